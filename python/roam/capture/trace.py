"""Pass 1 of the capture: trace one training step as an ATen graph (fx GraphModule).

The step (:func:`roam.capture.state.step_function`: the default forward / loss / backward /
update, or the user's own function) is traced with ``torch.fx.experimental.proxy_tensor.make_fx``
on real tensors (they run while the graph is recorded) or on fake tensors (a
``FakeTensorMode`` active below make_fx's proxy mode, :mod:`roam.capture.fake`: nothing is
allocated), with the parameters, buffers, optimizer state and the input tensors as
placeholders (:func:`roam.capture.state.bound_step`).

Why make_fx over the whole step, then functionalization as a second pass
(:mod:`roam.capture.functional`): the planner needs the whole step in one graph, the optimizer
update included (ROAM, arXiv 2310.19295, section 3), and torch 2.x's AOT export
(``aot_export_joint_simple``, ``torch.export``) traces forward and backward but not an
optimizer's ``step()`` with its state updates; make_fx records every ATen call below autograd,
``backward()`` and ``optimizer.step()`` included, in the order eager PyTorch runs them. Tracing
first without functionalization keeps what eager PyTorch ran in place visible (``relu_``,
``add_``), which the functional pass turns into ``inplace`` permissions.

Inside the traced step:

* ``Tensor.backward()`` / ``torch.autograd.backward`` run as ``torch.autograd.grad`` over the
  step's leaves, each gradient accumulated into ``.grad`` as autograd's ``AccumulateGrad``
  does (stolen when ``.grad`` is None, ``add_`` otherwise): the same kernels eager autograd
  runs, without the copies ``AccumulateGrad`` makes when a traced tensor looks shared;
* ``optimizer.step()`` is the optimizer's own step (any ``torch.optim`` optimizer, single
  tensor, foreach or fused), run in phase ``update`` without its profiler annotation;
* LR schedulers' ``step()`` calls are recorded, not run (the executor runs them after each
  step);
* ``Tensor.item()`` in the update (single-tensor Adam's ``step_t.item()``) is evaluated on the
  value and baked into the graph as a constant (``baked_items``; the executor refreshes such
  constants each step, :mod:`roam.executor.scalars`); anywhere else it may steer the Python
  code of the step (``if loss > 0``), which a graph cannot replay: refused with the reason.
  So is an operator whose output shape depends on tensor values (``nonzero``, ``unique``).

Phases (``node.meta["roam_phase"]``) and module paths (``node.meta["roam_module"]``) are stamped
while tracing (:mod:`roam.capture.modules`).
"""

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from . import modules as _modules
from .errors import CaptureError
from .modules import MODULE_KEY, PHASE_KEY, PHASES, ModuleTracker, forward_claims, phase, \
    on_create_node, stamp_nodes
from .state import (StepInputs, TrainingState, bound_step, python_state_unchanged,
                    step_function)

SEED_KEY = "roam_seed"  # node.meta flag: the ones_like seeding a backward() call


@contextlib.contextmanager
def eager_kernels_while_tracing():
    """While active, make_fx records an operator that has a CPU kernel as itself instead of
    decomposing it.

    make_fx's ``proxy_call`` decomposes every operator that has a CompositeImplicitAutograd
    kernel, even where eager PyTorch runs a dedicated CPU kernel (checked on torch 2.13 and
    2.14; ``OpOverload.decompose`` is what it calls): ``silu_backward`` and ``mish_backward``
    would become elementwise ops that round differently, so the captured step's gradients
    would differ from eager autograd in the last bits. Operators without a CPU kernel
    (``linear``, ``dropout``, ...) still decompose, as they do in eager mode.
    """
    OpOverload = torch._ops.OpOverload
    original = OpOverload.decompose
    cpu = torch._C.DispatchKey.CPU

    def decompose(self, *args, **kwargs):
        if torch._C._dispatch_has_kernel_for_dispatch_key(self.name(), cpu):
            return NotImplemented
        return original(self, *args, **kwargs)

    OpOverload.decompose = decompose
    try:
        yield
    finally:
        OpOverload.decompose = original


