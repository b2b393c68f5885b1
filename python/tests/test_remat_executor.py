"""The executor runs plan version 2 (recomputation): roam.optimize(..., budget=...).

Every comparison of results is exact: a step under a version-2 plan runs the captured fx graph
in the plan's order, recomputed ops included, so loss, parameters and optimizer state after 3
steps must be *bit-identical* to the same graph run in program order with PyTorch's default
allocator (``RoamStep.reference_step``); against the ordinary eager loop the target is 1e-6
relative. Counts (recomputations, instances, live blocks) are recounted here from the plan and
from the allocator's event log, independently of the executor.

Needs the extension ``roam._native`` (built by CMake into python/roam/); skipped without it.
"""

import copy
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import eager_step, same_params

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

from roam.executor import available  # noqa: E402

pytestmark = pytest.mark.skipif(not available(), reason="roam._native is not built")

from roam.executor import (BudgetInfeasible, StepReport, optimize, parse_size,  # noqa: E402
                           plan_graph, plan_within_budget, validate_plan)
from roam.executor.program import Program  # noqa: E402


# ---------------------------------------------------------------- tiny models

class ConvChain(nn.Module):
    """Three conv -> BatchNorm -> in-place ReLU blocks, dropout, linear; (B, 3, 12, 12)."""

    def __init__(self, c=6, classes=5):
        super().__init__()
        self.blocks = nn.ModuleList()
        cin = 3
        for _ in range(3):
            self.blocks.append(nn.Sequential(nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c),
                                             nn.ReLU(inplace=True)))
            cin = c
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.fc(self.drop(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


class DropMLP(nn.Module):
    """Four residual MLP blocks with GELU and dropout (the transformer feed-forward); (B, 16)."""

    def __init__(self, d=32, blocks=4, classes=5):
        super().__init__()
        self.inp = nn.Linear(16, d)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                                  nn.Dropout(0.2), nn.Linear(4 * d, d))
                                    for _ in range(blocks))
        self.out = nn.Linear(d, classes)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = x + b(x)
        return self.out(x)


class RandMask(nn.Module):
    """A dropout written with an out-of-place random op (``rand_like``): the mask is a fresh
    tensor that backward reads, so recomputing it needs the generator state of its first
    run; tanh layers around it; (B, 16)."""

    def __init__(self, d=24, classes=5):
        super().__init__()
        self.l1 = nn.Linear(16, d)
        self.l2 = nn.Linear(d, d)
        self.out = nn.Linear(d, classes)

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        keep = torch.rand_like(h) > 0.3
        h = torch.tanh(self.l2(h * keep))
        return self.out(h)


def _batch(shape, seed, classes=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g)


FAMILIES = {
    "conv_bn_inplace_relu_dropout": (ConvChain, lambda i: _batch((4, 3, 12, 12), 100 + i)),
    "mlp_gelu_dropout": (DropMLP, lambda i: _batch((16, 16), 200 + i)),
}


def make(family, seed=0):
    if family == "rand_mask":
        cls, batch = RandMask, (lambda i: _batch((8, 16), 300 + i))
    else:
        cls, batch = FAMILIES[family]
    torch.manual_seed(seed)
    model = cls()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    eager_step(model, opt, F.cross_entropy, batch(0))  # steady state: the optimizer state exists
    return model, opt, batch






def same_state(o1, o2, m1, m2):
    for p, q in zip(m1.parameters(), m2.parameters()):
        for k, v in o1.state[p].items():
            if isinstance(v, torch.Tensor) and not torch.equal(v, o2.state[q][k]):
                return False
    return True


def rel_diff(a, b):
    worst = 0.0
    for p, q in zip(a.parameters(), b.parameters()):
        d = (p.detach().double() - q.detach().double()).abs().max().item()
        s = q.detach().double().abs().max().item()
        worst = max(worst, d / s if s else d)
    return worst


