"""What one training step reads and mutates: the model, its optimizer (and LR schedulers), the
loss or the user's own step function, and one batch (:class:`TrainingState`); fresh copies of
its tensors for one run (:class:`StepInputs`); and :func:`bound_step`, the context in which a
step runs on such copies (the model reparametrized, the optimizer pointed at the copies, the
schedulers held back).

The step is either the **default step** (``loss = loss_fn(primary output of model(*inputs),
*targets)``, ``loss.backward()``, ``optimizer.step()``) or **the user's own function**
(``step_fn(*example_inputs)``: any forward, several losses, ``backward()`` calls, gradient
clipping, ``optimizer.step()`` and ``scheduler.step()``), as ``torch.compile`` takes a function.
Both run through the same code (:func:`default_step_function` makes the first a function).

Placeholders of the traced step, in this order: parameters (``model.parameters()`` order,
tied ones once), buffers, optimizer state tensors (per parameter with state, its tensor entries
in sorted key order), the tensors among the example inputs (pytree order).
"""

import contextlib
import copy
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from .errors import CaptureError
from .modules import phase


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
    installs for the profiler (its ``profiler::_record_function_enter_new`` call is not a
    tensor operation and has no fake-tensor implementation) and without the optimizer's step
    hooks. Everything else is the real step."""
    f = type(optimizer).step
    if getattr(f, "hooked", False) and hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return f(optimizer) if closure is None else f(optimizer, closure)


def optimizer_options(optimizer: Optional[torch.optim.Optimizer]) -> Dict[str, Any]:
    """The hyper-parameters of the first parameter group (JSON-friendly; tuples as lists),
    plus ``param_groups`` when there are several."""
    if optimizer is None:
        return {}

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


def tensor_names(model: torch.nn.Module, kind: str) -> Tuple[List[torch.Tensor], List[List[str]]]:
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


class _Batch:
    """``data`` / ``labels``: the first and the last of ``inputs`` (the default step's)."""
    inputs: Tuple[torch.Tensor, ...]

    @property
    def data(self) -> torch.Tensor:
        return self.inputs[0]

    @property
    def labels(self) -> torch.Tensor:
        return self.inputs[-1]


@dataclass
class StepInputs(_Batch):
    """Fresh copies of everything one training step reads and mutates.

    ``params[i]`` is a leaf (``requires_grad`` as in the model); ``optimizer_state[k]`` is the
    tuple of state tensors of parameter ``state_index[k]`` in the order of
    ``TrainingState.state_keys[k]`` (for Adam ``(exp_avg, exp_avg_sq, step)``). ``inputs``
    are the tensors among the example inputs (for the default step: the model's, then the loss
    function's, e.g. ``(data, labels)``).
    """
    params: List[torch.Tensor]
    buffers: List[torch.Tensor]
    optimizer_state: List[Tuple[torch.Tensor, ...]]
    inputs: Tuple[torch.Tensor, ...]

    def run(self, gm: torch.fx.GraphModule, seed: int = 0):
        """Run the traced step ``gm`` on these tensors (updated in place; detached, so that
        autograd records nothing: the graph holds the backward ops,
        :func:`roam.capture.kernels.call_graph`) after ``torch.manual_seed(seed)``; returns
        the step's outputs (the loss)."""
        from .kernels import call_graph
        torch.manual_seed(seed)
        return call_graph(gm, *self.as_args())

    def as_args(self):
        """The positional arguments of the traced step function / GraphModule."""
        return (self.params, self.buffers, self.optimizer_state, list(self.inputs))


@dataclass
class TrainingState(_Batch):
    """Everything one training step needs, in its steady state.

    ``model`` (its mode, train or eval, as given), ``optimizer`` (None only for a step function
    that updates the parameters itself) whose state exists, ``loss_fn`` (default step) or
    ``step_fn`` (the user's step, called as ``step_fn(*args)`` with ``args`` rebuilt from
    ``input_spec``: the tensor leaves are the step's ``inputs``, the other leaves stay the
    Python values of ``input_constants``), ``schedulers``: the LR schedulers the step calls.

    ``params`` / ``buffers``: the tensors the step starts from (the model's own, or copies
    after a warm-up on copies); ``state_values[k]``: the optimizer state dict of parameter
    ``state_index[k]`` (tensor and non-tensor entries) and ``state_keys[k]`` the names of its
    tensor entries, in the order in which they are passed to the step. ``fake_mode``: the
    ``FakeTensorMode`` of a fake capture (every tensor here is then fake), else None.

    The step inputs are built by :meth:`step_inputs` (clones: running the traced step never
    modifies this state).
    """
    model: torch.nn.Module
    optimizer: Optional[torch.optim.Optimizer]
    loss_fn: Optional[Callable]
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
    step_fn: Optional[Callable] = None
    input_spec: Any = None
    input_constants: List[Any] = field(default_factory=list)
    schedulers: List[Any] = field(default_factory=list)
    # a rank of a data-parallel step (roam.capture.collectives.DataParallel), else None
    data_parallel: Any = None

    @property
    def fake(self) -> bool:
        return self.fake_mode is not None

    def _mode(self):
        return self.fake_mode if self.fake_mode is not None else contextlib.nullcontext()

    def step_args(self, inputs: Sequence[torch.Tensor]) -> Tuple[Any, ...]:
        """The positional arguments of the step function with ``inputs`` as its tensors."""
        if self.input_spec is None:
            return tuple(inputs)
        leaves, k = [], 0
        for c in self.input_constants:
            if c is _TENSOR:
                leaves.append(inputs[k])
                k += 1
            else:
                leaves.append(c)
        return tuple(pytree.tree_unflatten(leaves, self.input_spec))

    def step_inputs(self) -> StepInputs:
        """Clones of parameters, buffers, optimizer state and inputs, so that running the
        traced step (which updates them in place) leaves this state untouched."""
        with self._mode(), torch.no_grad():
            params = [p.detach().clone().requires_grad_(p.requires_grad) for p in self.params]
            buffers = [b.detach().clone() for b in self.buffers]
            ostate = [tuple(d[k].detach().clone() for k in keys)
                      for d, keys in zip(self.state_values, self.state_keys)]
            inputs = tuple(x.detach().clone().requires_grad_(x.requires_grad)
                           for x in self.inputs)
        return StepInputs(params, buffers, ostate, inputs)

    def eager_reference_step(self, seed: int = 0):
        """Run one ordinary training step from this state's tensors on copies
        (:func:`eager_reference`), after ``torch.manual_seed(seed)``.

        Returns ``(outputs, params, buffers, optimizer state dicts)``."""
        outs, tensors = eager_reference(self, 1, seed=seed)
        return outs[0], tensors


_TENSOR = object()  # marks a tensor leaf of the example inputs (TrainingState.input_constants)


def _group_index(optimizer: Optional[torch.optim.Optimizer],
                 params: Sequence[torch.Tensor]) -> List[List[int]]:
    if optimizer is None:
        return []
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


def _state_entries(optimizer: Optional[torch.optim.Optimizer], params: Sequence[torch.Tensor],
                   names: Sequence[str]):
    """(state_index, state_keys, state_values) from ``optimizer.state`` keyed by ``params``.
    State dicts are shallow-copied; their tensor entries are the optimizer's own."""
    index, keys, values = [], [], []
    if optimizer is None:
        return index, keys, values
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


def make_state(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer],
               loss_fn: Optional[Callable], inputs: Sequence[Any], *, n_loss_inputs: int = 1,
               input_names: Optional[Sequence[str]] = None, fake_mode=None,
               adam: Optional[AdamOptions] = None, step_fn: Optional[Callable] = None,
               schedulers: Sequence[Any] = ()) -> TrainingState:
    """A :class:`TrainingState` over the model's own tensors and the optimizer's current
    state (nothing is copied).

    Default step (``step_fn`` None): ``inputs`` are tensors, the last ``n_loss_inputs`` for
    ``loss_fn``. Step function: ``inputs`` are its positional arguments (any pytree; the tensor
    leaves become the step's inputs, the other leaves are fixed).

    Raises:
        CaptureError: a model without parameters, an optimizer holding foreign tensors, bad
            input counts, non-tensor inputs of the default step.
    """
    params, ppaths = tensor_names(model, "_parameters")
    buffers, bpaths = tensor_names(model, "_buffers")
    if not params:
        raise CaptureError("model has no parameters")
    spec, constants = None, []
    if step_fn is None:
        inputs = tuple(inputs)
        if not all(isinstance(x, torch.Tensor) for x in inputs):
            raise CaptureError("example_inputs must be tensors")
        if not 0 <= n_loss_inputs < len(inputs):
            raise CaptureError(f"{len(inputs)} example inputs with {n_loss_inputs} for the "
                               f"loss: the model needs at least one")
        if optimizer is None:
            raise CaptureError("the default step needs an optimizer")
    else:
        leaves, spec = pytree.tree_flatten(tuple(inputs))
        constants = [_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves]
        inputs = tuple(x for x in leaves if isinstance(x, torch.Tensor))
        n_loss_inputs = 0
    if input_names is None:
        if step_fn is None and len(inputs) == 2 and n_loss_inputs == 1:
            input_names = ["data", "labels"]
        elif step_fn is None:
            n = len(inputs) - n_loss_inputs
            input_names = [f"input{i}" for i in range(n)] + \
                [f"target{i}" for i in range(n_loss_inputs)]
        else:
            input_names = [f"input{i}" for i in range(len(inputs))]
    if len(input_names) != len(inputs):
        raise CaptureError("input_names and the tensors of example_inputs differ in length")
    pnames = [p[0] for p in ppaths]
    sidx, skeys, svals = _state_entries(optimizer, params, pnames)
    return TrainingState(model=model, optimizer=optimizer, loss_fn=loss_fn, inputs=inputs,
                         n_loss_inputs=n_loss_inputs, params=list(params), buffers=list(buffers),
                         param_names=pnames, param_paths=ppaths,
                         buffer_names=[b[0] for b in bpaths], buffer_paths=bpaths,
                         group_index=_group_index(optimizer, params), state_index=sidx,
                         state_keys=skeys, state_values=svals, input_names=list(input_names),
                         fake_mode=fake_mode, adam=adam, step_fn=step_fn, input_spec=spec,
                         input_constants=constants, schedulers=list(schedulers))


