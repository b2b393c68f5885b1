"""The integer program of :mod:`roam.reference.remat_ilp` built for HiGHS: :class:`_Build` writes
the rows below over a :class:`~roam.reference.remat_ilp_model.RematModel`.

The integer program (Checkmate's, at storage granularity, an exact linearisation)
---------------------------------------------------------------------------------
Binary R[t,i] (op i runs in stage t; only for recomputable i and stages where a recomputation can
be read: a later reader, or a graph output, exists). Continuous S[t,s] in [0, 1] (storage s's
current instance kept from stage t-1 into t; t = n is the end of the step, fixed 1 for graph
outputs), SB[t,a] (alias a's binding kept into stage t), FREE[t,s,k] (s freed after op k in stage
t), U[t,k] (bytes live after op k of stage t has run and freed). Rows:
  S[t+1,s] <= S[t,s] + R[t,p(s)];  S[t,s] <= S[t+1,s] + sum_{j touches s, j != p} R[t,j]
  (kept only towards a later use); R[t,p(s)] + S[t,s] <= 1 (one instance at a time);
  for every input x of op j (and the base of every alias j binds): R[t,j] <= R[t,prod(x)] +
  S[t,root(x)] (root x) or + SB[t,x] (alias x, with SB[t+1,x] <= SB[t,x] + R[t,prod(x)] and
  SB[t,x] <= S[t,root(x)]);
  FREE[t,s,k] <= R[t,k], <= 1 - S[t+1,s], <= 1 - R[t,j] for every later j of stage t touching s
  (Checkmate's FREE as a product, linearised from above: freeing less is only pessimistic;
  written with a chain Y[t,s,k] >= R[t,k], >= Y of the next toucher, the last >= S[t+1,s],
  FREE[t,s,k] <= 1 - Y of the next toucher: the same LP in rows linear in the touchers);
  U[t,k] = U[t,k-] + M_k R[t,k] - sum_s M_s FREE[t,s,k] (k- the previous possible op of the
  stage; the stage starts at sum_s M_s S[t,s]);  U[t,k-] + (M_k + W_k) R[t,k] <= budget
  (M_k: bytes of op k's root outputs, W_k its workspace, in units of the alignment);
  a recomputation is read in its stage or kept: R[t,i] <= sum of R[t,j] over its readers j in
  (i, t] + the keep variables of its outputs into t+1 (dropping an unread recomputation never
  costs memory or seconds, so this cut changes no optimum).
With R binary, S and SB are forced integral and equal to the schedule's liveness (by backward
induction from t = n), so the optimum over R is exact for the model above; FREE may only be set
below its product, which overstates memory. :func:`solve_remat` checks the ILP's accounting (the
same formulas with FREE = its product, from the solution) against :func:`recount`, an
independent implementation of the plan-v2 liveness rules, on every schedule it returns.
Objective: least total ``cost`` of the recomputations (ops without ``cost`` count 0).
:func:`least_budget` minimises the peak instead (an integer P >= every memory row).
"""

import math
import os
import sys
import time
from typing import Dict, List, Optional

from .remat_ilp_model import RematModel


class _Milp:
    """Column and row buffers for highspy."""

    def __init__(self):
        self.lo, self.hi, self.cost, self.integer = [], [], [], []
        self.rlo, self.rhi, self.rstart, self.rindex, self.rvalue = [], [], [], [], []
        self.infeasible = False

    def col(self, lo=0.0, hi=1.0, cost=0.0, integer=False) -> int:
        self.lo.append(lo)
        self.hi.append(hi)
        self.cost.append(cost)
        self.integer.append(integer)
        return len(self.lo) - 1

    def row(self, terms, lo, hi):
        """terms: list of (value, coef) where value is a column index (int) or a constant
        (float, given as ('c', x)); constants are moved to the bounds."""
        acc: Dict[int, float] = {}
        const = 0.0
        for v, c in terms:
            if isinstance(v, tuple):
                const += c * v[1]
            else:
                acc[v] = acc.get(v, 0.0) + c
        acc = {k: c for k, c in acc.items() if c != 0.0}
        lo2 = lo - const if lo is not None else None
        hi2 = hi - const if hi is not None else None
        if not acc:
            if (lo2 is not None and lo2 > 1e-9) or (hi2 is not None and hi2 < -1e-9):
                self.infeasible = True  # a row of constants that does not hold
            return
        self.rstart.append(len(self.rindex))
        for k, c in acc.items():
            self.rindex.append(k)
            self.rvalue.append(c)
        self.rlo.append(lo2)
        self.rhi.append(hi2)