def smallest_budget(model, opt, batch):
    """(captured step, the smallest budget optimize meets: resident + arena + the CPU generator
    states the executor holds for the random ops that plan recomputes): a budget of 1 byte is
    refused with it, before anything runs."""
    probe = optimize(*copy.deepcopy((model, opt)), F.cross_entropy, batch(1), cost="estimate")
    with pytest.raises(BudgetInfeasible) as e:
        optimize(model, opt, F.cross_entropy, batch(1), budget=1, captured=probe.captured)
    return probe, e.value.smallest_budget_bytes


def recount_recomputations(order):
    """Appearances after an op's first (independent of the executor)."""
    return len(order) - len(set(order))


# ---------------------------------------------------------------- bit-identical under recomputation

@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_budget_plan_recomputes_and_is_bit_identical(family):
    model, opt, batch = make(family)
    probe, smallest = smallest_budget(model, opt, batch)
    v1 = probe.plan["stats"]
    assert 0 < smallest < v1["resident_bytes"] + v1["arena_bytes"]  # below the plan without it
    ref_m, ref_o = copy.deepcopy((model, opt))
    eag_m, eag_o = copy.deepcopy((model, opt))
    step = optimize(model, opt, F.cross_entropy, batch(1), budget=smallest, debug=True,
                    captured=probe.captured)
    plan = step.plan
    assert plan["version"] == 2
    assert step.budget_bytes == smallest and plan["method"]["options"]["budget_bytes"] <= smallest
    assert (plan["stats"]["resident_bytes"] + plan["stats"]["arena_bytes"]
            + step.rng_state_bytes <= smallest)
    n = recount_recomputations(plan["order"])
    assert n > 0 and plan["stats"]["recomputations"] == n == step.program.recomputations
    if family == "mlp_gelu_dropout":  # dropout masks are redrawn, replaying their generator
        target = {op["id"]: op["target"] for op in probe.graph["ops"]}
        redrawn = [o for o in set(plan["order"]) if plan["order"].count(o) > 1
                   and target[o] == "aten.bernoulli.p"]
        assert redrawn and all(st.rng == "replay" for st in step.program.steps
                               if st.op_id in redrawn and st.appearance > 0)
    assert sum(len(v) for v in plan["recompute_offsets"].values()) > 0
    for i in range(3):
        b = batch(2 + i)
        torch.manual_seed(50 + i)
        lr = step.reference_step(*b, model=ref_m, optimizer=ref_o)
        torch.manual_seed(50 + i)
        le = eager_step(eag_m, eag_o, F.cross_entropy, b)
        torch.manual_seed(50 + i)
        loss = step(*b)
        rep = step.last_report
        assert rep.mode == "planned" and rep.mismatch is None, rep
        assert rep.recomputations == n
        # every instance, recomputed ones included, was served at its planned offset
        assert rep.arena_used_bytes == rep.planned_arena_bytes == plan["stats"]["arena_bytes"]
        assert rep.debug_checks > 0 and rep.debug_violations == 0
        assert rep.escaped_arena_blocks == 0
        assert torch.equal(loss, lr)
        assert abs(float(loss) - float(le)) <= 1e-6 * abs(float(le))
    assert same_params(model, ref_m) and same_state(opt, ref_o, model, ref_m)
    assert rel_diff(model, eag_m) <= 1e-6


# ---------------------------------------------------------------- random ops: replayed generator

