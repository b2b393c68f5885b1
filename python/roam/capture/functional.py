"""Pass 2 of the capture: the traced step as a functional graph.

The trace of pass 1 (:mod:`roam.capture.trace`) holds what eager PyTorch ran: in-place
operators on intermediate tensors (``relu_``, the ``add_`` of a residual, dropout's ``div_``,
gradient accumulation) and the optimizer's in-place updates of parameters and state.
:func:`functionalize_step` re-traces that graph with ``make_fx`` over
``torch.func.functionalize(..., remove="mutations")`` (PyTorch's functionalization: every
in-place operator becomes its out-of-place form, views of mutated tensors are regenerated,
mutations of graph inputs become ``copy_`` write-backs at the end), recording for each new node
the node of pass 1 it came from. Then:

* **in place as a permission.** A functional node made from an in-place operator on an
  intermediate tensor (one node, the operator's functional variant) gets
  ``node.meta["roam_inplace"]``: which input it may write its result over, as eager PyTorch
  did (GRAPH_FORMAT.md op field ``inplace``; the export checks sizes and strides) and the
  in-place operator that does so (``node.meta["roam_inplace_target"]``, for the executor).
* **write-backs to resident tensors.** In the update phase (the optimizer's step) a functional
  node made from an in-place operator on a parameter or optimizer state is turned back into
  that in-place operator at its place in the program (what eager PyTorch does, with no copy
  of the parameter held), and the write-back at the end is dropped; the export orders every
  reader of the old contents before it (``after`` edges). Elsewhere (BatchNorm's running
  statistics, ``num_batches_tracked``, a write to an input) the functional form stays and the
  write-back runs at the end of the step (phase ``update``): a BatchNorm in training then
  returns its new statistics (``_native_batch_norm_legit_functional``) and writes nothing, so
  recomputing it changes nothing. A chain that cannot be turned back (a write through a view
  of a parameter) stays functional with its write-back at the end: correct, one copy more.

Every node keeps the phase, module and seed marks of its pass-1 node.
"""

import contextlib
import operator
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from .errors import CaptureError
from .kernels import call_with_grad_mode, needs_grad_mode
from .modules import MODULE_KEY, PHASE_KEY, on_create_node
from .state import TrainingState
from .trace import SEED_KEY, TracedStep, eager_kernels_while_tracing

SOURCE_KEY = "roam_source"             # name of the pass-1 node a node was made from
INPLACE_KEY = "roam_inplace"           # [(argument index, list element or None, result index)]
INPLACE_TARGET_KEY = "roam_inplace_target"  # the in-place OpOverload eager PyTorch ran
WRITEBACK_KEY = "roam_writeback"       # a copy_ write-back to a graph input at the end


