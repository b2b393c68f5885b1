"""Helpers of one planned step (:class:`roam.executor.api.RoamStep`): whether a fresh
optimizer's first step may start from zeros of its state, where a step first writes a
resident tensor, the interrupt guard that keeps a step whole once its writes have begun, and
the placeholder order of the captured step."""

from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.utils._pytree as pytree


NO_STATE = "the optimizer has no state yet (its first step creates it)"


def zero_state_template(optimizer: torch.optim.Optimizer):
    """``(template, None)`` when starting a fresh ``optimizer``'s first step from zeros of the
    state that step creates gives the step itself bit for bit, else ``(None, why)``.
    ``template[group]`` maps each state key to ``("param", None)`` (a tensor shaped like its
    parameter) or ``("scalar", t)`` (zeros like ``t``, e.g. Adam's ``step``). Checked per
    parameter group on a dummy parameter of 5 elements with two random gradients, the
    optimizer's own ``step()`` run from no state and from the zeros (hyper-parameters
    as they are; the optimizer is restored afterwards). Adam, AdamW, RMSprop: exact; SGD with
    momentum: exact without dampening (its first step copies the gradient)."""
    from collections import defaultdict
    from .scalars import _raw_step
    out = []
    saved_groups, saved_state = optimizer.param_groups, optimizer.state
    try:
        for gi, group in enumerate(saved_groups):
            kinds = None
            for trial in range(2):
                gen = torch.Generator().manual_seed(1234 + trial)
                p0 = torch.randn(5, generator=gen)
                grad = torch.randn(5, generator=gen)
                runs = []
                for start in ("none", "zeros"):
                    d = torch.nn.Parameter(p0.clone())
                    d.grad = grad.clone()
                    optimizer.param_groups = [dict(group, params=[d])]
                    optimizer.state = defaultdict(dict)
                    if start == "zeros":
                        optimizer.state[d] = {
                            k: torch.zeros_like(v) for k, v in runs[0][1].items()}
                    with torch.no_grad():
                        _raw_step(optimizer)
                    runs.append((d.detach().clone(), dict(optimizer.state[d])))
                (pa, sa), (pb, sb) = runs
                if any(not isinstance(v, torch.Tensor) for v in sa.values()):
                    return None, (f"the optimizer's state holds values other than tensors "
                                  f"(group {gi})")
                if not torch.equal(pa, pb) or set(sa) != set(sb) or \
                        any(not torch.equal(sa[k], sb[k]) for k in sa):
                    return None, (f"the optimizer's first step does not start from zeros of its "
                                  f"state (group {gi})")
                kinds = {k: ("param", None) if v.shape == p0.shape else
                         ("scalar", torch.zeros_like(v)) for k, v in sa.items()}
            out.append(kinds)
    finally:
        optimizer.param_groups, optimizer.state = saved_groups, saved_state
    return out, None


def _sig(t: torch.Tensor):
    return (tuple(t.shape), t.dtype, tuple(t.stride()), t.device.type)


def _first_tensor(out) -> torch.Tensor:
    """The loss among the step's outputs (the first tensor)."""
    return next(t for t in pytree.tree_flatten(out)[0] if isinstance(t, torch.Tensor))


def _loss_value(out) -> Optional[float]:
    """The first one-element tensor among the step's outputs, as a float (None if none)."""
    for t in pytree.tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and t.numel() == 1:
            return float(t)
    return None


def _first_resident_write(graph: Dict[str, Any], op_writes: Dict[str, List[str]],
                          order: Optional[Sequence[str]]) -> Optional[int]:
    """The first position in ``order`` (default program order) of an op that writes a
    resident tensor (parameter, buffer, optimizer state, input), None when none does."""
    tensors = {t["id"]: t for t in graph["tensors"]}

    def resident(tid):
        while "alias_of" in tensors[tid]:
            tid = tensors[tid]["alias_of"]
        return "role" in tensors[tid]
    writers = {oid for oid, tids in op_writes.items() if any(resident(t) for t in tids)}
    order = order if order is not None else [op["id"] for op in graph["ops"]]
    for k, oid in enumerate(order):
        if oid in writers:
            return k
    return None


class _InterruptGuard:
    """Ctrl-C (SIGINT) during a step: raised at once before the step's first write to a
    resident tensor; after it, held until the step is done and raised then, so the model and
    the optimizer are never left half updated. Only in the main thread (elsewhere Python
    delivers no signal)."""

    def __init__(self):
        self.armed = False
        self.pending = False
        self._old = None

    def _handler(self, signum, frame):
        if self.armed:
            self.pending = True
            return
        raise KeyboardInterrupt

    def __enter__(self):
        import signal
        import threading
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        import signal
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
        return False

    def reraise(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt("roam: interrupted during a step; the step was finished "
                                    "first (its writes to the model and optimizer had begun)")


def _flatten_state(st) -> List[torch.Tensor]:
    """Placeholder order of the captured step: params, buffers, optimizer state, inputs."""
    ostate = [st.state_values[k][key] for k in range(len(st.state_index))
              for key in st.state_keys[k]]
    return list(st.params) + list(st.buffers) + ostate + list(st.inputs)