def _hand_v2_plan(graph, recompute):
    """A version-2 plan written here, independently of the planner: the program order with
    the ops ``recompute`` (ids, program order) run once more right before the first backward
    op, and every instance and workspace in bytes of its own (64-aligned, no reuse). Stats
    from the validator's recount."""
    ops = graph["ops"]
    first_bwd = next(k for k, op in enumerate(ops) if op["phase"] == "backward")
    order = [op["id"] for op in ops[:first_bwd]] + list(recompute) + \
        [op["id"] for op in ops[first_bwd:]]
    tensors = {t["id"]: t for t in graph["tensors"]}
    by_id = {op["id"]: op for op in ops}
    offsets, later, wso = {}, {}, {}
    top = 0
    seen = set()
    for oid in order:
        op = by_id[oid]
        again = oid in seen
        seen.add(oid)
        for tid in op["outputs"]:
            t = tensors[tid]
            if "alias_of" in t or t.get("role") or int(t["size"]) == 0:
                continue
            if again:
                later.setdefault(tid, []).append(top)
            else:
                offsets[tid] = top
            top += (int(t["size"]) + 63) // 64 * 64
        if int(op.get("workspace", 0)) > 0:
            wso.setdefault(oid, []).append(top)
            top += (int(op["workspace"]) + 63) // 64 * 64
    plan = {"format": "roam-plan", "version": 2, "graph": graph["name"], "alignment": 64,
            "order": order, "offsets": offsets, "recompute_offsets": later,
            "stats": {k: 0 for k in ("resident_bytes", "theoretical_peak_bytes", "arena_bytes",
                                     "peak_bytes", "lower_bound_bytes", "fragmentation",
                                     "solve_seconds", "recompute_seconds", "compute_seconds",
                                     "recomputations")},
            "method": {"order": "hand", "layout": "hand", "options": {}}}
    if wso:
        plan["workspace_offsets"] = wso
    rec = validate_plan(graph, plan).get("recomputed")
    plan["stats"] = dict(rec, solve_seconds=0.0)
    rep = validate_plan(graph, plan)
    assert rep["valid"], rep["problems"]
    return plan


def test_recomputed_random_op_replays_the_generator_state_of_its_first_run():
    """rand_like recomputed in the backward pass draws the numbers of its forward run (as
    torch.utils.checkpoint's preserve_rng_state): bit-identical to program order. Without the
    replay the recomputed mask differs and so do the parameters (checked, so the test can
    fail)."""
    model, opt, batch = make("rand_mask")
    probe = optimize(*copy.deepcopy((model, opt)), F.cross_entropy, batch(1))
    graph = copy.deepcopy(probe.graph)
    rand = [op for op in graph["ops"] if "rand_like" in op["target"]]
    # out of place, default generator: the capture marks it recomputable since this executor
    # replays the generator state
    assert len(rand) == 1 and rand[0]["recomputable"] is True
    gt = next(op for op in graph["ops"] if rand[0]["outputs"][0] in op["inputs"])
    assert gt["recomputable"] and "gt" in gt["target"]
    plan = _hand_v2_plan(graph, [rand[0]["id"], gt["id"]])
    assert recount_recomputations(plan["order"]) == 2

    results = {}
    for replay in (True, False):
        m, o = copy.deepcopy((model, opt))
        rm, ro = copy.deepcopy((model, opt))
        captured = copy.copy(probe.captured)
        captured.graph = graph
        step = optimize(m, o, F.cross_entropy, batch(1), plan=plan, captured=captured,
                        debug=True)
        assert step.program is not None and step.program.recomputations == 2
        rng_steps = [st.rng for st in step.program.steps if st.rng]
        assert rng_steps == ["save", "replay"]
        if not replay:
            for st in step.program.steps:
                st.rng = None
        same = []
        for i in range(3):
            torch.manual_seed(7 + i)
            lr = step.reference_step(*batch(2 + i), model=rm, optimizer=ro)
            torch.manual_seed(7 + i)
            # the hand plan reuses no bytes, so it holds more than eager: keep it on anyway
            step.program_order_reason = None
            loss = step(*batch(2 + i))
            assert step.last_report.mode == "planned", step.last_report
            assert step.last_report.arena_used_bytes == plan["stats"]["arena_bytes"]
            same.append(torch.equal(loss, lr))
        results[replay] = (all(same), same_params(m, rm))
    assert results[True] == (True, True)
    assert results[False][1] is False  # the replay is what makes it exact


# ---------------------------------------------------------------- a recomputation that disagrees

def _planned_v2_step(family="mlp_gelu_dropout", **kw):
    model, opt, batch = make(family)
    probe, smallest = smallest_budget(model, opt, batch)
    ref = copy.deepcopy((model, opt))
    step = optimize(model, opt, F.cross_entropy, batch(1), budget=smallest,
                    captured=probe.captured, **kw)
    assert step.plan["version"] == 2
    return step, model, batch, ref


def _first_recompute_step(program):
    return next(k for k, st in enumerate(program.steps) if st.appearance > 0 and st.planned)


