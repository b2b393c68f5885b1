"""Keeping the optimizer's Python scalars of a captured step current.

make_fx records Python numbers as constants. An optimizer's update computes some of them from
its state and hyper-parameters: ``torch.optim.Adam`` (single-tensor path) reads
``step_t.item()`` and passes ``-lr / (1 - beta1 ** step)`` and ``sqrt(1 - beta2 ** step)`` to
``addcdiv_`` and ``div``; SGD passes ``-lr``. The captured graph is therefore exact for the
traced step only (``roam.capture`` says so in the graph's notes); after a step, or after an LR
scheduler changed ``lr``, its update-phase constants are stale.

:class:`StepScalars` refreshes them without tracing the model again. For each parameter group
it traces the optimizer's own ``step()`` on a one-element dummy parameter (same hyper-parameters,
the group's scalar state such as ``step``) twice: once as it was when the step was captured and
once as it is now. Both traces have the same operators. A single-tensor optimizer's update in
the captured graph is one copy of the dummy's node sequence per parameter, group by group; each
float argument of such a node is replaced by the new dummy's float at the same position when it
equals the old dummy's. (When the update does not decompose that way, the float arguments, by
value, form a map ``old constant -> new constant``; a value that would map to two constants
makes the refresh fail.) Elementwise optimizers (Adam, AdamW, SGD,
RMSprop, Adagrad, ...) compute these constants independently of the parameter's shape, which
is what makes the one-element dummy exact.

When the map cannot be made safely (the dummy traces differ in structure or in integer
arguments, one old constant would map to two new ones, parameters of one group disagree on
their scalar state), :meth:`StepScalars.refresh` returns a reason and the caller runs an
ordinary eager step instead.
"""

import copy
import struct
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, make_fx
from torch.utils._python_dispatch import TorchDispatchMode

PHASE_KEY = "roam_phase"


def _raw_step(optimizer):
    f = type(optimizer).step
    if getattr(f, "hooked", False) and hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return f(optimizer)


def _scalar_state_key(state: Dict[str, Any], param_numel: int):
    """The parts of a parameter's optimizer state that can enter Python scalars: non-tensor
    entries and tensors of at most one element (``step``), unless the parameter itself has
    one element (then every tensor is kept)."""
    out = []
    for k in sorted(state):
        v = state[k]
        if isinstance(v, torch.Tensor):
            if v.numel() <= 1 and (param_numel > 1 or v.dim() == 0):
                out.append((k, v.dtype, float(v.item()) if v.numel() else None))
        else:
            out.append((k, repr(v)))
    return tuple(out)


def _group_key(group: Dict[str, Any]):
    return tuple(sorted((k, repr(v)) for k, v in group.items() if k != "params"))


class _Trace:
    """Targets and float / int arguments of the dummy step's nodes, in node order
    (``aten.detach`` nodes dropped, as the capture drops them)."""

    def __init__(self, gm: Optional[torch.fx.GraphModule] = None,
                 calls: Sequence[Tuple[Any, Any, Any]] = ()):
        """From a traced GraphModule, or from ``calls``: ``(target, args, kwargs)`` of each
        operator in the order it ran (:func:`recorded_trace`)."""
        self.targets: List[Any] = []
        self.node_floats: List[List[float]] = []
        self.ints: List[int] = []
        if gm is not None:
            calls = [(n.target, n.args, n.kwargs) for n in gm.graph.nodes
                     if n.op == "call_function"]
        for target, args, kwargs in calls:
            if target is torch.ops.aten.detach.default:
                continue
            self.targets.append(target)
            fl = []
            for v in pytree.tree_flatten((args, kwargs))[0]:
                if type(v) is float:
                    fl.append(v)
                elif type(v) is int:
                    self.ints.append(v)
            self.node_floats.append(fl)

    @property
    def floats(self) -> List[float]:
        return [v for fl in self.node_floats for v in fl]