# ---------------------------------------------------------------- running a step on copies

@contextlib.contextmanager
def _rnn_flat_weights(model: torch.nn.Module, tensors: Dict[str, torch.Tensor]):
    """Point every ``nn.RNNBase`` submodule's ``_flat_weights`` (the list its forward reads,
    filled with the Parameter objects at construction) at the step's tensors while the block
    runs. ``torch.nn.utils.stateless._reparametrize_module`` swaps the entries of
    ``_parameters`` without the module's ``__setattr__`` that refreshes this cached list, so
    nn.LSTM / GRU / RNN would read the module's own parameters (traced as constants) instead
    (seen on torch 2.13 and 2.14)."""
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


class SchedulerCalls:
    """The ``step()`` calls of the step's LR schedulers while a step runs on copies: counted,
    not run (a scheduler changes the real optimizer's ``lr``). The executor runs them after
    each planned step, in this order (``calls``: indices into ``TrainingState.schedulers``)."""

    def __init__(self):
        self.calls: List[int] = []


@contextlib.contextmanager
def bound_step(state: TrainingState, params: Sequence[torch.Tensor],
               buffers: Sequence[torch.Tensor], state_dicts: Dict[int, Dict[str, Any]],
               *, optimizer_step: Optional[Callable] = None):
    """Run the block with the model reparametrized to ``params`` / ``buffers``, the optimizer
    pointed at ``params`` (``.grad`` None) with the state dicts ``{param index: dict}``, and
    the schedulers' ``step()`` recorded instead of run; everything is restored afterwards.

    ``optimizer_step``: what ``optimizer.step()`` does inside the block (default
    :func:`raw_step` in phase ``update``). Yields ``(new optimizer state, SchedulerCalls)``.

    ``torch.nn.utils.stateless._reparametrize_module`` is private: the public
    ``torch.func.functional_call`` swaps the parameters only around ``forward``, and the step
    also reads them in ``backward()``, gradient clipping and ``optimizer.step()`` (checked on
    torch 2.13 and 2.14).
    """
    from torch.nn.utils.stateless import _reparametrize_module
    tensors: Dict[str, torch.Tensor] = {}
    for i, names in enumerate(state.param_paths):
        for n in names:
            tensors[n] = params[i]
    for i, names in enumerate(state.buffer_paths):
        for n in names:
            tensors[n] = buffers[i]
    opt = state.optimizer
    calls = SchedulerCalls()
    saved_groups = [g["params"] for g in opt.param_groups] if opt is not None else []
    saved_state = opt.state if opt is not None else None
    new_state = defaultdict(dict)
    patched = []  # (object, attribute, what its __dict__ held before: restored after)
    missing = object()

    def step_in_update(*a, **k):
        if a or k:
            raise CaptureError("optimizer.step(closure) is not supported: call step() "
                               "without a closure inside the step function")
        with phase("update"):
            return raw_step(opt)

    def recorder(j):
        def step(*a, **k):
            calls.calls.append(j)
        return step

    try:
        if opt is not None:
            for g, idx in zip(opt.param_groups, state.group_index):
                g["params"] = [params[i] for i in idx]
            for i, d in state_dicts.items():
                new_state[params[i]] = d
            opt.state = new_state
            # an LR scheduler wraps the optimizer's step in the instance __dict__: kept aside
            patched.append((opt, "step", opt.__dict__.get("step", missing)))
            opt.__dict__["step"] = optimizer_step or step_in_update
        for j, s in enumerate(state.schedulers):
            patched.append((s, "step", s.__dict__.get("step", missing)))
            s.__dict__["step"] = recorder(j)
        for p in params:
            p.grad = None
        with _reparametrize_module(state.model, tensors), \
                _rnn_flat_weights(state.model, tensors):
            yield new_state, calls
            replaced = [k for k, v in tensors.items() if _lookup(state.model, k) is not v]
            if replaced:
                raise CaptureError(f"the step reassigns {replaced[:5]} instead of updating "
                                   f"them in place; not supported")
    finally:
        for obj, name, old in reversed(patched):
            if old is missing:
                obj.__dict__.pop(name, None)
            else:
                obj.__dict__[name] = old
        for p in params:
            p.grad = None
        if opt is not None:
            opt.state = saved_state
            for g, old in zip(opt.param_groups, saved_groups):
                g["params"] = old