def _new_highs(verbose: bool):
    """A highspy.Highs; without ``verbose`` the banner HiGHS prints on stdout when it is made
    is sent to /dev/null (file descriptor 1, where the C++ code writes)."""
    import highspy  # the optional dependency (python/requirements.txt: highspy)
    if verbose:
        return highspy.Highs()
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        return highspy.Highs()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _const(x):
    return ("c", float(x))


class _Build:
    """The MILP of a model at a budget (units of alignment) or, with budget None, min peak."""

    def __init__(self, m: RematModel, budget_units: Optional[int], cost_scale: float):
        self.m = m
        n = m.n
        L = self.L = _Milp()
        self.R: Dict[tuple, int] = {}
        for t in range(n):
            for k in m.stage_ops[t]:
                if k != t:
                    self.R[(t, k)] = L.col(0, 1, m.cost[k] * cost_scale, True)
        self.S: Dict[tuple, int] = {}
        for s, p in enumerate(m.prod):
            for t in range(p + 1, min(m.storage_horizon[s], n - 1) + 1):
                self.S[(t, s)] = L.col()
        self.SB: Dict[tuple, int] = {}
        for it, q in m.item_prod.items():
            if it[0] == "a":
                for t in range(q + 1, min(m.item_horizon[it], n - 1) + 1):
                    self.SB[(t, it)] = L.col()
        self.P = None
        if budget_units is None:
            self.P = L.col(0, float(sum(m.sizes) + max(m.work, default=0)) / m.alignment + 1,
                           1.0, True)
        self.budget_units = budget_units
        self.FREE: Dict[tuple, int] = {}
        self.Y: Dict[tuple, tuple] = {}  # (t, s, k) -> (column, the later touchers of s)
        self.U: Dict[tuple, int] = {}
        self._rows()

    def r(self, t, k):
        if k == t:
            return _const(1)
        c = self.R.get((t, k))
        return c if c is not None else _const(0)

    def s(self, t, s):
        if t == self.m.n:
            return _const(1 if s in self.m.graph_out_storages else 0)
        c = self.S.get((t, s))
        return c if c is not None else _const(0)

    def sb(self, t, it):
        if t == self.m.n:
            return _const(1 if it in self.m.graph_out_aliases else 0)
        c = self.SB.get((t, it))
        return c if c is not None else _const(0)

    def keep(self, t, it):
        return self.s(t, self.m.item_storage[it]) if it[0] == "s" else self.sb(t, it)

    @staticmethod
    def is0(v):
        return isinstance(v, tuple) and v[1] == 0.0

    @staticmethod
    def is1(v):
        return isinstance(v, tuple) and v[1] == 1.0

    def _rows(self):
        m, L, n = self.m, self.L, self.m.n
        A = m.alignment
        # Keep chains and one instance at a time.
        for s, p in enumerate(m.prod):
            others = [j for j in m.users[s] if j != p]
            for t in range(p, n):
                L.row([(self.s(t + 1, s), 1.0), (self.s(t, s), -1.0), (self.r(t, p), -1.0)],
                      None, 0.0)
                if t > p:
                    terms = [(self.s(t, s), 1.0), (self.s(t + 1, s), -1.0)]
                    terms += [(self.r(t, j), -1.0) for j in others if j <= t]
                    L.row(terms, None, 0.0)
                    if (t, p) in self.R:
                        L.row([(self.r(t, p), 1.0), (self.s(t, s), 1.0)], None, 1.0)
        for it, q in m.item_prod.items():
            if it[0] != "a":
                continue
            st = m.item_storage[it]
            for t in range(q, n):
                L.row([(self.sb(t + 1, it), 1.0), (self.sb(t, it), -1.0), (self.r(t, q), -1.0)],
                      None, 0.0)
                L.row([(self.sb(t + 1, it), 1.0), (self.s(t + 1, st), -1.0)], None, 0.0)
        # Availability of every item an op needs.
        for t in range(n):
            for j in m.stage_ops[t]:
                rj = self.r(t, j)
                for it in m.needs[j]:
                    q = m.item_prod[it]
                    L.row([(rj, 1.0), (self.r(t, q) if q < j else _const(0), -1.0),
                           (self.keep(t, it), -1.0)], None, 0.0)
        # A recomputation is read in its stage or kept (dropping an unread one is never worse).
        for (t, i), c in self.R.items():
            terms = [(c, 1.0)]
            for it in m.made[i]:
                terms += [(self.r(t, j), -1.0) for j in m.readers.get(it, []) if i < j <= t]
                terms.append((self.keep(t + 1, it), -1.0))
            L.row(terms, None, 0.0)
        # Frees and memory per stage.
        for t in range(n):
            P_t = m.stage_ops[t]
            possible = set(P_t)
            # FREE[t,s,k] <= 1 - Y[t,s,k'] for k' the next op of the stage touching s, where
            # Y[t,s,k'] >= R[t,k'], >= Y of the next one, the last one >= S[t+1,s]: the same LP
            # as FREE <= 1 - R[t,j] for every later j, with rows linear in the touchers.
            frees_at: Dict[int, list] = {}
            for s in range(len(m.sizes)):
                K = [k for k in m.users[s] if k in possible]
                if not K or t in K[:-1] or K[-1] == t:
                    continue  # the stage's own op touches s last: no free before it
                nxt = self.s(t + 1, s)
                if self.is1(nxt):
                    continue
                y_next = nxt
                for i in range(len(K) - 1, -1, -1):
                    k = K[i]
                    rk = self.r(t, k)
                    f = L.col()
                    self.FREE[(t, s, k)] = f
                    L.row([(f, 1.0), (rk, -1.0)], None, 0.0)
                    if not self.is0(y_next):
                        L.row([(f, 1.0), (y_next, 1.0)], None, 1.0)
                    frees_at.setdefault(k, []).append((f, s))
                    if i > 0:
                        y = L.col()
                        self.Y[(t, s, K[i - 1])] = (y, K[i:])
                        L.row([(y, 1.0), (rk, -1.0)], 0.0, None)
                        if not self.is0(y_next):
                            L.row([(y, 1.0), (y_next, -1.0)], 0.0, None)
                        y_next = y
            start = [(self.s(t, s), m.sizes[s] / A) for s in range(len(m.sizes))
                     if not self.is0(self.s(t, s))]
            before = start
            for k in P_t:
                rk = self.r(t, k)
                peak = before + [(rk, (m.out_bytes[k] + m.work[k]) / A)]
                if self.P is None:
                    L.row(peak, None, float(self.budget_units))
                else:
                    L.row(peak + [(self.P, -1.0)], None, 0.0)
                if k == P_t[-1]:
                    break  # nothing after the stage's own op reads its running total
                frees = frees_at.get(k, [])
                u = L.col(0.0, float(sum(m.sizes)) / A + 1.0)
                self.U[(t, k)] = u
                after = before + [(rk, m.out_bytes[k] / A)] + \
                    [(f, -m.sizes[s] / A) for f, s in frees] + [(u, -1.0)]
                L.row(after, 0.0, 0.0)
                before = [(u, 1.0)]

    def solve(self, time_limit: float, threads: int, verbose: bool, rel_gap: float,
              start: Optional[List[float]] = None, presolve: str = "auto"):
        # HiGHS's presolve does not stop at the time limit; on large models it can take all of
        # it (a 190-op graph: 49 s for 190,000 rows), so "auto" skips it there.
        if presolve == "auto":
            presolve = "off" if len(self.L.rlo) > 100000 else "on"
        if presolve == "on":
            # HiGHS 1.16 with presolve and a user solution (setSolution) can report a better
            # incumbent's objective but return the user solution's values; starts are given
            # only without presolve (and every answer's objective is checked against its values).
            start = None
        L = self.L
        if L.infeasible:  # a row without variables fails: no schedule meets the budget
            return "infeasible", None, math.inf, 0.0, len(L.lo), len(L.rlo), sum(L.integer)
        out = self._run(time_limit, threads, verbose, rel_gap, start, presolve)
        if out[1] is not None and not self._consistent(out[1], out[-1]):
            if start is None:
                raise RuntimeError("HiGHS returned a solution whose objective is not the one "
                                   "it reports")
            out = self._run(time_limit, threads, verbose, rel_gap, None, presolve)
            if out[1] is not None and not self._consistent(out[1], out[-1]):
                raise RuntimeError("HiGHS returned a solution whose objective is not the one "
                                   "it reports")
        return out[:-1]

    def _consistent(self, x, objective) -> bool:
        mine = sum(c * v for c, v in zip(self.L.cost, x) if c)
        return abs(mine - objective) <= 1e-6 * max(1.0, abs(objective))

    def _run(self, time_limit, threads, verbose, rel_gap, start, presolve):
        import highspy
        h = _new_highs(verbose)
        h.setOptionValue("output_flag", bool(verbose))
        h.setOptionValue("time_limit", float(time_limit))
        h.setOptionValue("threads", int(threads))
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        h.setOptionValue("mip_abs_gap", 1e-9)
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("presolve", presolve)
        L = self.L
        inf = highspy.kHighsInf
        ncol = len(L.lo)
        h.addVars(ncol, L.lo, L.hi)
        h.changeColsCost(ncol, list(range(ncol)), L.cost)
        ints = [i for i in range(ncol) if L.integer[i]]
        if ints:
            h.changeColsIntegrality(len(ints), ints, [highspy.HighsVarType.kInteger] * len(ints))
        nrow = len(L.rlo)
        if nrow:
            h.addRows(nrow, [(-inf if x is None else x) for x in L.rlo],
                      [(inf if x is None else x) for x in L.rhi], len(L.rindex),
                      L.rstart, L.rindex, L.rvalue)
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = start
            sol.value_valid = True
            h.setSolution(sol)
        t0 = time.monotonic()
        h.run()
        secs = time.monotonic() - t0
        ms = h.getModelStatus()
        info = h.getInfo()
        has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
        x = list(h.getSolution().col_value) if has_sol else None
        S = highspy.HighsModelStatus
        if ms == S.kModelEmpty and not ncol:
            status, x, has_sol = "optimal", [], True
        elif ms == S.kOptimal:
            status = "optimal"
        elif ms == S.kInfeasible:
            status = "infeasible"
        elif has_sol:
            status = "feasible-not-proven"
        else:
            status = "time-limited"
        obj = info.objective_function_value
        if not ncol:
            obj = 0.0
        dual = info.mip_dual_bound if ints else obj
        if status == "optimal" and x is not None and not math.isfinite(dual):
            dual = obj
        return status, x, dual, secs, ncol, nrow, len(ints), obj

    def complete(self, ones) -> List[float]:
        """Every column's value for the schedule whose recomputations are ``ones`` (a set of
        (stage, op) with R = 1): S and SB by backward induction from the end, FREE as its
        product, U the running totals, P the peak. Used as HiGHS's starting solution (the
        schedule must be in the model: no stale alias binding)."""
        m, n = self.m, self.m.n
        x = [0.0] * len(self.L.lo)

        def rv(t, k):
            return k == t or (t, k) in ones

        for (t, k), c in self.R.items():
            x[c] = 1.0 if (t, k) in ones else 0.0
        sval = {}
        for s, p in enumerate(m.prod):
            nxt = 1 if s in m.graph_out_storages else 0
            others = [j for j in m.users[s] if j != p]
            for t in range(n - 1, p, -1):
                if rv(t, p):
                    cur = 0
                else:
                    cur = 1 if nxt or any(j <= t and rv(t, j) for j in others) else 0
                sval[(t, s)] = cur
                if (t, s) in self.S:
                    x[self.S[(t, s)]] = float(cur)
                nxt = cur
        for it, q in m.item_prod.items():
            if it[0] != "a":
                continue
            nxt = 1 if it in m.graph_out_aliases else 0
            readers = m.readers.get(it, [])
            for t in range(n - 1, q, -1):
                if rv(t, q):
                    cur = 0
                else:
                    cur = 1 if nxt or any(j <= t and rv(t, j) for j in readers) else 0
                if (t, it) in self.SB:
                    x[self.SB[(t, it)]] = float(cur)
                nxt = cur

        def sv(t, s):
            if t == n:
                return 1 if s in m.graph_out_storages else 0
            return sval.get((t, s), 0)

        for (t, s, _), (y, later) in self.Y.items():
            x[y] = 1.0 if sv(t + 1, s) or any(rv(t, j) for j in later) else 0.0
        peak = 0
        for t in range(n):
            P_t = m.stage_ops[t]
            mem = sum(m.sizes[s] for s in range(len(m.sizes)) if sv(t, s))
            for k in P_t:
                r = rv(t, k)
                if r:
                    peak = max(peak, mem + m.out_bytes[k] + m.work[k])
                    mem += m.out_bytes[k]
                for s in m.touch[k]:
                    f = self.FREE.get((t, s, k))
                    if f is None:
                        continue
                    later = [j for j in m.users[s] if j > k and j in P_t and rv(t, j)]
                    if r and not later and not sv(t + 1, s):
                        x[f] = 1.0
                        mem -= m.sizes[s]
                u = self.U.get((t, k))
                if u is not None:
                    x[u] = mem / m.alignment
        if self.P is not None:
            x[self.P] = float(peak // m.alignment)
        return x

    # ---- reading a solution back ----
    def schedule(self, x) -> List[int]:
        out = []
        for t in range(self.m.n):
            for k in self.m.stage_ops[t]:
                v = self.r(t, k)
                if isinstance(v, tuple) and v[1] == 1.0 or (not isinstance(v, tuple) and
                                                           x[v] > 0.5):
                    out.append(k)
        return out

    def model_peak_units(self, x) -> int:
        """The ILP's own accounting of the solution: the memory rows with S, SB, R rounded
        and FREE set to its product (Checkmate's definition), the peak over computed ops."""
        m, n = self.m, self.m.n

        def val(v):
            return v[1] if isinstance(v, tuple) else float(round(x[v]))

        peak = 0
        for t in range(n):
            P_t = m.stage_ops[t]
            mem = sum(m.sizes[s] for s in range(len(m.sizes)) if val(self.s(t, s)) > 0.5)
            for k in P_t:
                rk = val(self.r(t, k))
                if rk > 0.5:
                    peak = max(peak, mem + m.out_bytes[k] + m.work[k])
                    mem += m.out_bytes[k]
                    for s in m.touch[k]:
                        later = [j for j in m.users[s] if j > k and j in P_t and
                                 val(self.r(t, j)) > 0.5]
                        if not later and val(self.s(t + 1, s)) < 0.5:
                            mem -= m.sizes[s]
        return peak // m.alignment