class _Recorder(TorchDispatchMode):
    """Records ``(operator, args, kwargs)`` of every ATen call that reaches the Python
    dispatch key, then runs it."""

    def __init__(self):
        super().__init__()
        self.calls: List[Tuple[Any, Any, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.ops.aten._local_scalar_dense.default:  # .item(): no node
            self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)


def dummy_trace(optimizer: torch.optim.Optimizer, group: Dict[str, Any],
                state: Dict[str, Any], param: torch.Tensor, record: bool = False) -> _Trace:
    """Trace ``optimizer.step()`` for one parameter group holding a one-element dummy of
    ``param`` whose state is ``state`` (tensors shaped like the parameter become one-element
    tensors; scalar state is copied). The optimizer is restored afterwards.

    ``record``: run the step under a dispatch mode that records each operator call instead of
    tracing it with make_fx (~0.3 ms instead of ~7 ms: make_fx builds a graph through fx's
    tracer). Its calls are what make_fx records except for composite operators that have a
    CPU kernel (make_fx keeps them under :func:`eager_kernels_while_tracing`, the dispatcher
    decomposes them before the dispatch mode): :meth:`StepScalars.refresh` uses it and
    traces with make_fx when its operators differ from the captured trace's."""
    dtype = param.dtype
    d = torch.zeros(1, dtype=dtype)
    grad = torch.full((1,), 0.5, dtype=dtype)
    st: Dict[str, Any] = {}
    tensors: List[torch.Tensor] = [d, grad]
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            if v.numel() == param.numel() and (param.numel() > 1 or v.dim() == param.dim()):
                t = torch.full((1,), 0.25, dtype=v.dtype)
            else:
                t = v.detach().clone()
            st[k] = t
            tensors.append(t)
        else:
            st[k] = copy.deepcopy(v)

    def local_scalar_dense(x):
        with disable_proxy_modes_tracing():
            return torch.ops.aten._local_scalar_dense.default(x)

    def fn(*_tensors):
        _raw_step(optimizer)
        return d

    saved_groups, saved_state = optimizer.param_groups, optimizer.state
    try:
        optimizer.param_groups = [dict(group, params=[d])]
        optimizer.state = defaultdict(dict)
        optimizer.state[d] = st
        d.grad = grad
        from .planning import eager_kernels_while_tracing
        if record:
            rec = _Recorder()
            with torch.no_grad(), rec:
                fn(*tensors)
        else:
            with torch.no_grad(), eager_kernels_while_tracing():
                gm = make_fx(fn, decomposition_table={
                    torch.ops.aten._local_scalar_dense.default: local_scalar_dense})(*tensors)
    finally:
        d.grad = None
        optimizer.param_groups, optimizer.state = saved_groups, saved_state
    return _Trace(calls=rec.calls) if record else _Trace(gm)


def _same_op(a, b) -> bool:
    """The same operator, or its in-place and functional forms (the capture's functional pass
    turns ``denom.add_(eps)`` into ``add`` with an inplace permission; the dummy's trace keeps
    the in-place form): schema names equal but for a trailing ``_``, overloads equal."""
    if a == b:
        return True
    sa, sb = getattr(a, "_schema", None), getattr(b, "_schema", None)
    if sa is None or sb is None or sa.overload_name != sb.overload_name:
        return False
    return sa.name.rstrip("_") == sb.name.rstrip("_")


def _same_structure(a: _Trace, b: _Trace) -> bool:
    """The same operators with the same integer arguments and float counts."""
    return (a.targets == b.targets and a.ints == b.ints
            and [len(f) for f in a.node_floats] == [len(f) for f in b.node_floats])


def _same_floats(a: Sequence[float], b: Sequence[float]) -> bool:
    """The two float lists are equal bit for bit (-0.0 differs from 0.0, NaN equals NaN)."""
    return len(a) == len(b) and struct.pack(f"{len(a)}d", *a) == struct.pack(f"{len(b)}d", *b)


def _set_args(n: torch.fx.Node, args, kwargs) -> None:
    """Set a node's ``args`` (or ``kwargs``, the one not None) that differ from its current
    ones in float constants only. fx's setters walk both structures to update the users of
    every input node (~60 us a node); the input nodes are the same here, so the stored
    structure is replaced directly when this fx keeps it in ``_args`` / ``_kwargs``."""
    if hasattr(n, "_args") and hasattr(n, "_kwargs") and hasattr(n, "_input_nodes"):
        if args is not None:
            n._args = args
        else:
            n._kwargs = kwargs
    elif args is not None:
        n.args = args
    else:
        n.kwargs = kwargs


def _map_floats(obj, fn):
    """``obj`` (fx node arguments: tuples, lists, dicts, immutable collections) with every
    ``float`` replaced by ``fn(value)``, in the order pytree flattens it; containers keep
    their type."""
    t = type(obj)
    if t is float:
        return fn(obj)
    if t is tuple or t is list:
        return t(_map_floats(v, fn) for v in obj)
    if isinstance(obj, (tuple, list)):  # immutable_list, namedtuples are not fx arguments
        return t([_map_floats(v, fn) for v in obj])
    if isinstance(obj, dict):
        return t({k: _map_floats(v, fn) for k, v in obj.items()})
    return obj


class StepScalars:
    """See the module docstring.

    Args:
        gm: the captured GraphModule (its update-phase nodes are rewritten in place).
        optimizer: the optimizer that will run the steps (hyper-parameters read from it).
        group_index: per parameter group, the indices (in the capture's parameter list) of
            its parameters.
        state_index / state_values: the capture's parameters with optimizer state and their
            state dicts *as captured* (snapshotted here).
        params: the capture's parameters (for dtype and size).
    """

    def __init__(self, gm: torch.fx.GraphModule, optimizer: torch.optim.Optimizer,
                 group_index: Sequence[Sequence[int]], state_index: Sequence[int],
                 state_values: Sequence[Dict[str, Any]], params: Sequence[torch.Tensor]):
        self.gm = gm
        self.optimizer = optimizer
        self.group_index = [list(g) for g in group_index]
        # the update's own nodes (the write-backs of BatchNorm statistics at the end of the
        # step are not the optimizer's)
        self.nodes = [n for n in gm.graph.nodes
                      if n.op == "call_function" and n.meta.get(PHASE_KEY) == "update"
                      and not n.meta.get("roam_writeback")]
        self.original = {n: (n.args, n.kwargs) for n in self.nodes}
        self.params_meta = [(p.dtype, p.numel(), p.dim()) for p in params]
        slot = {i: k for k, i in enumerate(state_index)}
        self.slot = slot
        # the captured situation, per group: key and dummy trace
        self.base: List[Optional[Tuple[Any, _Trace]]] = []
        self._cache: Dict[Any, _Trace] = {}
        for gi, idx in enumerate(self.group_index):
            rep = next((i for i in idx if i in slot), None)
            if rep is None:
                self.base.append(None)
                continue
            st = state_values[slot[rep]]
            group = optimizer.param_groups[gi]
            key = (_group_key(group), _scalar_state_key(st, params[rep].numel()))
            self.base.append((key, self._trace(key, group, st, params[rep])))
        self.current_key = [b[0] if b else None for b in self.base]
        self.substitutions = 0
        self._applied: Optional[List[Optional[_Trace]]] = None  # positional mode
        self._stale_code = False  # node args changed, gm.forward not regenerated yet
        # positional mode: the update is one copy of the dummy's node sequence per parameter
        # with state, group by group (single-tensor optimizers); node -> (group, position)
        self.position: Optional[Dict[torch.fx.Node, Tuple[int, int]]] = {}
        expected: List[Tuple[int, int]] = []
        for gi, idx in enumerate(self.group_index):
            if self.base[gi] is None:
                continue
            n_state = sum(1 for i in idx if i in slot)
            pattern = self.base[gi][1].targets
            expected += [(gi, j) for _ in range(n_state) for j in range(len(pattern))]
        if len(expected) == len(self.nodes) and all(
                _same_op(n.target, self.base[gi][1].targets[j])
                for n, (gi, j) in zip(self.nodes, expected)):
            self.position = dict(zip(self.nodes, expected))
        else:
            self.position = None  # value mode (old constant -> new constant)

    def _trace(self, key, group, state, param, record: bool = False) -> _Trace:
        tr = self._cache.get((key, record))
        if tr is None:
            tr = dummy_trace(self.optimizer, group, state, param, record=record)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[(key, record)] = tr
        return tr

    def refresh(self, params: Sequence[torch.Tensor]) -> Optional[str]:
        """Bring the update-phase constants of ``gm`` to the optimizer's current state and
        hyper-parameters (``params``: the live parameters, in the capture's order, whose
        ``optimizer.state`` entries are read). Returns None on success, else the reason why the
        graph cannot be used for this step (the caller then runs an eager step)."""
        keys = []
        new_traces: Dict[int, _Trace] = {}
        for gi, idx in enumerate(self.group_index):
            base = self.base[gi]
            if base is None:
                keys.append(None)
                continue
            group = self.optimizer.param_groups[gi]
            gkey = _group_key(group)
            skeys = set()
            rep_state = None
            rep = None
            for i in idx:
                if i not in self.slot:
                    continue
                st = self.optimizer.state.get(params[i])
                if not st:
                    return f"parameter {i} has no optimizer state"
                skeys.add(_scalar_state_key(st, params[i].numel()))
                if rep_state is None:
                    rep_state, rep = st, i
            if len(skeys) != 1:
                return (f"parameters of group {gi} differ in their optimizer scalar state "
                        f"({len(skeys)} different step counts)")
            key = (gkey, skeys.pop())
            keys.append(key)
            if key == base[0]:
                continue
            old = base[1]
            new = self._trace(key, group, rep_state, params[rep], record=True)
            if not _same_structure(old, new):  # see dummy_trace: make_fx's trace then
                new = self._trace(key, group, rep_state, params[rep])
            if not _same_structure(old, new):
                return (f"the optimizer's update changes structure between the captured step "
                        f"and now (group {gi})")
            new_traces[gi] = new
        if keys == self.current_key:
            return None  # the graph already holds these constants
        if self.position is not None:
            self._apply_positional(new_traces)
        else:
            mapping: Dict[float, float] = {}
            for gi, new in new_traces.items():
                for a, b in zip(self.base[gi][1].floats, new.floats):
                    if mapping.get(a, b) != b:
                        return f"constant {a!r} of the update maps to two values"
                    mapping[a] = b
            self._apply(mapping)
        self.current_key = keys
        return None

    def compiled_module(self) -> torch.fx.GraphModule:
        """``gm`` with its generated code up to date (``gm(*args)`` runs the current
        constants; :class:`~roam.executor.program.Program` reads the nodes directly)."""
        if self._stale_code:
            self.gm.recompile()
            self._stale_code = False
        return self.gm

    def _apply_positional(self, new_traces: Dict[int, "_Trace"]) -> None:
        """Give every update node at pattern position ``(gi, j)`` the floats of the target
        trace of its group (``new_traces[gi]``, else the captured one), substituted where the
        node's captured float equals the captured dummy's. Only positions whose target floats
        differ (bit for bit) from those applied now are rewritten: Adam's step changes 2 of
        its ~10 positions, and each node rewrite is a graph update (fx's args setter)."""
        if self._applied is None:
            self._applied = [b[1] if b else None for b in self.base]
            self._node_subs = {}
            self._at: Dict[Tuple[int, int], List[torch.fx.Node]] = defaultdict(list)
            for n in self.nodes:
                self._at[self.position[n]].append(n)
        for gi, base in enumerate(self.base):
            if base is None:
                continue
            target = new_traces.get(gi, base[1])
            applied = self._applied[gi]
            if target is applied:
                continue
            old = base[1]
            for j, (cur_f, new_f) in enumerate(zip(applied.node_floats, target.node_floats)):
                if _same_floats(cur_f, new_f):
                    continue
                old_f = old.node_floats[j]
                for n in self._at.get((gi, j), ()):
                    args, kwargs = self.original[n]
                    k = [0, 0, 0]  # float index, floats changed, floats matched

                    def sub(v, _old=old_f, _new=new_f, _k=k):
                        i = _k[0]
                        _k[0] += 1
                        if i < len(_old) and v == _old[i]:
                            _k[2] += 1
                            if v != _new[i]:
                                _k[1] += 1
                            return _new[i]
                        return v
                    # only the part (args, kwargs) that holds a matched float is set (each
                    # set is a graph update); the same part matches for every target
                    na = _map_floats(args, sub)
                    in_args = k[2]
                    nk = _map_floats(kwargs, sub)
                    if target is old:
                        na, nk, k[1] = args, kwargs, 0
                    if in_args:
                        _set_args(n, na, None)
                    if k[2] > in_args:
                        _set_args(n, None, nk)
                    count = k[1]
                    self.substitutions += count - self._node_subs.get(n, 0)
                    self._node_subs[n] = count
            self._applied[gi] = target
        self._stale_code = True

    def _apply(self, mapping: Dict[float, float]) -> None:
        def sub(v):
            if type(v) is float:
                return mapping.get(v, v)
            return v
        count = 0
        for n in self.nodes:
            args, kwargs = self.original[n]
            if mapping:
                na = pytree.tree_map(sub, args)
                nk = pytree.tree_map(sub, kwargs)
                count += sum(1 for x, y in zip(pytree.tree_flatten((args, kwargs))[0],
                                               pytree.tree_flatten((na, nk))[0])
                             if type(x) is float and x != y)
                n.args, n.kwargs = na, nk
            else:
                n.args, n.kwargs = args, kwargs
        self.substitutions = count
        self._stale_code = True
