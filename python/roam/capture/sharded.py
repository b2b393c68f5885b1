"""Fully-sharded data parallel (FSDP2 ``fully_shard`` / ZeRO-3): one rank's training step
with the parameter all-gathers and gradient reduce-scatters as ops of its graph.

A rank of a fully-sharded job holds ``1/world_size`` of every parameter and of the optimizer
state. :class:`ShardedModel` wraps a model for one rank, as ``fully_shard`` does (the model
is modified in place: each of its parameters becomes this rank's shard, an ``nn.Parameter``
in the same slot, so names, tied weights and buffers are the model's):

* **Layout** (:class:`ShardSpec`): FSDP2's, by default (``layout="dim0"``): a parameter of
  shape ``(d0, *rest)`` is split along dim 0 into chunks of ``ceil(d0 / world_size)`` rows
  (``torch.chunk``), padded with zero rows to ``world_size`` equal chunks; rank ``r`` holds
  chunk ``r``, a tensor of shape ``(ceil(d0 / world_size), *rest)``: the ``r``-th contiguous
  part of the flattened, padded parameter. ``layout="flat"`` pads the flattened parameter
  only to a multiple of ``world_size`` elements (FSDP1's ``FlatParameter`` / ZeRO-3) and the
  shard is 1-D. A 0-d parameter counts as one row.
* **Forward**: each call of a submodule's ``forward`` first all-gathers the shards of the
  parameters it owns (``_c10d_functional.all_gather_into_tensor`` + ``wait_tensor``, one per
  parameter, each into a new tensor of ``world_size`` shards), un-pads them and views them as
  the parameters (:class:`AllGatherParameter`) in their slots, and puts the shards back when
  it returns (FSDP2's unshard in pre-forward, reshard in post-forward, per module); a read of
  a parameter outside the forward of the module owning it (a tied weight read by the root,
  such as an LM head ``F.linear(x, self.wte.weight)``) all-gathers it there
  (:class:`GatherAgain`: its gradient joins the first gather's, so each parameter still has
  one reduce-scatter per step). So a gathered
  tensor of the forward is read by the forward of one module only: it does not stay live
  across the rest of the forward (which would keep roam's recomputation from cutting the
  forward into units, ``src/remat/graph_remat.cpp`` ``find_units``).
* **Backward**: the gradient of a gathered parameter, complete once autograd reaches its
  all-gather (every use accumulated), is zero-padded and reduce-scattered (sum,
  ``_c10d_functional.reduce_scatter_tensor`` + ``wait_tensor``) into this rank's gradient
  shard, then averaged as FSDP2's ``foreach_reduce`` averages by default
  (:func:`gradient_divide_factors`, torch 2.14 ``_fsdp_collectives._get_gradient_divide_factors``
  with no ``gradient_divide_factor``, one reduce-scatter group): float32 and bfloat16 use
  ``ReduceOp.AVG``, which gloo computes as the sum divided by ``world_size`` (checked on
  torch 2.14, 3 ranks: bit-equal to ``sum / 3``, not to ``sum * (1/3)``), so the graph has
  the sum then ``div(world_size)`` (post-divide); other dtypes (float16, float64) divide by
  ``pre`` before the sum and by ``world_size / pre`` after it (``pre`` ~ sqrt(world_size), a
  power of two), as FSDP2 does against overflow.
* **Update**: the optimizer (over ``ShardedModel.parameters()``: the shards) updates the
  shards; its state has the shards' shapes. Padding stays zero (its gradient is zero).

**Lifetimes.** ``reshard_after_forward=False`` (FSDP2's ``reshard_after_forward=False``,
ZeRO-2-like for parameters): what autograd saves of a
gathered parameter for the backward (a linear's weight, a LayerNorm's weight and bias; not a
linear's bias) is the forward's gathered tensor, so it lives from its forward all-gather to
its last use in the backward; there is no all-gather in the backward. ``reshard_after_forward=True``
(the default, as FSDP2's for non-root modules; ZeRO-3): what autograd saves of a gathered parameter
(the parameter or a view of it, e.g. ``weight.t()`` of a linear) is replaced by a marker
(``torch.autograd.graph.saved_tensors_hooks``), and the backward all-gathers the shard again
when a node unpacks it (once per node; a second node needing the same parameter while the
first's copy is still referenced reuses it), so the forward's gathered parameter dies at its
last forward use and the backward has one more all-gather per saved weight (LayerNorm and
linear weights; biases are not saved). Values are the same either way (an all-gather
returns the same bytes). Unlike FSDP2 (which keeps the root module's parameters gathered
when resharding, and prefetches the next module's all-gather) nothing is special-cased:
roam's planner chooses where the collectives run (in their program order, GRAPH_FORMAT.md
"Collectives").

**What differs from ``fully_shard``.** One all-gather and one reduce-scatter per parameter
(FSDP2 issues one of each per ``fully_shard`` unit, the unit's parameters copied into one
flat buffer; the same bytes cross the wire); gathering at each submodule's forward rather
than at each unit's, and a tied parameter at each module that reads it (FSDP2 gathers it
once, with the unit that owns it); no mixed precision (``MixedPrecisionPolicy``), CPU offload or HSDP;
the shard of the last ranks keeps its padding (FSDP2's optimizer state covers the unpadded
rows only, so a rank whose chunk is padded holds a few bytes more optimizer state here).

The collectives are torch.distributed's functional collectives (private namespace, the
traceable API of torch.compile and DTensor; checked on torch 2.14, gloo/CPU and the fake
backend). ``all_gather_tensor_autograd`` (deprecated in torch 2.14 for
``all_gather_single_autograd``) records the same two ops and its backward the same
reduce-scatter, but sums without averaging; :class:`AllGatherParameter` calls the operators
itself (the same on every torch 2.x that has them) and adds the average.

Use::

    sharded = ShardedModel(model, dist.group.WORLD)          # every rank, same model
    opt = torch.optim.Adam(sharded.parameters())
    g = roam.capture(sharded, opt, loss_fn, (x, y))           # meta.distributed: fully_sharded

``roam.optimize(sharded, opt, loss_fn, (x, y))`` runs the step for real (the collectives are
inside the model's forward and backward: no ``process_group`` argument); its values equal
eager FSDP2's (python/tests/test_sharded.py). The executor waits for collective buffers the
process group releases late, as for a data-parallel rank (the graph's ``meta.distributed``).
The ranks decide together, as data-parallel ranks do: before the first step they check that
their plans issue the same collectives in the same order, and whether to plan again after a
trial step is or'ed over them (every rank runs the same number of calibration steps).
"""

