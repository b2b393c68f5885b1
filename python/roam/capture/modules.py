"""Where each traced operator comes from: the phase of the step (forward, backward, update,
other) and the path of the ``nn.Module`` whose forward ran it.

Phases are recorded while tracing: a module-level "current phase" is set by the traced step at
each phase boundary (:func:`phase`: ``backward()`` calls, ``optimizer.step()``) and every fx
node created while it is set is stamped with it (``node.meta["roam_phase"]``,
:func:`stamp_nodes`). Nothing is inferred from operator names. Likewise each node records the
path of the module whose forward ran it (``node.meta["roam_module"]``, :class:`ModuleTracker`).
"""

import contextlib
import time
from typing import Any, Callable, Dict, List, Optional, Set

import torch
import torch.fx
import torch.utils._pytree as pytree

PHASE_KEY = "roam_phase"
PHASES = ("forward", "backward", "update", "other")

# The phase the traced function is in right now (None outside a traced step).
_CURRENT_PHASE: Optional[str] = None
# How many phase("update") blocks (optimizer steps) have ended so far (updates_done).
_UPDATES = 0


@contextlib.contextmanager
def phase(name: str):
    """Mark the code inside the ``with`` block as phase ``name`` (one of :data:`PHASES`);
    fx nodes created meanwhile by :func:`trace_training_step` get that phase."""
    global _CURRENT_PHASE
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}")
    global _UPDATES
    old = _CURRENT_PHASE
    _CURRENT_PHASE = name
    try:
        yield
    finally:
        _CURRENT_PHASE = old
        if name == "update":
            _UPDATES += 1


MODULE_KEY = "roam_module"

# The ModuleTracker of the trace in progress (None outside trace_training_step).
_TRACKER: Optional["ModuleTracker"] = None


class ModuleTracker:
    """Which ``nn.Module`` of ``model`` ran each fx node of a trace (make_fx records no
    ``nn_module_stack`` for backward and update ops, which are traced below autograd).

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
        """Register the module hooks and make this the tracker of :func:`stamp_nodes`."""
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
def forward_claims():
    """The claiming mode of the active tracker for the forward phase (no-op without one)."""
    if _TRACKER is None:
        yield
    else:
        with _TRACKER.claiming():
            yield


@contextlib.contextmanager
def on_create_node(after: Callable[[torch.fx.Node], None]):
    """Call ``after(node)`` on every node ``torch.fx.Graph.create_node`` makes inside the
    ``with`` block (the trace's node stamping: phase, module, source, last node)."""
    original = torch.fx.Graph.create_node

    def create_node(self, *args, **kwargs):
        node = original(self, *args, **kwargs)
        after(node)
        return node

    torch.fx.Graph.create_node = create_node
    try:
        yield
    finally:
        torch.fx.Graph.create_node = original


@contextlib.contextmanager
def stamp_nodes(progress: Optional[Callable[[str], None]] = None, every: float = 2.0):
    """Wrap ``torch.fx.Graph.create_node`` so every node records the current phase (and,
    with a :class:`ModuleTracker` installed, the current module path under
    ``node.meta["roam_module"]`` where there is one); with ``progress``, report the node
    count every ``every`` seconds."""
    count = [0, time.monotonic()]

    def stamp(node):
        node.meta[PHASE_KEY] = _CURRENT_PHASE or "other"
        if _TRACKER is not None:
            path = _TRACKER.current(_CURRENT_PHASE)
            if path:
                node.meta[MODULE_KEY] = path
        count[0] += 1
        if progress is not None and time.monotonic() - count[1] >= every:
            count[1] = time.monotonic()
            progress(f"tracing: {count[0]} fx nodes ({_CURRENT_PHASE or 'other'})")

    with on_create_node(stamp):
        yield


def updates_done() -> int:
    """How many ``phase("update")`` blocks (the optimizer's steps) have ended in this process;
    compare two readings to tell whether one ended between them."""
    return _UPDATES


def current_phase() -> Optional[str]:
    """The phase the traced step is in right now (None outside a traced step)."""
    return _CURRENT_PHASE