def test_recomputation_of_the_wrong_size_falls_back_with_the_right_loss():
    """The plan's instance of a recomputed tensor is 64 bytes larger than what the kernel
    asks for: the allocator does not find the output at its planned offset, the step goes on
    with ordinary allocation from that op (warned once, reported) and is still exact."""
    step, model, batch, (rm, ro) = _planned_v2_step(debug=True)
    prog = step.program
    k = _first_recompute_step(prog)
    size, off = prog.schedule[k][0]
    prog.schedule[k][0] = (size + 64, off)
    step.session.configure(step.planned_arena_bytes, step.alignment,
                           prog.session_schedule(step.ranks), prog.session_workspaces())
    torch.manual_seed(3)
    lr = step.reference_step(*batch(2), model=rm, optimizer=ro)
    torch.manual_seed(3)
    with pytest.warns(UserWarning, match="diverged"):
        loss = step(*batch(2))
    rep = step.last_report
    assert rep.mode == "diverged" and "recomputation" in rep.mismatch
    assert step.session.stats()["first_mismatch_step"] == k
    assert rep.debug_violations == 0
    assert torch.equal(loss, lr) and same_params(model, rm)


def test_recompute_offset_on_live_bytes_is_refused_with_the_right_loss():
    """A trusted plan whose recomputed instance is placed on bytes still held by a live
    instance (offset 0 for every recomputed instance, as a wrong layout would): refused,
    ordinary allocation from there on, exact result, no overlap ever handed out."""
    model, opt, batch = make("mlp_gelu_dropout")
    probe, smallest = smallest_budget(model, opt, batch)
    good = plan_graph(probe.graph, budget_bytes=smallest)
    bad = copy.deepcopy(good)
    bad["recompute_offsets"] = {k: [0] * len(v) for k, v in bad["recompute_offsets"].items()}
    bad["offsets"] = {k: 0 for k in bad["offsets"]}
    assert not validate_plan(probe.graph, bad)["valid"]
    rm, ro = copy.deepcopy((model, opt))
    step = optimize(model, opt, F.cross_entropy, batch(1), plan=bad, trust_plan=True,
                    debug=True, captured=probe.captured)
    torch.manual_seed(4)
    lr = step.reference_step(*batch(2), model=rm, optimizer=ro)
    torch.manual_seed(4)
    with pytest.warns(UserWarning, match="still occupied"):
        loss = step(*batch(2))
    rep = step.last_report
    assert rep.mode == "diverged" and rep.debug_violations == 0 and rep.debug_checks > 0
    assert torch.equal(loss, lr) and same_params(model, rm)


# ---------------------------------------------------------------- no overlapping live instances

def test_allocator_never_hands_out_overlapping_live_instances():
    """Debug mode checks every allocation against every live block; in addition the event
    log of a planned version-2 step is replayed here: no two live arena blocks ever share a
    byte, and each recomputation's outputs are served at their recompute offsets."""
    model, opt, batch = make("conv_bn_inplace_relu_dropout")
    probe, smallest = smallest_budget(model, opt, batch)
    step = optimize(model, opt, F.cross_entropy, batch(1), budget=smallest, debug=True,
                    captured=probe.captured)
    step.session.record = True
    torch.manual_seed(5)
    step(*batch(2))
    rep = step.last_report
    assert rep.mode == "planned" and rep.debug_checks > 0 and rep.debug_violations == 0
    events = step.session.events()
    live = {}          # address -> (offset, end)
    served = {}        # step -> offsets served in the arena during it
    blocks = 0
    for k, size, off, sign, addr in events:
        if off < 0:
            continue
        if sign > 0:
            end = off + (size + 63) // 64 * 64
            for o2, e2 in live.values():
                assert end <= o2 or e2 <= off, (k, off, end, o2, e2)
            live[addr] = (off, end)
            served.setdefault(k, []).append(off)
            blocks += 1
        else:
            live.pop(addr, None)
    assert blocks > 10
    prog = step.program
    recomputed = [k for k, st in enumerate(prog.steps) if st.appearance > 0 and st.planned]
    assert recomputed
    for k in recomputed:
        for _size, off in prog.schedule[k]:
            assert off in served.get(k, []), (k, off)
    # the schedule of each recomputation is the plan's recompute_offsets (recounted)
    later = step.plan["recompute_offsets"]
    expect = sorted(o for v in later.values() for o in v)
    got = sorted(off for k in recomputed for _s, off in prog.schedule[k])
    assert got == expect