def _mutated_args(schema) -> List[int]:
    """Positions of the arguments ``schema`` writes (alias annotation with ``!``)."""
    return [i for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


def _bound_args(schema, args, kwargs) -> List[Any]:
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(args):
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        else:
            out.append(None)
    return out


def runs_unfunctionalized(target) -> bool:
    """The fused optimizer kernels (``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``, ...):
    they write only the optimizer's tensors (parameters, state, gradients) and run in place
    as they are. Functionalization cannot take them: with ``amsgrad=False`` their empty
    ``max_exp_avg_sqs`` list fails its check ("mutating a non-functional tensor with a
    functional tensor", torch 2.13 and 2.14), and ``_fused_sgd_`` has no meta kernel for its
    shape check."""
    return isinstance(target, torch._ops.OpOverload) and \
        target._schema.name.startswith("aten::_fused_") and bool(_mutated_args(target._schema))


def _random_write_in_layout(n: torch.fx.Node) -> bool:
    """A random operator writing in place a tensor that is not contiguous
    (``bernoulli_``, ``uniform_`` on a transposed tensor): it draws in memory order, its
    functional variant into a contiguous tensor, so functionalizing it would change the bits.
    (Dropout masks are rewritten before, :func:`roam.capture.trace.functional_dropout_masks`.)"""
    t = n.target
    if not isinstance(t, torch._ops.OpOverload) or not _mutated_args(t._schema):
        return False
    if torch.Tag.nondeterministic_seeded not in (getattr(t, "tags", ()) or ()):
        return False
    val = n.args[0].meta.get("val") if n.args and isinstance(n.args[0], torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and not val.is_contiguous()


def _call_unfunctionalized(target, args, kwargs):
    """Call ``target`` on the values under functionalization's wrappers, with the
    Functionalize dispatch key excluded: make_fx records it as it is (in place), and the
    wrappers see the new contents because their values were written in place. Private APIs
    (``torch._from_functional_tensor``, ``torch._sync``, ``torch._is_functional_tensor``,
    ``torch._C._ExcludeDispatchKeyGuard``): the public ``torch.func.functionalize`` has no way
    to leave one operator out (checked on torch 2.13 and 2.14)."""
    import torch.utils._pytree as pytree

    def unwrap(t):
        if isinstance(t, torch.Tensor) and torch._is_functional_tensor(t):
            torch._sync(t)
            return torch._from_functional_tensor(t)
        return t
    args, kwargs = pytree.tree_map(unwrap, (args, kwargs))
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
    with torch._C._ExcludeDispatchKeyGuard(keys):
        return target(*args, **kwargs)


class _Sourced(torch.fx.Interpreter):
    """Runs the pass-1 graph, making each node the current source of what gets traced."""

    def __init__(self, gm, current: List[Optional[torch.fx.Node]]):
        super().__init__(gm)
        self.current = current

    def run_node(self, n):
        self.current[0] = n
        try:
            if n.op == "call_function" and (runs_unfunctionalized(n.target)
                                            or _random_write_in_layout(n)):
                args, kwargs = self.fetch_args_kwargs_from_env(n)
                return _call_unfunctionalized(n.target, args, kwargs)
            if n.op == "call_function" and needs_grad_mode(n.target):
                args, kwargs = self.fetch_args_kwargs_from_env(n)
                return call_with_grad_mode(n.target, args, kwargs, detach=False)
            return super().run_node(n)
        finally:
            self.current[0] = None if n.op != "output" else n


@contextlib.contextmanager
def _stamp_sources(current: List[Optional[torch.fx.Node]]):
    def stamp(node):
        src = current[0]
        if src is not None and node.op == "call_function":
            node.meta[SOURCE_KEY] = src
            if src.op == "output":
                node.meta[PHASE_KEY] = "update"
                node.meta[WRITEBACK_KEY] = True
            else:
                for key in (PHASE_KEY, MODULE_KEY, SEED_KEY):
                    if key in src.meta:
                        node.meta[key] = src.meta[key]

    with on_create_node(stamp):
        yield


def functionalize_step(traced: TracedStep, state: TrainingState, seed: int = 0,
                       progress=None) -> TracedStep:
    """The functional graph of ``traced`` (see the module docstring). Returns a new
    :class:`TracedStep` with the functional GraphModule (same placeholders, same calling
    convention, same outputs); ``functional`` counts what was done: ``permissions`` (nodes
    with ``roam_inplace``), ``restored`` (update ops turned back into in-place writes),
    ``writebacks`` (write-backs left at the end).

    Raises:
        CaptureError: a restored write would leave a later reader of the old contents (a bug
            of this pass: the graph would not compute what eager PyTorch computes).
    """
    say = progress or (lambda s: None)
    g0 = traced.gm
    current: List[Optional[torch.fx.Node]] = [None]

    def run(*args):
        import torch.utils._pytree as pytree
        flat = pytree.tree_flatten(args)[0]
        return _Sourced(g0, current).run(*flat)

    from .fake import register_meta_kernels
    register_meta_kernels()  # the fused optimizers' shape checks (see runs_unfunctionalized)
    inputs = state.step_inputs()
    say(f"functionalizing {len(g0.graph.nodes)} fx nodes")
    torch.manual_seed(seed)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_stamp_sources(current))
        stack.enter_context(eager_kernels_while_tracing())
        if state.fake_mode is not None:
            stack.enter_context(state.fake_mode)
        stack.enter_context(torch.no_grad())
        gm = make_fx(torch.func.functionalize(run, remove="mutations"),
                     tracing_mode="real")(*inputs.as_args())
    stats = _rewrite(gm)
    gm.recompile()
    out = TracedStep(**{k: getattr(traced, k) for k in traced.__dataclass_fields__})
    out.gm = gm
    out.functional = stats
    return out


def _result_slots(n_schema, f_schema, mutated: List[int]) -> Optional[List[Tuple[str, int]]]:
    """What each result of the functional variant ``f_schema`` is, for the in-place operator
    ``n_schema`` whose arguments ``mutated`` it writes: ``("arg", position)`` (the new value of
    that mutated argument) or ``("ret", index)`` (the in-place operator's own result of that
    index, a fresh tensor). None when the correspondence is not one of the forms torchgen
    generates."""
    n_rets = list(n_schema.returns)
    nf = len(f_schema.returns)
    aliases = []
    for r in n_rets:
        ai = r.alias_info
        if ai is not None and ai.is_write:
            names = set(ai.before_set)
            pos = [i for i in mutated if schema_arg_set(n_schema, i) & names]
            aliases.append(pos[0] if pos else None)
        else:
            aliases.append(None)
    if n_rets and nf == len(n_rets) and all(a is not None for a in aliases):
        return [("arg", a) for a in aliases]            # add_ -> add
    if not n_rets and nf == len(mutated):
        return [("arg", a) for a in mutated]            # _foreach_add_ -> _foreach_add
    if nf == len(n_rets) + len(mutated) and all(a is None for a in aliases):
        return [("ret", i) for i in range(len(n_rets))] + [("arg", a) for a in mutated]
    return None


def _is_view(n: torch.fx.Node) -> bool:
    """A node that computes nothing: every result of its operator is a (non-writing) alias of
    an argument (``view``, ``t``, ``select``, ...), as functionalization regenerates views of
    a written tensor."""
    t = n.target
    if not isinstance(t, torch._ops.OpOverload) or not t._schema.returns:
        return False
    return all(r.alias_info is not None and not r.alias_info.is_write for r in t._schema.returns)


def schema_arg_set(schema, i: int) -> set:
    ai = schema.arguments[i].alias_info
    return set(ai.before_set) if ai is not None else set()


def _rewrite(gm: torch.fx.GraphModule) -> Dict[str, Any]:
    graph = gm.graph
    by_source: Dict[torch.fx.Node, List[torch.fx.Node]] = {}
    for n in graph.nodes:
        src = n.meta.get(SOURCE_KEY)
        if src is not None and n.op == "call_function" and n.target is not operator.getitem:
            by_source.setdefault(src, []).append(n)
    placeholders = {n for n in graph.nodes if n.op == "placeholder"}
    base: Dict[torch.fx.Node, torch.fx.Node] = {}  # restored write result -> its placeholder

    def resident(v) -> Optional[torch.fx.Node]:
        if isinstance(v, torch.fx.Node):
            v = base.get(v, v)
            return v if v in placeholders else None
        return None

    permissions = restored = 0
    for src, made in by_source.items():
        target = src.target
        if src.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        mutated = _mutated_args(target._schema)
        compute = [m for m in made if not _is_view(m)]
        if not mutated or len(compute) != 1:
            continue
        f = compute[0]
        if len(made) != 1 and f.meta.get(PHASE_KEY) == "update" and \
                any(resident(v) is not None for v in f.all_input_nodes):
            continue  # a write through a view of a resident tensor: left functional
        if not isinstance(f.target, torch._ops.OpOverload):
            continue
        slots = _result_slots(target._schema, f.target._schema, mutated)
        if slots is None:
            continue
        fargs = _bound_args(f.target._schema, f.args, f.kwargs)
        leaves: Dict[int, List[Any]] = {}
        for a in mutated:
            v = fargs[a] if a < len(fargs) else None
            leaves[a] = list(v) if isinstance(v, (list, tuple)) else [v]
        res = [resident(v) for a in mutated for v in leaves[a]]
        if f.meta.get(PHASE_KEY) == "update" and all(r is not None for r in res):
            _restore(graph, f, src, slots, leaves, base)
            restored += 1
        elif all(r is None for r in res) and all(kind == "arg" for kind, _a in slots):
            perms = []
            for k, (kind, a) in enumerate(slots):
                if kind != "arg":
                    continue
                v = fargs[a] if a < len(fargs) else None  # (an out= keyword: not bound)
                if len(leaves[a]) == 1 and not isinstance(v, (list, tuple)):
                    perms.append((a, None, k))
                else:
                    perms.append((a, "list", k))
            if perms:
                f.meta[INPLACE_KEY] = perms
                f.meta[INPLACE_TARGET_KEY] = target
                permissions += 1
    writebacks = 0
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default and \
                n.meta.get(WRITEBACK_KEY):
            dst, v = n.args[0], n.args[1]
            if resident(v) is dst:
                n.replace_all_uses_with(dst)
                graph.erase_node(n)
            else:
                writebacks += 1  # in no module's forward, as the optimizer's update
    dead = _drop_dead_views(graph)
    _check_no_stale_reads(graph, placeholders, base)
    return {"permissions": permissions, "restored": restored, "writebacks": writebacks,
            "dead_views": dead}


def _drop_dead_views(graph) -> int:
    """Erase the views nobody reads (functionalization regenerates views of a written base
    eagerly, e.g. ``t(mm)`` of a transposed gradient written by ``clip_grad_norm_``'s
    ``_foreach_mul_``): such a view would read the old contents after the write and make the
    write look invalid in place. Returns how many were erased."""
    n_erased = 0
    changed = True
    while changed:
        changed = False
        for n in reversed(list(graph.nodes)):
            if n.op == "call_function" and not n.users and _is_view(n):
                graph.erase_node(n)
                n_erased += 1
                changed = True
    return n_erased


RESTORED_KEY = "roam_restored"  # "alias": returns the written tensor; "elements": returns none


def _restore(graph, f, src, slots, leaves, base) -> None:
    """Replace the functional node ``f`` by the in-place operator of its source ``src``
    (same arguments) and point every use of ``f``'s results at what holds them after the
    write: the in-place operator's own result where it returns the written tensor (``add_``),
    else the written argument itself (a list element of ``_foreach_add_``, the running
    statistics of a BatchNorm)."""
    with graph.inserting_before(f):
        r = graph.call_function(src.target, f.args, dict(f.kwargs))
    r.meta.update({k: v for k, v in f.meta.items()
                   if k not in ("val", "tensor_meta", INPLACE_KEY, INPLACE_TARGET_KEY)})
    n_rets = len(src.target._schema.returns)
    f_rets = list(f.target._schema.returns)
    alias_result = (n_rets == 1 and len(slots) == 1 and slots[0][0] == "arg"
                    and len(leaves[slots[0][1]]) == 1
                    and not isinstance(f_rets[0].type, torch.ListType))
    r.meta[RESTORED_KEY] = "alias" if alias_result else "elements"

    def result(k: int):
        """What replaces return k of f: a node, or a list of nodes (a list return)."""
        kind, a = slots[k]
        if kind == "ret":
            if n_rets == 1:
                return r
            with graph.inserting_after(r):
                return graph.call_function(operator.getitem, (r, a))
        if alias_result:
            return r
        vals = leaves[a]
        return vals if isinstance(f_rets[k].type, torch.ListType) else vals[0]

    def replace(node, value):
        """Point the uses of ``node`` (return value or list) at ``value``."""
        if isinstance(value, list):
            for u in list(node.users):
                if not (u.op == "call_function" and u.target is operator.getitem):
                    raise CaptureError(f"cannot restore {src.target}: list result used as a "
                                       f"whole by {u.name}")
                u.replace_all_uses_with(value[u.args[1]])
                graph.erase_node(u)
        else:
            node.replace_all_uses_with(value)

    if len(f_rets) == 1:
        replace(f, result(0))
    else:
        for u in list(f.users):
            if not (u.op == "call_function" and u.target is operator.getitem):
                raise CaptureError(f"cannot restore {src.target}: result tuple used as a whole")
            replace(u, result(u.args[1]))
            if not u.users:
                graph.erase_node(u)
    if f.users:
        raise CaptureError(f"cannot restore {src.target}: {len(f.users)} uses left")
    graph.erase_node(f)
    if alias_result:
        v = leaves[slots[0][1]][0]
        base[r] = base.get(v, v)


def _check_no_stale_reads(graph, placeholders, base) -> None:
    """After the restored writes: no node reads a resident tensor's old contents (the
    placeholder, or a view of it made before a restored write that returns the written
    tensor, read after that write)."""
    version: Dict[torch.fx.Node, int] = {p: 0 for p in placeholders}
    seen: Dict[torch.fx.Node, Tuple[torch.fx.Node, int]] = {p: (p, 0) for p in placeholders}
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        for a in n.all_input_nodes:
            if a in seen:
                p, v = seen[a]
                if version[p] != v and not n.meta.get(WRITEBACK_KEY):
                    raise CaptureError(
                        f"functionalization: {n.name} ({n.target}) reads {a.name}, the contents "
                        f"of {p.name} before a write the capture restored in place")
        kind = n.meta.get(RESTORED_KEY)
        if kind == "alias":
            p = base[n]
            version[p] += 1
            seen[n] = (p, version[p])
        elif kind == "elements":
            for i in _mutated_args(n.target._schema):
                v = _bound_args(n.target._schema, n.args, n.kwargs)[i]
                for x in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(x, torch.fx.Node) and x in seen:
                        p, _ = seen[x]
                        version[p] += 1
                        seen[x] = (p, version[p])
        elif isinstance(n.target, torch._ops.OpOverload) and n.args and \
                isinstance(n.args[0], torch.fx.Node) and n.args[0] in seen:
            rets = n.target._schema.returns
            if rets and rets[0].alias_info is not None and not rets[0].alias_info.is_write:
                seen[n] = seen[n.args[0]]  # a view carries the version it was made at
