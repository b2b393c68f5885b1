"""Tracing one training step (forward, loss, backward, optimizer update) with make_fx.

The step is traced at the ATen level with ``torch.fx.experimental.proxy_tensor.make_fx``:
either on real tensors (``tracing_mode="real"``: they run while the graph is recorded) or on
fake tensors (a ``FakeTensorMode`` active below make_fx's proxy mode, see
:mod:`roam.capture.fake`: nothing is allocated). Phases are recorded while tracing: a
module-level "current phase" is set by the traced function at each phase boundary and every
fx node created while it is set is stamped with it (``node.meta["roam_phase"]``). Nothing is
inferred from operator names. Likewise each node records the path of the ``nn.Module`` whose
forward ran it (``node.meta["roam_module"]``, see :class:`ModuleTracker`): for forward ops from
forward pre/post hooks on every submodule, for backward ops from the autograd node being
applied, whose creating module is recorded during the forward.

The update is the optimizer's own ``step()`` (any ``torch.optim`` optimizer, in its steady
state): while tracing, the optimizer's parameter groups and state are swapped for the traced
tensors, their ``.grad`` set to the traced gradients, and ``step()`` is called (without the
profiler annotation that ``torch.optim`` wraps around it). Optimizer state must exist before
the traced step (see :func:`prepare_training_state` and :func:`warm_up`); the traced step
reads and updates it in place, as a real step does.

This is the capture stage of the ROAM pipeline (arXiv 2310.19295, section 3: the planner
needs the whole training graph, weight updates included).
"""

import contextlib
import copy
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.fx
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils.stateless import functional_call

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


MODULE_KEY = "roam_module"

# The ModuleTracker of the trace in progress (None outside trace_training_step).
_TRACKER: Optional["ModuleTracker"] = None


