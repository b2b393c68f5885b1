"""Exact rematerialization under a memory budget: Checkmate's integer program, solved by HiGHS.

Method: Checkmate (P. Jain, A. Jain, A. Nrusimha, A. Gholami, P. Abbeel, K. Keutzer, I. Stoica,
J. Gonzalez, "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization",
MLSys 2020), its MILP over a fixed topological order, on the memory model of
docs/GRAPH_FORMAT.md (graph v1, plan v2 liveness per instance), solved with HiGHS (``highspy``).
An offline reference for checking roam's ``plan --budget`` on small graphs; roam does not use
it.

Units: sizes, budgets and peaks in **bytes**; ``cost``, objectives, bounds and time limits in
**seconds**.

The schedules and the memory model: :mod:`roam.reference.remat_ilp_model`; the integer
program's rows: :mod:`roam.reference.remat_ilp_milp`.

Solver: HiGHS (``highspy``, python/requirements.txt), 1 thread by default; its proven dual bound
is reported. Without presolve HiGHS is started from the cheapest of a few simple schedules that
meet the budget (:func:`_candidate_starts`); with presolve it is not (HiGHS 1.16 then returns the
start's values with a better incumbent's objective; every answer's objective is checked against
its values). Size: about (recomputable ops x stages) binaries; HiGHS proves optima within
seconds up to ~50 ops, and not within a minute on most graphs of 100-200 ops.

Public API: :func:`load_graph`, :func:`recount`, :func:`solve_remat`, :func:`least_budget`,
:class:`RematModel`.
"""

import math
import time
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["LeastBudgetResult", "Recount", "RematModel", "RematResult", "least_budget",
           "load_graph", "recount", "solve_remat"]

STATUSES = ("optimal", "feasible-not-proven", "infeasible", "time-limited")


from .recount import Recount, load_graph, recount  # noqa: F401  (public API, __all__)
from .remat_ilp_milp import _Build
from .remat_ilp_model import RematModel


# ------------------------------------------------------------------------------ results ---

@dataclass
class RematResult:
    """Result of :func:`solve_remat`.

    Attributes:
        status: ``optimal`` (proven within ``rel_gap``), ``feasible-not-proven`` (time limit,
            a schedule found), ``infeasible`` (no schedule of the model meets the budget),
            ``time-limited`` (time limit, no schedule found).
        objective_seconds: recompute seconds of ``schedule`` (sum of ``cost`` over its
            recomputations, recounted); None without a schedule.
        dual_bound_seconds: HiGHS's proven lower bound on the optimum (seconds); None when
            infeasible.
        schedule: op ids in execution order with repeats (a plan-v2 ``order``), or None.
        tp_bytes: Tp of ``schedule`` recounted by :func:`recount` (bytes, arena part).
        model_tp_bytes: the ILP's own accounting of the same schedule (bytes); equals
            ``tp_bytes`` (checked: a mismatch raises RuntimeError).
        budget_bytes: the budget (bytes, arena part, resident excluded).
        recomputations: appearances after the first in ``schedule``.
        solve_seconds: HiGHS wall seconds; build_seconds: Python seconds to build the model.
        binaries, columns, rows: size of the MILP.
    """
    status: str
    objective_seconds: Optional[float]
    dual_bound_seconds: Optional[float]
    schedule: Optional[List[str]]
    tp_bytes: Optional[int]
    model_tp_bytes: Optional[int]
    budget_bytes: int
    recomputations: Optional[int]
    solve_seconds: float
    build_seconds: float
    binaries: int
    columns: int
    rows: int


@dataclass
class LeastBudgetResult:
    """Result of :func:`least_budget`.

    Attributes:
        status: as :class:`RematResult` (``infeasible`` cannot occur on a valid graph).
        budget_bytes: the least Tp found (bytes, arena part; proven least when ``optimal``).
        lower_bound_bytes: HiGHS's proven lower bound on it (bytes, a multiple of alignment).
        schedule, tp_bytes, model_tp_bytes, recompute_seconds, solve_seconds, build_seconds:
            as in :class:`RematResult` for the schedule meeting it (its recompute seconds are
            not minimised).
    """
    status: str
    budget_bytes: Optional[int]
    lower_bound_bytes: Optional[int]
    schedule: Optional[List[str]]
    tp_bytes: Optional[int]
    model_tp_bytes: Optional[int]
    recompute_seconds: Optional[float]
    solve_seconds: float
    build_seconds: float