def _lookup(model: torch.nn.Module, path: str):
    mod = model
    parts = path.split(".")
    for p in parts[:-1]:
        mod = getattr(mod, p)
    return getattr(mod, parts[-1])


def default_step_function(state: TrainingState) -> Callable:
    """The default step as a step function: ``optimizer.zero_grad()``, ``loss =
    loss_fn(primary_output(model(*inputs[:n])), *inputs[n:])``, ``loss.backward()``,
    ``optimizer.step()``; returns the loss."""
    n = len(state.inputs) - state.n_loss_inputs

    def step(*inputs):
        state.optimizer.zero_grad(set_to_none=True)
        out = primary_output(state.model(*inputs[:n]))
        loss = state.loss_fn(out, *inputs[n:])
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise CaptureError("loss_fn must return a tensor with one element")
        loss.backward()
        state.optimizer.step()
        return loss
    return step


def step_function(state: TrainingState) -> Callable:
    """The function one step calls: the user's ``step_fn`` or :func:`default_step_function`;
    for a rank of a data-parallel step (``state.data_parallel``), with every ``backward()``
    followed by the gradient all-reduce (:func:`roam.capture.collectives.data_parallel_backward`)."""
    fn = state.step_fn if state.step_fn is not None else default_step_function(state)
    dp = state.data_parallel
    if dp is None:
        return fn
    from .collectives import data_parallel_step

    def rank_step(*args):
        with data_parallel_step(dp, state.model):
            return fn(*args)
    return rank_step


