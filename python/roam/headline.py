"""The headline of ``roam plan`` and ``roam compare`` in Python, for reports that want the same
line (e.g. the executor's): one format, the one of include/roam/headline.h::

    peak X MiB; program order on a CPU allocator Y MiB (-Z%); on PyTorch's CUDA caching
    allocator (simulated) W MiB (-V%); lower bound L MiB

(one line). Every figure includes the resident bytes (parameters, buffers, optimizer state,
batch). X: the plan's peak (resident + arena); Y: resident + Tp of the program order, what an
exact-fit CPU allocator (eager PyTorch on a CPU) holds; W: resident + the segments PyTorch's
CUDA caching allocator would hold for the program order (roam's simulation); L: resident + the
lower bound on Tp. Z and V: 100 * (X / reference - 1), one decimal. A figure given as None is
left out with its clause (a CPU run has no W), so a measured report can reuse the format::

    from roam.headline import headline
    print(headline(peak_bytes, cpu_bytes, cuda_bytes=None, lower_bound_bytes=None))
"""

from typing import Optional

__all__ = ["headline", "percent_change", "KEY"]

MiB = float(1 << 20)

KEY = ("(peak = resident + this plan's arena; CPU allocator = resident + Tp of the graph's own "
       "op order, what eager PyTorch holds on a CPU; CUDA caching allocator = resident + the "
       "segments PyTorch's allocator would hold for that order on a GPU; lower bound = no "
       "valid order needs less)")


def percent_change(value: int, reference: int) -> str:
    """``"-12.3%"`` / ``"+4.0%"``: 100 * (value / reference - 1), one decimal; ``"n/a"`` for a
    zero reference."""
    if not reference:
        return "n/a"
    s = f"{100.0 * (value / reference - 1.0):+.1f}%"
    return "+0.0%" if s == "-0.0%" else s


def headline(peak_bytes: int, cpu_bytes: Optional[int], cuda_bytes: Optional[int] = None,
             lower_bound_bytes: Optional[int] = None, budget_bytes: Optional[int] = None,
             recompute_overhead: Optional[float] = None, recomputations: int = 0) -> str:
    """The headline (see the module docstring); bytes in, MiB with two decimals out.
    ``budget_bytes``: adds "(budget B MiB, recompute overhead R%)" after the peak, with
    ``recompute_overhead`` = recompute seconds / compute seconds when ``recomputations`` > 0."""
    s = f"peak {peak_bytes / MiB:.2f} MiB"
    if budget_bytes is not None:
        s += f" (budget {budget_bytes / MiB:.2f} MiB, "
        if recomputations > 0 and recompute_overhead is not None:
            s += f"recompute overhead {100.0 * recompute_overhead:.1f}%)"
        elif recomputations > 0:
            s += f"{recomputations} recomputations, overhead unknown: no op costs)"
        else:
            s += "no recomputation)"
    if cpu_bytes is not None:
        s += (f"; program order on a CPU allocator {cpu_bytes / MiB:.2f} MiB "
              f"({percent_change(peak_bytes, cpu_bytes)})")
    if cuda_bytes is not None:
        s += (f"; on PyTorch's CUDA caching allocator (simulated) {cuda_bytes / MiB:.2f} MiB "
              f"({percent_change(peak_bytes, cuda_bytes)})")
    if lower_bound_bytes is not None:
        s += f"; lower bound {lower_bound_bytes / MiB:.2f} MiB"
    return s
