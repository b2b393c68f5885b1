"""What one planned training step measured (:class:`StepReport`, ``RoamStep.last_report``):
bytes counted by the planned CPU allocator (src/executor/arena_allocator.h), not a simulation.
"""

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional


def _mib_or_bytes(n: int) -> str:
    """``n`` bytes as ``"X.XX MiB"``, or as ``"N B"`` where that would print a non-zero size
    as 0.00 MiB."""
    n = int(n)
    return f"{n} B" if 0 < n < 0.005 * (1 << 20) else f"{n / (1 << 20):.2f} MiB"


@dataclass
class StepReport:
    """What one step measured. Bytes are counted by the planned CPU allocator; fallback and
    eager bytes are rounded up to 64 per allocation (c10's CPU alignment).

    ``mode``: ``planned`` (the plan held for the whole step), ``diverged`` (it switched to
    ordinary allocation at ``mismatch``), ``unplanned`` (no usable plan: program order,
    ordinary allocation), ``program`` (an earlier planned step measured more than the same
    graph run eagerly: program order, ordinary allocation; ``reason`` says which) or ``eager`` (inputs or optimizer state unlike the captured step:
    an ordinary ``loss.backward(); optimizer.step()``; ``reason`` says why).
    """
    step: int
    loss: float
    mode: str
    planned_arena_bytes: int = 0       # the plan's arena (stats.arena_bytes)
    arena_bytes: int = 0               # arena reserved for the step (= planned when planned)
    arena_used_bytes: int = 0          # measured: max offset + size served in the arena
    fallback_peak_bytes: int = 0       # measured peak of the fallback heap (workspaces, ...)
    total_peak_bytes: int = 0          # arena + fallback at their worst moment
    eager_peak_bytes: Optional[int] = None  # same step, program order, default allocator
    planned_saving_bytes: int = 0      # Tp(program order) - planned arena
    arena_allocs: int = 0
    fallback_allocs: int = 0
    arena_workspaces: int = 0          # unplanned requests (workspaces) served from free arena
                                       # bytes (optimize(workspaces="arena"))
    block_workspaces: int = 0          # requests served from their op's planned workspace block
    loan_workspaces: int = 0           # scratch requests served in a slot of one of their op's
                                       # outputs still to come (freed before it, calibrated)
    mismatch: Optional[str] = None
    reason: Optional[str] = None
    debug_checks: int = 0
    debug_violations: int = 0
    escaped_arena_blocks: int = 0      # arena blocks still referenced after the step
    seconds: float = 0.0
    resident_bytes: int = 0            # parameters, buffers, optimizer state, batch (the plan's):
                                       # what existed before the step (a fresh optimizer's first
                                       # step: less the state it creates, which the step counts)
    state_created_bytes: int = 0       # first step of a fresh optimizer: the state it created
                                       # (zeros, before the step; counted in total_peak_bytes)
    eager_first_step_bytes: Optional[int] = None  # that step's eager peak, estimated from the
                                       # graph (program order, a group's whole state created
                                       # at its first use; counted like Tp)
    at_peak: Optional[str] = None      # what is live at the plan's peak (roam plan's line)
    recomputations: int = 0            # ops run again in this step (plan version 2)
    budget_bytes: Optional[int] = None  # the budget the plan was made for, resident included
                                       # (optimize(budget=...) or the plan's; None: no budget)

    @property
    def reduction(self) -> Optional[float]:
        """1 - total_peak / eager_peak (None without an eager figure)."""
        if not self.eager_peak_bytes:
            return None
        return 1.0 - self.total_peak_bytes / self.eager_peak_bytes

    @property
    def saved_bytes(self) -> Optional[int]:
        """What the step saved: eager peak - measured total peak (negative: it cost more than
        the same graph run eagerly; None without an eager figure)."""
        if self.eager_peak_bytes is None:
            return None
        return self.eager_peak_bytes - self.total_peak_bytes

    @property
    def realised_fraction(self) -> Optional[float]:
        """saved / planned saving (1.0: everything the plan promised was saved; None when the
        plan promised nothing or there is no eager figure)."""
        if self.saved_bytes is None or self.planned_saving_bytes <= 0:
            return None
        return self.saved_bytes / self.planned_saving_bytes

    def describe(self) -> str:
        """One sentence in plain words: what the step used and what it saved."""
        mib = 1 << 20
        if self.mode == "eager":
            return (f"step {self.step} (eager): an ordinary eager step ({self.reason}), "
                    f"{self.total_peak_bytes / mib:.2f} MiB at its peak, what eager PyTorch "
                    f"holds for it; nothing planned, nothing saved")
        used = (f"step {self.step} ({self.mode}): {self.total_peak_bytes / mib:.2f} MiB above "
                f"the resident tensors (arena {self.arena_bytes / mib:.2f} + fallback heap peak "
                f"{_mib_or_bytes(self.fallback_peak_bytes)})")
        if self.state_created_bytes:
            used = (f"step {self.step} ({self.mode}, the first step of a fresh optimizer): "
                    f"{self.total_peak_bytes / mib:.2f} MiB above what existed before it (the "
                    f"optimizer state it created, {self.state_created_bytes / mib:.2f}, + arena "
                    f"{self.arena_bytes / mib:.2f} + fallback heap peak "
                    f"{_mib_or_bytes(self.fallback_peak_bytes)})")
            if self.eager_first_step_bytes is not None:
                used += (f"; an eager first step holds about "
                         f"{self.eager_first_step_bytes / mib:.2f} MiB (estimated from the graph: "
                         f"its live bytes at the program order's peak with the whole new state)")
            return used
        if self.saved_bytes is None:
            return used
        if self.saved_bytes >= 0:
            what = (f"saved {self.saved_bytes / mib:.2f} MiB against the same step run eagerly "
                    f"({self.eager_peak_bytes / mib:.2f} MiB)")
        else:
            what = (f"used {-self.saved_bytes / mib:.2f} MiB MORE than the same step run eagerly "
                    f"({self.eager_peak_bytes / mib:.2f} MiB)")
        if self.mode == "planned" and self.planned_saving_bytes > 0:
            what += (f"; the plan promised {self.planned_saving_bytes / mib:.2f} MiB "
                     f"({100 * self.realised_fraction:.1f}% realised)")
        return f"{used}; {what}"

    def over_budget(self, budget_bytes: Optional[int] = None) -> Optional[str]:
        """Plain words when the step held more than ``budget_bytes`` (bytes, resident
        included; default: this report's :attr:`budget_bytes`): resident + measured total
        peak, the bytes over, and the fallback heap peak, the bytes the plan did not cover
        (allocations outside it: generator states saved for recomputed random ops beyond free
        arena bytes, kernel scratch larger than the capture measured). None when within it or
        without a budget."""
        budget = self.budget_bytes if budget_bytes is None else budget_bytes
        held = self.resident_bytes + self.total_peak_bytes
        if budget is None or held <= budget:
            return None
        mib = 1 << 20
        return (f"the step held {held} B = {held / mib:.2f} MiB (resident {self.resident_bytes} "
                f"B + measured {self.total_peak_bytes} B: arena {self.arena_bytes} B + fallback "
                f"heap peak {self.fallback_peak_bytes} B), {held - budget} B above the budget of "
                f"{budget / mib:.2f} MiB ({budget} B); the fallback heap peak "
                f"({self.fallback_peak_bytes} B) is what the plan did not cover")

    def why_not_met(self, budget_bytes: Optional[int] = None,
                    target_fraction: float = 0.95) -> Optional[str]:
        """Plain words on why the step did not save what the plan promised (less than
        ``target_fraction`` of it realised, or more than the same graph run eagerly) or held
        more than ``budget_bytes`` (bytes, resident included; default: this report's
        :attr:`budget_bytes`, see :meth:`over_budget`); None when everything was met."""
        mib = 1 << 20
        why = []
        over = self.over_budget(budget_bytes)
        if over:
            why.append(over)
        if self.mode == "eager":
            why.append(f"nothing was planned for this step: {self.reason}")
        elif self.mode == "unplanned":
            why.append(f"no usable plan, so the step ran in program order with ordinary "
                       f"allocation: {self.reason}")
        elif self.mode == "program":
            why.append(f"the plan is off: {self.reason}, so this step ran in program order with "
                       f"ordinary allocation")
        elif self.mode == "diverged":
            why.append(f"the run left the plan ({self.mismatch}); the rest of the step used "
                       f"ordinary allocation")
        if self.mode in ("planned", "diverged") and self.eager_peak_bytes is not None:
            short = self.saved_bytes < 0 or (
                self.planned_saving_bytes > 0
                and self.realised_fraction is not None
                and self.realised_fraction < target_fraction)
            if self.planned_saving_bytes <= 0 and self.mode == "planned":
                why.append("the plan promised no saving: its arena is not below Tp of the "
                           "program order (that order is already as good as roam finds)")
            elif short:
                parts = []
                if self.fallback_peak_bytes > 0:
                    parts.append(f"{_mib_or_bytes(self.fallback_peak_bytes)} went to the fallback "
                                 f"heap (allocations that fit neither a planned block nor their "
                                 f"op's workspace block: kernel scratch larger on this run than "
                                 f"the capture measured)")
                tp_program = self.planned_saving_bytes + self.planned_arena_bytes
                if self.eager_peak_bytes < tp_program:
                    parts.append(f"the same graph run eagerly held "
                                 f"{(tp_program - self.eager_peak_bytes) / mib:.2f} MiB less than "
                                 f"Tp of the program order, on which the promise was counted")
                if self.arena_bytes > self.planned_arena_bytes:
                    parts.append("the arena was larger than planned")
                if not parts:
                    parts.append("the arena was reserved for the whole step while the eager run "
                                 "needed its peak only briefly")
                what = ("it held more than the same graph run eagerly" if self.saved_bytes < 0
                        else f"only {100 * self.realised_fraction:.1f}% of the planned saving "
                             f"was realised")
                why.append(f"{what}: " + "; ".join(parts))
        return "; ".join(why) if why else None

    def as_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["reduction"] = self.reduction
        d["saved_bytes"] = self.saved_bytes
        d["realised_fraction"] = self.realised_fraction
        d["why_not_met"] = self.why_not_met()
        return d
