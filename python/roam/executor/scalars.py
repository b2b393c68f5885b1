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
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, make_fx

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
                out.append((k, v.dtype, float(v.detach().reshape(-1)[0]) if v.numel() else None))
        else:
            out.append((k, repr(v)))
    return tuple(out)


def _group_key(group: Dict[str, Any]):
    return tuple(sorted((k, repr(v)) for k, v in group.items() if k != "params"))


class _Trace:
    """Targets and float / int arguments of the dummy step's nodes, in node order
    (``aten.detach`` nodes dropped, as the capture drops them)."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.targets: List[Any] = []
        self.node_floats: List[List[float]] = []
        self.ints: List[int] = []
        for n in gm.graph.nodes:
            if n.op != "call_function" or n.target is torch.ops.aten.detach.default:
                continue
            self.targets.append(n.target)
            fl = []
            for v in pytree.tree_flatten((n.args, n.kwargs))[0]:
                if type(v) is float:
                    fl.append(v)
                elif type(v) is int:
                    self.ints.append(v)
            self.node_floats.append(fl)

    @property
    def floats(self) -> List[float]:
        return [v for fl in self.node_floats for v in fl]


def dummy_trace(optimizer: torch.optim.Optimizer, group: Dict[str, Any],
                state: Dict[str, Any], param: torch.Tensor) -> _Trace:
    """Trace ``optimizer.step()`` for one parameter group holding a one-element dummy of
    ``param`` whose state is ``state`` (tensors shaped like the parameter become one-element
    tensors; scalar state is copied). The optimizer is restored afterwards."""
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
        from .api import eager_kernels_while_tracing
        with torch.no_grad(), eager_kernels_while_tracing():
            gm = make_fx(fn, decomposition_table={
                torch.ops.aten._local_scalar_dense.default: local_scalar_dense})(*tensors)
    finally:
        d.grad = None
        optimizer.param_groups, optimizer.state = saved_groups, saved_state
    return _Trace(gm)


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
        self.nodes = [n for n in gm.graph.nodes
                      if n.op == "call_function" and n.meta.get(PHASE_KEY) == "update"]
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
                n.target == self.base[gi][1].targets[j]
                for n, (gi, j) in zip(self.nodes, expected)):
            self.position = dict(zip(self.nodes, expected))
        else:
            self.position = None  # value mode (old constant -> new constant)

    def _trace(self, key, group, state, param) -> _Trace:
        tr = self._cache.get(key)
        if tr is None:
            tr = dummy_trace(self.optimizer, group, state, param)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = tr
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
            old, new = base[1], self._trace(key, group, rep_state, params[rep])
            if old.targets != new.targets or old.ints != new.ints or \
                    [len(f) for f in old.node_floats] != [len(f) for f in new.node_floats]:
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
        count = 0
        for n in self.nodes:
            args, kwargs = self.original[n]
            gi, j = self.position[n]
            new = new_traces.get(gi)
            if new is None:
                n.args, n.kwargs = args, kwargs
                continue
            old_f, new_f = self.base[gi][1].node_floats[j], new.node_floats[j]
            k = [0]

            def sub(v):
                if type(v) is not float:
                    return v
                i = k[0]
                k[0] += 1
                if i < len(old_f) and v == old_f[i]:
                    return new_f[i]
                return v
            na, nk = pytree.tree_map(sub, (args, kwargs))
            count += sum(1 for x, y in zip(pytree.tree_flatten((args, kwargs))[0],
                                           pytree.tree_flatten((na, nk))[0])
                         if type(x) is float and x != y)
            n.args, n.kwargs = na, nk
        self.substitutions = count
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
