"""Converting a traced training step (fx GraphModule from make_fx) into a roam-graph v1.

The GraphModule is run once by :class:`GraphBuilder` (a ``torch.fx.Interpreter``), on real
tensors or, for a fake capture, on fake tensors under the capture's ``FakeTensorMode``, and
every tensor is described from its value (shape, dtype, storage), never from node metadata:

* placeholders become resident tensors with their role (``param``, ``buffer``,
  ``optimizer_state``, ``input``); ``get_attr`` constants become ``constant``;
* each ``call_function`` on an ATen ``OpOverload`` becomes one op; each non-None tensor of a
  tuple/list result is its own tensor; ``operator.getitem`` nodes are not ops;
* aliases come from the operator schema (``Tensor(a) self -> Tensor(a)``,
  ``Tensor(a!) self``), checked against the storages (fake tensors share storages exactly
  as real ones do);
* writes come from the schema (``alias_info.is_write``), from the tensors' version
  counters, and from :data:`roam.capture.schema.HIDDEN_WRITES`, the writes that neither shows (such as
  ``native_batch_norm``'s running statistics in eval-mode graphs of other tools; the capture
  gives training BatchNorm its writing schema before functionalization); in real mode the contents of
  resident tensors are also compared before and after each op, which would reveal any other
  hidden write;
* ``after`` edges order every write after the earlier readers of the storage and every
  reader after the last write (:func:`roam.capture.edges.add_order_edges`);
* ``recomputable`` is decided for every op by :func:`roam.capture.schema.recompute_blocker` (schema writes,
  outputs aliasing resident tensors, random operators, uninitialised results);
* ``module`` is the path of the module whose forward ran the op, where the trace recorded
  one (``node.meta["roam_module"]``, :class:`roam.capture.trace.ModuleTracker`).

Sizes are bytes (numel x element size); ``cost`` is seconds. See GRAPH_FORMAT.md and
ROAM (arXiv 2310.19295) for what the planner does with the result.
"""

import operator
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.node import map_arg

from .errors import CaptureError
from .kernels import call_with_grad_mode, needs_grad_mode
from .cost import estimate_op
from .functional import INPLACE_KEY, WRITEBACK_KEY
from .modules import MODULE_KEY, PHASE_KEY, PHASES
from .trace import SEED_KEY
from .collectives import collective_kind, group_name_of
from .schema import (HIDDEN_WRITES, UNDECLARED_ALIAS_OK, _bind, argument_alias_sets,
                     passes_generator, recompute_blocker, return_alias_sets)

RESIDENT_ROLES = ("param", "buffer", "optimizer_state", "constant", "input")
# Operators that copy a constant into the step (FakeTensorMode's lift functions).
_LIFT_FNS = frozenset(getattr(torch.ops.aten, n).default for n in ("lift_fresh", "lift_fresh_copy")
                      if hasattr(torch.ops.aten, n))


class _NonTensor:
    """Marks a node value that is not a tensor (int, float, bool, ...)."""
    __slots__ = ()

    def __repr__(self):
        return "<non-tensor>"


NON_TENSOR = _NonTensor()


class _Tid(str):
    """A tensor id standing for a node value (distinct from literal string arguments such
    as ``rounding_mode="floor"``)."""
    __slots__ = ()


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).replace("torch.", "")


def storage_ptr(t: torch.Tensor) -> int:
    """Data pointer of the storage behind ``t`` (equal for tensors sharing storage)."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def storage_key(t: torch.Tensor) -> int:
    """Identity of the storage object behind ``t``: equal exactly for tensors that share a
    storage (also for fake / meta tensors, whose data pointers are all 0)."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()._cdata
    return t.storage()._cdata


