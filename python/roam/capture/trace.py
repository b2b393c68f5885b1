"""Tracing one training step (forward, loss, backward, Adam update) with make_fx.

The step is traced at the ATen level with ``torch.fx.experimental.proxy_tensor.make_fx``
(``tracing_mode="real"``: the real tensors run while the graph is recorded). Phases are
recorded while tracing: a module-level "current phase" is set by the traced function at each
phase boundary and every fx node created while it is set is stamped with it
(``node.meta["roam_phase"]``). Nothing is inferred from operator names.

This is the capture stage of the ROAM pipeline (arXiv 2310.19295, section 3: the planner
needs the whole training graph, weight updates included).
"""

import contextlib
import copy
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils.stateless import functional_call
from torch.optim._functional import adam as _functional_adam

from .errors import CaptureError

PHASE_KEY = "roam_phase"
PHASES = ("forward", "backward", "update", "other")

# The phase the traced function is in right now (None outside a traced step).
_CURRENT_PHASE: Optional[str] = None


@contextlib.contextmanager
def phase(name: str):
    """Mark the code inside the ``with`` block as phase ``name`` (one of :data:`PHASES`);
    fx nodes created meanwhile by :func:`trace_training_step` get that phase."""
    global _CURRENT_PHASE
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}")
    old = _CURRENT_PHASE
    _CURRENT_PHASE = name
    try:
        yield
    finally:
        _CURRENT_PHASE = old


@contextlib.contextmanager
def _stamp_phases():
    """Wrap ``torch.fx.Graph.create_node`` so every node records the current phase."""
    original = torch.fx.Graph.create_node

    def create_node(self, *args, **kwargs):
        node = original(self, *args, **kwargs)
        node.meta[PHASE_KEY] = _CURRENT_PHASE or "other"
        return node

    torch.fx.Graph.create_node = create_node
    try:
        yield
    finally:
        torch.fx.Graph.create_node = original