@dataclass
class TracedStep:
    """Result of a capture pass over the step.

    ``gm``: the fx GraphModule; ``gm(*inputs.as_args())`` runs the step (it updates the given
    tensors in place and returns the step's outputs). ``placeholders``: ``(role, name)`` for
    each placeholder in graph order. ``baked_items``: ``(phase, value)`` for each
    ``Tensor.item()`` evaluated at trace time and frozen into the graph as a constant.
    ``unused_params``: names of parameters without optimizer state (no gradient in the
    warm-up; not updated). ``fallbacks``: ``{operator: calls}`` run through FakeTensorMode's
    real-kernel fallback (fake captures only). ``fake``: traced on fake tensors.
    ``removed_detach``: ``aten.detach`` nodes removed (:func:`remove_detach_nodes`).
    ``functional_dropouts``: dropout masks rewritten out of place
    (:func:`functional_dropout_masks`). ``batch_norms``: training BatchNorms given their
    writing schema (:func:`batch_norm_writes`). ``scheduler_calls``: indices into
    ``TrainingState.schedulers`` of the ``step()`` calls the step made, in order.
    ``output_spec``: the pytree structure of the step's outputs. ``functional``: set by
    :func:`roam.capture.functional.functionalize_step` (its statistics).
    """
    gm: torch.fx.GraphModule
    placeholders: List[Tuple[str, str]]
    baked_items: List[Tuple[str, Any]]
    unused_params: List[str]
    fallbacks: Dict[str, int] = field(default_factory=dict)
    fake: bool = False
    removed_detach: int = 0
    functional_dropouts: int = 0
    batch_norms: int = 0
    scheduler_calls: List[int] = field(default_factory=list)
    output_spec: Any = None
    functional: Optional[Dict[str, Any]] = None


def placeholder_roles(state: TrainingState, inputs: Optional[StepInputs] = None
                      ) -> List[Tuple[str, str]]:
    """``(role, name)`` for each flattened argument of the step, in the order in which
    make_fx creates the placeholders (pytree flattening of ``inputs.as_args()``)."""
    ostate = []
    for i, keys in zip(state.state_index, state.state_keys):
        n = state.param_names[i]
        ostate += [("optimizer_state", f"{n}.{k}") for k in keys]
    labels = ([("param", n) for n in state.param_names]
              + [("buffer", n) for n in state.buffer_names]
              + ostate + [("input", n) for n in state.input_names])
    if inputs is not None:
        flat_args, _ = pytree.tree_flatten(inputs.as_args())
        if len(labels) != len(flat_args) or not all(isinstance(a, torch.Tensor)
                                                    for a in flat_args):
            raise CaptureError(f"placeholder labelling mismatch: {len(labels)} labels for "
                               f"{len(flat_args)} inputs")
    return labels


# ---------------------------------------------------------------- the traced function

class _Backward:
    """``backward()`` inside the traced step: ``torch.autograd.grad`` over the step's leaves
    (the parameters, and input tensors that require grad), accumulated into ``.grad``."""

    def __init__(self, leaves: List[torch.Tensor]):
        self.leaves = leaves
        self.last_node: Optional[torch.fx.Node] = None
        self.before: Optional[Callable[[], None]] = None  # called first (_step_events)

    def __call__(self, tensors, grad_tensors=None, retain_graph=None, create_graph=False,
                 grad_variables=None, inputs=None):
        if self.before is not None:
            self.before()
        if isinstance(tensors, torch.Tensor):
            tensors = (tensors,)
        tensors = tuple(tensors)
        if grad_tensors is None:
            grad_tensors = grad_variables
        if isinstance(grad_tensors, torch.Tensor):
            grad_tensors = (grad_tensors,)
        if inputs is not None:
            leaves = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        else:
            leaves = [t for t in self.leaves if t.requires_grad]
        with phase("backward"):
            seeds = []
            for k, t in enumerate(tensors):
                g = grad_tensors[k] if grad_tensors is not None else None
                if g is None:
                    if t.numel() != 1:
                        raise CaptureError("backward() on a tensor of more than one element "
                                           "needs a gradient argument")
                    g = torch.ones_like(t, memory_format=torch.preserve_format)
                    _mark_last_node(SEED_KEY)
                seeds.append(g)
            grads = torch.autograd.grad(tensors, leaves, grad_outputs=seeds,
                                        retain_graph=retain_graph, create_graph=create_graph,
                                        allow_unused=True)
            with torch.no_grad():
                for leaf, g in zip(leaves, grads):
                    if g is None:
                        continue
                    if leaf.grad is None:
                        leaf.grad = g
                    else:
                        leaf.grad.add_(g)


