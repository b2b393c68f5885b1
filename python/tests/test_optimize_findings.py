"""roam.optimize as a new user met it: a plan made by the CLI on a saved graph, a fresh
optimizer's first step (with and without a budget), a batch of another shape.

Sizes are worked out by hand from the models' shapes (float32, Adam: exp_avg and exp_avg_sq
shaped like each parameter and a 4-byte ``step``; tensors of the plan rounded up to 64 bytes).

Needs the extension ``roam._native`` (built by CMake into python/roam/) and, for the CLI
plan, ``build/roam`` (or ROAM_BIN); skipped without them.
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
REPO_ROOT = os.path.dirname(PYTHON_DIR)
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

from roam.executor import available  # noqa: E402

pytestmark = pytest.mark.skipif(not available(), reason="roam._native is not built")

import roam  # noqa: E402
from roam.executor import (BudgetInfeasible, optimize, plan_graph, validate_plan,  # noqa: E402
                           with_graph_costs)
from roam.run import measured  # noqa: E402

MiB = 1 << 20






# ---------------------------------------------------------------- 1. a plan made by the CLI

def gelu_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                          nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, 16, generator=g), torch.randint(0, 5, (64,), generator=g))
               for _ in range(3)]
    eager_step(model, opt, F.cross_entropy, batches[0])  # steady state: the optimizer state exists
    return model, opt, batches


def test_with_graph_costs_recounts_only_the_seconds_by_hand():
    graph = {"ops": [{"id": "a", "cost": 1.0}, {"id": "b", "cost": 2.0}, {"id": "c"},
                     {"id": "d", "cost": 0.5}]}
    plan = {"version": 2, "order": ["a", "b", "a", "c", "d", "b", "a"],
            "offsets": {"t0": 0}, "stats": {"arena_bytes": 64, "recomputations": 3,
                                            "compute_seconds": 9.0, "recompute_seconds": 7.0}}
    out = with_graph_costs(graph, plan)
    # every op once: 1 + 2 + 0 (no cost) + 0.5; runs after the first: a, b, a = 1 + 2 + 1
    assert out["stats"]["compute_seconds"] == 3.5
    assert out["stats"]["recompute_seconds"] == 4.0
    # nothing else changes, and the given plan is left as it was
    assert {k: v for k, v in out["stats"].items() if "seconds" not in k} == \
        {"arena_bytes": 64, "recomputations": 3}
    assert out["order"] is plan["order"] and plan["stats"]["compute_seconds"] == 9.0
    v1 = {"version": 1, "order": ["a"], "stats": {"arena_bytes": 0}}
    assert with_graph_costs(graph, v1) is v1


def test_cli_budget_plan_is_used_and_a_wrong_one_still_refused(tmp_path):
    roam_bin = os.environ.get("ROAM_BIN", os.path.join(REPO_ROOT, "build", "roam"))
    if not os.path.exists(roam_bin):
        pytest.skip("build/roam is not built")
    model, opt, batches = gelu_mlp()
    # the user's steps: capture with measured op seconds, save, plan with the CLI
    graph_path, plan_path = str(tmp_path / "G.json"), str(tmp_path / "P.json")
    roam.capture(*copy.deepcopy((model, opt)), F.cross_entropy, batches[0],
                 cost="measured").save(graph_path)
    with open(graph_path) as f:
        saved = json.load(f)
    with pytest.raises(BudgetInfeasible) as e:
        plan_graph(saved, budget_bytes=1)
    budget = e.value.smallest_budget_bytes
    r = subprocess.run([roam_bin, "plan", graph_path, "--budget", str(budget), "-o", plan_path],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(plan_path) as f:
        plan = json.load(f)
    order = plan["order"]
    recomputations = len(order) - len(set(order))  # runs after an op's first
    assert plan["version"] == 2 and recomputations > 0
    assert plan["stats"]["recomputations"] == recomputations
    assert plan["stats"]["recompute_seconds"] > 0  # from the measured seconds of G.json

    ref_m, ref_o = copy.deepcopy((model, opt))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not valid" warning
        step = optimize(model, opt, F.cross_entropy, batches[0], plan=plan_path, debug=True)
    assert step.unplanned_reason is None and step.program is not None
    # the cause: this capture has no op seconds (cost "none"), so the plan's seconds differ
    # from a recount on it; the structure and bytes are what is checked
    assert not any("cost" in op for op in step.graph["ops"])
    raw = validate_plan(step.graph, plan)
    assert not raw["valid"] and any("recompute_seconds" in p for p in raw["problems"])
    assert validate_plan(step.graph, with_graph_costs(step.graph, plan))["valid"]
    for i in (1, 2):
        torch.manual_seed(i)
        lr = step.reference_step(*batches[i], model=ref_m, optimizer=ref_o)
        torch.manual_seed(i)
        loss = step(*batches[i])
        rep = step.last_report
        assert rep.mode == "planned" and rep.recomputations == recomputations
        assert rep.arena_used_bytes == plan["stats"]["arena_bytes"]
        assert torch.equal(loss, lr)
    assert same_params(model, ref_m)
    lines = step.summary()
    assert lines[0] == "planned: " + step.headline() and "budget" in lines[0]

    # a plan whose structure does not match is still refused: the first op moved to the end
    bad = copy.deepcopy(plan)
    bad["order"] = bad["order"][1:] + bad["order"][:1]
    m2, o2 = copy.deepcopy((ref_m, ref_o))
    with pytest.warns(UserWarning, match="the plan is not valid for the captured graph"):
        refused = optimize(m2, o2, F.cross_entropy, batches[0], plan=bad)
    assert refused.program is None
    refused(*batches[1])
    assert refused.last_report.mode == "unplanned"
    lines = refused.summary()
    assert lines[0].startswith("plan refused: the plan is not valid for the captured graph")
    assert "every step runs the captured step in program order with ordinary allocation" \
        in lines[0]
    assert not any(line.startswith("planned:") or line.startswith("at the plan's peak")
                   for line in lines)


# ---------------------------------------------------------------- 2. a fresh optimizer's first step

def two_layers():
    """Linear(128, 512) -> ReLU -> Linear(512, 8), batch 4, fresh Adam. By hand:
    parameters W0 128*512*4 = 262144, b0 2048, W1 512*8*4 = 16384, b1 32: P = 280608 B;
    Adam's state 2 P + 4 steps * 4 B = 561232 B; the batch 4*128*4 + 4*8 = 2080 B."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 128, generator=g), torch.randint(0, 8, (4,), generator=g))
               for _ in range(3)]
    return model, opt, batches


