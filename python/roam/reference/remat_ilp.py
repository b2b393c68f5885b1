"""Exact rematerialization under a memory budget: Checkmate's integer program, solved by HiGHS.

Method: Checkmate (P. Jain, A. Jain, A. Nrusimha, A. Gholami, P. Abbeel, K. Keutzer, I. Stoica,
J. Gonzalez, "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization",
MLSys 2020), its MILP over a fixed topological order, on the memory model of
docs/GRAPH_FORMAT.md (graph v1, plan v2 liveness per instance), solved with HiGHS (``highspy``).
An offline reference for checking roam's ``plan --budget`` on small graphs; roam does not use
it.

Units: sizes, budgets and peaks in **bytes**; ``cost``, objectives, bounds and time limits in
**seconds**.

The schedules (the model)
-------------------------
Ops are indexed 0..n-1 in program order (the graph's ``ops`` list, a topological order). A
schedule has n *stages*; stage t runs a subset of ops {i <= t} in increasing index order and
ends with op t (R[t,t] = 1, R[t,i] = 0 for i > t), so first appearances are in program order.
An op runs in a stage t > i (a recomputation) only if it is ``recomputable: true``, and never in
a stage after an op that lists it in ``after`` (every appearance of v precedes every appearance
of w). The schedule is the concatenation of the stages: a plan-v2 ``order`` (op ids with
repeats). So an op is recomputed at most once per stage (at most n-1-i times in all), and the
recomputations inside a stage run in program order: these restrictions are Checkmate's and are
part of the model. One more: **no storage has two instances live at once** (equivalently, no
appearance reads, and no graph output ends bound to, an alias bound to an older instance of
its root than the latest; without aliases this always holds).

Memory (GRAPH_FORMAT.md, implemented independently of the C++ code): an alias lives in its
root's storage; roots with a ``role`` (resident) cost nothing and are always available; storages
of size 0 are ignored; every size is rounded up to ``alignment`` (64); each run of an op has its
own ``workspace``, live at that step only; an op's inputs and outputs are live together at its
step; an instance is live from the appearance creating it to the last appearance that reads or
binds a tensor bound to it, and to the end if a graph output is bound to it. The peak Tp is the
arena part (resident bytes excluded). **In-place permissions (``inplace``) are ignored**: the
graph is treated as if it had none, so this is a reference for plans without in-place writes
(roam may use them; on graphs without ``inplace`` fields the models agree on that point).

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
import os
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

__all__ = ["LeastBudgetResult", "Recount", "RematModel", "RematResult", "least_budget",
           "load_graph", "recount", "solve_remat"]

STATUSES = ("optimal", "feasible-not-proven", "infeasible", "time-limited")


from .recount import (Recount, _align, _as_graph, _check_alignment, _Tensors,  # noqa: F401
                      load_graph, recount)


# -------------------------------------------------------------------------------- model ---

class RematModel:
    """The graph as the integer program sees it (storages, items, stages), in program order.

    Attributes (op indices are positions in ``graph['ops']``): ``n`` ops; ``sizes[s]`` aligned
    bytes of storage s; ``prod[s]`` its producer; ``users[s]`` ops touching it (listing its root
    or an alias of it in inputs or outputs), producer included; ``out_bytes[k]`` bytes of op k's
    root outputs; ``work[k]`` its aligned workspace; ``needs[k]`` the items (('s', storage) or
    ('a', alias tensor id)) it must find available; ``last_stage[k]`` the last stage in which op
    k may run (k itself unless recomputable); ``graph_out_storages``, ``graph_out_aliases``.

    Raises:
        ValueError: ``graph`` malformed or its ``ops`` list not a topological order (naming the
            op), ``alignment`` not a power of two.
    """

    def __init__(self, graph, alignment: int = 64):
        g = _as_graph(graph)
        self.alignment = _check_alignment(alignment)
        self.graph = g
        T = self.T = _Tensors(g)
        ops = g["ops"]
        n = self.n = len(ops)
        self.op_ids = T.op_ids
        index = {oid: k for k, oid in enumerate(self.op_ids)}
        self.cost = [float(o.get("cost", 0.0) or 0.0) for o in ops]
        for k, c in enumerate(self.cost):
            if not math.isfinite(c) or c < 0:
                raise ValueError(f"graph: op {self.op_ids[k]!r}: cost must be >= 0 seconds")
        self.recomputable = [bool(o.get("recomputable", False)) for o in ops]
        self.work = [_align(int(o.get("workspace", 0) or 0), self.alignment) for o in ops]

        # Storages: non-resident roots of non-zero aligned size, indexed by first production.
        self.sid: Dict[str, int] = {}
        self.sizes, self.prod, self.roots = [], [], []
        for k, o in enumerate(ops):
            for y in o.get("outputs", []):
                if T.t[y].get("alias_of") is None and T.storage_bytes(y, self.alignment) > 0:
                    self.sid[y] = len(self.sizes)
                    self.sizes.append(T.storage_bytes(y, self.alignment))
                    self.prod.append(k)
                    self.roots.append(y)

        def sid_of(x):
            return self.sid.get(T.root(x)) if not T.resident(x) else None

        self.item_prod: Dict[tuple, int] = {}
        self.item_storage: Dict[tuple, int] = {}
        for s, p in enumerate(self.prod):
            self.item_prod[("s", s)] = p
            self.item_storage[("s", s)] = s

        def item_of(x):
            s = sid_of(x)
            if s is None:
                return None
            if T.t[x].get("alias_of") is None:
                return ("s", s)
            it = ("a", x)
            self.item_prod[it] = T.producer[x]
            self.item_storage[it] = s
            return it

        self.needs: List[List[tuple]] = []
        self.touch: List[List[int]] = []
        self.out_storages: List[List[int]] = []
        self.out_bytes: List[int] = []
        self.made: List[List[tuple]] = []  # items an op produces
        preds = [set() for _ in range(n)]
        for k, o in enumerate(ops):
            outs = set(o.get("outputs", []))
            need, made = set(), set()
            for x in o.get("inputs", []):
                if x in T.producer:
                    preds[k].add(T.producer[x])
                it = item_of(x)
                if it is not None:
                    need.add(it)
            for y in o.get("outputs", []):
                it = item_of(y)
                if it is not None:
                    made.add(it)
                b = T.t[y].get("alias_of")
                if b is not None and b not in outs:
                    if b in T.producer:
                        preds[k].add(T.producer[b])
                    it = item_of(b)
                    if it is not None:
                        need.add(it)
            for v in o.get("after", []):
                if v not in index:
                    raise ValueError(f"graph: op {o['id']!r}: after names unknown op {v!r}")
                preds[k].add(index[v])
            preds[k].discard(k)
            for u in preds[k]:
                if u > k:
                    raise ValueError(f"graph: the ops list is not a topological order: op "
                                     f"{o['id']!r} comes before {self.op_ids[u]!r}, which it "
                                     "depends on")
            self.needs.append(sorted(need, key=repr))
            self.made.append(sorted(made, key=repr))
            tch = set()
            for x in list(o.get("inputs", [])) + list(o.get("outputs", [])):
                s = sid_of(x)
                if s is not None:
                    tch.add(s)
            self.touch.append(sorted(tch))
            outs_s = sorted(self.sid[y] for y in o.get("outputs", []) if y in self.sid)
            self.out_storages.append(outs_s)
            self.out_bytes.append(sum(self.sizes[s] for s in outs_s))
        self.preds = [sorted(p) for p in preds]
        self.users = [[] for _ in self.sizes]
        for k in range(n):
            for s in self.touch[k]:
                self.users[s].append(k)

        # Graph outputs: storages live to the end, alias bindings kept to the end.
        self.graph_out_storages, self.graph_out_aliases = set(), set()
        for x in g.get("outputs", []):
            if x not in T.t:
                raise ValueError(f"graph: output {x!r} is not a tensor")
            s = sid_of(x)
            if s is None:
                continue
            self.graph_out_storages.add(s)
            if T.t[x].get("alias_of") is not None:
                self.graph_out_aliases.add(("a", x))

        # after-caps: an op may not run in a stage after any op that lists it in `after`.
        cap = [n - 1] * n
        for k, o in enumerate(ops):
            for v in o.get("after", []):
                cap[index[v]] = min(cap[index[v]], k)
        self.after_cap = cap
        # Consumers of each item; last stage each op may usefully run in (reverse order).
        self.readers: Dict[tuple, List[int]] = {it: [] for it in self.item_prod}
        for k in range(n):
            for it in self.needs[k]:
                self.readers.setdefault(it, []).append(k)
        last = list(range(n))
        for k in range(n - 1, -1, -1):
            if not self.recomputable[k]:
                continue
            reach = k
            for it in self.made[k]:
                if it in self.graph_out_aliases or (it[0] == "s" and
                                                    self.item_storage[it] in
                                                    self.graph_out_storages):
                    reach = n - 1
                for c in self.readers.get(it, []):
                    if c != k:
                        reach = max(reach, last[c])
            last[k] = min(reach, cap[k])
        self.last_stage = last
        # Horizon of each item: the last stage a reader of it can run in (n for graph outputs).
        self.item_horizon: Dict[tuple, int] = {}
        for it, p in self.item_prod.items():
            h = max([last[c] for c in self.readers.get(it, []) if c != p], default=p)
            if it in self.graph_out_aliases or (it[0] == "s" and
                                                self.item_storage[it] in self.graph_out_storages):
                h = n
            self.item_horizon[it] = h
        self.storage_horizon = []
        for s, p in enumerate(self.prod):
            h = max([last[j] for j in self.users[s] if j != p], default=p)
            if s in self.graph_out_storages:
                h = n
            self.storage_horizon.append(max(h, self.item_horizon[("s", s)]))
        # Ops that may run in each stage, ascending.
        self.stage_ops = [[] for _ in range(n)]
        for k in range(n):
            self.stage_ops[k].append(k)
            if self.recomputable[k]:
                for t in range(k + 1, last[k] + 1):
                    self.stage_ops[t].append(k)
        for t in range(n):
            self.stage_ops[t].sort()

    def static_bound_bytes(self) -> int:
        """Bytes every schedule holds at some step: max over ops of the storages it touches
        plus its outputs and workspace (all live at its step); a lower bound on Tp."""
        best = 0
        for k in range(self.n):
            best = max(best, sum(self.sizes[s] for s in self.touch[k]) + self.work[k])
        return best

    def no_recompute_tp_bytes(self) -> int:
        """Tp of program order without recomputation (bytes)."""
        if getattr(self, "_tp0", None) is None:
            self._tp0 = recount(self.graph, self.op_ids, alignment=self.alignment).tp_bytes
        return self._tp0


# ---------------------------------------------------------------------------------- MILP ---

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