def _state_dicts(state: TrainingState, optimizer_state: Sequence[Sequence[torch.Tensor]]):
    dicts = {}
    for k, i in enumerate(state.state_index):
        d = {key: (copy.deepcopy(v) if not isinstance(v, torch.Tensor) else v)
             for key, v in state.state_values[k].items()}
        d.update(zip(state.state_keys[k], optimizer_state[k]))
        dicts[i] = d
    return dicts


def warm_up(state: TrainingState, steps: int = 1, inputs: Optional[Sequence[Any]] = None,
            seed: int = 0) -> TrainingState:
    """A new :class:`TrainingState` whose parameters, buffers and optimizer state are copies
    of ``state``'s after ``steps`` ordinary training steps (the step function run eagerly,
    real autograd, the optimizer's real update; LR schedulers held back) on ``inputs``
    (default: the state's own batch; for a step function, its positional arguments). Nothing
    of ``state`` (nor its model, optimizer or schedulers) is modified. Works on fake states
    too (the steps then run on fake tensors). Creates the optimizer state of a fresh
    optimizer."""
    out = copy.copy(state)
    fn = step_function(state)
    with state._mode():
        if inputs is None:
            args = state.step_args(state.inputs)
        elif state.step_fn is None:
            args = tuple(inputs)
        else:
            args = tuple(inputs)
        if state.fake_mode is not None:
            from .fake import to_fake
            args = pytree.tree_map(lambda x: to_fake(state.fake_mode, x)
                                   if isinstance(x, torch.Tensor) else x, args)
        with torch.no_grad():
            params = [p.detach().clone().requires_grad_(p.requires_grad) for p in state.params]
            buffers = [b.detach().clone() for b in state.buffers]
            dicts = {}
            for i, d in zip(state.state_index, state.state_values):
                dicts[i] = {k: (v.detach().clone() if isinstance(v, torch.Tensor)
                                else copy.deepcopy(v)) for k, v in d.items()}
        torch.manual_seed(seed)
        for _ in range(steps):
            opt = state.optimizer
            with python_state_unchanged(state.model), \
                    bound_step(state, params, buffers, dicts,
                               optimizer_step=(lambda: raw_step(opt)) if opt else None) as (st, _):
                fn(*args)
                if opt is not None:
                    dicts = {i: st[params[i]] for i in range(len(params)) if st.get(params[i])}
    out.params, out.buffers = params, buffers
    out.state_index = sorted(dicts)
    out.state_keys = [tuple(sorted(k for k, v in dicts[i].items()
                                   if isinstance(v, torch.Tensor))) for i in out.state_index]
    out.state_values = [dicts[i] for i in out.state_index]
    return out