class ModuleTracker:
    """Which ``nn.Module`` of ``model`` ran each fx node of a trace (PyTorch 1.13's make_fx
    records no ``nn_module_stack``).

    Forward: a forward pre-hook on every submodule pushes the module's dotted path and a
    forward hook pops it, so the top of the stack is the innermost module whose ``forward``
    is running when make_fx creates a node. A module registered under several names gets the
    one whose parent is the enclosing module on the stack; if that does not decide, its path
    is unknown (None) and its ops get no module. Modules that are not submodules of
    ``model``, and a submodule whose ``forward`` is called directly instead of through
    ``__call__``, run no hooks: their ops get the innermost enclosing submodule.

    Backward: while the forward runs, a ``TorchFunctionMode`` (:meth:`claiming`) sees every
    outermost torch call; the autograd nodes that call created -- those reachable from its
    results' ``grad_fn`` without passing an argument's ``grad_fn`` or a node seen before --
    belong to the module on top of the stack. Each such node gets a pre-hook and a hook that
    push and pop that module while autograd applies it, so the backward ops of its formula
    get the module of the forward op they differentiate. Ops that autograd runs between
    nodes (the seed ``ones_like``, accumulation of gradients from several uses) and nodes
    created outside a torch call (a direct ``torch.ops`` call, a custom autograd Function)
    get no module: nothing is guessed.

    Paths are those of ``model.named_modules()``; the root module's own ops (path ``""``)
    get no module either.
    """

    def __init__(self, model: torch.nn.Module):
        self.names: Dict[int, List[str]] = {}
        self.modules: List[torch.nn.Module] = []
        for name, mod in model.named_modules(remove_duplicate=False):
            if id(mod) not in self.names:
                self.names[id(mod)] = []
                self.modules.append(mod)
            self.names[id(mod)].append(name)
        self.stack: List[Optional[str]] = []      # forward: paths of running modules
        self.backward: List[Optional[str]] = []   # backward: paths of applied autograd nodes
        self.owner: Dict[Any, Optional[str]] = {}  # autograd node -> module path
        self._handles: List[Any] = []

    def resolve(self, mod: torch.nn.Module) -> Optional[str]:
        """The path of ``mod`` in the model for the call now starting, or None if unknown."""
        names = self.names.get(id(mod), [])
        if len(names) == 1:
            return names[0]
        parent = self.stack[-1] if self.stack else None
        if parent is not None:
            cands = [n for n in names if n.rpartition(".")[0] == parent and n != parent]
            if len(cands) == 1:
                return cands[0]
        return None

    def current(self, phase_name: Optional[str]) -> Optional[str]:
        """The module path for a node created now in phase ``phase_name`` (None: no module)."""
        stack = self.stack if phase_name == "forward" else (
            self.backward if phase_name == "backward" else [])
        path = stack[-1] if stack else None
        return path or None  # the root module ("") counts as no module

    def _pre(self, mod, inputs):
        self.stack.append(self.resolve(mod))

    def _post(self, mod, inputs, output):
        self.stack.pop()

    def claim(self, result, stop: Set[Any]) -> None:
        """Record the module on top of the stack as the owner of the autograd nodes created by
        the torch call that returned ``result`` (see the class docstring)."""
        path = self.stack[-1] if self.stack else None
        todo = [t.grad_fn for t in pytree.tree_flatten(result)[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node is None or node in stop or node in self.owner:
                continue
            if "AccumulateGrad" in node.name():  # a leaf's, not created by the call
                continue
            self.owner[node] = path
            if path:
                self._hook_node(node, path)
            todo.extend(nxt for nxt, _ in node.next_functions)

    def _hook_node(self, node, path: str) -> None:
        def pre(grad_outputs):
            self.backward.append(path)

        def post(grad_inputs, grad_outputs):
            self.backward.pop()

        node.register_prehook(pre)
        node.register_hook(post)

    @contextlib.contextmanager
    def claiming(self):
        """Within the block, every outermost torch call claims the autograd nodes it
        creates (:meth:`claim`)."""
        from torch.overrides import TorchFunctionMode
        tracker = self

        class _Claim(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                stop = {t.grad_fn for t in pytree.tree_flatten((args, kwargs))[0]
                        if isinstance(t, torch.Tensor) and t.grad_fn is not None}
                out = func(*args, **kwargs)
                tracker.claim(out, stop)
                return out

        with _Claim():
            yield

    @contextlib.contextmanager
    def installed(self):
        """Register the module hooks and make this the tracker of :func:`_stamp_phases`."""
        global _TRACKER
        old = _TRACKER
        try:
            for mod in self.modules:
                self._handles.append(mod.register_forward_pre_hook(self._pre))
                self._handles.append(mod.register_forward_hook(self._post))
            _TRACKER = self
            yield self
        finally:
            _TRACKER = old
            for h in self._handles:
                h.remove()
            self._handles = []
            self.owner.clear()  # drop the references to autograd nodes


@contextlib.contextmanager
def _forward_claims():
    """The claiming mode of the active tracker for the forward phase (no-op without one)."""
    if _TRACKER is None:
        yield
    else:
        with _TRACKER.claiming():
            yield


@contextlib.contextmanager
def _stamp_phases(progress: Optional[Callable[[str], None]] = None, every: float = 2.0):
    """Wrap ``torch.fx.Graph.create_node`` so every node records the current phase (and,
    with a :class:`ModuleTracker` installed, the current module path under
    ``node.meta["roam_module"]`` where there is one); with ``progress``, report the node
    count every ``every`` seconds."""
    original = torch.fx.Graph.create_node
    count = [0, time.monotonic()]

    def create_node(self, *args, **kwargs):
        node = original(self, *args, **kwargs)
        node.meta[PHASE_KEY] = _CURRENT_PHASE or "other"
        if _TRACKER is not None:
            path = _TRACKER.current(_CURRENT_PHASE)
            if path:
                node.meta[MODULE_KEY] = path
        count[0] += 1
        if progress is not None and time.monotonic() - count[1] >= every:
            count[1] = time.monotonic()
            progress(f"tracing: {count[0]} fx nodes ({_CURRENT_PHASE or 'other'})")
        return node

    torch.fx.Graph.create_node = create_node
    try:
        yield
    finally:
        torch.fx.Graph.create_node = original


def primary_output(out):
    """What the loss is computed from: ``out`` itself for a tensor or a dict (a model
    returning a dict gets it passed to ``loss_fn`` as it is), ``out.logits`` for the named
    tuples of GoogLeNet / Inception in training mode, else ``out[0]``."""
    if isinstance(out, (torch.Tensor, dict)):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise CaptureError(f"model output of type {type(out).__name__} has no primary tensor")


def cross_entropy_loss(output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``F.cross_entropy(output, labels)``: the classifier loss of the benchmarks."""
    return F.cross_entropy(output, labels)


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

    def make(self, params) -> torch.optim.Adam:
        """The ``torch.optim.Adam`` (single-tensor implementation) over ``params``."""
        return torch.optim.Adam(params, lr=self.lr, betas=self.betas, eps=self.eps,
                                weight_decay=self.weight_decay, amsgrad=False, foreach=False,
                                maximize=self.maximize)


# ---------------------------------------------------------------- optimizer plumbing

def raw_step(optimizer: torch.optim.Optimizer, closure=None):
    """``optimizer.step()`` without the ``record_function`` wrapper that ``torch.optim``
    installs for the profiler (its ``profiler::_record_function_enter`` call is not a tensor
    operation and has no fake-tensor implementation). Everything else is the real step."""
    f = type(optimizer).step
    if getattr(f, "hooked", False) and hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return f(optimizer) if closure is None else f(optimizer, closure)


def optimizer_options(optimizer: torch.optim.Optimizer) -> Dict[str, Any]:
    """The hyper-parameters of the first parameter group (JSON-friendly; tuples as lists),
    plus ``param_groups`` when there are several."""
    def plain(v):
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, (bool, int, float, str)) or v is None:
            return v
        return repr(v)
    g = optimizer.param_groups[0]
    out = {k: plain(v) for k, v in sorted(g.items()) if k != "params"}
    if len(optimizer.param_groups) > 1:
        out["param_groups"] = len(optimizer.param_groups)
    return out


def _tensor_names(model: torch.nn.Module, kind: str) -> Tuple[List[torch.Tensor], List[List[str]]]:
    """Unique parameters (``kind="_parameters"``) or buffers (``"_buffers"``) of ``model`` in
    ``model.parameters()`` / ``model.buffers()`` order, each with all its dotted names (several
    when a tensor is shared by two modules, e.g. a tied embedding)."""
    tensors: List[torch.Tensor] = []
    names: List[List[str]] = []
    index: Dict[int, int] = {}
    for mname, mod in model.named_modules(remove_duplicate=False):
        for n, t in getattr(mod, kind).items():
            if t is None:
                continue
            full = f"{mname}.{n}" if mname else n
            k = index.get(id(t))
            if k is None:
                index[id(t)] = len(tensors)
                tensors.append(t)
                names.append([full])
            elif full not in names[k]:
                names[k].append(full)
    return tensors, names


@dataclass
class StepInputs:
    """Fresh copies of everything one training step reads and mutates.

    ``params[i]`` is a leaf (``requires_grad`` as in the model); ``optimizer_state[k]`` is the
    tuple of state tensors of parameter ``state_index[k]`` in the order of
    ``TrainingState.state_keys[k]`` (for Adam ``(exp_avg, exp_avg_sq, step)``). ``inputs``
    are the example inputs: the model's, then the loss function's (e.g. ``(data, labels)``).
    """
    params: List[torch.Tensor]
    buffers: List[torch.Tensor]
    optimizer_state: List[Tuple[torch.Tensor, ...]]
    inputs: Tuple[torch.Tensor, ...]

    @property
    def data(self) -> torch.Tensor:
        return self.inputs[0]

    @property
    def labels(self) -> torch.Tensor:
        return self.inputs[-1]

    def run(self, gm: torch.fx.GraphModule, seed: int = 0) -> torch.Tensor:
        """Run the traced step ``gm`` on these tensors (updated in place) under
        ``torch.no_grad()`` (the graph holds the backward ops) after
        ``torch.manual_seed(seed)``; returns the loss (0-d tensor)."""
        torch.manual_seed(seed)
        with torch.no_grad():
            return gm(*self.as_args())

    def as_args(self):
        """The positional arguments of the traced step function / GraphModule."""
        return (self.params, self.buffers, self.optimizer_state, list(self.inputs))


@dataclass
class TrainingState:
    """Everything one training step needs, in its steady state: the model (train mode), the
    optimizer whose state exists, the loss function and one batch of example inputs.

    ``params`` / ``buffers``: the tensors the step starts from (the model's own, or copies
    after a warm-up on copies); ``state_values[k]``: the optimizer state dict of parameter
    ``state_index[k]`` (tensor and non-tensor entries) and ``state_keys[k]`` the names of its
    tensor entries, in the order in which they are passed to the step. ``fake_mode``: the
    ``FakeTensorMode`` of a fake capture (every tensor here is then fake), else None.

    The step inputs are built by :meth:`step_inputs` (clones: running the traced step never
    modifies this state).
    """
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: Callable
    inputs: Tuple[torch.Tensor, ...]
    n_loss_inputs: int = 1
    params: List[torch.Tensor] = field(default_factory=list)
    buffers: List[torch.Tensor] = field(default_factory=list)
    param_names: List[str] = field(default_factory=list)
    param_paths: List[List[str]] = field(default_factory=list)
    buffer_names: List[str] = field(default_factory=list)
    buffer_paths: List[List[str]] = field(default_factory=list)
    group_index: List[List[int]] = field(default_factory=list)
    state_index: List[int] = field(default_factory=list)
    state_keys: List[Tuple[str, ...]] = field(default_factory=list)
    state_values: List[Dict[str, Any]] = field(default_factory=list)
    input_names: List[str] = field(default_factory=list)
    fake_mode: Any = None
    adam: Optional[AdamOptions] = None

    @property
    def data(self) -> torch.Tensor:
        return self.inputs[0]

    @property
    def labels(self) -> torch.Tensor:
        return self.inputs[-1]

    @property
    def fake(self) -> bool:
        return self.fake_mode is not None

    def _mode(self):
        return self.fake_mode if self.fake_mode is not None else contextlib.nullcontext()

    def step_inputs(self) -> StepInputs:
        """Clones of parameters, buffers, optimizer state and inputs, so that running the
        traced step (which updates them in place) leaves this state untouched."""
        with self._mode(), torch.no_grad():
            params = [p.detach().clone().requires_grad_(p.requires_grad) for p in self.params]
            buffers = [b.detach().clone() for b in self.buffers]
            ostate = [tuple(d[k].detach().clone() for k in keys)
                      for d, keys in zip(self.state_values, self.state_keys)]
            inputs = tuple(x.detach().clone() for x in self.inputs)
        return StepInputs(params, buffers, ostate, inputs)

    def eager_reference_step(self, seed: int = 0):
        """Run one ordinary training step (module forward, loss, ``loss.backward()``,
        ``optimizer.step()``) from this state's tensors on copies of the model and the
        optimizer (:func:`eager_reference`), after ``torch.manual_seed(seed)``.

        Returns ``(loss, model, optimizer)``: the loss (0-d tensor) and the updated copies.
        """
        losses, model, opt = eager_reference(self, 1, seed=seed)
        return losses[0], model, opt


def _group_index(optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> List[List[int]]:
    pos = {id(p): i for i, p in enumerate(params)}
    out = []
    for g in optimizer.param_groups:
        idx = []
        for p in g["params"]:
            if id(p) not in pos:
                raise CaptureError(f"the optimizer holds a tensor of shape {list(p.shape)} "
                                   f"that is not a parameter of the model")
            idx.append(pos[id(p)])
        out.append(idx)
    return out


def _state_entries(optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor],
                   names: Sequence[str]):
    """(state_index, state_keys, state_values) from ``optimizer.state`` keyed by ``params``.
    State dicts are shallow-copied; their tensor entries are the optimizer's own."""
    index, keys, values = [], [], []
    for i, p in enumerate(params):
        st = optimizer.state.get(p) if hasattr(optimizer.state, "get") else None
        if not st:
            continue
        for k in st:
            if not isinstance(k, str):
                raise CaptureError(f"optimizer state of {names[i]} has a non-string key {k!r}")
        index.append(i)
        keys.append(tuple(sorted(k for k, v in st.items() if isinstance(v, torch.Tensor))))
        values.append(dict(st))
    return index, keys, values


def make_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable,
               inputs: Sequence[torch.Tensor], *, n_loss_inputs: int = 1,
               input_names: Optional[Sequence[str]] = None, fake_mode=None,
               adam: Optional[AdamOptions] = None) -> TrainingState:
    """A :class:`TrainingState` over the model's own tensors and the optimizer's current
    state (nothing is copied). Raises CaptureError for a model without parameters, an
    optimizer holding foreign tensors, or bad input counts."""
    params, ppaths = _tensor_names(model, "_parameters")
    buffers, bpaths = _tensor_names(model, "_buffers")
    if not params:
        raise CaptureError("model has no parameters")
    inputs = tuple(inputs)
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise CaptureError("example_inputs must be tensors")
    if not 0 <= n_loss_inputs < len(inputs):
        raise CaptureError(f"{len(inputs)} example inputs with {n_loss_inputs} for the loss: "
                           f"the model needs at least one")
    if input_names is None:
        if len(inputs) == 2 and n_loss_inputs == 1:
            input_names = ["data", "labels"]
        else:
            n = len(inputs) - n_loss_inputs
            input_names = [f"input{i}" for i in range(n)] + \
                [f"target{i}" for i in range(n_loss_inputs)]
    if len(input_names) != len(inputs):
        raise CaptureError("input_names and example_inputs differ in length")
    pnames = [p[0] for p in ppaths]
    sidx, skeys, svals = _state_entries(optimizer, params, pnames)
    return TrainingState(model=model, optimizer=optimizer, loss_fn=loss_fn, inputs=inputs,
                         n_loss_inputs=n_loss_inputs, params=list(params), buffers=list(buffers),
                         param_names=pnames, param_paths=ppaths,
                         buffer_names=[b[0] for b in bpaths], buffer_paths=bpaths,
                         group_index=_group_index(optimizer, params), state_index=sidx,
                         state_keys=skeys, state_values=svals, input_names=list(input_names),
                         fake_mode=fake_mode, adam=adam)


@contextlib.contextmanager
def _swapped_optimizer(state: TrainingState, params: Sequence[torch.Tensor],
                       grads: Sequence[Optional[torch.Tensor]], state_dicts: Dict[int, Dict]):
    """Point ``state.optimizer`` at ``params`` (with ``.grad`` = ``grads``) and at the state
    dicts ``{param index: dict}``; restore the optimizer afterwards."""
    opt = state.optimizer
    saved_groups = [g["params"] for g in opt.param_groups]
    saved_state = opt.state
    try:
        for g, idx in zip(opt.param_groups, state.group_index):
            g["params"] = [params[i] for i in idx]
        new_state = defaultdict(dict)
        for i, d in state_dicts.items():
            new_state[params[i]] = d
        opt.state = new_state
        for p, g in zip(params, grads):
            p.grad = g
        yield new_state
    finally:
        for p in params:
            p.grad = None
        opt.state = saved_state
        for g, old in zip(opt.param_groups, saved_groups):
            g["params"] = old


@contextlib.contextmanager
def _rnn_flat_weights(model: torch.nn.Module, tensors: Dict[str, torch.Tensor]):
    """Point every ``nn.RNNBase`` submodule's ``_flat_weights`` (the list its forward reads,
    filled with the Parameter objects at construction) at the step's tensors while the block
    runs. torch 1.13's ``functional_call`` swaps parameters through a class-level
    ``__getattr__`` that this cached list never sees, so nn.LSTM / GRU / RNN would read the
    module's own parameters (traced as constants) instead."""
    saved = []
    for path, mod in model.named_modules():
        if isinstance(mod, torch.nn.RNNBase) and hasattr(mod, "_flat_weights_names"):
            prefix = f"{path}." if path else ""
            new = [tensors.get(prefix + n, w) for n, w in
                   zip(mod._flat_weights_names, mod._flat_weights)]
            saved.append((mod, mod._flat_weights))
            mod.__dict__["_flat_weights"] = new
    try:
        yield
    finally:
        for mod, old in saved:
            mod.__dict__["_flat_weights"] = old


def _forward_loss(state: TrainingState, params, buffers, inputs):
    tensors = {}
    for i, names in enumerate(state.param_paths):
        for n in names:
            tensors[n] = params[i]
    for i, names in enumerate(state.buffer_paths):
        for n in names:
            tensors[n] = buffers[i]
    given = dict(tensors)
    n = len(inputs) - state.n_loss_inputs
    with _rnn_flat_weights(state.model, tensors):
        out = primary_output(functional_call(state.model, tensors, tuple(inputs[:n])))
    loss = state.loss_fn(out, *inputs[n:])
    replaced = [k for k, v in tensors.items() if given[k] is not v]
    if replaced:
        raise CaptureError(f"the model's forward reassigns {replaced[:5]} instead of updating "
                           f"them in place; not supported")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise CaptureError("loss_fn must return a tensor with one element")
    return loss


def _grads(loss, params):
    idx = [i for i, p in enumerate(params) if p.requires_grad]
    got = torch.autograd.grad(loss, [params[i] for i in idx], allow_unused=True)
    grads: List[Optional[torch.Tensor]] = [None] * len(params)
    for i, g in zip(idx, got):
        grads[i] = g
    return grads


def make_train_step(state: TrainingState) -> Callable:
    """The function that :func:`trace_training_step` traces:
    ``train_step(params, buffers, optimizer_state, inputs) -> loss``.

    forward: ``functional_call(model, params + buffers, model inputs)`` (model in train mode)
    and ``loss_fn(primary output, loss inputs)``; backward: ``torch.autograd.grad(loss,
    params)``; update: the optimizer's own ``step()`` on the traced parameters, gradients and
    ``optimizer_state`` (updated in place), skipping parameters whose gradient is None, as
    ``optimizer.step()`` does.
    """
    slot = {p: k for k, p in enumerate(state.state_index)}
    in_optimizer = {i for idx in state.group_index for i in idx}

    def train_step(params, buffers, optimizer_state, inputs):
        with phase("forward"), _forward_claims():
            loss = _forward_loss(state, params, buffers, inputs)
        with phase("backward"):
            grads = _grads(loss, params)
        with phase("update"):
            missing = [state.param_names[i] for i, g in enumerate(grads)
                       if g is not None and i in in_optimizer and i not in slot]
            if missing:
                raise CaptureError(f"no optimizer state for parameters {missing[:5]} "
                                   f"(the traced step must be a steady-state step)")
            dicts = {}
            for i, k in slot.items():
                d = dict(state.state_values[k])
                d.update(zip(state.state_keys[k], optimizer_state[k]))
                dicts[i] = d
            with torch.no_grad(), _swapped_optimizer(state, params, grads, dicts) as st:
                raw_step(state.optimizer)
                for i, k in slot.items():
                    d = st[params[i]]
                    for key, t in zip(state.state_keys[k], optimizer_state[k]):
                        if d.get(key) is not t:
                            raise CaptureError(
                                f"optimizer step replaced state {state.param_names[i]}.{key} "
                                f"instead of updating it in place (not a steady-state step)")
                    new = [key for key, v in d.items()
                           if isinstance(v, torch.Tensor) and key not in state.state_keys[k]]
                    if new:
                        raise CaptureError(f"optimizer step created state {new} for "
                                           f"{state.param_names[i]} (not a steady-state step)")
        return loss

    return train_step


def warm_up(state: TrainingState, steps: int = 1, inputs: Optional[Sequence[torch.Tensor]] = None,
            seed: int = 0) -> TrainingState:
    """A new :class:`TrainingState` whose parameters, buffers and optimizer state are copies
    of ``state``'s after ``steps`` ordinary training steps (forward, loss, autograd, the
    optimizer's real ``step()``) on ``inputs`` (default: the state's own batch). Nothing of
    ``state`` (nor its model or optimizer) is modified. Works on fake states too (the steps
    then run on fake tensors). Creates the optimizer state of a fresh optimizer."""
    out = copy.copy(state)
    batch = tuple(inputs) if inputs is not None else state.inputs
    with state._mode():
        if state.fake_mode is not None:
            from .fake import to_fake
            batch = tuple(to_fake(state.fake_mode, x) for x in batch)
        with torch.no_grad():
            params = [p.detach().clone().requires_grad_(p.requires_grad) for p in state.params]
            buffers = [b.detach().clone() for b in state.buffers]
            dicts = {}
            for i, d, keys in zip(state.state_index, state.state_values, state.state_keys):
                dicts[i] = {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                            for k, v in d.items()}
        torch.manual_seed(seed)
        for _ in range(steps):
            loss = _forward_loss(state, params, buffers, batch)
            grads = _grads(loss, params)
            with torch.no_grad(), _swapped_optimizer(state, params, grads, dicts) as st:
                raw_step(state.optimizer)
                dicts = {i: st[params[i]] for i in range(len(params)) if st.get(params[i])}
    out.params, out.buffers = params, buffers
    out.state_index = sorted(dicts)
    out.state_keys = [tuple(sorted(k for k, v in dicts[i].items()
                                   if isinstance(v, torch.Tensor))) for i in out.state_index]
    out.state_values = [dicts[i] for i in out.state_index]
    return out


def prepare_training_state(model: torch.nn.Module, data: torch.Tensor, labels: torch.Tensor,
                           adam: Optional[AdamOptions] = None, warmup_steps: int = 1,
                           seed: int = 0,
                           warmup_batch: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                           ) -> TrainingState:
    """Put ``model`` in train mode, create ``torch.optim.Adam(model.parameters())`` and run
    ``warmup_steps`` (>= 1) real training steps *on the model itself* so the Adam state
    exists (steady state). Loss: cross-entropy of the primary output.

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
        CaptureError: the model has no parameters.
    """
    if warmup_steps < 1:
        raise ValueError("warmup_steps must be >= 1 (the traced step uses existing Adam state)")
    adam = adam or AdamOptions()
    model.train()
    params = list(model.parameters())
    if not params:
        raise CaptureError("model has no parameters")
    opt = adam.make(params)
    torch.manual_seed(seed)
    wdata, wlabels = warmup_batch if warmup_batch is not None else (data, labels)
    for _ in range(warmup_steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(primary_output(model(wdata)), wlabels)
        loss.backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    return make_state(model, opt, cross_entropy_loss, (data, labels), adam=adam)


def eager_reference(state: TrainingState, steps: int = 1, seed: int = 0):
    """Run ``steps`` ordinary eager training steps (module forward, loss, ``backward()``,
    ``optimizer.step()``) from ``state``'s tensors on a copy of the model and a copy of the
    optimizer (real states only). Returns ``(losses, model, optimizer)``."""
    if state.fake_mode is not None:
        raise ValueError("eager_reference needs a real state")
    model = copy.deepcopy(state.model)
    params, _ = _tensor_names(model, "_parameters")
    buffers, _ = _tensor_names(model, "_buffers")
    with torch.no_grad():
        for p, v in zip(params, state.params):
            p.copy_(v)
        for b, v in zip(buffers, state.buffers):
            b.copy_(v)
    opt = copy.copy(state.optimizer)
    opt.param_groups = [dict(g, params=[params[i] for i in idx])
                        for g, idx in zip(state.optimizer.param_groups, state.group_index)]
    opt.state = defaultdict(dict)
    for i, d in zip(state.state_index, state.state_values):
        opt.state[params[i]] = {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                                for k, v in d.items()}
    n = len(state.inputs) - state.n_loss_inputs
    losses = []
    torch.manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = state.loss_fn(primary_output(model(*state.inputs[:n])), *state.inputs[n:])
        loss.backward()
        raw_step(opt)
        losses.append(loss.detach())
    opt.zero_grad(set_to_none=True)
    return losses, model, opt


@dataclass
class TracedStep:
    """Result of :func:`trace_training_step`.

    ``gm``: the fx GraphModule; call ``gm(*inputs.as_args())`` to run the step (it updates
    the given tensors in place and returns the loss). ``placeholders``: ``(role, name)`` for
    each placeholder in graph order. ``baked_items``: ``(phase, value)`` for each
    ``Tensor.item()`` evaluated at trace time and frozen into the graph as a constant.
    ``unused_params``: names of parameters without optimizer state (no gradient in the
    warm-up; not updated). ``fallbacks``: ``{operator: calls}`` run through FakeTensorMode's
    real-kernel fallback (fake captures only). ``fake``: traced on fake tensors.
    ``removed_detach``: ``aten.detach`` nodes removed (:func:`remove_detach_nodes`).
    ``functional_dropouts``: dropout masks rewritten out of place
    (:func:`functional_dropout_masks`).
    """
    gm: torch.fx.GraphModule
    placeholders: List[Tuple[str, str]]
    baked_items: List[Tuple[str, Any]]
    unused_params: List[str]
    fallbacks: Dict[str, int] = field(default_factory=dict)
    fake: bool = False
    removed_detach: int = 0
    functional_dropouts: int = 0


def placeholder_roles(state: TrainingState, inputs: Optional[StepInputs] = None
                      ) -> List[Tuple[str, str]]:
    """``(role, name)`` for each flattened argument of the step, in the order in which
    make_fx creates the placeholders (pytree flattening of ``inputs.as_args()``)."""
    import torch.utils._pytree as pytree
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


_placeholder_roles = placeholder_roles  # name used by earlier versions


def trace_training_step(state: TrainingState, seed: int = 0,
                        progress: Optional[Callable[[str], None]] = None) -> TracedStep:
    """Trace one steady-state training step with ``make_fx`` (``tracing_mode="real"``; for a
    fake state the state's ``FakeTensorMode`` is active below make_fx's proxy mode, so the
    trace runs on fake tensors).

    The trace runs on clones (``state`` is not modified). ``Tensor.item()`` (e.g.
    ``step_t.item()`` in the single-tensor Adam) cannot be traced: it is evaluated on the
    value (real, or a constant fake tensor) and frozen as a Python constant (listed in
    ``baked_items``); the in-place increment of the step tensor itself is traced.

    Returns:
        :class:`TracedStep`; every node has ``node.meta["roam_phase"]`` in :data:`PHASES`.

    Raises:
        CaptureError: missing optimizer state, a placeholder that is not a tensor, or (fake
            mode) ``.item()`` on a value that only a real run could know.
    """
    inputs = state.step_inputs()
    placeholders = placeholder_roles(state, inputs)
    baked: List[Tuple[str, Any]] = []

    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    def local_scalar_dense(x):
        with disable_proxy_modes_tracing():
            try:
                v = torch.ops.aten._local_scalar_dense.default(x)
            except Exception as e:  # a fake tensor without a known value
                raise CaptureError(
                    f"Tensor.item() in phase {_CURRENT_PHASE or 'other'} on a value that "
                    f"fake tensors do not know ({type(e).__name__}); capture in real mode")
        baked.append((_CURRENT_PHASE or "other", v))
        return v

    decomp = {torch.ops.aten._local_scalar_dense.default: local_scalar_dense}
    step_fn = make_train_step(state)
    fallbacks: Dict[str, int] = {}
    torch.manual_seed(seed)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_stamp_phases(progress))
        stack.enter_context(ModuleTracker(state.model).installed())
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
            if state.fake_mode is None:
                raise
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CaptureError(f"tracing on fake tensors failed ({type(e).__name__}: "
                               f"{first[:300]}); the program needs real values (e.g. a "
                               f"data-dependent shape): capture in real mode") from e

    removed = remove_detach_nodes(gm)
    dropouts = functional_dropout_masks(gm)
    with_state = set(state.state_index)
    unused = [n for i, n in enumerate(state.param_names) if i not in with_state]
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(placeholders):
        raise CaptureError(f"{len(phs)} placeholders in the trace, {len(placeholders)} inputs")
    return TracedStep(gm=gm, placeholders=placeholders, baked_items=baked,
                      unused_params=unused, fallbacks=dict(fallbacks),
                      fake=state.fake_mode is not None, removed_detach=removed,
                      functional_dropouts=dropouts)


def remove_detach_nodes(gm: torch.fx.GraphModule) -> int:
    """Remove every ``aten.detach`` node of ``gm`` (its users read its argument instead) and
    recompile; returns how many were removed.

    In the traced step (run under ``no_grad``, backward ops explicit) ``detach`` is the
    identity: its result is an alias of its argument and nothing reads ``requires_grad``.
    Most of them are not even written by the program: autograd detaches saved tensors and
    freshly created tensors (``TensorImpl::shallow_copy_and_detach``), and it does so through
    a dispatched ``aten.detach`` only for tensors with a Python dispatch key, so a fake trace
    records detaches that a real trace of the same program does not. Dropping them all makes
    real and fake captures identical and removes ops that allocate nothing."""
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
    """Rewrite each dropout mask of ``gm`` out of place, so that it can be recomputed; returns
    how many were rewritten (``gm`` is recompiled when any was).

    On the CPU, PyTorch 1.13 runs ``F.dropout(x, p, training=True)`` as ::

        e = empty_like(x, memory_format=contiguous_format)   # uninitialized
        b = bernoulli_(e, 1 - p)                             # random, in place
        d = div_(b, 1 - p)                                   # in place
        y = mul(x, d)                                        # backward reads d too

    None of the first three may be recomputed (GRAPH_FORMAT.md ``recomputable``: no in-place
    write, no uninitialized result), so every mask is held from the forward to its backward
    (BERT-base, batch 32: 588 MiB of masks). The rewrite gives the same bytes out of place::

        s = new_zeros(x, [])                # 4 bytes; reads x only for its dtype
        v = expand(s, x.shape)              # a view: the mask's shape, no bytes
        m = bernoulli.p(v, 1 - p)           # empty_like(v).bernoulli_(1 - p): contiguous
        d = div.Scalar(m, 1 - p)

    ``bernoulli.p`` draws into ``empty_like`` of its argument; of an expanded (overlapping)
    tensor that is the contiguous layout the original ``empty_like`` asked for, and the draws
    depend only on the generator and the element count, so ``m`` holds the bits ``b`` held
    and the generator advances the same way. Recomputing the mask needs only ``s`` (64 bytes
    in an arena) and the generator state of its first run, which the executor replays
    (:mod:`roam.executor.program`, ``Step.rng``). ``s`` reads ``x`` so that the first draw
    of each mask still follows the data flow of the program (masks of a chain of layers are
    drawn in program order by any valid order without ``after`` edges between them). Memory
    in program order is unchanged at the peak of the pattern: at ``div`` the mask is held
    twice, as at ``mul`` (mask and ``y``).

    Rewritten only where the pattern is exact: ``empty_like`` with ``contiguous_format`` (or
    of a contiguous tensor) read only by ``bernoulli_.float`` without a generator, read only
    by ``div_.Scalar``, with the shape known from the trace (``tensor_meta``), and no reader
    of the mask that writes in place (``nn.Dropout(inplace=True)`` multiplies ``x`` in
    place: there the out-of-place mask would add a mask-sized tensor at ``div``)."""
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
        if d is None or d.target is not aten.div_.Scalar or d.args[0] is not b:
            continue
        if any(_writes_in_place(u) for u in d.users):
            continue  # nn.Dropout(inplace=True): x.mul_(mask) holds no second mask-sized
            # tensor, so drawing the mask out of place would raise the program order's peak
        tm = e.meta.get("tensor_meta")
        if tm is None or len(e.args) != 1 or any(k != "memory_format" for k in e.kwargs):
            continue
        contiguous = e.kwargs.get("memory_format") is torch.contiguous_format or \
            tm.memory_format is torch.contiguous_format
        if not contiguous or not tm.dtype.is_floating_point:
            continue
        prob = b.args[1] if len(b.args) > 1 else b.kwargs.get("p", 0.5)
        with gm.graph.inserting_before(e):
            s = gm.graph.call_function(aten.new_zeros.default, (e.args[0], []))
            v = gm.graph.call_function(aten.expand.default, (s, list(tm.shape)))
            m = gm.graph.call_function(aten.bernoulli.p, (v, prob))
            q = gm.graph.call_function(aten.div.Scalar, (m, *d.args[1:]), dict(d.kwargs))
        for new, old in ((s, e), (v, e), (m, b), (q, d)):
            new.meta.update({k: val for k, val in old.meta.items() if k != "tensor_meta"})
        d.replace_all_uses_with(q)
        for old in (d, b, e):
            gm.graph.erase_node(old)
        n += 1
    if n:
        gm.recompile()
    return n