# ---------------------------------------------------------------- generator states under a budget

def _dropouts_run_again(graph, order):
    """Recount, from the plan's order: dropout masks (aten.bernoulli.p, the only random op of
    DropMLP) that run more than once."""
    target = {op["id"]: op["target"] for op in graph["ops"]}
    assert {t for t in target.values() if "bernoulli" in t or "rand" in t} == {"aten.bernoulli.p"}
    return {o for o in order if order.count(o) > 1 and target[o] == "aten.bernoulli.p"}


def _state_bytes():
    return torch.get_rng_state().numel()  # a uint8 tensor: one byte per element


def test_plans_under_a_budget_hold_the_generator_states_of_recomputed_dropout():
    """The executor keeps the CPU generator state (torch.get_rng_state()) of every recomputed
    random op from its first run to the end of the step, plus one more while a replay runs,
    outside the plan. plan_within_budget counts (n + 1) states for n recomputed dropout masks
    beside resident + arena; over budgets from libroam's own smallest to the plan without
    recomputation, every plan it returns fits with them (recounted here), or it refuses with a
    smallest budget above the one asked, while libroam's plan at the same budget does not fit
    at some of them (what optimize ran before)."""
    model, opt, batch = make("mlp_gelu_dropout")
    probe = optimize(*copy.deepcopy((model, opt)), F.cross_entropy, batch(1), cost="estimate")
    with pytest.raises(BudgetInfeasible) as e:
        plan_graph(probe.graph, budget_bytes=1)
    s0 = e.value.smallest_budget_bytes
    full = probe.plan["stats"]["resident_bytes"] + probe.plan["stats"]["arena_bytes"]
    state = _state_bytes()

    def held(plan):
        n = len(_dropouts_run_again(probe.graph, plan["order"]))
        st = plan["stats"]
        return st["resident_bytes"] + st["arena_bytes"] + (n + 1) * state * (n > 0)
    raw_over = fitted = refused = 0
    for k in range(9):
        budget = s0 + (full - s0) * k // 8
        raw_over += held(plan_graph(probe.graph, budget_bytes=budget)) > budget
        try:
            plan = plan_within_budget(probe.graph, probe.captured, budget)
        except BudgetInfeasible as err:
            assert err.smallest_budget_bytes > budget == err.budget_bytes
            refused += 1
            continue
        assert held(plan) <= budget
        fitted += 1
    assert raw_over > 0 and fitted > 0 and refused > 0
    # reserve_bytes (a rank's process-group buffers on the fallback heap) is kept free beside
    # them: the smallest budget named grows by exactly the reserve (the same plan, at
    # libroam's smallest), and every plan returned fits with it
    reserve = 4096
    with pytest.raises(BudgetInfeasible) as e0:
        plan_within_budget(probe.graph, probe.captured, 1)
    with pytest.raises(BudgetInfeasible) as er:
        plan_within_budget(probe.graph, probe.captured, 1, reserve_bytes=reserve)
    assert er.value.smallest_budget_bytes == e0.value.smallest_budget_bytes + reserve
    assert f"{reserve} B kept for the process group's own buffers" in str(er.value)
    fitted = 0
    for k in range(9):
        budget = s0 + (full - s0) * k // 8
        try:
            plan = plan_within_budget(probe.graph, probe.captured, budget, reserve_bytes=reserve)
        except BudgetInfeasible as err:
            assert err.smallest_budget_bytes > budget == err.budget_bytes
            continue
        assert held(plan) + reserve <= budget
        fitted += 1
    assert fitted > 0


