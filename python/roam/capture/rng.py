"""PyTorch's global random state, left as it was found (:func:`preserved_rng_state`).

The capture seeds the global generators (``torch.manual_seed``) before tracing and before each
run of the step, and a model with dropout draws from them; :func:`roam.capture` and
:func:`roam.optimize` must not change what the caller's next random draw is.
"""

import contextlib

import torch


def _lazy_cuda_seeds():
    """The CUDA seeding calls queued while CUDA is not initialised (``torch.manual_seed``
    queues one for every device, run when CUDA initialises): ``(tracker, its fields)``, or
    ``(None, None)`` where this torch keeps no such tracker."""
    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    fields = ("manual_seed_all_cb", "manual_seed_cb", "call_order")
    if tracker is None or not all(hasattr(tracker, f) for f in fields):
        return None, None
    return tracker, {f: (list(getattr(tracker, f)) if f == "call_order" else getattr(tracker, f))
                     for f in fields}


@contextlib.contextmanager
def preserved_rng_state():
    """Restore PyTorch's global random state on exit, normal or by an exception: the CPU
    default generator (``torch.get_rng_state``); every CUDA device's generator
    (``torch.cuda.get_rng_state_all``) when CUDA was initialised on entry, else the CUDA
    seeding that ``torch.manual_seed`` queues for CUDA's initialisation (so a later CUDA
    start draws what it would have drawn; CUDA initialised inside the block keeps the state
    it has then). CUDA is never initialised here. Also usable as a decorator
    (``@preserved_rng_state()``). Raises nothing of its own."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    tracker, queued = (None, None) if cuda is not None else _lazy_cuda_seeds()
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        elif tracker is not None and not torch.cuda.is_initialized():
            for f, v in queued.items():
                setattr(tracker, f, v)
