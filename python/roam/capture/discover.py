"""What a user's step function trains: its model, optimizer and LR schedulers.

``roam.capture(train_step, example_inputs)`` and ``roam.optimize(train_step, example_inputs)``
take the whole step as a function, as ``torch.compile`` does. The tensors it reads and writes
(parameters, buffers, optimizer state) must be inputs of the captured graph, so the capture
needs the ``nn.Module``, the ``torch.optim.Optimizer`` and the LR schedulers behind them: given
as ``model=``, ``optimizer=``, ``schedulers=``, or found in what the function refers to (its
closure, the globals it names, its default arguments, ``self`` of a bound method, one level of
attributes of those objects).
"""

import inspect
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from .errors import CaptureError


def _scheduler_types() -> Tuple[type, ...]:
    sched = torch.optim.lr_scheduler
    types = [getattr(sched, n) for n in ("LRScheduler", "_LRScheduler", "ReduceLROnPlateau")
             if hasattr(sched, n)]
    return tuple(types)


def _referenced(fn: Callable) -> List[Any]:
    """Objects ``fn`` refers to: closure cells, the globals its code (and nested code) names,
    default arguments, ``self`` of a bound method; then one level of their attributes."""
    out: List[Any] = []
    seen = set()

    def add(v):
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)

    target = fn
    if inspect.ismethod(fn):
        add(fn.__self__)
        target = fn.__func__
    code = getattr(target, "__code__", None)
    if code is None and callable(fn) and hasattr(type(fn), "__call__"):
        add(fn)  # a callable object: its attributes below
        call = type(fn).__call__
        code = getattr(call, "__code__", None)
        target = call
    for cell in getattr(target, "__closure__", None) or ():
        try:
            add(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    globs = getattr(target, "__globals__", {})
    codes = [code] if code is not None else []
    while codes:
        c = codes.pop()
        for name in c.co_names:
            if name in globs:
                add(globs[name])
        codes.extend(k for k in c.co_consts if inspect.iscode(k))
    for d in (getattr(target, "__defaults__", None) or ()):
        add(d)
    for v in list(out):
        if isinstance(v, (torch.nn.Module, torch.optim.Optimizer)) or inspect.ismodule(v):
            continue
        for a in list(getattr(v, "__dict__", {}).values()):
            add(a)
    return out


def discover(fn: Callable, model: Optional[torch.nn.Module] = None,
             optimizer: Optional[torch.optim.Optimizer] = None,
             schedulers: Optional[Sequence[Any]] = None
             ) -> Tuple[torch.nn.Module, Optional[torch.optim.Optimizer], List[Any]]:
    """``(model, optimizer, schedulers)`` of the step function ``fn``: the ones given, else the
    ones it refers to. Several modules: the one that holds the others; modules that none
    holds are trained together (an ``nn.ModuleDict`` of them, named by the variable that
    holds each where known). Several optimizers are refused.

    Raises:
        CaptureError (naming the argument ``model`` or ``optimizer``): nothing found, several
            optimizers, an optimizer over tensors of none of the modules.
    """
    if not callable(fn):
        raise CaptureError(f"step function: a callable is needed, got {type(fn).__name__}")
    refs = _referenced(fn) if (model is None or optimizer is None or schedulers is None) else []
    if model is None:
        mods = [v for v in refs if isinstance(v, torch.nn.Module)]
        model = _outermost(mods, fn)
    if optimizer is None:
        opts = [v for v in refs if isinstance(v, torch.optim.Optimizer)]
        if len(opts) > 1:
            raise CaptureError(f"step function {_name(fn)}: it refers to {len(opts)} "
                               f"optimizers; roam captures a step with one (pass optimizer=)")
        optimizer = opts[0] if opts else None
    if schedulers is None:
        types = _scheduler_types()
        schedulers = [v for v in refs if isinstance(v, types)]
        if optimizer is not None:
            schedulers = [s for s in schedulers if getattr(s, "optimizer", None) is optimizer]
    schedulers = list(schedulers)
    if optimizer is not None:
        own = {id(p) for p in model.parameters()}
        foreign = [p for g in optimizer.param_groups for p in g["params"] if id(p) not in own]
        if foreign:
            raise CaptureError(f"step function {_name(fn)}: the optimizer holds "
                               f"{len(foreign)} tensors that are not parameters of the model "
                               f"(pass model= the module that owns them)")
    return model, optimizer, schedulers


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _outermost(mods: List[torch.nn.Module], fn) -> torch.nn.Module:
    if not mods:
        raise CaptureError(f"step function {_name(fn)}: no nn.Module found in what it refers "
                           f"to (pass model=)")
    inner = set()
    for m in mods:
        for sub in m.modules():
            if sub is not m:
                inner.add(id(sub))
    tops = [m for m in mods if id(m) not in inner]
    tops = [m for m in tops if any(True for _ in m.parameters())] or tops
    if len(tops) == 1:
        return tops[0]
    return torch.nn.ModuleDict({f"m{i}": m for i, m in enumerate(tops)})