def test_measured_step_within_a_budget_that_recomputes_dropout():
    """optimize(budget=B) at the smallest budget it meets on DropMLP, where the plan recomputes
    dropout masks: the measured step (resident + arena + fallback heap peak, which holds the
    generator states) is within B, every step, with no warning; the plan's generator-state
    figure is (n + 1) states for the n masks it redraws (recounted from the order)."""
    model, opt, batch = make("mlp_gelu_dropout")
    probe, budget = smallest_budget(model, opt, batch)
    step = optimize(model, opt, F.cross_entropy, batch(1), budget=budget, captured=probe.captured)
    n = len(_dropouts_run_again(step.graph, step.plan["order"]))
    assert n > 0 and n == sum(1 for st in step.program.steps if st.rng == "save")
    assert step.rng_state_bytes == (n + 1) * _state_bytes()
    assert step.budget_bytes == budget
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no step above the budget (a warning each)
        for i in range(3):
            torch.manual_seed(60 + i)
            step(*batch(2 + i))
            rep = step.last_report
            assert rep.mode == "planned" and rep.recomputations > 0 and rep.budget_bytes == budget
            assert rep.fallback_peak_bytes > 0  # the states are held outside the plan
            assert rep.resident_bytes + rep.total_peak_bytes <= budget, rep.why_not_met()
            assert rep.over_budget() is None
            # the gradients stay inside the step (README.md, "Using it")
            assert all(p.grad is None for p in model.parameters())


def test_step_above_its_budget_is_warned_once_and_reported():
    """libroam's plan at its own smallest budget s0 (resident + arena <= s0), given to optimize,
    is run as it is: the dropout masks it redraws keep their generator states outside the plan,
    so a step holds more than s0. Every report carries the plan's budget; one warning (not one
    per step) names the bytes over and the fallback heap peak; why_not_met() says the same
    without an argument; an eager step's report carries the budget too."""
    model, opt, batch = make("mlp_gelu_dropout")
    probe = optimize(*copy.deepcopy((model, opt)), F.cross_entropy, batch(1), cost="estimate")
    with pytest.raises(BudgetInfeasible) as e:
        plan_graph(probe.graph, budget_bytes=1)
    s0 = e.value.smallest_budget_bytes
    step = optimize(model, opt, F.cross_entropy, batch(1), captured=probe.captured,
                    plan=plan_graph(probe.graph, budget_bytes=s0))
    assert step.budget_bytes == s0 and step.rng_state_bytes > 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        step(*batch(2))
        step(*batch(3))
    over = [str(x.message) for x in w if "above the budget" in str(x.message)]
    assert len(over) == 1, [str(x.message) for x in w]
    for rep in step.reports:
        assert rep.mode == "planned" and rep.budget_bytes == s0
        held = rep.resident_bytes + rep.total_peak_bytes
        assert held == rep.resident_bytes + rep.arena_bytes + rep.fallback_peak_bytes > s0
    rep = step.reports[0]
    held = rep.resident_bytes + rep.total_peak_bytes
    words = (f"the step held {held} B = {held / (1 << 20):.2f} MiB (resident {rep.resident_bytes} "
             f"B + measured {rep.total_peak_bytes} B: arena {rep.arena_bytes} B + fallback heap "
             f"peak {rep.fallback_peak_bytes} B), {held - s0} B above the budget of "
             f"{s0 / (1 << 20):.2f} MiB ({s0} B); the fallback heap peak "
             f"({rep.fallback_peak_bytes} B) is what the plan did not cover")
    assert words in over[0] and over[0].startswith("roam: step 1 (planned): ")
    assert rep.why_not_met().startswith(words)
    assert step.summary()[-1] == "not met: " + step.last_report.why_not_met()
    assert rep.as_dict()["budget_bytes"] == s0
    assert rep.why_not_met(budget_bytes=held) is None or "budget" not in rep.why_not_met(held)
    with pytest.warns(UserWarning, match="differs from the captured step"):
        step(*_batch((8, 16), 7))  # another batch shape: an ordinary eager step
    assert step.last_report.mode == "eager" and step.last_report.budget_bytes == s0