def python_attributes(model: torch.nn.Module) -> Dict[Tuple[str, str], Any]:
    """The public plain Python attributes (numbers, strings, booleans, None) of every
    submodule of ``model``: (module path, name) -> value."""
    out = {}
    for path, m in model.named_modules():
        for k, v in vars(m).items():
            if not k.startswith("_") and (v is None or isinstance(v, (bool, int, float, str))):
                out[(path, k)] = v
    return out


@contextlib.contextmanager
def python_state_unchanged(model: torch.nn.Module):
    """Refuse a step that changes a module's Python attribute (a step counter on the
    model): the graph would hold the value of the traced step forever. The attributes are
    put back as they were before the trace either way."""
    before = python_attributes(model)
    ok = False
    try:
        yield
        ok = True
    finally:
        after = python_attributes(model)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        mods = dict(model.named_modules())
        for path, k in changed:
            if (path, k) in before and path in mods:
                setattr(mods[path], k, before[(path, k)])
    if ok and changed:
        path, k = changed[0]
        raise CaptureError(f"the step changes the Python attribute {k!r} of module "
                           f"{path or type(model).__name__} ({before.get((path, k))!r} -> "
                           f"{after.get((path, k))!r}): a captured graph holds the value of the "
                           f"traced step and cannot replay the change; keep such state in a "
                           f"tensor buffer (register_buffer) updated in place")


def eager_reference(state: TrainingState, steps: int = 1, seed: int = 0):
    """Run ``steps`` ordinary eager steps (the step function with real autograd and the
    optimizer's real update, LR schedulers held back) from ``state``'s tensors on copies of
    them (real states only). Returns ``(outputs per step, (params, buffers, state dicts))``:
    the copies after the steps (state dicts keyed by parameter index)."""
    if state.fake_mode is not None:
        raise ValueError("eager_reference needs a real state")
    fn = step_function(state)
    with torch.no_grad():
        params = [p.detach().clone().requires_grad_(p.requires_grad) for p in state.params]
        buffers = [b.detach().clone() for b in state.buffers]
        dicts = {i: {k: (v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v))
                     for k, v in d.items()}
                 for i, d in zip(state.state_index, state.state_values)}
    args = state.step_args(state.inputs)
    outs = []
    torch.manual_seed(seed)
    opt = state.optimizer
    for _ in range(steps):
        with python_state_unchanged(state.model), \
                bound_step(state, params, buffers, dicts,
                           optimizer_step=(lambda: raw_step(opt)) if opt else None) as (st, _):
            out = fn(*args)
            if opt is not None:
                dicts = {i: st[params[i]] for i in range(len(params)) if st.get(params[i])}
        outs.append(pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t,
                                    out))
    return outs, (params, buffers, dicts)


def prepare_training_state(model: torch.nn.Module, data: torch.Tensor, labels: torch.Tensor,
                           adam: Optional[AdamOptions] = None, warmup_steps: int = 1,
                           seed: int = 0,
                           warmup_batch: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                           ) -> TrainingState:
    """Put ``model`` in train mode, create ``torch.optim.Adam(model.parameters())`` and run
    ``warmup_steps`` (>= 1) real training steps *on the model itself* so the Adam state
    exists (steady state). Loss: cross-entropy of the primary output.

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
