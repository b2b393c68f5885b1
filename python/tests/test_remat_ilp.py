"""roam.reference.remat_ilp (Checkmate's MILP with HiGHS) against an independent brute force.

The brute force below enumerates every schedule of the model the ILP solves (its module
docstring): n stages, stage t runs a subset of the recomputable ops i < t (only those no op
w <= ... lists in `after` before stage t: i may run in stage t only if every op listing i in
`after` is >= t) in program order and then op t; schedules in which some storage has two
instances live at once are outside the model and dropped. An op is thus recomputed at most once
per stage (at most n-1-i times), which is part of the model. Tp of every schedule is recounted
by this file's own implementation of GRAPH_FORMAT.md's plan-v2 liveness (not the module's).
A second, more general brute force (any interleaving, up to 2 recomputations) checks that the
ILP's optimum is never below what any plan-v2 schedule of the format achieves.

Run: .venv/bin/python -m pytest python/tests/test_remat_ilp.py -q
"""

import itertools
import random

import pytest

highspy = pytest.importorskip("highspy")

from roam.reference import remat_ilp as R  # noqa: E402

A = 64


# ------------------------------------------------- this file's own liveness recount ---

def own_recount(g, order, alignment=A):
    """(Tp bytes, recompute seconds, two instances of one storage live at once?) of a plan-v2
    order, straight from GRAPH_FORMAT.md (written separately from the module's recount)."""
    tens = {t["id"]: t for t in g["tensors"]}
    ops = {o["id"]: o for o in g["ops"]}

    def root(x):
        while tens[x].get("alias_of"):
            x = tens[x]["alias_of"]
        return x

    def resident(x):
        return bool(tens[root(x)].get("role")) or bool(tens[x].get("role"))

    def size(x):
        return -(-int(tens[root(x)]["size"]) // alignment) * alignment

    binding = {}            # tensor -> instance key (root, n) or None (resident)
    count = {}              # root -> instances made
    span = {}               # instance -> [first, last]
    runs = {}
    seconds = 0.0
    ws = []
    for step, oid in enumerate(order):
        o = ops[oid]
        runs[oid] = runs.get(oid, 0) + 1
        if runs[oid] > 1:
            assert o.get("recomputable"), oid
            seconds += o.get("cost", 0.0)
        for x in o["inputs"]:
            if resident(x):
                continue
            key = binding[x]          # KeyError: read before produced
            span[key][1] = step
        for y in o["outputs"]:
            if tens[y].get("alias_of") is None and not resident(y):
                c = count.get(y, 0)
                count[y] = c + 1
                binding[y] = (y, c)
                span[(y, c)] = [step, step]
        for y in o["outputs"]:
            if tens[y].get("alias_of") is not None and not resident(y):
                key = binding[tens[y]["alias_of"]]
                binding[y] = key
                span[key][1] = step
        ws.append(-(-int(o.get("workspace", 0)) // alignment) * alignment)
    for x in g["outputs"]:
        if not resident(x):
            span[binding[x]][1] = len(order) - 1
    live = list(ws)
    for (r, c), (a, b) in span.items():
        for s in range(a, b + 1):
            live[s] += size(r)
    overlap = False
    for (r, c), (a, b) in span.items():
        if size(r) and (r, c + 1) in span and span[(r, c + 1)][0] <= b:
            overlap = True
    return max(live), seconds, overlap


# ------------------------------------------------------------------- brute forces ---

def stage_allowed(g):
    """Per stage t, the ops that may be recomputed in it (the model's rule)."""
    ops = g["ops"]
    idx = {o["id"]: k for k, o in enumerate(ops)}
    cap = [len(ops) - 1] * len(ops)
    for k, o in enumerate(ops):
        for v in o.get("after", []):
            cap[idx[v]] = min(cap[idx[v]], k)
    return [[i for i in range(t) if ops[i].get("recomputable") and t <= cap[i]]
            for t in range(len(ops))]


def schedule_count(g):
    return 2 ** sum(len(a) for a in stage_allowed(g))


def brute_force(g):
    """(recompute seconds, Tp) of every schedule of the model."""
    ops = g["ops"]
    allowed = stage_allowed(g)
    per_stage = []
    for t, al in enumerate(allowed):
        subs = []
        for r in range(len(al) + 1):
            subs += [list(c) for c in itertools.combinations(al, r)]
        per_stage.append([[ops[i]["id"] for i in sorted(sub)] + [ops[t]["id"]] for sub in subs])
    out = []
    for choice in itertools.product(*per_stage):
        order = [x for stage in choice for x in stage]
        tp, sec, overlap = own_recount(g, order)
        if not overlap:
            out.append((sec, tp, order))
    return out


def brute_best(results, budget):
    fit = [sec for sec, tp, _ in results if tp <= budget]
    return min(fit) if fit else None


def general_orders(g, max_recomputations=2):
    """Every plan-v2 order with first appearances in program order and at most
    `max_recomputations` recomputations anywhere after the op's first run (`after` kept)."""
    ops = g["ops"]
    ids = [o["id"] for o in ops]
    rec = [o["id"] for o in ops if o.get("recomputable")]
    after = {o["id"]: set(o.get("after", [])) for o in ops}
    out = []

    def ok(order):
        for k, w in enumerate(order):
            for v in after[w]:
                if v in order[k + 1:]:
                    return False
        return True

    def rec_place(order, left):
        if ok(order):
            out.append(order)
        if left == 0:
            return
        for pos in range(1, len(order) + 1):
            for v in rec:
                if v in order[:pos]:
                    rec_place(order[:pos] + [v] + order[pos:], left - 1)

    rec_place(list(ids), max_recomputations)
    return out


# ------------------------------------------------------------------ tiny graphs ---

def T(tid, size, role=None, alias=None):
    t = {"id": tid, "size": size}
    if role:
        t["role"] = role
    if alias:
        t["alias_of"] = alias
    return t


def O(oid, ins, outs, cost=None, rec=False, ws=0, after=None):
    o = {"id": oid, "target": "test." + oid, "phase": "forward", "inputs": ins, "outputs": outs}
    if cost is not None:
        o["cost"] = cost
    if rec:
        o["recomputable"] = True
    if ws:
        o["workspace"] = ws
    if after:
        o["after"] = after
    return o


def G(name, tensors, ops, outputs):
    return {"format": "roam-graph", "version": 1, "name": name, "tensors": tensors,
            "ops": ops, "outputs": outputs}


def hand3():
    """A 3-op chain, worked by hand (alignment 64).

    A: x (resident) -> a (100 B -> 128), a2 (4000 B -> 4032); cost 0.5 s, recomputable.
    B: a -> b (50 B -> 64); workspace 1000 B -> 1024; cost 0.25 s, recomputable.
    C: a2, b -> c (10 B -> 64, the graph output); cost 0.1 s.
    No recomputation [A, B, C]: step A: a + a2 = 4160; step B: a + a2 (kept for C) + b + ws =
      128 + 4032 + 64 + 1024 = 5248; step C: a2 + b + c = 4160.  Tp = 5248, 0 s.
    Recompute A before C, [A, B, A, C]: step A: 4160 (a2 dies at once); B: a + b + ws = 1216;
      A again: a' + a2' + b = 4224; C: a2' + b + c = 4160.  Tp = 4224, 0.5 s.
    Recomputing B too ([A, B, A, B, C]) puts a + a2 + b + ws = 5248 back at B's second run;
    every schedule holds a2' + b + something at A's last run before C, so 4224 is the least.
    Hence: budget >= 5248: 0 s; 4224 <= budget < 5248: 0.5 s; budget < 4224: infeasible.
    """
    return G("hand3", [T("x", 100, "input"), T("a", 100), T("a2", 4000), T("b", 50), T("c", 10)],
             [O("A", ["x"], ["a", "a2"], 0.5, True),
              O("B", ["a"], ["b"], 0.25, True, ws=1000),
              O("C", ["a2", "b"], ["c"], 0.1)], ["c"])


def chain6():
    """Forward chain f0 -> f1 -> f2 (loss), backward b2, b1, b0 reading the activations."""
    return G("chain6",
             [T("x", 256, "input"), T("w", 64, "param"), T("a0", 3000), T("a1", 2000),
              T("l", 4), T("g1", 2000), T("g0", 500), T("gw", 64)],
             [O("f0", ["x", "w"], ["a0"], 0.3, True),
              O("f1", ["a0"], ["a1"], 0.2, True),
              O("f2", ["a1"], ["l"], 0.05, True),
              O("b2", ["l", "a1"], ["g1"], 0.1),
              O("b1", ["g1", "a0"], ["g0"], 0.1),
              O("b0", ["g0", "x"], ["gw"], 0.1)], ["l", "gw"])


def diamond():
    """a -> (b, c) -> d, with a skip from a into e; big a."""
    return G("diamond",
             [T("x", 64, "input"), T("a", 5000), T("b", 1500), T("c", 1200), T("d", 800),
              T("e", 900), T("f", 10)],
             [O("fa", ["x"], ["a"], 0.4, True),
              O("fb", ["a"], ["b"], 0.2, True, ws=700),
              O("fc", ["a"], ["c"], 0.15, True),
              O("fd", ["b", "c"], ["d"], 0.1, True, ws=2500),
              O("fe", ["d", "a"], ["e"], 0.1),
              O("ff", ["e", "b"], ["f"], 0.05)], ["f"])


def alias_view():
    """A view (alias) of a recomputable op's output read late: recomputing the producer needs
    the view recomputed after it (one instance at a time). No recomputation: at fc, a (kept
    for fd through av) + b + c + ws = 3008 + 512 + 640 + 4032 = 8192; recomputing fa and view
    before fd drops a there (Tp 5184 = b + c + ws at fc)."""
    return G("alias_view",
             [T("x", 64, "input"), T("a", 3000), T("av", 3000, alias="a"), T("b", 500),
              T("c", 600), T("d", 100)],
             [O("fa", ["x"], ["a"], 0.3, True),
              O("view", ["a"], ["av"], 0.0, True),
              O("fb", ["av"], ["b"], 0.2, True),
              O("fc", ["b"], ["c"], 0.1, ws=4000),
              O("fd", ["c", "av"], ["d"], 0.1)], ["d"])


def workspace_graph():
    """The op in the middle has a large workspace; two recomputable producers around it."""
    return G("workspace",
             [T("x", 64, "input"), T("p", 2000), T("q", 1800), T("r", 300), T("s", 64),
              T("z", 0)],
             [O("fp", ["x"], ["p", "z"], 0.25, True),
              O("fq", ["x"], ["q"], 0.35, True),
              O("big", ["x"], ["r"], 0.5, False, ws=6000),
              O("use", ["p", "q", "r", "z"], ["s"], 0.1)], ["s"])


def nonrecomputable():
    """chain6 with f0 not recomputable: a0, read again by b1, can no longer be dropped, so
    recomputation (of f1, f2) cannot lower the least budget below no recomputation's Tp."""
    g = chain6()
    g["name"] = "nonrecomputable"
    g["ops"][0].pop("recomputable")
    return g


HAND = [hand3, chain6, diamond, alias_view, workspace_graph, nonrecomputable]


def random_graph(seed, max_schedules=2 ** 13):
    """Seeded tiny graph (3-7 ops): random reads of earlier tensors, 1-2 root outputs (some of
    size 0), views and aliases of an op's own output, workspaces, `after` edges, costs (some
    absent), two graph outputs (one may be an alias)."""
    rng = random.Random(seed)
    while True:
        n = rng.randint(3, 7)
        tensors = [T("x", rng.randint(1, 3000), "input"), T("w", rng.randint(1, 500), "param")]
        readable = []       # non-resident tensors
        ops = []
        tid = 0
        for k in range(n):
            pool = readable[-4:]
            ins = rng.sample(pool, min(len(pool), rng.randint(1, 2))) if pool else []
            if rng.random() < 0.4 or not ins:
                ins.append(rng.choice(["x", "w"]))
            outs = []
            for _ in range(rng.choice([1, 1, 2])):
                sz = 0 if rng.random() < 0.1 else rng.randint(1, 5000)
                tensors.append(T("t%d" % tid, sz))
                outs.append("t%d" % tid)
                tid += 1
            if rng.random() < 0.3:
                bases = [x for x in ins if x not in ("x", "w")] + outs[:1]
                b = rng.choice(bases)
                tensors.append(T("v%d" % tid, 0, alias=b))
                outs.append("v%d" % tid)
                tid += 1
            o = O("o%d" % k, ins, outs,
                  None if rng.random() < 0.1 else round(rng.uniform(0.05, 1.0), 3),
                  rng.random() < 0.6, ws=rng.choice([0, 0, 0, rng.randint(1, 4000)]))
            if k >= 2 and rng.random() < 0.2:
                o["after"] = ["o%d" % rng.randrange(k - 1)]
            ops.append(o)
            readable += outs
        outputs = [ops[-1]["outputs"][0]]
        if rng.random() < 0.5:
            extra = rng.choice(readable)
            if extra not in outputs:
                outputs.append(extra)
        g = G("random-%d" % seed, tensors, ops, outputs)
        if schedule_count(g) <= max_schedules:
            return g


def random_training_graph(seed, max_schedules=2 ** 13):
    """Seeded tiny training-like graph (4-7 ops): 2-4 forward ops (a chain with skips, some
    recomputable, some saving a second output or a view of their output for the backward, the
    last one the loss), then backward ops in reverse reading the previous gradient and the
    saved activations (so activations live long and recomputation can pay), workspaces,
    sometimes an `after` edge; accepted only where recomputation lowers the least Tp (by the
    brute force)."""
    rng = random.Random(1000 + seed)
    while True:
        nf = rng.randint(2, 4)
        nb = rng.randint(max(1, nf - 2), min(nf, 7 - nf))
        tensors = [T("x", rng.randint(64, 2000), "input"), T("w", 256, "param")]
        ops, saved, acts = [], [], ["x"]
        for k in range(nf):
            ins = [acts[-1]] + ([rng.choice(acts[:-1])] if len(acts) > 2 and
                                rng.random() < 0.3 else [])
            if rng.random() < 0.5:
                ins.append("w")
            last = k == nf - 1
            a = "a%d" % k
            tensors.append(T(a, 4 if last else rng.randint(500, 5000)))
            outs = [a]
            keep = a
            if not last and rng.random() < 0.3:
                tensors.append(T("s%d" % k, rng.randint(100, 3000)))
                outs.append("s%d" % k)
                keep = "s%d" % k
            elif not last and rng.random() < 0.3:
                tensors.append(T("v%d" % k, 0, alias=a))
                outs.append("v%d" % k)
                keep = "v%d" % k
            ops.append(O("f%d" % k, ins, outs, round(rng.uniform(0.05, 1.0), 3),
                         rng.random() < 0.8, ws=rng.choice([0, 0, rng.randint(64, 3000)])))
            acts.append(a)
            saved.append(keep)
        grad = "a%d" % (nf - 1)
        for j in range(nb):
            k = nf - 2 - j
            ins = [grad] + ([saved[k]] if k >= 0 else []) + \
                ([rng.choice(saved[:k])] if k > 0 and rng.random() < 0.3 else [])
            g_out = "g%d" % j
            tensors.append(T(g_out, rng.randint(64, 3000)))
            o = O("b%d" % j, ins, [g_out], round(rng.uniform(0.05, 1.0), 3),
                  rng.random() < 0.2, ws=rng.choice([0, 0, rng.randint(64, 4000)]))
            if j > 0 and rng.random() < 0.2:
                o["after"] = ["f%d" % rng.randrange(nf)]
            ops.append(o)
            grad = g_out
        g = G("train-%d" % seed, tensors, ops, ["a%d" % (nf - 1), grad])
        if schedule_count(g) > max_schedules:
            continue
        results = brute_force(g)
        tp0 = own_recount(g, [o["id"] for o in ops])[0]
        if min(tp for _, tp, _ in results) < tp0:
            return g, results


def budgets_for(results, most=10):
    """Budgets at every step of the brute force's time-memory front: each Tp where the least
    recompute seconds drop, and 1 byte below it (the previous step, or infeasible below the
    least Tp); at most `most`, spread over the front."""
    best = {}
    for sec, tp, _ in results:
        best[tp] = min(sec, best.get(tp, sec))
    front, low = [], None
    for tp in sorted(best):
        if low is None or best[tp] < low:
            front.append(tp)
            low = best[tp]
    if len(front) > most // 2:
        step = len(front) / (most // 2)
        front = sorted(set(front[int(i * step)] for i in range(most // 2)) | {front[-1]})
    return sorted(set(b for tp in front for b in (tp - 1, tp) if b >= 0))


def check_against_brute(g, presolve="auto", results=None):
    results = results if results is not None else brute_force(g)
    assert results, "the no-recomputation schedule is always in the model"
    model = R.RematModel(g)
    for budget in budgets_for(results):
        want = brute_best(results, budget)
        got = R.solve_remat(g, budget, time_limit=30, model=model, presolve=presolve)
        if want is None:
            assert got.status == "infeasible", (g["name"], budget, got)
            continue
        assert got.status == "optimal", (g["name"], budget, got.status)
        assert got.objective_seconds == pytest.approx(want, rel=1e-9, abs=1e-12), \
            (g["name"], budget, got.schedule)
        assert got.dual_bound_seconds <= got.objective_seconds + 1e-12
        tp, sec, overlap = own_recount(g, got.schedule)
        assert (tp, overlap) == (got.tp_bytes, False)
        assert tp <= budget
        assert sec == pytest.approx(got.objective_seconds, abs=1e-12)
        assert got.model_tp_bytes == got.tp_bytes
    least = R.least_budget(g, time_limit=30, model=model, presolve=presolve)
    assert least.status == "optimal"
    assert least.budget_bytes == min(tp for _, tp, _ in results), g["name"]
    assert least.lower_bound_bytes == least.budget_bytes
    assert own_recount(g, least.schedule)[0] == least.budget_bytes
    return results


# ---------------------------------------------------------------------------- tests ---

def test_hand_worked_three_op_chain():
    g = hand3()
    expect = {6000: 0.0, 5248: 0.0, 5247: 0.5, 4224: 0.5}
    for budget, seconds in expect.items():
        r = R.solve_remat(g, budget, time_limit=10)
        assert r.status == "optimal"
        assert r.objective_seconds == pytest.approx(seconds)
    r = R.solve_remat(g, 4224, time_limit=10)
    assert r.schedule == ["A", "B", "A", "C"] and r.tp_bytes == 4224
    assert R.solve_remat(g, 4223, time_limit=10).status == "infeasible"
    lb = R.least_budget(g, time_limit=10)
    assert (lb.status, lb.budget_bytes, lb.lower_bound_bytes) == ("optimal", 4224, 4224)


@pytest.mark.parametrize("make", HAND, ids=[f.__name__ for f in HAND])
def test_hand_built_graphs_match_brute_force(make):
    g = make()
    results = check_against_brute(g)
    # recomputation lowers the least budget on every hand-built graph but `nonrecomputable`
    tp0 = own_recount(g, [o["id"] for o in g["ops"]])[0]
    least = min(tp for _, tp, _ in results)
    assert (least < tp0) == (make is not nonrecomputable), (least, tp0)


@pytest.mark.parametrize("seed", range(30))
def test_random_training_graphs_match_brute_force(seed):
    g, results = random_training_graph(seed)
    check_against_brute(g, results=results)


@pytest.mark.parametrize("seed", range(25))
def test_random_tiny_graphs_match_brute_force(seed):
    check_against_brute(random_graph(seed))


@pytest.mark.parametrize("seed", range(100, 110))
def test_without_presolve_from_a_start(seed):
    """presolve off: HiGHS starts from _candidate_starts' cheapest schedule within budget."""
    g, results = random_training_graph(seed)
    check_against_brute(g, presolve="off", results=results)


def test_alias_view_needs_the_view_recomputed():
    """Recomputing fa alone would leave the view bound to the dropped instance (two instances
    of a live at once): every schedule the ILP returns that recomputes fa also reruns view
    after it, before av's next reader."""
    g = alias_view()
    results = brute_force(g)
    best = min(tp for _, tp, _ in results)
    r = R.solve_remat(g, best, time_limit=10)
    assert r.status == "optimal"
    if r.schedule.count("fa") > 1:
        k = len(r.schedule) - 1 - r.schedule[::-1].index("fa")
        assert "view" in r.schedule[k:]
    # the format itself allows the stale binding: the recounts agree that it overlaps
    stale = ["fa", "view", "fb", "fa", "fc", "fd"]
    assert own_recount(g, stale)[2] is True
    assert R.recount(g, stale).overlapping == ["a"]


@pytest.mark.parametrize("make", [hand3, chain6, alias_view, workspace_graph])
def test_recount_agrees_on_arbitrary_orders(make):
    """The module's recount (used to check every ILP schedule) equals this file's on every
    plan-v2 order with <= 2 recomputations anywhere (not only the model's stage form),
    overlapping instances included; and no such order beats the ILP where it is in the model."""
    g = make()
    orders = general_orders(g)
    assert len(orders) > len(g["ops"])
    model_orders = set(tuple(o) for _, _, o in brute_force(g))
    least = R.least_budget(g, time_limit=10)
    for o in orders:
        tp, sec, overlap = own_recount(g, o)
        rc = R.recount(g, o)
        assert (rc.tp_bytes, bool(rc.overlapping)) == (tp, overlap), o
        assert rc.recompute_seconds == pytest.approx(sec, abs=1e-12)
        if tuple(o) in model_orders:
            assert tp >= least.budget_bytes, o


def test_recount_matches_program_order_liveness():
    g = chain6()
    rc = R.recount(g, [o["id"] for o in g["ops"]])
    # sizes rounded to 64: a0 3008, a1 2048, l 64 (a graph output: live to the end), g1 2048,
    # g0 512, gw 64.  At b2: a0 + a1 + l + g1 = 7168; at b1: a0 + l + g1 + g0 = 5632 (a1 died
    # at b2); at b0: l + g0 + gw = 640.
    assert rc.live_bytes == [3008, 5056, 5120, 7168, 5632, 640]
    assert rc.tp_bytes == 7168 == own_recount(g, [o["id"] for o in g["ops"]])[0]
    assert rc.recomputations == 0 and rc.recompute_seconds == 0.0
    rc2 = R.recount(g, ["f0", "f1", "f2", "b2", "f0", "b1", "b0"])
    assert rc2.recomputations == 1 and rc2.recompute_seconds == pytest.approx(0.3)


def test_errors_name_the_argument():
    g = hand3()
    with pytest.raises(ValueError, match="budget"):
        R.solve_remat(g, -1)
    with pytest.raises(ValueError, match="budget"):
        R.solve_remat(g, 1.5)
    with pytest.raises(ValueError, match="time_limit"):
        R.solve_remat(g, 5000, time_limit=0)
    with pytest.raises(ValueError, match="alignment"):
        R.solve_remat(g, 5000, alignment=48)
    with pytest.raises(ValueError, match="threads"):
        R.least_budget(g, threads=0)
    with pytest.raises(ValueError, match="graph"):
        R.solve_remat(5, 5000)
    bad = hand3()
    bad["ops"] = [bad["ops"][1], bad["ops"][0], bad["ops"][2]]
    with pytest.raises(ValueError, match="graph: the ops list is not a topological order"):
        R.solve_remat(bad, 5000)
    with pytest.raises(ValueError, match="order"):
        R.recount(g, ["A", "B", "C", "C"])       # C is not recomputable
    with pytest.raises(ValueError, match="order"):
        R.recount(g, ["B", "A", "C"])            # B reads a before A ran
    with pytest.raises(ValueError, match="order"):
        R.recount(g, ["A", "B"])                 # C never runs