def primary_output(out):
    """The tensor the loss is computed from: ``out`` itself, ``out.logits`` for the named
    tuples of GoogLeNet / Inception in training mode, else ``out[0]``."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise CaptureError(f"model output of type {type(out).__name__} has no primary tensor")


@dataclass
class AdamOptions:
    """Hyper-parameters of ``torch.optim.Adam`` (single parameter group)."""
    lr: float = 1e-3
    betas: Tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    maximize: bool = False

    def as_meta(self) -> Dict[str, Any]:
        return {"lr": self.lr, "betas": list(self.betas), "eps": self.eps,
                "weight_decay": self.weight_decay, "amsgrad": False, "maximize": self.maximize,
                "foreach": False}


@dataclass
class StepInputs:
    """Fresh copies of everything one training step reads and mutates.

    ``params[i]`` is a leaf with ``requires_grad=True``; ``optimizer_state[k]`` is the tuple
    ``(exp_avg, exp_avg_sq, step)`` of parameter ``state_index[k]`` (0-d float32 ``step``).
    ``data`` has shape (B, C, H, W), ``labels`` shape (B,) int64.
    """
    params: List[torch.Tensor]
    buffers: List[torch.Tensor]
    optimizer_state: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    data: torch.Tensor
    labels: torch.Tensor

    def run(self, gm: torch.fx.GraphModule, seed: int = 0) -> torch.Tensor:
        """Run the traced step ``gm`` on these tensors (updated in place) under
        ``torch.no_grad()`` (the graph holds the backward ops) after
        ``torch.manual_seed(seed)``; returns the loss (0-d tensor)."""
        torch.manual_seed(seed)
        with torch.no_grad():
            return gm(*self.as_args())

    def as_args(self):
        """The positional arguments of the traced step function / GraphModule."""
        return (self.params, self.buffers, self.optimizer_state, self.data, self.labels)


@dataclass
class TrainingState:
    """A model in train mode plus a ``torch.optim.Adam`` that already holds its state
    (steady state: at least one real ``optimizer.step()`` has run), and one batch.

    Build it with :func:`prepare_training_state`. It is never mutated by tracing or by
    :meth:`step_inputs`; use :meth:`eager_reference_step` for the ordinary PyTorch step.
    """
    model: torch.nn.Module
    optimizer: torch.optim.Adam
    data: torch.Tensor
    labels: torch.Tensor
    adam: AdamOptions
    param_names: List[str] = field(default_factory=list)
    buffer_names: List[str] = field(default_factory=list)
    state_index: List[int] = field(default_factory=list)

    def step_inputs(self) -> StepInputs:
        """Clones of parameters, buffers, Adam state (exp_avg, exp_avg_sq, step) and the
        batch, so that running the traced step (which updates them in place) leaves this
        state untouched."""
        params = [p.detach().clone().requires_grad_(True) for p in self.model.parameters()]
        buffers = [b.detach().clone() for b in self.model.buffers()]
        plist = list(self.model.parameters())
        ostate = []
        for i in self.state_index:
            st = self.optimizer.state[plist[i]]
            ostate.append((st["exp_avg"].clone(), st["exp_avg_sq"].clone(), st["step"].clone()))
        return StepInputs(params, buffers, ostate, self.data.clone(), self.labels.clone())

    def eager_reference_step(self, seed: int = 0):
        """Run one ordinary training step (nn.Module forward, cross-entropy,
        ``loss.backward()``, ``torch.optim.Adam.step()``) on deep copies of the model and the
        optimizer, with ``torch.manual_seed(seed)`` first.

        Returns ``(loss, model, optimizer)``: the loss (0-d tensor) and the updated copies.
        """
        model, opt = copy.deepcopy((self.model, self.optimizer))
        torch.manual_seed(seed)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(primary_output(model(self.data)), self.labels)
        loss.backward()
        opt.step()
        return loss.detach(), model, opt


def prepare_training_state(model: torch.nn.Module, data: torch.Tensor, labels: torch.Tensor,
                           adam: Optional[AdamOptions] = None, warmup_steps: int = 1,
                           seed: int = 0,
                           warmup_batch: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                           ) -> TrainingState:
    """Put ``model`` in train mode, create ``torch.optim.Adam(model.parameters())`` and run
    ``warmup_steps`` (>= 1) real training steps so the Adam state exists (steady state).

    Args:
        model: any ``nn.Module`` mapping ``data`` to logits (or a tuple whose primary output
            is the logits, see :func:`primary_output`).
        data: batch of the captured step, e.g. shape (B, 3, H, W) float32.
        labels: shape (B,) int64 class indices.
        warmup_batch: ``(data, labels)`` for the warm-up steps (default: the same batch;
            a different one keeps the captured loss away from 0 after the warm-up).
        adam: hyper-parameters (default: PyTorch's defaults).
        warmup_steps: real optimizer steps before capture.
        seed: ``torch.manual_seed`` used before the warm-up steps.

    Raises:
        ValueError: ``warmup_steps < 1``.
        CaptureError: the model has no parameters, or parameters are shared under two names.
    """
    if warmup_steps < 1:
        raise ValueError("warmup_steps must be >= 1 (the traced step uses existing Adam state)")
    adam = adam or AdamOptions()
    model.train()
    params = list(model.parameters())
    if not params:
        raise CaptureError("model has no parameters")
    names = [n for n, _ in model.named_parameters()]
    if len(names) != len(params):
        raise CaptureError("model shares parameters between modules; not supported")
    opt = torch.optim.Adam(params, lr=adam.lr, betas=adam.betas, eps=adam.eps,
                           weight_decay=adam.weight_decay, amsgrad=False, foreach=False,
                           maximize=adam.maximize)
    torch.manual_seed(seed)
    wdata, wlabels = warmup_batch if warmup_batch is not None else (data, labels)
    for _ in range(warmup_steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(primary_output(model(wdata)), wlabels)
        loss.backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    state_index = [i for i, p in enumerate(params) if len(opt.state[p]) > 0]
    return TrainingState(model=model, optimizer=opt, data=data, labels=labels, adam=adam,
                         param_names=names, buffer_names=[n for n, _ in model.named_buffers()],
                         state_index=state_index)


def _adam_kwargs(opts: AdamOptions) -> Dict[str, Any]:
    kw = dict(amsgrad=False, beta1=opts.betas[0], beta2=opts.betas[1], lr=opts.lr,
              weight_decay=opts.weight_decay, eps=opts.eps, maximize=opts.maximize,
              foreach=False, capturable=False, differentiable=False, fused=False)
    accepted = inspect.signature(_functional_adam).parameters
    return {k: v for k, v in kw.items() if k in accepted}


def make_train_step(state: TrainingState) -> Callable:
    """The function that :func:`trace_training_step` traces:
    ``train_step(params, buffers, optimizer_state, data, labels) -> loss``.

    forward: ``functional_call(model, params + buffers, data)`` (model in train mode) and
    ``F.cross_entropy``; backward: ``torch.autograd.grad(loss, params)``; update: PyTorch's own
    single-tensor Adam (``torch.optim._functional.adam``, ``foreach=False``) applied in place to
    the parameters and to ``optimizer_state`` (exp_avg, exp_avg_sq, step), skipping parameters
    whose gradient is None, exactly as ``torch.optim.Adam.step()`` does.
    """
    model = state.model
    pnames, bnames = list(state.param_names), list(state.buffer_names)
    slot = {p: k for k, p in enumerate(state.state_index)}
    adam_kw = _adam_kwargs(state.adam)

    def train_step(params, buffers, optimizer_state, data, labels):
        with phase("forward"):
            tensors = dict(zip(pnames, params))
            tensors.update(zip(bnames, buffers))
            out = primary_output(functional_call(model, tensors, (data,)))
            loss = F.cross_entropy(out, labels)
        with phase("backward"):
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        with phase("update"):
            with torch.no_grad():
                idx = [i for i, g in enumerate(grads) if g is not None]
                missing = [pnames[i] for i in idx if i not in slot]
                if missing:
                    raise CaptureError(f"no Adam state for parameters {missing}")
                st = [optimizer_state[slot[i]] for i in idx]
                _functional_adam([params[i] for i in idx], [grads[i] for i in idx],
                                 [s[0] for s in st], [s[1] for s in st], [], [s[2] for s in st],
                                 **adam_kw)
        return loss

    return train_step


@dataclass
class TracedStep:
    """Result of :func:`trace_training_step`.

    ``gm``: the fx GraphModule; call ``gm(*inputs.as_args())`` to run the step (it updates
    the given tensors in place and returns the loss). ``placeholders``: ``(role, name)`` for
    each placeholder in graph order. ``baked_items``: ``(phase, value)`` for each
    ``Tensor.item()`` evaluated at trace time and frozen into the graph as a constant.
    ``unused_params``: names of parameters whose gradient was None (not updated).
    """
    gm: torch.fx.GraphModule
    placeholders: List[Tuple[str, str]]
    baked_items: List[Tuple[str, Any]]
    unused_params: List[str]


def _placeholder_roles(state: TrainingState, inputs: StepInputs) -> List[Tuple[str, str]]:
    """``(role, name)`` for each flattened argument of the step, in the order in which
    make_fx creates the placeholders (pytree flattening of ``inputs.as_args()``)."""
    import torch.utils._pytree as pytree
    ostate = []
    for i in state.state_index:
        n = state.param_names[i]
        ostate += [("optimizer_state", f"{n}.exp_avg"), ("optimizer_state", f"{n}.exp_avg_sq"),
                   ("optimizer_state", f"{n}.step")]
    labels = ([("param", n) for n in state.param_names]
              + [("buffer", n) for n in state.buffer_names]
              + ostate + [("input", "data"), ("input", "labels")])
    flat_args, _ = pytree.tree_flatten(inputs.as_args())
    if len(labels) != len(flat_args) or not all(isinstance(a, torch.Tensor) for a in flat_args):
        raise CaptureError(f"placeholder labelling mismatch: {len(labels)} labels for "
                           f"{len(flat_args)} inputs")
    return labels


def trace_training_step(state: TrainingState, seed: int = 0) -> TracedStep:
    """Trace one steady-state training step with
    ``make_fx(train_step, tracing_mode="real")`` (``torch.fx.experimental.proxy_tensor``).

    The trace runs on clones (``state`` is not modified). ``Tensor.item()`` (Adam's
    ``step_t.item()`` in PyTorch's single-tensor path) cannot be traced: it is evaluated on the
    real value and frozen as a Python constant (listed in ``baked_items``); the in-place
    increment of the step tensor itself is traced.

    Returns:
        :class:`TracedStep`; every node has ``node.meta["roam_phase"]`` in :data:`PHASES`.

    Raises:
        CaptureError: missing Adam state, or a placeholder that is not a tensor.
    """
    inputs = state.step_inputs()
    placeholders = _placeholder_roles(state, inputs)
    baked: List[Tuple[str, Any]] = []

    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    def local_scalar_dense(x):
        with disable_proxy_modes_tracing():
            v = torch.ops.aten._local_scalar_dense.default(x)
        baked.append((_CURRENT_PHASE or "other", v))
        return v

    decomp = {torch.ops.aten._local_scalar_dense.default: local_scalar_dense}
    step_fn = make_train_step(state)
    torch.manual_seed(seed)
    with _stamp_phases():
        gm = make_fx(step_fn, decomposition_table=decomp, tracing_mode="real")(*inputs.as_args())

    grads_none = []
    # parameters without Adam state after warm-up had no gradient: they are not updated
    with_state = set(state.state_index)
    for i, n in enumerate(state.param_names):
        if i not in with_state:
            grads_none.append(n)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(placeholders):
        raise CaptureError(f"{len(phs)} placeholders in the trace, {len(placeholders)} inputs")
    return TracedStep(gm=gm, placeholders=placeholders, baked_items=baked,
                      unused_params=grads_none)
