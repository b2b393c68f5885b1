"""Measured eager memory peak of a traced training step (CPU), for checking a captured graph.

DESIGN.md asks that the measured eager peak of the step match ``resident + Tp(program
order)``. The traced GraphModule frees every value after its last use, as eager PyTorch does,
so the peak of the bytes it allocates above what already exists (the resident tensors) is
``Tp(program order)`` of the graph (GRAPH_FORMAT.md liveness) plus the workspaces that
kernels allocate internally, which the graph does not contain. A graph that misses tensors
(dropped outputs, false aliases) measures well above its Tp; one that invents storage (a
missed alias) measures below it.
"""

from typing import Tuple

import torch

from .kernels import call_graph
from .state import StepInputs
from .trace import TracedStep


def measure_eager_peak(traced: TracedStep, inputs: StepInputs, seed: int = 0) -> Tuple[int, int]:
    """Run the traced step once on ``inputs`` (updated in place) under the PyTorch profiler
    with ``profile_memory=True`` and replay the allocator events in time order.

    Returns:
        ``(peak, end)`` in bytes: the highest total of bytes allocated during the run minus
        bytes freed (resident tensors, allocated before, are not counted), and that total at
        the end (the graph outputs still held).
    """
    torch.manual_seed(seed)
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, profile_memory=True) as prof:
        out = call_graph(traced.gm, *inputs.as_args())
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    cur = peak = 0
    for e in events:
        cur += e.nbytes()
        peak = max(peak, cur)
    del out
    return peak, cur