def _mark_last_node(key: str) -> None:
    node = _LAST_NODE[0]
    if node is not None:
        node.meta[key] = True


_LAST_NODE: List[Optional[torch.fx.Node]] = [None]


@contextlib.contextmanager
def _track_last_node():
    try:
        with on_create_node(lambda node: _LAST_NODE.__setitem__(0, node)):
            yield
    finally:
        _LAST_NODE[0] = None


@contextlib.contextmanager
def _backward_as_grad(leaves: List[torch.Tensor]):
    """Route ``Tensor.backward`` and ``torch.autograd.backward`` through :class:`_Backward`."""
    bw = _Backward(leaves)
    tensor_backward = torch.Tensor.backward
    autograd_backward = torch.autograd.backward

    def tensor_method(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        bw(self, None if gradient is None else (gradient,), retain_graph, create_graph,
           inputs=inputs)

    torch.Tensor.backward = tensor_method
    torch.autograd.backward = bw
    try:
        yield bw
    finally:
        torch.Tensor.backward = tensor_backward
        torch.autograd.backward = autograd_backward


@contextlib.contextmanager
def _step_events(events: List[str], bw: "_Backward", on: bool):
    """Append ``"zero"`` (``zero_grad()`` of an optimizer or a module), ``"backward"`` and
    ``"update"`` (the end of ``optimizer.step()``) to ``events`` as a step function does them."""
    if not on:
        yield
        return
    opt_zero, mod_zero = torch.optim.Optimizer.zero_grad, torch.nn.Module.zero_grad
    updates = [_modules.updates_done()]

    def note_updates():
        while updates[0] < _modules.updates_done():
            updates[0] += 1
            events.append("update")

    def zero(orig):
        def z(self, *a, **k):
            note_updates()
            events.append("zero")
            return orig(self, *a, **k)
        return z

    def backward():
        note_updates()
        events.append("backward")
    torch.optim.Optimizer.zero_grad = zero(opt_zero)
    torch.nn.Module.zero_grad = zero(mod_zero)
    bw.before = backward
    try:
        yield
        note_updates()
    finally:
        torch.optim.Optimizer.zero_grad, torch.nn.Module.zero_grad = opt_zero, mod_zero
        bw.before = None


def _check_gradients_do_not_cross_steps(events: List[str]) -> None:
    """A step function's gradients must begin and end within the step: roam starts each step
    from no ``.grad`` and keeps none after it. Refused: gradients accumulated onto those of the
    step before (no ``zero_grad()`` before the first ``backward()``, nor after the last), and
    gradients left in ``.grad`` (a ``backward()`` that no ``optimizer.step()`` or
    ``zero_grad()`` follows)."""
    if "backward" not in events:
        return
    first = events.index("backward")
    last = len(events) - 1 - events[::-1].index("backward")
    cleared_before = "zero" in events[:first]
    after = events[last + 1:]
    if "update" not in after and "zero" not in after:
        raise CaptureError("the step function leaves gradients in .grad (a backward() that no "
                           "optimizer.step() follows): roam keeps no gradients after a step, "
                           "so gradient accumulation must happen within one step function "
                           "(several backward() calls, then optimizer.step())")
    if not cleared_before and "zero" not in after:
        raise CaptureError("the step function adds its gradients to those .grad held before it "
                           "(no optimizer.zero_grad() before its first backward(), nor after "
                           "its last): roam starts each step from no gradients; call "
                           "zero_grad() in the step")


def make_train_step(state: TrainingState, record: Optional[Dict[str, Any]] = None) -> Callable:
    """The function that :func:`trace_training_step` traces:
    ``train_step(params, buffers, optimizer_state, inputs) -> outputs``: the step function
    (:func:`roam.capture.state.step_function`) on these tensors, in phase ``forward`` but for
    its ``backward()`` calls (phase ``backward``) and ``optimizer.step()`` (phase ``update``),
    with the optimizer's state dicts holding ``optimizer_state`` (updated in place).
    ``record`` (a dict) receives ``scheduler_calls`` and ``output_spec``."""
    fn = step_function(state)
    slot = {p: k for k, p in enumerate(state.state_index)}
    in_optimizer = {i for idx in state.group_index for i in idx}

    def train_step(params, buffers, optimizer_state, inputs):
        dicts = {}
        for i, k in slot.items():
            d = dict(state.state_values[k])
            d.update(zip(state.state_keys[k], optimizer_state[k]))
            dicts[i] = d
        leaves = list(params) + [x for x in inputs if x.requires_grad]
        events: List[str] = []
        with bound_step(state, params, buffers, dicts) as (st, calls), \
                _backward_as_grad(leaves) as bw, phase("forward"), forward_claims(), \
                _step_events(events, bw, state.step_fn is not None):
            out = fn(*state.step_args(inputs))
            if state.optimizer is not None:
                _check_steady_state(state, params, optimizer_state, st, slot, in_optimizer)
        if state.step_fn is not None:
            _check_gradients_do_not_cross_steps(events)
        if record is not None:
            record["scheduler_calls"] = list(calls.calls)
        flat, spec = pytree.tree_flatten(out)
        if record is not None:
            record["output_spec"] = spec
        bad = [type(v).__name__ for v in flat if v is not None and not isinstance(v, torch.Tensor)]
        if bad:
            raise CaptureError(f"the step returns {bad[0]} values: a captured step returns "
                               f"tensors (return the tensor, not its .item())")
        return out

    return train_step


def _check_steady_state(state, params, optimizer_state, st, slot, in_optimizer):
    """The traced update must be a steady-state step: it updates the given state tensors in
    place (never replaces them), creates no state, and every parameter it updates has state."""
    for i, k in slot.items():
        d = st[params[i]]
        for key, t in zip(state.state_keys[k], optimizer_state[k]):
            if d.get(key) is not t:
                raise CaptureError(f"optimizer step replaced state {state.param_names[i]}.{key} "
                                   f"instead of updating it in place (not a steady-state step)")
        new = [key for key, v in d.items()
               if isinstance(v, torch.Tensor) and key not in state.state_keys[k]]
        if new:
            raise CaptureError(f"optimizer step created state {new} for "
                               f"{state.param_names[i]} (not a steady-state step)")
    missing = [state.param_names[i] for i in sorted(in_optimizer)
               if i not in slot and st.get(params[i])]
    if missing:
        raise CaptureError(f"no optimizer state for parameters {missing[:5]} "
                           f"(the traced step must be a steady-state step)")


def trace_training_step(state: TrainingState, seed: int = 0,
                        progress: Optional[Callable[[str], None]] = None) -> TracedStep:
    """Trace one steady-state training step with ``make_fx`` (``tracing_mode="real"``; for a
    fake state the state's ``FakeTensorMode`` is active below make_fx's proxy mode, so the
    trace runs on fake tensors), then :func:`remove_detach_nodes`,
    :func:`functional_dropout_masks`, :func:`batch_norm_writes` and :func:`update_phase_of_glue`.

    The trace runs on clones (``state`` is not modified).

    Returns:
        :class:`TracedStep` (not yet functional); every node has ``node.meta["roam_phase"]``
        in :data:`roam.capture.modules.PHASES`.

    Raises:
        CaptureError: missing optimizer state, ``Tensor.item()`` outside the update (or, in
            fake mode, on a value only a real run could know), an operator whose output shape
            depends on tensor values, a step returning non-tensors.
    """
    inputs = state.step_inputs()
    placeholders = placeholder_roles(state, inputs)
    baked: List[Tuple[str, Any]] = []

    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    updates_before = _modules.updates_done()

    def local_scalar_dense(x):
        where = _modules.current_phase() or "other"
        if where != "update":
            tr = _modules._TRACKER
            path = next((p for p in reversed(tr.stack) if p), None) if tr is not None else None
            at = ("after optimizer.step()" if _modules.updates_done() > updates_before
                  else f"in the {where} phase")
            raise CaptureError(
                f"Tensor.item() (or bool(), int(), float() of a tensor) {at}"
                + (f" (module {path})" if path else "") + ": "
                "its value may steer the Python code of the step, which a captured graph "
                "cannot replay; keep it a tensor (return it, or compute with torch.where; "
                "call .item() on what the step returns)")
        with disable_proxy_modes_tracing():
            try:
                v = torch.ops.aten._local_scalar_dense.default(x)
            except Exception as e:  # a fake tensor without a known value
                raise CaptureError(
                    f"Tensor.item() in phase {where} on a value that fake tensors do not know "
                    f"({type(e).__name__}); capture in real mode")
        baked.append((where, v))
        return v

    decomp = {torch.ops.aten._local_scalar_dense.default: local_scalar_dense}

    def reads_values(name, orig):
        # Tensor.tolist() / numpy() read a real tensor's values without dispatch (make_fx
        # sees no op): refused outside the update, as .item() is
        def read(self, *a, **k):
            where = _modules.current_phase() or "other"
            if where != "update":
                raise CaptureError(f"Tensor.{name}() {'in the ' + where + ' phase'}: its values "
                                   f"may steer the Python code of the step, which a captured "
                                   f"graph cannot replay; keep them tensors")
            return orig(self, *a, **k)
        return read
    reads = {n: getattr(torch.Tensor, n) for n in ("tolist", "numpy")}
    record: Dict[str, Any] = {}
    step_fn = make_train_step(state, record)
    fallbacks: Dict[str, int] = {}
    torch.manual_seed(seed)
    refuse_closure_optimizer(state.optimizer)
    with contextlib.ExitStack() as stack:
        stack.enter_context(stamp_nodes(progress))
        stack.enter_context(_track_last_node())
        tracker = stack.enter_context(ModuleTracker(state.model).installed())
        stack.enter_context(eager_kernels_while_tracing())
        for n, orig in reads.items():
            setattr(torch.Tensor, n, reads_values(n, orig))
            stack.callback(setattr, torch.Tensor, n, orig)
        stack.enter_context(python_state_unchanged(state.model))
        if state.fake_mode is not None:
            from .fake import count_fallbacks
            fallbacks = stack.enter_context(count_fallbacks())
            stack.enter_context(state.fake_mode)
        try:
            gm = make_fx(step_fn, decomposition_table=decomp,
                         tracing_mode="real")(*inputs.as_args())
        except CaptureError:
            raise
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            if state.fake_mode is None:
                where = next((p for p in reversed(tracker.stack) if p), None)
                raise CaptureError(
                    f"the step cannot be traced ({type(e).__name__}: {first[:300]})"
                    + (f" in module {where}" if where else "")
                    + f", phase {_modules.current_phase() or 'other'}: roam traces the "
                      f"ATen operators of one step with make_fx, so the step must run on "
                      f"tensors only (no NumPy or Python values computed from tensor data)"
                ) from e
            raise CaptureError(f"tracing on fake tensors failed ({type(e).__name__}: "
                               f"{first[:300]}); the program needs real values (e.g. a "
                               f"data-dependent shape): capture in real mode") from e

    refuse_data_dependent_shapes(gm)
    remove_profiler_nodes(gm)
    removed = remove_detach_nodes(gm)
    dropouts = functional_dropout_masks(gm)
    norms = batch_norm_writes(gm)
    update_phase_of_glue(gm)
    with_state = set(state.state_index)
    unused = [n for i, n in enumerate(state.param_names)
              if i not in with_state and state.optimizer is not None]
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(placeholders):
        raise CaptureError(f"{len(phs)} placeholders in the trace, {len(placeholders)} inputs")
    return TracedStep(gm=gm, placeholders=placeholders, baked_items=baked,
                      unused_params=unused, fallbacks=dict(fallbacks),
                      fake=state.fake_mode is not None, removed_detach=removed,
                      functional_dropouts=dropouts, batch_norms=norms,
                      scheduler_calls=record.get("scheduler_calls", []),
                      output_spec=record.get("output_spec"))


def refuse_closure_optimizer(optimizer) -> None:
    """An optimizer whose ``step()`` needs a closure (``LBFGS``) re-evaluates the model inside
    the step a data-dependent number of times: refused, naming it."""
    if optimizer is None:
        return
    import inspect
    try:
        sig = inspect.signature(type(optimizer).step)
    except (TypeError, ValueError):
        return
    p = sig.parameters.get("closure")
    if p is not None and p.default is inspect.Parameter.empty:
        raise CaptureError(f"optimizer {type(optimizer).__name__}: its step() needs a closure "
                           f"(it runs the model again, a data-dependent number of times); "
                           f"roam captures optimizers whose step() takes none")


# ---------------------------------------------------------------- passes on the trace

# Operators whose output shape depends on tensor values (PyTorch tags them, and index and
# index_put too, ``dynamic_output_shape``; those two only for boolean masks).
VALUE_SHAPED = frozenset({"aten::nonzero", "aten::unique", "aten::_unique", "aten::_unique2",
                          "aten::unique_dim", "aten::unique_consecutive",
                          "aten::unique_dim_consecutive", "aten::masked_select",
                          "aten::repeat_interleave", "aten::bincount",
                          "aten::_ragged_idx", "aten::argwhere"})
MASK_INDEXED = frozenset({"aten::index", "aten::index_put", "aten::_index_put_impl"})


def refuse_data_dependent_shapes(gm: torch.fx.GraphModule) -> None:
    """Raise CaptureError for an operator whose output shape depends on tensor values
    (:data:`VALUE_SHAPED`: ``nonzero``, ``unique``, ``masked_select``, ...; indexing with a
    boolean mask): the graph records this batch's shapes, and another batch would need
    another plan. ``repeat_interleave`` with a given ``output_size`` is not refused."""
    def val(a):
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else None
    for n in gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        name = n.target._schema.name
        bad = name in VALUE_SHAPED and not (name == "aten::repeat_interleave"
                                            and n.kwargs.get("output_size") is not None)
        if name in MASK_INDEXED and len(n.args) > 1 and isinstance(n.args[1], (list, tuple)):
            bad = any(isinstance(v, torch.Tensor) and v.dtype in (torch.bool, torch.uint8)
                      for v in (val(a) for a in n.args[1]))
        if bad:
            raise CaptureError(
                f"{n.target} (phase {n.meta.get(PHASE_KEY, 'other')}) has an output shape "
                f"that depends on tensor values: a captured graph fixes every shape, so "
                f"this step cannot be planned once for every batch")


def remove_profiler_nodes(gm: torch.fx.GraphModule) -> int:
    """Remove the profiler's ``record_function`` calls (``profiler._record_function_enter_new``
    and its exit, which ``torch.optim``'s ``zero_grad()`` and user code emit): they are not
    tensor operations. Returns how many nodes were removed."""
    n = 0
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and str(node.target).startswith("profiler."):
            for u in list(node.users):
                if u.op == "call_function" and str(u.target).startswith("profiler."):
                    continue
                raise CaptureError(f"{u.format_node()} reads a profiler record")
            if not node.users:
                gm.graph.erase_node(node)
                n += 1
    if any(node.op == "call_function" and str(node.target).startswith("profiler.")
           for node in gm.graph.nodes):
        raise CaptureError("profiler records left in the trace")
    if n:
        gm.recompile()
    return n


def remove_detach_nodes(gm: torch.fx.GraphModule) -> int:
    """Remove every ``aten.detach`` node of ``gm`` (its users read its argument instead) and
    recompile; returns how many were removed.

    In the traced step (run under ``no_grad``, backward ops explicit) ``detach`` is the
    identity: its result is an alias of its argument and nothing reads ``requires_grad``.
    Most of them are not even written by the program: autograd detaches saved tensors and
    freshly created tensors, and it does so through a dispatched ``aten.detach`` only for
    tensors with a Python dispatch key, so a fake trace records detaches that a real trace of
    the same program does not. Dropping them all makes real and fake captures identical and
    removes ops that allocate nothing."""
    n = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.detach.default:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            n += 1
    if n:
        gm.recompile()
    return n


def _single_user(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _writes_in_place(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not hasattr(target, "_schema"):
        return False
    name = target._schema.name
    return name.endswith("_") and not name.endswith("__")


def functional_dropout_masks(gm: torch.fx.GraphModule) -> int:
    """Rewrite each dropout mask of ``gm`` out of place, so that it can be recomputable; returns
    how many were rewritten (``gm`` is recompiled when any was).

    On the CPU, PyTorch runs ``F.dropout(x, p, training=True)`` as ::

        e = empty_like(x, memory_format=contiguous_format)   # uninitialized
        b = bernoulli_(e, 1 - p)                             # random, in place
        d = div_(b, 1 - p)                                   # in place
        y = mul(x, d)                                        # backward reads d too

    Functionalized as it is, ``e`` (uninitialized, not recomputable) would have to be kept to
    recompute the mask. The rewrite gives the same bytes with nothing uninitialized::

        s = new_zeros(x, [])                # 4 bytes; reads x only for its dtype
        v = expand(s, x.shape)              # a view: the mask's shape, no bytes
        m = bernoulli.p(v, 1 - p)           # empty_like(v).bernoulli_(1 - p): contiguous
        d = div_(m, 1 - p)                  # in place, as before

    ``bernoulli.p`` draws into ``empty_like`` of its argument; of an expanded (overlapping)
    tensor that is the contiguous layout the original ``empty_like`` asked for, and the draws
    depend only on the generator and the element count, so ``m`` holds the bits ``b`` held
    and the generator advances the same way. Recomputing the mask needs only ``s`` and the
    generator state of its first run, which the executor replays (:mod:`roam.executor.program`,
    ``Step.rng``). ``s`` reads ``x`` so that the first draw of each mask still follows the data
    flow of the program. Memory in program order is unchanged: the mask is held once, as
    before (``div_`` stays in place and becomes an ``inplace`` permission).

    ``empty_like`` keeps its input's layout: a mask of a transposed input is drawn in memory
    order (``bernoulli_`` fills a tensor in memory order) as a contiguous tensor of the
    permuted shape, then viewed in that layout (``permute``), so the bits stay where they were.

    Rewritten only where the pattern is exact: ``empty_like`` (a dense layout: contiguous or
    a permutation of it) read only by ``bernoulli_.float`` without a generator, read only by
    ``div_`` by a number, with the value known from the trace (``node.meta["val"]``)."""
    aten = torch.ops.aten
    n = 0
    for e in list(gm.graph.nodes):
        if e.op != "call_function" or e.target is not aten.empty_like.default:
            continue
        b = _single_user(e)
        if b is None or b.target is not aten.bernoulli_.float or b.args[0] is not e:
            continue
        if b.kwargs.get("generator") is not None or len(b.args) > 2:
            continue
        d = _single_user(b)
        if d is None or d.args[0] is not b or not (
                d.target is aten.div_.Scalar or (d.target is aten.div_.Tensor and len(d.args) == 2
                                                 and isinstance(d.args[1], (int, float)))):
            continue
        val = e.meta.get("val")
        if not isinstance(val, torch.Tensor) or len(e.args) != 1 or any(
                k not in ("memory_format", "pin_memory") or (k == "pin_memory" and v)
                for k, v in e.kwargs.items()):
            continue
        perm = _dense_permutation(val)
        if perm is None or not val.dtype.is_floating_point:
            continue
        prob = b.args[1] if len(b.args) > 1 else b.kwargs.get("p", 0.5)
        inverse = [perm.index(i) for i in range(len(perm))]
        with gm.graph.inserting_before(e):
            s = gm.graph.call_function(aten.new_zeros.default, (e.args[0], []))
            v = gm.graph.call_function(aten.expand.default,
                                       (s, [val.shape[i] for i in perm]))
            m = gm.graph.call_function(aten.bernoulli.p, (v, prob))
            made = [(s, e), (v, e), (m, b)]
            if perm != list(range(len(perm))):
                # the mask's layout: bernoulli_ fills a tensor in memory order, bernoulli.p a
                # contiguous one: draw the memory order contiguously, view it in e's layout
                m = gm.graph.call_function(aten.permute.default, (m, inverse))
                made.append((m, b))
            q = gm.graph.call_function(d.target, (m, *d.args[1:]), dict(d.kwargs))
            made.append((q, d))
        for new, old in made:
            new.meta.update({k: val for k, val in old.meta.items()
                             if k not in ("tensor_meta", "val")})
        d.replace_all_uses_with(q)
        for old in (d, b, e):
            gm.graph.erase_node(old)
        n += 1
    if n:
        gm.recompile()
    return n


def _dense_permutation(t: torch.Tensor) -> Optional[List[int]]:
    """The dims of ``t`` from outermost to innermost in memory when ``t`` is dense and
    non-overlapping (``t.permute(perm)`` is contiguous), else None."""
    if t.numel() == 0:
        return None
    perm = sorted(range(t.dim()), key=lambda i: (-t.stride(i), -t.shape[i]))
    expect = 1
    for i in reversed(perm):
        if t.shape[i] != 1 and t.stride(i) != expect:
            return None
        expect *= t.shape[i]
    return perm


def batch_norm_writes(gm: torch.fx.GraphModule) -> int:
    """Give each training BatchNorm with running statistics the schema that says it writes
    them: ``native_batch_norm(x, w, b, running_mean, running_var, True, momentum, eps)`` (its
    schema declares no write, its CPU kernel updates the statistics through a raw pointer)
    becomes ``_native_batch_norm_legit`` (the same kernel, bit for bit, with ``Tensor(a!)
    running_mean, Tensor(b!) running_var``), so that functionalization sees the write: it then
    returns the new statistics (``_native_batch_norm_legit_functional``) and writes them back
    at the end of the step, which makes the BatchNorm recomputable. The training backward
    (``native_batch_norm_backward(..., train=True, ...)``) gets None for the running
    statistics it never reads. Returns how many forward nodes were rewritten."""
    aten = torch.ops.aten
    n = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.native_batch_norm.default:
            continue
        args = list(node.args) + [None] * (8 - len(node.args))
        names = ["input", "weight", "bias", "running_mean", "running_var", "training",
                 "momentum", "eps"]
        for k, name in enumerate(names):
            if name in node.kwargs:
                args[k] = node.kwargs[name]
        if not args[5] or args[3] is None or args[4] is None:
            continue  # eval mode or no running statistics: writes nothing
        node.target = aten._native_batch_norm_legit.default
        node.args = tuple(args)
        node.kwargs = {}
        n += 1
    for node in gm.graph.nodes:
        # In training the backward reads save_mean / save_invstd, never the running
        # statistics (bit for bit the same result with None): without these reads the new
        # statistics are not kept from the forward to the backward for nothing.
        if node.op == "call_function" and \
                node.target is aten.native_batch_norm_backward.default and \
                len(node.args) >= 8 and node.args[7] is True and not node.kwargs:
            node.args = node.args[:3] + (None, None) + node.args[5:]
    if n:
        gm.recompile()
    return n


def update_phase_of_glue(gm: torch.fx.GraphModule) -> None:
    """An op traced outside ``backward()`` and ``optimizer.step()`` that reads a gradient (the
    result of a backward or update op: gradient clipping, a hand-written update) is part of
    the update: its phase becomes ``update``. Forward ops of a later micro-batch (gradient
    accumulation) read parameters and inputs only and stay ``forward``."""
    late = set()
    for n in gm.graph.nodes:
        ph = n.meta.get(PHASE_KEY)
        if ph in ("backward", "update"):
            late.add(n)
            continue
        if n.op == "call_function" and any(a in late for a in n.all_input_nodes):
            n.meta[PHASE_KEY] = "update"
            late.add(n)


__all__ = ["MODULE_KEY", "PHASE_KEY", "PHASES", "SEED_KEY", "TracedStep",
           "batch_norm_writes", "eager_kernels_while_tracing", "functional_dropout_masks",
           "make_train_step", "placeholder_roles", "refuse_data_dependent_shapes",
           "remove_detach_nodes", "trace_training_step", "update_phase_of_glue"]