W0, B0, W1, B1 = 262144, 2048, 16384, 32
PARAMS = W0 + B0 + W1 + B1                      # 280608
STATE = 2 * PARAMS + 4 * 4                      # 561232
BATCH = 4 * 128 * 4 + 4 * 8                     # 2080


def test_first_step_estimate_counts_the_whole_state_at_the_peak():
    """The program order's peak is W0's Adam update (its sqrt and div temporaries, 2 W0, beside
    the gradients not yet used: W1, b0, b1 -> 64 bytes, the loss, 4 -> 64, and the div's
    measured workspace); an eager first step holds the whole new state there. The planned first step
    (state + arena) is not above that, so it runs planned, and holds less than the ordinary
    eager loop's first step measured on the same counting."""
    model, opt, batches = two_layers()
    eag_m, eag_o = copy.deepcopy((model, opt))
    step = optimize(model, opt, F.cross_entropy, batches[0], debug=True)
    assert not opt.state
    g = step.graph
    assert step.resident_bytes == PARAMS + STATE + BATCH
    size = {t["id"]: t["size"] for t in g["tensors"]}
    peak_op = next(op for op in g["ops"] if op["target"] == "aten.div.Tensor"
                   and size[op["outputs"][0]] == W0)  # exp_avg_sq.sqrt() / bias correction
    ws = int(peak_op.get("workspace", 0))
    assert step.tp_program == 2 * W0 + W1 + B0 + 64 + 64 + ws
    state_bytes, estimate = step._first_step_estimate()
    assert state_bytes == STATE
    # at the peak: Tp's live bytes + the whole state (before: only W0's own state, 2 W0 + 4,
    # was counted there, 1067268 B, below the planned 1085712 B: the step ran eagerly)
    assert estimate == step.tp_program + STATE
    below = step.tp_program - step.eager_peak_bytes
    assert 0 <= below

    le, eager_first = measured(lambda: eager_step(eag_m, eag_o, F.cross_entropy, batches[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = step(*batches[1])
    rep = step.last_report
    assert rep.mode == "planned" and rep.state_created_bytes == STATE
    assert rep.eager_first_step_bytes == estimate - below
    assert rep.total_peak_bytes == STATE + rep.arena_bytes + rep.fallback_peak_bytes
    assert rep.arena_bytes == step.planned_arena_bytes
    # what existed before the step: parameters and batch, the state was created by it
    assert rep.resident_bytes == PARAMS + BATCH
    assert rep.total_peak_bytes <= rep.eager_first_step_bytes <= eager_first
    # the eager loop also holds every .grad and Adam's two temporaries: at least that
    assert eager_first >= STATE + PARAMS + 2 * W0
    assert torch.equal(loss, le) and same_params(model, eag_m)


def test_first_step_under_a_budget_is_planned_and_within_it():
    """budget = the plan's peak (resident + arena, by hand) + 64 KiB: the planned first step
    holds the parameters and batch + the new state + the arena = the plan's peak, within the
    budget; an eager first step would hold at least the state + every gradient + Adam's two
    W0 temporaries beside the parameters and batch, above it."""
    model, opt, batches = two_layers()
    probe = optimize(*copy.deepcopy((model, opt)), F.cross_entropy, batches[0])
    plan_peak = PARAMS + STATE + BATCH + probe.planned_arena_bytes
    budget = plan_peak + 64 * 1024
    assert plan_peak == 843920 + probe.planned_arena_bytes
    eager_floor = PARAMS + BATCH + STATE + PARAMS + 2 * W0   # 1648816
    assert eager_floor > budget
    step = optimize(model, opt, F.cross_entropy, batches[0], budget=budget, cost="estimate")
    assert step.budget_bytes == budget and step.recomputations == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(*batches[1])
    rep = step.last_report
    assert rep.mode == "planned" and rep.state_created_bytes == STATE
    assert rep.resident_bytes + rep.total_peak_bytes == plan_peak + rep.fallback_peak_bytes
    assert rep.why_not_met(budget) is None


def test_first_step_neither_fits_one_warning_with_both_numbers():
    """When the planned first step is above the eager estimate and the eager one is above the
    budget too, one warning names the budget and both figures (resident before the step
    included), and the lower, eager step runs; what it then measures above the budget is
    warned once more."""
    model, opt, batches = two_layers()
    step = optimize(model, opt, F.cross_entropy, batches[0])
    state_bytes, estimate = step._first_step_estimate()
    eager = estimate - (step.tp_program - step.eager_peak_bytes)
    # make the planned figure the higher one (an arena 1 MiB larger than the plan's) and the
    # budget 1 MiB: both are above it
    step.planned_arena_bytes += MiB
    step.budget_bytes = MiB
    before = PARAMS + BATCH
    with pytest.warns(UserWarning) as w:
        step(*batches[1])
    rep = step.last_report
    # the choice (estimates, before the step), then what the eager step measured above it
    assert rep.mode == "eager" and len(w) == 2
    planned_total = before + STATE + step.planned_arena_bytes
    want = (f"neither first step fits the budget of 1.00 MiB: a planned one would hold "
            f"{planned_total / MiB:.2f} MiB, an eager one about {(before + eager) / MiB:.2f} MiB")
    assert want in str(w[0].message) and want in rep.reason
    held = rep.resident_bytes + rep.total_peak_bytes
    assert rep.budget_bytes == MiB and held > MiB
    assert f"{held - MiB} B above the budget of 1.00 MiB" in str(w[1].message)
    assert rep.eager_first_step_bytes == eager and rep.resident_bytes == before


# ---------------------------------------------------------------- 3. a batch of another shape

def test_other_shape_names_the_input_and_is_counted():
    model, opt, batches = two_layers()
    eager_step(model, opt, F.cross_entropy, batches[0])  # steady state
    eag_m, eag_o = copy.deepcopy((model, opt))
    step = optimize(model, opt, F.cross_entropy, batches[0])
    g = torch.Generator().manual_seed(9)
    small = (torch.randn(6, 128, generator=g), torch.randint(0, 8, (6,), generator=g))
    want = "input 0 (data) differs from the captured step: shape (6, 128) given, (4, 128) captured"
    with pytest.warns(UserWarning) as w:
        for b in (small, small, batches[1]):
            loss = step(*b)
            assert torch.equal(loss, eager_step(eag_m, eag_o, F.cross_entropy, b))
    assert len(w) == 1 and want in str(w[0].message)
    assert [r.mode for r in step.reports] == ["eager", "eager", "planned"]
    assert step.reports[0].reason == want
    assert step.eager_steps() == {want: 2}
    assert f"eager steps: 2 of 3 ran as ordinary eager steps, nothing planned in them: 2 x {want}" \
        in step.summary()
    # strides: the same shape, transposed storage
    xt = batches[2][0].t().contiguous().t()
    with pytest.warns(UserWarning, match=r"input 0 \(data\) differs from the captured step: "
                                         r"strides \(1, 4\) given, \(128, 1\) captured"):
        step(xt, batches[2][1])
    assert step.eager_steps()[want] == 2 and len(step.eager_steps()) == 2


# ---------------------------------------------------------------- 4. a graph without workspaces

def small_cnn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                          nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(2, 3, 8, 8, generator=g), torch.randint(0, 4, (2,), generator=g))
               for _ in range(2)]
    eager_step(model, opt, F.cross_entropy, batches[0])
    return model, opt, batches


def test_capture_without_the_extension_warns_and_its_plan_is_refused_with_the_cause(
        monkeypatch):
    """A fresh reader captured before roam._native was built: the graph had no workspaces, and
    a plan made from it was refused later naming only 'workspace of op ... has no offset'."""
    import roam.capture.workspace as wsmod
    model, opt, batches = small_cnn()
    with_ext = roam.capture(*copy.deepcopy((model, opt)), F.cross_entropy, batches[0]).graph
    measured_ops = [op["id"] for op in with_ext["ops"] if op.get("workspace", 0) > 0]
    assert measured_ops  # MKL-DNN convolutions allocate scratch on this CPU
    monkeypatch.setattr(wsmod, "native_available", lambda: False)
    with pytest.warns(UserWarning, match="roam._native is not built, so the kernel workspaces"):
        bare = roam.capture(*copy.deepcopy((model, opt)), F.cross_entropy, batches[0]).graph
    monkeypatch.undo()
    assert not any("workspace" in op for op in bare["ops"])
    assert bare["meta"]["capture"]["workspace"]["mode"] == "none"
    plan = plan_graph(bare)  # the user planned the graph without workspaces
    with pytest.warns(UserWarning, match="the plan was made from a graph with other kernel "
                                         "workspaces"):
        step = optimize(*copy.deepcopy((model, opt)), F.cross_entropy, batches[0], plan=plan)
    assert step.program is None
    assert f"workspace of op '{measured_ops[0]}'" in step.unplanned_reason