def storage_nbytes(t: torch.Tensor) -> int:
    """Bytes of the storage behind ``t``."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().nbytes()
    return t.storage().nbytes()


def tensor_nbytes(t: torch.Tensor) -> int:
    """``numel * element_size`` in bytes: the ``size`` of a roam-graph tensor."""
    return t.numel() * t.element_size()


def _same_contents(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-ish equality (NaN equals NaN) of two tensors of the same shape."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return False


# ---------------------------------------------------------------- the builder

@dataclass
class BuiltGraph:
    """Intermediate result of :class:`GraphBuilder` (before ``after`` edges and JSON)."""
    tensors: List[Dict[str, Any]] = field(default_factory=list)
    ops: List[Dict[str, Any]] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)
    op_writes: Dict[str, List[str]] = field(default_factory=dict)  # op id -> written tensor ids
    op_nodes: Dict[str, str] = field(default_factory=dict)  # op id -> fx node name
    unannotated_writes: Dict[str, int] = field(default_factory=dict)  # target -> count
    unobserved_writes: Dict[str, int] = field(default_factory=dict)
    oversized_storages: List[str] = field(default_factory=list)
    undeclared_aliases: Dict[str, int] = field(default_factory=dict)  # target -> count
    estimates: Dict[str, Tuple[float, float]] = field(default_factory=dict)  # op -> flops, bytes
    recompute_blockers: Dict[str, str] = field(default_factory=dict)  # op id -> rule
    loss_value: Optional[torch.Tensor] = None
    losses: List[str] = field(default_factory=list)  # tensors a backward() call started from
    writebacks: List[str] = field(default_factory=list)  # ops writing a value back at the end


class GraphBuilder(torch.fx.Interpreter):
    """Runs a make_fx GraphModule once and builds the roam-graph tensors and ops from the
    real values (sizes in bytes, optional per-op cost in seconds).

    Args:
        gm: the GraphModule of :func:`roam.capture.trace.trace_training_step`.
        placeholders: ``(role, name)`` per placeholder, in graph order.

    Raises (from :meth:`run`):
        CaptureError: a tensor argument that maps to no tensor id, an fx node that is not an
            ATen OpOverload call / getitem, or an alias where schema and storage disagree.
    """

    def __init__(self, gm: torch.fx.GraphModule, placeholders: Sequence[Tuple[str, str]],
                 check_hidden_writes: bool = True, fake_mode=None,
                 progress=None):
        super().__init__(gm, garbage_collect_values=True)
        self.fake_mode = fake_mode
        # content comparison needs real values
        self.check_hidden_writes = check_hidden_writes and fake_mode is None
        self.progress = progress
        self._n_nodes = len(gm.graph.nodes)
        self._n_done = 0
        self._last_report = time.monotonic()
        self.g = BuiltGraph()
        self._roles = list(placeholders)
        self._ph_index = 0
        self._tid: Dict[torch.fx.Node, Any] = {}
        self._root: Dict[str, str] = {}
        self._getitem_names: Dict[torch.fx.Node, Dict[int, str]] = {}
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target is operator.getitem:
                self._getitem_names.setdefault(n.args[0], {})[n.args[1]] = n.name

    # -- tensors
    def _by_id(self, tid: str) -> Dict[str, Any]:
        return self.g.tensors[int(tid[1:])]

    def _new_tensor(self, t: torch.Tensor, name: str, role: Optional[str] = None,
                    alias_of: Optional[str] = None) -> str:
        if t.layout != torch.strided:
            raise CaptureError(f"tensor {name}: layout {t.layout} is not supported")
        tid = f"t{len(self.g.tensors)}"
        rec = {"id": tid, "size": tensor_nbytes(t), "name": name, "dtype": dtype_name(t.dtype),
               "shape": list(t.shape)}
        if role is not None:
            rec["role"] = role
        if alias_of is not None:
            rec["alias_of"] = alias_of
        self.g.tensors.append(rec)
        self._root[tid] = self._root[alias_of] if alias_of is not None else tid
        return tid

    def run(self, *args, **kwargs):
        if self.fake_mode is None:
            return super().run(*args, **kwargs)
        with self.fake_mode:
            return super().run(*args, **kwargs)

    # -- nodes
    def run_node(self, n: torch.fx.Node) -> Any:
        self._n_done += 1
        if self.progress is not None and time.monotonic() - self._last_report >= 2.0:
            self._last_report = time.monotonic()
            self.progress(f"recording: {self._n_done}/{self._n_nodes} fx nodes")
        if n.op == "placeholder":
            value = super().run_node(n)
            if not isinstance(value, torch.Tensor):
                raise CaptureError(f"placeholder {n.name} is not a tensor")
            role, name = self._roles[self._ph_index]
            self._ph_index += 1
            self._tid[n] = _Tid(self._new_tensor(value, name, role=role))
            return value
        if n.op == "get_attr":
            value = super().run_node(n)
            if isinstance(value, torch.nn.Parameter):
                raise CaptureError(f"parameter {n.target} leaked into the trace as a constant")
            if not isinstance(value, torch.Tensor):
                raise CaptureError(f"get_attr {n.target} is not a tensor")
            if self.fake_mode is not None:
                from .fake import to_fake
                value = to_fake(self.fake_mode, value, constant=True)
            self._tid[n] = _Tid(self._new_tensor(value, str(n.target), role="constant"))
            return value
        if n.op == "output":
            value = super().run_node(n)
            tids = map_arg(n.args[0], lambda x: self._tid[x])
            flat_t, _ = pytree.tree_flatten(tids)
            flat_v, _ = pytree.tree_flatten(value)
            if len(flat_t) != len(flat_v):
                raise CaptureError("graph output structure mismatch")
            for t, v in zip(flat_t, flat_v):
                if isinstance(v, torch.Tensor):
                    if not isinstance(t, _Tid):
                        raise CaptureError("graph output tensor maps to no tensor id")
                    self.g.outputs.append(str(t))
                    if self.g.loss_value is None:
                        self.g.loss_value = v.detach().clone()
            return value
        if n.op == "call_function" and n.target is operator.getitem:
            value = super().run_node(n)
            base = self._tid[n.args[0]]
            if not isinstance(base, (list, tuple)):
                raise CaptureError(f"{n.format_node()}: getitem on a value that is not a tuple")
            self._tid[n] = base[n.args[1]]
            return value
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            return self._run_op(n)
        raise CaptureError(f"unsupported fx node {n.format_node()} (target {n.target!r})")

    def _run_op(self, n: torch.fx.Node) -> Any:
        target = n.target
        schema = target._schema
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        bound = _bind(schema, n, args, kwargs)
        arg_sets = argument_alias_sets(schema)
        oid = f"n{len(self.g.ops)}"

        # map every tensor argument (lists included) to a tensor id
        arg_leaves: List[List[Tuple[str, torch.Tensor]]] = []
        for (sarg, nval, rval) in bound:
            tstruct = map_arg(nval, lambda x: self._tid[x]) if nval is not None else None
            flat_r, spec_r = pytree.tree_flatten(rval)
            flat_t, spec_t = pytree.tree_flatten(tstruct)
            if len(flat_r) != len(flat_t):
                raise CaptureError(f"{n.format_node()}: argument {sarg.name!r}: structure of "
                                   f"the traced argument and of its real value differ")
            leaves = []
            for r, t in zip(flat_r, flat_t):
                if isinstance(r, torch.Tensor):
                    if not isinstance(t, _Tid):
                        raise CaptureError(
                            f"{n.format_node()}: tensor in argument {sarg.name!r} of {target} "
                            f"cannot be mapped to a tensor id (traced value {t!r})")
                    leaves.append((str(t), r))
                elif isinstance(t, _Tid):
                    raise CaptureError(f"{n.format_node()}: argument {sarg.name!r} maps to "
                                       f"tensor {t} but its value is {type(r).__name__}")
            arg_leaves.append(leaves)

        flat_in = [(j, tid, t) for j, leaves in enumerate(arg_leaves) for tid, t in leaves]
        versions = [t._version for _, _, t in flat_in]
        # Kernels may write an argument without a schema annotation and without bumping its
        # version counter (native_batch_norm's running statistics). Compare the contents of
        # the resident (persistent) storages they read.
        snapshots = {}
        if self.check_hidden_writes:
            for k, (j, tid, t) in enumerate(flat_in):
                if not arg_sets[j][1] and "role" in self._by_id(self._root[tid]):
                    snapshots[k] = t.clone()

        t0 = time.perf_counter()
        if (self.fake_mode is not None and target in _LIFT_FNS and args
                and getattr(args[0], "fake_mode", None) is self.fake_mode):
            # A constant lifted into the step (swin_t's relative-position table): the constant
            # is already fake here, and FakeTensorMode lifts only real tensors. A lift is a
            # copy of its argument: clone it.
            out = torch.ops.aten.clone.default(args[0])
        elif needs_grad_mode(target):
            out = call_with_grad_mode(target, args, kwargs)
        else:
            out = target(*args, **kwargs)
        cost = time.perf_counter() - t0

        hidden = HIDDEN_WRITES.get(schema.name)
        hidden_args = set()
        if hidden is not None:
            names, flag = hidden
            values = {a.name: rv for a, _, rv in bound}
            if flag is None or values.get(flag):
                hidden_args = set(names)

        # writes: schema annotation and version counters
        written: List[str] = []
        for k, (j, tid, t) in enumerate(flat_in):
            declared = arg_sets[j][1]
            observed = t._version != versions[k]
            if schema.arguments[j].name in hidden_args:
                observed = True
            elif k in snapshots and not observed:
                observed = not _same_contents(snapshots[k], t)
            if declared or observed:
                if tid not in written:
                    written.append(tid)
            if observed and not declared:
                key = f"{target}:{schema.arguments[j].name}"
                self.g.unannotated_writes[key] = self.g.unannotated_writes.get(key, 0) + 1
            if declared and not observed:
                key = f"{target}:{schema.arguments[j].name}"
                self.g.unobserved_writes[key] = self.g.unobserved_writes.get(key, 0) + 1

        # outputs
        ret_sets = return_alias_sets(schema)
        if isinstance(out, torch.Tensor):
            elems = [(0, None, out)]
        elif isinstance(out, (tuple, list)):
            if len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch.ListType):
                elems = [(0, i, e) for i, e in enumerate(out)]
            elif len(out) == len(schema.returns):
                elems = [(i, i, e) for i, e in enumerate(out)]
            else:
                raise CaptureError(f"{n.format_node()}: {len(out)} results, schema {schema}")
        elif out is None:
            elems = []
        else:
            elems = []  # a scalar result is not a tensor

        out_struct: Any
        out_ids: List[str] = []
        if isinstance(out, (tuple, list)):
            out_struct = [None if e is None else NON_TENSOR for e in out]
        else:
            out_struct = NON_TENSOR if out is not None else None
        names = self._getitem_names.get(n, {})
        fresh_out: List[torch.Tensor] = []
        single_list = len(schema.returns) == 1 and isinstance(schema.returns[0].type,
                                                             torch.ListType)
        result_pos: Dict[Tuple[int, Optional[int]], int] = {}  # (return, element) -> output
        result_val: Dict[str, torch.Tensor] = {}
        for (ri, ei, e) in elems:
            if e is None:
                continue
            if not isinstance(e, torch.Tensor):
                continue
            result_pos[(ri, ei if single_list else None)] = len(out_ids)
            name = n.name if ei is None else names.get(ei, f"{n.name}_{ei}")
            alias = self._resolve_alias(n, target, ret_sets[ri] if ri < len(ret_sets) else set(),
                                        arg_sets, arg_leaves, flat_in, e)
            tid = self._new_tensor(e, name, alias_of=alias)
            if alias is None:
                fresh_out.append(e)
            if alias is None and storage_nbytes(e) > tensor_nbytes(e):
                self.g.oversized_storages.append(tid)
            out_ids.append(tid)
            result_val[tid] = e
            if ei is None:
                out_struct = _Tid(tid)
            else:
                out_struct[ei] = _Tid(tid)
        self._tid[n] = out_struct

        inputs: List[str] = []
        for _, tid, _ in flat_in:
            if tid not in inputs:
                inputs.append(tid)
        phase = n.meta.get(PHASE_KEY, "other")
        if phase not in PHASES:
            phase = "other"
        blocker = recompute_blocker(
            target, written,
            ["role" in self._by_id(self._root[t]) for t in out_ids
             if "alias_of" in self._by_id(t)],
            explicit_generator=passes_generator(target._schema, n))
        rec = {"id": oid, "target": str(target), "phase": phase, "inputs": inputs,
               "outputs": out_ids, "cost": cost, "recomputable": blocker is None}
        if blocker is not None:
            self.g.recompute_blockers[oid] = blocker
        kind = collective_kind(target)
        if kind is not None:  # docs/COLLECTIVES.md
            rec["collective"] = {"kind": kind}
            group = group_name_of(n.args)
            if group is not None:
                rec["collective"]["group"] = group
        module = n.meta.get(MODULE_KEY)
        if module:
            rec["module"] = module
        if n.meta.get(WRITEBACK_KEY):
            self.g.writebacks.append(oid)
        if n.meta.get(SEED_KEY) and inputs:  # ones_like(loss) seeding a backward() call
            self.g.losses.append(inputs[0])
        pairs = self._inplace_pairs(n, arg_leaves, inputs, out_ids, result_pos, result_val)
        if pairs:
            rec["inplace"] = pairs
        self.g.ops.append(rec)
        by_tid = {tid: t for _, tid, t in flat_in}
        self.g.estimates[oid] = estimate_op(target, {a.name: rv for a, _, rv in bound},
                                            list(by_tid.values()), fresh_out,
                                            [by_tid[t] for t in written])
        self.g.op_writes[oid] = written
        self.g.op_nodes[oid] = n.name
        return out

    def _inplace_pairs(self, n, arg_leaves, inputs, out_ids, result_pos, result_val
                       ) -> List[List[int]]:
        """The op's ``inplace`` permissions (GRAPH_FORMAT.md): ``[input position, output
        position]`` for each result that eager PyTorch wrote over an argument (the functional
        pass's ``node.meta["roam_inplace"]``), where the two tensors have the same dtype,
        shape and strides, the input covers its whole storage (offset 0, no bytes beyond it)
        and is not resident, and the output is a new storage."""
        perms = n.meta.get(INPLACE_KEY)
        if not perms:
            return []
        pairs: List[List[int]] = []
        used_in, used_out = set(), set()
        for (a, kind, k) in perms:
            if a >= len(arg_leaves):
                continue
            leaves = arg_leaves[a]
            cands = [(leaves[0], result_pos.get((k, None)))] if kind is None else \
                [(leaves[i], result_pos.get((k, i))) for i in range(len(leaves))]
            for (tid, x), j in cands:
                if j is None:
                    continue
                out = out_ids[j]
                y = result_val[out]
                rec_out = self._by_id(out)
                if "alias_of" in rec_out or "role" in self._by_id(self._root[tid]):
                    continue
                if x.dtype != y.dtype or x.shape != y.shape or x.stride() != y.stride():
                    continue
                if x.storage_offset() != 0 or storage_nbytes(x) != tensor_nbytes(x):
                    continue
                i = inputs.index(tid)
                if i in used_in or j in used_out or tensor_nbytes(x) == 0:
                    continue
                used_in.add(i)
                used_out.add(j)
                pairs.append([i, j])
        return pairs

    def _resolve_alias(self, n, target, ret_set, arg_sets, arg_leaves, flat_in, e):
        """Tensor id that result ``e`` aliases per the schema, checked against storages."""
        nonempty = storage_nbytes(e) > 0
        eptr = storage_key(e) if nonempty else None
        if ret_set:
            matches = [j for j, (s, _) in enumerate(arg_sets) if s & ret_set]
            cands = [(tid, t) for j in matches for tid, t in arg_leaves[j]]
            if not cands:
                raise CaptureError(f"{n.format_node()}: schema of {target} says the result "
                                   f"aliases {sorted(ret_set)} but no tensor argument carries it")
            if not nonempty:
                return cands[0][0]
            sharing = [tid for tid, t in cands
                       if storage_nbytes(t) > 0 and storage_key(t) == eptr]
            if not sharing:
                raise CaptureError(f"{n.format_node()}: schema of {target} says the result "
                                   f"aliases argument {cands[0][0]} but the storages differ")
            return sharing[0]
        if nonempty:
            for _, tid, t in flat_in:
                if storage_nbytes(t) > 0 and storage_key(t) == eptr:
                    if target._schema.name in UNDECLARED_ALIAS_OK:
                        key = str(target)
                        self.g.undeclared_aliases[key] = self.g.undeclared_aliases.get(key, 0) + 1
                        return tid
                    raise CaptureError(f"{n.format_node()}: result of {target} shares the "
                                       f"storage of argument {tid} but the schema declares no "
                                       f"alias")
        return None


def measure_costs(gm: torch.fx.GraphModule, make_args, repeats: int = 3,
                  seed: int = 0) -> Dict[str, float]:
    """Median run time in seconds of every ATen op node of ``gm`` over ``repeats`` runs.

    ``make_args()`` must return fresh arguments for each run (the step updates them in
    place). Returns ``{fx node name: seconds}``.
    """
    samples: Dict[str, List[float]] = {}

    class _Timer(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
                args, kwargs = self.fetch_args_kwargs_from_env(n)
                t0 = time.perf_counter()
                out = (call_with_grad_mode(n.target, args, kwargs) if needs_grad_mode(n.target)
                       else n.target(*args, **kwargs))
                samples.setdefault(n.name, []).append(time.perf_counter() - t0)
                return out
            return super().run_node(n)

    for _ in range(repeats):
        torch.manual_seed(seed)
        with torch.no_grad():
            _Timer(gm).run(*make_args())
    return {k: statistics.median(v) for k, v in samples.items()}


# ---------------------------------------------------------------- order edges