def test_why_not_met_names_the_reports_budget():
    """A report built by hand with the repro's figures: resident 1999860 + arena 1116224 +
    fallback heap peak 30336 = 3146420 B, 692 B above a budget of 3 MiB = 3145728 B; the
    saving is met (2253440 of 2300000 B, 98.0%), so the budget is the only thing said."""
    rep = StepReport(step=2, loss=1.0, mode="planned", planned_arena_bytes=1116224,
                     arena_bytes=1116224, arena_used_bytes=1116224, fallback_peak_bytes=30336,
                     total_peak_bytes=1116224 + 30336, eager_peak_bytes=3400000,
                     planned_saving_bytes=2300000, resident_bytes=1999860,
                     budget_bytes=3 * 2 ** 20)
    assert rep.why_not_met() == (
        "the step held 3146420 B = 3.00 MiB (resident 1999860 B + measured 1146560 B: arena "
        "1116224 B + fallback heap peak 30336 B), 692 B above the budget of 3.00 MiB (3145728 "
        "B); the fallback heap peak (30336 B) is what the plan did not cover")
    assert rep.why_not_met() == rep.over_budget() == rep.as_dict()["why_not_met"]
    assert rep.why_not_met(budget_bytes=3146420) is None  # at the budget: met
    assert "692 B above" in rep.why_not_met(budget_bytes=3145728)
    rep.budget_bytes = None
    assert rep.why_not_met() is None and rep.over_budget() is None


# ---------------------------------------------------------------- budgets roam cannot meet

def test_infeasible_budget_is_one_error_before_the_first_step():
    model, opt, batch = make("mlp_gelu_dropout")
    probe, smallest = smallest_budget(model, opt, batch)
    before = copy.deepcopy(model)
    with pytest.raises(BudgetInfeasible) as e:
        optimize(model, opt, F.cross_entropy, batch(1), budget=smallest - 64,
                 captured=probe.captured)
    err = e.value
    assert err.budget_bytes == smallest - 64
    assert err.smallest_budget_bytes == smallest
    assert 0 < err.lower_bound_bytes <= smallest
    assert f"smallest budget roam meets is {smallest} B" in str(err)
    assert same_params(model, before)  # nothing ran
    # the smallest budget itself is met, by a plan within it
    step = optimize(model, opt, F.cross_entropy, batch(1), budget=smallest,
                    captured=probe.captured)
    assert step.plan["stats"]["peak_bytes"] <= smallest


def test_parse_size():
    assert parse_size("2GiB") == 2 * 1024 ** 3
    assert parse_size("1.5 MiB") == 1572864
    assert parse_size("512kib") == 512 * 1024
    assert parse_size("3GB") == 3 * 10 ** 9
    assert parse_size("100") == 100 and parse_size(100) == 100
    for bad in ("2 GiBs", "-1MiB", "0", "lots", "", True):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_run_cli_budget_reports_and_refuses(tmp_path):
    """python -m roam.run --budget: the step report names the planned and measured peak, the
    recomputations and the measured time overhead; an unmeetable budget is one line naming
    the smallest budget, exit 3, before any step."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    # resnet18 at 64 pixels, batch 8: activations above the parameters and Adam's state, so
    # recomputation lowers the peak; estimated op costs keep the plan the same in both runs
    base = [sys.executable, "-m", "roam.run", "--model", "resnet18", "--batch-size", "8",
            "--image-size", "64", "--num-classes", "10", "--steps", "2", "--quiet",
            "--cost", "estimate"]
    bad = subprocess.run(base + ["--budget", "1KiB"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert bad.returncode == 3, bad.stderr
    lines = [l for l in bad.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "smallest budget roam meets is" in lines[0], bad.stderr
    assert "step" not in bad.stdout
    smallest = int(lines[0].split("smallest budget roam meets is ")[1].split(" B")[0])
    out_json = tmp_path / "run.json"
    ok = subprocess.run(base + ["--budget", str(smallest), "--check", "--json", str(out_json)],
                        capture_output=True, text=True, env=env, timeout=600)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(out_json.read_text())
    assert summary["plan_stats"]["peak_bytes"] <= smallest
    n = recount_recomputations(summary["plan_order"])
    assert n == summary["plan_stats"]["recomputations"] > 0
    assert f"{n} recomputations" in ok.stdout
    assert "time overhead" in ok.stdout and "budget" in ok.stdout
    assert summary["bit_identical_to_graph"] is True
    assert all(s["mode"] == "planned" for s in summary["steps"])