def _check_common(time_limit, threads, rel_gap, presolve="auto"):
    if presolve not in ("auto", "on", "off"):
        raise ValueError(f"presolve: 'auto', 'on' or 'off', got {presolve!r}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or \
            not time_limit > 0 or not math.isfinite(time_limit):
        raise ValueError(f"time_limit: seconds > 0, got {time_limit!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: an integer >= 1, got {threads!r}")
    if isinstance(rel_gap, bool) or not isinstance(rel_gap, (int, float)) or \
            not 0 <= rel_gap < 1:
        raise ValueError(f"rel_gap: in [0, 1), got {rel_gap!r}")


def _cost_scale(m: RematModel) -> float:
    """Objective units: seconds x scale, so the largest recomputable cost is 1000 units
    (keeps HiGHS's absolute gap 1e-9 far below any cost)."""
    c = max([m.cost[k] for k in range(m.n) if m.recomputable[k]], default=0.0)
    return 1000.0 / c if c > 0 else 1.0


def _candidate_starts(m: RematModel, b: _Build):
    """Simple schedules of the model, as HiGHS starting points (they change no result, only
    how soon HiGHS has an incumbent): for a drop set D (every recomputable op, or the forward
    ones) and a window w, stage t recomputes, in program order, each op of D that op t or
    another recomputation of stage t reads, when it ran more than w stages before. Returns
    [(recompute seconds, Tp bytes, set of (stage, op))] for those in the model, no
    recomputation first."""
    phase = [o.get("phase") for o in m.graph["ops"]]
    made_by = {}
    for k in range(m.n):
        for it in m.made[k]:
            made_by[it] = k
    out = [(0.0, m.no_recompute_tp_bytes(), set())]
    seen = {frozenset()}
    drops = [set(k for k in range(m.n) if m.recomputable[k]),
             set(k for k in range(m.n) if m.recomputable[k] and phase[k] == "forward")]
    for D in drops:
        for w in (1, 2, 4, 8, 16, 32, 64):
            ones = set()
            for t in range(m.n):
                want = set()
                for k in range(t, -1, -1):
                    if k != t and k not in want:
                        continue
                    for it in m.needs[k]:
                        i = made_by.get(it)
                        if i is not None and i in D and t - i > w and (t, i) in b.R:
                            want.add(i)
                ones |= {(t, i) for i in want}
            key = frozenset(ones)
            if key in seen:
                continue
            seen.add(key)
            order = []
            for t in range(m.n):
                order += [m.op_ids[k] for k in m.stage_ops[t] if k == t or (t, k) in ones]
            rc = recount(m.graph, order, alignment=m.alignment)
            if not rc.overlapping:
                out.append((rc.recompute_seconds, rc.tp_bytes, ones))
    return out


def _check_accounting(m: RematModel, b: _Build, x, sched):
    order = [m.op_ids[k] for k in sched]
    rc = recount(m.graph, order, alignment=m.alignment)
    model_tp = b.model_peak_units(x) * m.alignment
    if rc.tp_bytes != model_tp:
        raise RuntimeError(f"ILP accounting {model_tp} B != recount {rc.tp_bytes} B for "
                           f"schedule {order} (a bug in remat_ilp)")
    if rc.overlapping:
        raise RuntimeError(f"ILP schedule has overlapping instances of {rc.overlapping} "
                           "(a bug in remat_ilp)")
    return order, rc, model_tp


def solve_remat(graph, budget: int, *, time_limit: float = 60.0, alignment: int = 64,
                threads: int = 1, rel_gap: float = 1e-7, verbose: bool = False,
                presolve: str = "auto", model: Optional[RematModel] = None) -> RematResult:
    """Least recompute seconds of a schedule whose Tp (arena part, bytes) is <= ``budget``.

    Checkmate's MILP (Jain et al., MLSys 2020) over the stages of program order, on
    GRAPH_FORMAT.md's memory model (see the module docstring for the model and its stated
    restrictions), solved by HiGHS.

    Args:
        graph: a roam-graph v1 dict (as loaded from ``.json`` / ``.json.gz``) or a path.
        budget: bytes, the bound on Tp (resident bytes excluded: give roam resident + budget).
        time_limit: HiGHS wall-clock seconds.
        alignment: bytes every size is rounded up to (a power of two).
        threads: HiGHS threads.
        rel_gap: HiGHS's relative MIP gap at which ``optimal`` is declared.
        verbose: HiGHS log on stdout.
        presolve: HiGHS presolve, "on", "off" or "auto" (off above 100,000 rows: HiGHS's
            presolve ignores the time limit). Without presolve HiGHS starts from the cheapest
            of a few simple schedules that meet the budget (:func:`_candidate_starts`).
        model: a :class:`RematModel` of ``graph`` already built (saves the Python build).

    Returns:
        :class:`RematResult`; its schedule's Tp is recounted by :func:`recount` and must equal
        the ILP's accounting.

    Raises:
        ValueError: bad ``graph`` (malformed, ops not in a topological order), ``budget``
            (not an integer >= 0), ``time_limit``, ``alignment``, ``threads``, ``rel_gap`` or
            ``presolve``.
        RuntimeError: the ILP's accounting disagrees with the recount (a bug).
        ImportError: highspy is not installed.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget: bytes, an integer >= 0, got {budget!r}")
    _check_common(time_limit, threads, rel_gap, presolve)
    t0 = time.monotonic()
    m = model if model is not None else RematModel(graph, alignment)
    scale = _cost_scale(m)
    b = _Build(m, budget // m.alignment, scale)
    fits = [c for c in _candidate_starts(m, b) if c[1] <= budget]
    start = b.complete(min(fits, key=lambda c: c[0])[2]) if fits else None
    build = time.monotonic() - t0
    status, x, dual, secs, ncol, nrow, nint = b.solve(time_limit, threads, verbose, rel_gap,
                                                         start, presolve)
    res = RematResult(status=status, objective_seconds=None, dual_bound_seconds=None,
                      schedule=None, tp_bytes=None, model_tp_bytes=None, budget_bytes=budget,
                      recomputations=None, solve_seconds=secs, build_seconds=build,
                      binaries=nint, columns=ncol, rows=nrow)
    if status in ("optimal", "feasible-not-proven") and x is not None:
        sched = b.schedule(x)
        order, rc, model_tp = _check_accounting(m, b, x, sched)
        if rc.tp_bytes > budget:
            raise RuntimeError(f"ILP schedule Tp {rc.tp_bytes} B above budget {budget} B")
        res.schedule = order
        res.tp_bytes = rc.tp_bytes
        res.model_tp_bytes = model_tp
        res.objective_seconds = rc.recompute_seconds
        res.recomputations = rc.recomputations
        res.dual_bound_seconds = max(0.0, dual / scale) if math.isfinite(dual) else 0.0
        if status == "optimal":
            res.dual_bound_seconds = min(res.dual_bound_seconds, rc.recompute_seconds)
    elif status == "time-limited":
        res.dual_bound_seconds = max(0.0, dual / scale) if math.isfinite(dual) else 0.0
    return res


def least_budget(graph, *, time_limit: float = 60.0, alignment: int = 64, threads: int = 1,
                 verbose: bool = False, presolve: str = "auto",
                 model: Optional[RematModel] = None) -> LeastBudgetResult:
    """The least budget (bytes, arena part: min Tp) that any schedule of the model meets, by
    the same MILP with the peak minimised instead of the recompute seconds (Checkmate, MLSys
    2020, formulation of :func:`solve_remat`).

    Args: as :func:`solve_remat` (no budget).

    Returns:
        :class:`LeastBudgetResult` (bytes, seconds).

    Raises:
        ValueError: bad ``graph``, ``time_limit``, ``alignment``, ``threads`` or
            ``presolve``.
        RuntimeError: the ILP's accounting disagrees with the recount (a bug).
    """
    _check_common(time_limit, threads, 0.0, presolve)
    t0 = time.monotonic()
    m = model if model is not None else RematModel(graph, alignment)
    b = _Build(m, None, 0.0)  # recompute seconds not minimised here
    start = b.complete(min(_candidate_starts(m, b), key=lambda c: c[1])[2])
    build = time.monotonic() - t0
    status, x, dual, secs, _, _, _ = b.solve(time_limit, threads, verbose, 0.0, start,
                                                presolve)
    res = LeastBudgetResult(status=status, budget_bytes=None, lower_bound_bytes=None,
                            schedule=None, tp_bytes=None, model_tp_bytes=None,
                            recompute_seconds=None, solve_seconds=secs, build_seconds=build)
    lb_units = math.ceil(dual - 1e-6) if math.isfinite(dual) else 0
    res.lower_bound_bytes = max(lb_units * m.alignment, 0)
    if x is not None and status in ("optimal", "feasible-not-proven"):
        sched = b.schedule(x)
        order, rc, model_tp = _check_accounting(m, b, x, sched)
        res.schedule = order
        res.tp_bytes = rc.tp_bytes
        res.model_tp_bytes = model_tp
        res.budget_bytes = rc.tp_bytes
        res.recompute_seconds = rc.recompute_seconds
        if status == "optimal":
            res.lower_bound_bytes = rc.tp_bytes
    return res