import contextlib
import math
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .errors import CaptureError
from .state import tensor_names

LAYOUTS = ("dim0", "flat")


# ---------------------------------------------------------------- shard arithmetic

@dataclass(frozen=True)
class ShardSpec:
    """How one parameter of shape ``shape`` is split over ``world_size`` ranks.

    ``layout="dim0"`` (FSDP2): rows of ``shape[0]`` (one row for a 0-d parameter) in chunks of
    ``ceil(rows / world_size)``; ``layout="flat"`` (FSDP1 / ZeRO-3): elements in chunks of
    ``ceil(numel / world_size)``. Either way rank ``r``'s shard is elements
    ``[r * shard_numel, (r + 1) * shard_numel)`` of the flattened parameter padded with zeros
    to ``padded_numel = world_size * shard_numel`` elements."""
    shape: Tuple[int, ...]
    world_size: int
    layout: str = "dim0"

    def __post_init__(self):
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, not {self.world_size}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, not {self.layout!r}")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def rows(self) -> int:
        """Rows of dim 0 (1 for a 0-d parameter)."""
        return self.shape[0] if self.shape else 1

    @property
    def row_numel(self) -> int:
        """Elements per row of dim 0."""
        return math.prod(self.shape[1:]) if self.shape else 1

    @property
    def shard_rows(self) -> int:
        """Rows of dim 0 per shard (layout dim0)."""
        return -(-self.rows // self.world_size)

    @property
    def shard_numel(self) -> int:
        """Elements of every rank's shard, padding included."""
        if self.layout == "dim0":
            return self.shard_rows * self.row_numel
        return -(-self.numel // self.world_size)

    @property
    def shard_shape(self) -> Tuple[int, ...]:
        """Shape of a shard: ``(shard_rows, *shape[1:])`` (dim0), ``(shard_numel,)`` (flat)."""
        if self.layout == "dim0":
            return (self.shard_rows,) + tuple(self.shape[1:])
        return (self.shard_numel,)

    @property
    def gathered_shape(self) -> Tuple[int, ...]:
        """Shape of the all-gathered shards (``world_size`` shards along dim 0)."""
        s = self.shard_shape
        return (self.world_size * s[0],) + tuple(s[1:])

    @property
    def padded_numel(self) -> int:
        return self.world_size * self.shard_numel

    @property
    def pad(self) -> int:
        """Zero elements after the parameter's in the padded parameter."""
        return self.padded_numel - self.numel

    def valid_numel(self, rank: int) -> int:
        """Elements of the parameter (not padding) in rank ``rank``'s shard."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} out of [0, {self.world_size})")
        start = rank * self.shard_numel
        return max(0, min(self.numel, start + self.shard_numel) - start)

    def shard(self, full: torch.Tensor, rank: int) -> torch.Tensor:
        """Rank ``rank``'s shard of ``full`` (a new contiguous tensor, zero padded)."""
        if tuple(full.shape) != tuple(self.shape):
            raise ValueError(f"shape {tuple(full.shape)} is not {self.shape}")
        flat = full.detach().reshape(-1)
        start = rank * self.shard_numel
        n = self.valid_numel(rank)
        out = flat.new_zeros(self.shard_numel)
        if n:
            out[:n] = flat[start:start + n]
        return out.view(self.shard_shape)

    def unshard(self, gathered: torch.Tensor) -> torch.Tensor:
        """The parameter from the all-gathered shards (a view of ``gathered``)."""
        if self.layout == "dim0":
            return gathered.narrow(0, 0, self.rows).view(self.shape)
        return gathered.narrow(0, 0, self.numel).view(self.shape)

    def pad_gradient(self, grad: torch.Tensor) -> torch.Tensor:
        """A full gradient as the input of the reduce-scatter: zero padded, contiguous, of
        :attr:`gathered_shape` (``grad`` itself, viewed, when there is no padding)."""
        flat = grad.contiguous().view(-1)
        if self.pad:
            flat = torch.constant_pad_nd(flat, (0, self.pad), 0.0)
        return flat.view(self.gathered_shape)


def gradient_divide_factors(world_size: int, dtype: torch.dtype
                            ) -> Tuple[Optional[float], Optional[float]]:
    """``(pre, post)``: FSDP2's default gradient averaging over a reduce-scatter group of
    ``world_size`` ranks (torch 2.14 ``_fsdp_collectives._get_gradient_divide_factors`` with
    no ``gradient_divide_factor``, no all-reduce group, CPU), as divisions around a sum:
    divide by ``pre`` before the reduce-scatter, by ``post`` after it (None: no division).

    float32 / bfloat16: FSDP2 reduces with ``ReduceOp.AVG`` (world size 1: ``SUM``), the sum
    divided by ``world_size``: ``(None, world_size)``. Other dtypes: ``pre`` doubles while it
    divides ``world_size`` and is below ``world_size / pre``, ``post = world_size / pre``."""
    if world_size <= 1:
        return None, None
    if dtype in (torch.float32, torch.bfloat16):
        return None, float(world_size)
    factor = float(world_size)
    pre = 1
    while factor % pre == 0 and factor / pre > pre:
        pre *= 2
    return (float(pre) if pre != 1 else None), (factor / pre if factor / pre != 1 else None)


# ---------------------------------------------------------------- the collectives

def _c10d():
    return torch.ops._c10d_functional


def all_gather_shard(shard: torch.Tensor, spec: ShardSpec, group_name: str) -> torch.Tensor:
    """All-gather ``shard`` over the group (no autograd): the gathered shards, of
    ``spec.gathered_shape``."""
    c10d = _c10d()
    return c10d.wait_tensor(c10d.all_gather_into_tensor(shard.contiguous(), spec.world_size,
                                                        group_name))


def reduce_scatter_gradient(grad: torch.Tensor, spec: ShardSpec, group_name: str
                            ) -> torch.Tensor:
    """This rank's averaged gradient shard of the full gradient ``grad``
    (:func:`gradient_divide_factors`)."""
    c10d = _c10d()
    pre, post = gradient_divide_factors(spec.world_size, grad.dtype)
    x = spec.pad_gradient(grad)
    if pre is not None:
        x = torch.div(x, pre)
    out = c10d.wait_tensor(c10d.reduce_scatter_tensor(x, "sum", spec.world_size, group_name))
    if post is not None:
        out = torch.div(out, post)
    return out


class AllGatherParameter(torch.autograd.Function):
    """``apply(shard, spec, group_name)``: the parameter all-gathered from the shards
    (:func:`all_gather_shard`, :meth:`ShardSpec.unshard`); backward: the averaged
    reduce-scatter of its gradient (:func:`reduce_scatter_gradient`). Saves nothing."""

    @staticmethod
    def forward(ctx, shard, spec, group_name):
        ctx.spec, ctx.group_name = spec, group_name
        return spec.unshard(all_gather_shard(shard, spec, group_name))

    @staticmethod
    def backward(ctx, grad):
        return reduce_scatter_gradient(grad, ctx.spec, ctx.group_name), None, None


class GatherAgain(torch.autograd.Function):
    """``apply(first, shard, spec, group_name)``: the parameter all-gathered again from
    ``shard`` (a second read in the same forward); backward: its gradient goes to ``first``
    (the parameter's first gather in this forward), so that autograd sums every use before
    the one reduce-scatter of ``first``'s :class:`AllGatherParameter`. ``first``'s values are
    not read: in the graph the second gather depends on the shard only."""

    @staticmethod
    def forward(ctx, first, shard, spec, group_name):
        return spec.unshard(all_gather_shard(shard, spec, group_name))

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None


# ---------------------------------------------------------------- the wrapper

@dataclass
class _Param:
    """One parameter of the model (tied slots once): its slots ``(module, name)``, paths,
    shard spec."""
    slots: List[Tuple[nn.Module, str]]
    paths: List[str]
    spec: ShardSpec
    requires_grad: bool


class _Regather:
    """What autograd saves instead of (a view of) a gathered parameter under
    ``reshard_after_forward=True``: which parameter, and the view's geometry."""
    __slots__ = ("index", "size", "stride", "offset")

    def __init__(self, index, t):
        self.index, self.size, self.stride, self.offset = (
            index, tuple(t.size()), tuple(t.stride()), t.storage_offset())


def _storage_key(t: torch.Tensor):
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


class ShardedModel(nn.Module):
    """One rank of fully-sharded data parallel over ``group`` (module docstring).

    Args:
        model: the full model, the same on every rank (built with the same seed). Modified
            in place: each parameter is replaced by this rank's shard (an ``nn.Parameter`` of
            :attr:`ShardSpec.shard_shape`, ``requires_grad`` kept; tied parameters stay
            tied); buffers are untouched (replicated, as in FSDP2).
        group: the ``torch.distributed`` process group (None: the default group).
        layout: ``"dim0"`` (FSDP2) or ``"flat"`` (FSDP1 / ZeRO-3), :class:`ShardSpec`.
        reshard_after_forward: re-gather in the backward instead of keeping the gathered
            parameters from the forward (module docstring, "Lifetimes"); default True, as
            FSDP2's ``fully_shard``.

    ``forward(*args, **kwargs)`` is the model's, each submodule's parameters gathered right
    before its forward. ``parameters()`` are the shards (``module.<name>``); pass them to
    the optimizer. :meth:`full_parameters` gathers the current values (every rank must call
    it).

    Raises:
        CaptureError: torch.distributed not initialized; TypeError: not a module.
    """

    def __init__(self, model: nn.Module, group=None, *, layout: str = "dim0",
                 reshard_after_forward: bool = True):
        super().__init__()
        import torch.distributed as dist
        if not isinstance(model, nn.Module):
            raise TypeError(f"ShardedModel: {type(model).__name__} is not an nn.Module")
        if not dist.is_available() or not dist.is_initialized():
            raise CaptureError("roam: ShardedModel: torch.distributed is not initialized "
                               "(call torch.distributed.init_process_group first, e.g. under "
                               "torchrun)")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
        group = group if group is not None else dist.group.WORLD
        self.module = model
        self.group = group  # the process group (roam.executor's ranks decide over it)
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.group_name = group.group_name
        self.backend = str(dist.get_backend(group))
        self.layout = layout
        self.reshard_after_forward = bool(reshard_after_forward)
        # each parameter once (tied ones too), with every dotted name of it; a slot
        # (module, attribute) once even where a module is reached by two paths
        params: List[_Param] = []
        for t, names in zip(*tensor_names(model, "_parameters")):
            ps = _Param([], [], ShardSpec(tuple(t.shape), self.world_size, layout),
                        t.requires_grad)
            for path in names:
                prefix, _, name = path.rpartition(".")
                slot = (model.get_submodule(prefix), name)
                if slot not in ps.slots:
                    ps.slots.append(slot)
                    ps.paths.append(path)
            params.append(ps)
        if not params:
            raise CaptureError("ShardedModel: the model has no parameters")
        # one shard Parameter per parameter, in every slot of it (tied slots share it)
        shards: Dict[int, nn.Parameter] = {}
        for k, ps in enumerate(params):
            mod, name = ps.slots[0]
            full = mod._parameters[name]
            with torch.no_grad():
                shard = nn.Parameter(ps.spec.shard(full, self.rank),
                                     requires_grad=full.requires_grad)
            shards[k] = shard
        for k, ps in enumerate(params):
            for mod, name in ps.slots:
                mod._parameters[name] = shards[k]
        self._params = params
        # the modules that own parameters, and which parameters each gathers
        owners: Dict[int, Tuple[nn.Module, List[int]]] = {}
        for k, ps in enumerate(params):
            for mod, _ in ps.slots:
                owners.setdefault(id(mod), (mod, []))[1].append(k)
        self._owners = list(owners.values())

    # ------------------------------------------------------------ description

    @property
    def specs(self) -> List[ShardSpec]:
        """The :class:`ShardSpec` of each parameter (``model.parameters()`` order, tied once)."""
        return [p.spec for p in self._params]

    @property
    def parameter_paths(self) -> List[List[str]]:
        """The dotted names of each parameter in the wrapped model (several when tied)."""
        return [list(p.paths) for p in self._params]

    def shard_bytes(self) -> int:
        """Bytes of this rank's parameter shards (padding included)."""
        return sum(p.spec.shard_numel * p.slots[0][0]._parameters[p.slots[0][1]].element_size()
                   for p in self._params)

    def roam_distributed_meta(self) -> Dict[str, Any]:
        """The graph's ``meta.distributed`` (:func:`roam.capture.capture` writes it)."""
        return {"kind": "fully_sharded", "world_size": self.world_size, "rank": self.rank,
                "backend": self.backend, "group": self.group_name, "layout": self.layout,
                "reshard_after_forward": self.reshard_after_forward,
                "parameters": len(self._params), "shard_bytes": self.shard_bytes(),
                "full_parameter_bytes": sum(
                    p.spec.numel * p.slots[0][0]._parameters[p.slots[0][1]].element_size()
                    for p in self._params),
                "all_gather": "per parameter at each forward call of the submodule owning "
                              "it (and at a read outside it, e.g. a tied LM head)" + (
                                  "; again in the backward for each node that saved it"
                                  if self.reshard_after_forward else
                                  "; what autograd saves is kept for the backward"),
                "gradient_average": "zero-padded gradient reduce-scattered (sum), then "
                                    "divided as FSDP2's default (float32/bfloat16: by "
                                    "world_size, its ReduceOp.AVG on gloo)",
                "rule": "roam.capture.sharded.ShardedModel"}

    # ------------------------------------------------------------ running

    def _gather(self, k: int, shard: torch.Tensor) -> torch.Tensor:
        """Parameter ``k`` all-gathered from ``shard`` (with autograd where it needs a
        gradient)."""
        ps = self._params[k]
        if shard.requires_grad and torch.is_grad_enabled():
            return AllGatherParameter.apply(shard, ps.spec, self.group_name)
        with torch.no_grad():
            return ps.spec.unshard(all_gather_shard(shard, ps.spec, self.group_name))

    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """Within the block, each call of a submodule's forward first all-gathers the
        parameters it owns into its slots and puts the shards back when it returns; a read
        of a parameter outside the forward of its module (a tied weight read by another
        module, e.g. an LM head ``F.linear(x, self.wte.weight)``) all-gathers it there. After
        the block every slot holds its shard."""
        # the step's shards (in a capture: the traced tensors bound_step put in the slots)
        shards = [ps.slots[0][0]._parameters[ps.slots[0][1]] for ps in self._params]
        slot_param = {(id(m), n): k for k, ps in enumerate(self._params) for m, n in ps.slots}
        storages: Dict[Any, int] = {}
        alive: List[torch.Tensor] = []  # every gathered tensor, so its storage stays unique
        frames: List[List[Tuple[nn.Module, str, Any]]] = []
        swapped: List[Tuple[nn.Module, type]] = []

        first: Dict[int, torch.Tensor] = {}  # parameter -> its first gather (autograd)

        def gather(k):
            f = first.get(k)
            if f is not None and f.requires_grad and torch.is_grad_enabled():
                # gathered again: the gradient joins the first gather's, one reduce-scatter
                full = GatherAgain.apply(f, shards[k], self._params[k].spec, self.group_name)
            else:
                full = self._gather(k, shards[k])
                first.setdefault(k, full)
            storages[_storage_key(full)] = k
            alive.append(full)
            return full

        def pre(mod, args, ks):
            frame = []
            for k in ks:
                for m, n in self._params[k].slots:
                    if m is mod:
                        frame.append((m, n, m._parameters[n]))
                        m._parameters[n] = gather(k)
            frames.append(frame)

        def post(mod, args, out):
            for m, n, old in reversed(frames.pop()):
                m._parameters[n] = old

        def read(mod, name):
            """A slot of ``mod`` read outside its forward: gathered on the spot."""
            k = slot_param.get((id(mod), name))
            if k is not None and mod._parameters.get(name) is shards[k]:
                return gather(k)
            return _MISSING

        handles = []
        try:
            for mod, ks in self._owners:
                handles.append(mod.register_forward_pre_hook(
                    lambda m, a, ks=ks: pre(m, a, ks)))
                handles.append(mod.register_forward_hook(post))
                swapped.append((mod, type(mod)))
                object.__setattr__(mod, _READ_KEY, read)
                mod.__class__ = _reading_class(type(mod))
            with self._resharding(storages, shards):
                yield
        finally:
            for h in handles:
                h.remove()
            for frame in reversed(frames):
                for m, n, old in reversed(frame):
                    m._parameters[n] = old
            for mod, cls in swapped:
                mod.__class__ = cls
                mod.__dict__.pop(_READ_KEY, None)
            storages.clear()
            alive.clear()
            first.clear()

    @contextlib.contextmanager
    def _resharding(self, storages: Dict[Any, int], shards: List[torch.Tensor]
                    ) -> Iterator[None]:
        if not self.reshard_after_forward:
            yield
            return
        cache: Dict[int, Any] = {}

        def pack(t):
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                return t
            try:
                k = storages.get(_storage_key(t))
            except Exception:  # a tensor without storage (a subclass): kept
                return t
            return t if k is None else _Regather(k, t)

        def unpack(x):
            if not isinstance(x, _Regather):
                return x
            ref = cache.get(x.index)
            g = ref() if ref is not None else None
            if g is None:
                ps = self._params[x.index]
                with torch.no_grad():
                    g = all_gather_shard(shards[x.index], ps.spec, self.group_name)
                cache[x.index] = weakref.ref(g)
            return g.as_strided(x.size, x.stride, x.offset)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield

    def forward(self, *args, **kwargs):
        with self.gathered():
            return self.module(*args, **kwargs)

    @torch.no_grad()
    def full_parameters(self) -> Dict[str, torch.Tensor]:
        """``{first path: the full parameter}`` gathered from every rank's shard (a
        collective: every rank of the group calls it)."""
        out = {}
        for k, ps in enumerate(self._params):
            mod, name = ps.slots[0]
            out[ps.paths[0]] = ps.spec.unshard(
                all_gather_shard(mod._parameters[name].detach(), ps.spec,
                                 self.group_name)).clone()
        return out


_MISSING = object()
_READ_KEY = "_roam_sharded_read"  # instance attribute of an owning module during a forward
_READING_CLASSES: Dict[type, type] = {}


def _sharded_getattr(self, name):
    read = self.__dict__.get(_READ_KEY)
    if read is not None:
        v = read(self, name)
        if v is not _MISSING:
            return v
    return super(type(self), self).__getattr__(name)


def _reading_class(cls: type) -> type:
    """``cls`` with a ``__getattr__`` that all-gathers a sharded parameter read outside its
    module's forward (set on the owning modules only while a ShardedModel's forward runs:
    ``nn.Module`` finds parameters through ``__getattr__``, which only a class can
    override)."""
    if getattr(cls, "_roam_reads_sharded", False):
        return cls
    sub = _READING_CLASSES.get(cls)
    if sub is None:
        sub = type(cls.__name__, (cls,), {"__getattr__": _sharded_getattr,
                                          "_roam_reads_sharded": True,
                                          "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        _READING_CLASSES[cls] = sub
    return sub


def shard_of(model: nn.Module) -> Optional[ShardedModel]:
    """``model`` if it is a :class:`ShardedModel`, else None."""
    return model if isinstance(model, ShardedModel) else None
