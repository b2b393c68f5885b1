"""The executor (roam.optimize, the planned CPU allocator, roam.run) on tiny models.

Every comparison is exact unless stated: a roam step runs the captured fx graph in the plan's
order with the plan's arena, so loss and parameters must be *bit-identical* to the same graph
run in program order with PyTorch's default allocator (``RoamStep.reference_step``), and the
arena the allocator actually used must be the plan's arena to the byte. Against the ordinary
``model / backward / optimizer.step()`` loop the tolerance is 1e-5 relative (different ATen
decompositions may round differently; on these models the difference is 0).

Needs the extension ``roam._native`` (built by CMake into python/roam/); skipped without it.
"""

import copy
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

from roam.executor import (Program, add_rng_order_edges, native, optimize,  # noqa: E402
                           plan_graph, validate_plan)
from roam.executor.program import PlanMismatch  # noqa: E402


# ---------------------------------------------------------------- tiny models, one per family

class ConvBN(nn.Module):
    """convolution, BatchNorm, in-place ReLU, max-pool, dropout, linear; (B, 3, 8, 8)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x)), inplace=True), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


class DepthwiseSE(nn.Module):
    """MobileNet/EfficientNet family: pointwise expansion, depthwise conv, BatchNorm, SiLU,
    squeeze-excitation, projection, residual, global pooling, classifier; (B, 4, 8, 8)."""

    def __init__(self, c=4, e=8, classes=5):
        super().__init__()
        self.expand = nn.Conv2d(c, e, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(e)
        self.dw = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False)
        self.bn2 = nn.BatchNorm2d(e)
        self.se1 = nn.Conv2d(e, 2, 1)
        self.se2 = nn.Conv2d(2, e, 1)
        self.project = nn.Conv2d(e, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        y = F.silu(self.bn1(self.expand(x)))
        y = F.silu(self.bn2(self.dw(y)))
        s = torch.sigmoid(self.se2(F.silu(self.se1(F.adaptive_avg_pool2d(y, 1)))))
        y = self.bn3(self.project(y * s))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x + y, 1), 1))


class TinyGPT(nn.Module):
    """Attention family: token + position embedding, one pre-LayerNorm block with causal
    self-attention and a GELU MLP, dropout, LM head tied to the embedding; ids (B, S)."""

    def __init__(self, vocab=11, d=8, heads=2, seq=6):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.1)
        self.lnf = nn.LayerNorm(d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, ids):
        b, s = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(s))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)

        def heads(t):
            return t.view(b, s, self.heads, -1).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        att = att.masked_fill(~self.mask[:s, :s], float("-inf")).softmax(-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(b, s, -1)
        x = x + self.proj(y)
        x = x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))
        return F.linear(self.lnf(x), self.tok.weight)


class InplaceResidual(nn.Module):
    """A ResNet basic block as torchvision writes it: in-place ReLU and ``out += identity``
    (the model issue 13 measured 19 % above eager before workspaces); (B, 4, 8, 8)."""

    def __init__(self, c=4, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        out = self.relu(out)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def lm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def conv_batch(i, b=2):
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(b, 3, 8, 8, generator=g), torch.randint(0, 5, (b,), generator=g)


def dw_batch(i, b=2):
    g = torch.Generator().manual_seed(200 + i)
    return torch.randn(b, 4, 8, 8, generator=g), torch.randint(0, 5, (b,), generator=g)


def gpt_batch(i, b=2):
    g = torch.Generator().manual_seed(300 + i)
    t = torch.randint(0, 11, (b, 7), generator=g)
    return t[:, :-1].clone(), t[:, 1:].clone()


FAMILIES = {
    "conv_bn": (ConvBN, F.cross_entropy, conv_batch),
    "depthwise_se": (DepthwiseSE, F.cross_entropy, dw_batch),
    "attention": (TinyGPT, lm_loss, gpt_batch),
}
# with the families above, in test_never_above_the_eager_loop only (no saving is possible on it)
INPLACE = {"inplace_residual": (InplaceResidual, F.cross_entropy, dw_batch)}


def make(family, opt="adam", seed=0, warm=True):
    cls, loss_fn, batch = {**FAMILIES, **INPLACE}[family]
    torch.manual_seed(seed)
    model = cls()
    if opt == "adam":
        o = torch.optim.Adam(model.parameters(), lr=1e-2)
    elif opt == "adamw":
        o = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    else:
        o = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if warm:
        eager_step(model, o, loss_fn, batch(0))
    return model, o, loss_fn, batch




def rel_diff(a, b):
    worst = 0.0
    for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        d = (p.detach().double() - q.detach().double()).abs().max().item()
        s = q.detach().double().abs().max().item()
        worst = max(worst, d / s if s else d)
    return worst




def same_state(o1, o2, m1, m2):
    for p, q in zip(m1.parameters(), m2.parameters()):
        s1, s2 = o1.state[p], o2.state[q]
        for k in s1:
            if isinstance(s1[k], torch.Tensor) and not torch.equal(s1[k], s2[k]):
                return False
    return True


def run_three(family, opt="adam", steps=3, **kw):
    """roam, the captured graph in program order and the eager loop side by side."""
    model, o, loss_fn, batch = make(family, opt)
    ref_m, ref_o = copy.deepcopy((model, o))
    eag_m, eag_o = copy.deepcopy((model, o))
    step = optimize(model, o, loss_fn, batch(1), debug=True, **kw)
    losses = []
    for i in range(steps):
        b = batch(2 + i)
        torch.manual_seed(50 + i)
        lr = step.reference_step(*b, model=ref_m, optimizer=ref_o)
        torch.manual_seed(50 + i)
        le = eager_step(eag_m, eag_o, loss_fn, b)
        torch.manual_seed(50 + i)
        l = step(*b)
        losses.append((l, lr, le))
    return step, (model, o), (ref_m, ref_o), (eag_m, eag_o), losses


# ---------------------------------------------------------------- bit-identical results

@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_bit_identical_to_program_order_and_close_to_eager(family):
    step, (m, o), (rm, ro), (em, eo), losses = run_three(family)
    for rep in step.reports:
        assert rep.mode == "planned", rep
        assert rep.mismatch is None
        # the arena the allocator used is the plan's arena, to the byte
        assert rep.arena_used_bytes == rep.planned_arena_bytes == step.plan["stats"]["arena_bytes"]
        assert rep.arena_bytes == rep.planned_arena_bytes
        assert rep.debug_checks > 0 and rep.debug_violations == 0
        assert rep.escaped_arena_blocks == 0
        assert rep.total_peak_bytes == rep.arena_bytes + rep.fallback_peak_bytes
        # what was saved: never more than eager; at least the planned saving less what went
        # to the fallback heap and less the workspace bytes the eager run did not need at
        # once (Tp(program order) counts each op's scratch beside all of its outputs)
        slack = step.tp_program - step.eager_peak_bytes
        assert 0 <= slack <= 0.2 * step.tp_program
        assert rep.saved_bytes >= (rep.planned_saving_bytes - rep.fallback_peak_bytes
                               - (step.tp_program - step.eager_peak_bytes)) - slack
        assert rep.saved_bytes >= 0 and "saved" in rep.describe()
    for l, lr, le in losses:
        assert torch.equal(l, lr)
        assert abs(float(l) - float(le)) <= 1e-5 * abs(float(le))
    assert same_params(m, rm)
    assert same_state(o, ro, m, rm)
    assert rel_diff(m, em) <= 1e-5
    # the real model and optimizer were updated in place (they moved)
    assert not same_params(m, copy.deepcopy(make(family)[0]))


@pytest.mark.parametrize("family", sorted(FAMILIES) + sorted(INPLACE))
def test_never_above_the_eager_loop(family):
    """Issue 13's target on every family, the in-place one included: each step holds no more
    than the ordinary eager loop's step, both counted by the same pass-through allocator
    (bytes above what exists before the step). A plan whose arena is above the graph run
    eagerly (a kernel's scratch that eagerly is gone before its outputs exist counts beside
    them in a plan) says so and runs the program order from the start instead of holding more
    than eager once. On the in-place residual block the plan of the captured graph has an
    arena of 33472 B, below the 34176 B of the graph run eagerly, but its trial step needs
    14592 B of fallback heap (convolution backward's scratch, which eagerly sits where its
    outputs come later, finds no room beside them in that layout), and the plan with the
    servable workspaces has an arena of 34560 B, above eager: the step says so and runs the
    program order from the start."""
    from roam.run import measured
    model, o, loss_fn, batch = make(family)
    eag_m, eag_o = copy.deepcopy((model, o))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        step = optimize(model, o, loss_fn, batch(1))
    above = step.program_order_reason is not None
    assert above == (family in INPLACE)
    assert above == any("running the program order" in str(x.message) for x in w)
    for i in range(2):
        torch.manual_seed(70 + i)
        _, eager = measured(lambda: eager_step(eag_m, eag_o, loss_fn, batch(2 + i)))
        torch.manual_seed(70 + i)
        step(*batch(2 + i))
        rep = step.last_report
        assert rep.mode == ("program" if above else "planned")
        assert rep.total_peak_bytes <= eager, (rep.describe(), eager)
        if above:
            assert rep.total_peak_bytes == rep.eager_peak_bytes  # the graph run eagerly
            assert "above" in rep.why_not_met()


def test_workspaces_on_the_heap_only():
    """workspaces="heap": every unplanned allocation goes to the fallback heap; the plan
    still holds and the step is still exact. The planned trial step on copies sees that it
    would hold more than eager and runs the program order from the first step; with the
    trial skipped (trust_plan) the first planned step says so and the later ones run the
    program order."""
    step, _, _, _, losses = run_three("conv_bn", steps=2, workspaces="heap")
    assert [r.mode for r in step.reports] == ["program", "program"]
    assert step.trial_total_bytes > step.eager_peak_bytes
    assert "a planned trial step on copies measured" in step.reports[0].reason
    assert all(torch.equal(l, lr) for l, lr, _ in losses)
    step, (m, o), (rm, ro), _, losses = run_three("conv_bn", steps=2, workspaces="heap",
                                                  trust_plan=True)
    assert step.trial_total_bytes is None
    first = step.reports[0]
    assert first.mode == "planned" and first.arena_workspaces == first.block_workspaces == 0
    assert first.arena_used_bytes == first.planned_arena_bytes
    # the workspaces on the heap cost more than eager here: said once, then program order
    assert first.saved_bytes < 0 and step.reports[1].mode == "program"
    assert "MORE than the same step run eagerly" in first.describe()
    # why, in plain words: the bytes that went to the heap, and the later steps' mode
    why = first.why_not_met()
    assert why.startswith("it held more than the same graph run eagerly: ")
    assert f"{first.fallback_peak_bytes / (1 << 20):.2f} MiB went to the fallback heap" in why
    assert "the plan is off: step 1 measured" in step.reports[1].why_not_met()
    assert all(torch.equal(l, lr) for l, lr, _ in losses)
    assert same_params(m, rm)


def test_report_says_what_is_live_at_the_peak_and_what_was_met():
    """The step report carries roam plan's "at the peak" line for the plan it ran (recounted
    by roam.headline.live_at_peak; its live bytes are libroam's Tp of the plan's order) and
    summary() puts the planned headline, that line, the measured sentence and, only when
    something was not met, why."""
    from roam.headline import live_at_peak, peak_line
    model, o, loss_fn, batch = make("conv_bn")
    step = optimize(model, o, loss_fn, batch(1))
    step(*batch(2))
    rep = step.last_report
    pk = live_at_peak(step.graph, step.plan["order"], step.alignment)
    assert pk["live_bytes"] == native().theoretical_peak(
        __import__("json").dumps(step.graph), step.plan["order"], step.alignment)
    assert step.plan["order"][pk["index"]] == pk["op"]
    assert rep.at_peak == peak_line(pk) and rep.at_peak.startswith("op index ")
    assert rep.resident_bytes == step.plan["stats"]["resident_bytes"] > 0
    lines = step.summary()
    assert lines[0] == "planned: " + step.headline()
    assert lines[0].startswith(f"planned: peak "
                               f"{(rep.resident_bytes + rep.planned_arena_bytes) / (1 << 20):.2f}")
    assert lines[1] == "at the plan's peak: " + rep.at_peak
    assert lines[2] == rep.describe()
    if rep.why_not_met() is None:  # met: no "not met" line
        assert len(lines) == 3 and rep.saved_bytes >= 0
        assert rep.realised_fraction is None or rep.realised_fraction >= 0.95
    else:
        assert lines[3] == "not met: " + rep.why_not_met()
    # a budget below what the step held is said in plain words
    held = rep.resident_bytes + rep.total_peak_bytes
    assert rep.why_not_met(budget_bytes=held) is None or "budget" not in rep.why_not_met(held)
    assert f"above the budget of {(held - 1) / (1 << 20):.2f} MiB" in rep.why_not_met(held - 1)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_other_optimizers_and_lr_changes(opt):
    """SGD (lr baked into the graph) and AdamW: the optimizer's scalar constants follow the
    step count and an LR change between steps."""
    model, o, loss_fn, batch = make("conv_bn", opt)
    eag_m, eag_o = copy.deepcopy((model, o))
    step = optimize(model, o, loss_fn, batch(1), debug=True)
    for i in range(3):
        if i == 2:
            for g in o.param_groups + eag_o.param_groups:
                g["lr"] *= 0.5
        b = batch(2 + i)
        torch.manual_seed(i)
        le = eager_step(eag_m, eag_o, loss_fn, b)
        torch.manual_seed(i)
        l = step(*b)
        assert step.last_report.mode == "planned"
        assert abs(float(l) - float(le)) <= 1e-5 * abs(float(le))
    assert rel_diff(model, eag_m) <= 1e-5


def test_rng_order_edges_chain_dropouts():
    """The attention model's dropouts are ordered by their data flow already (each mask's
    new_zeros reads the activation it masks): no edge is needed, and the plan draws them in
    program order."""
    model, o, loss_fn, batch = make("attention")
    step = optimize(model, o, loss_fn, batch(1))
    rand = [op["id"] for op in step.captured.graph["ops"]
            if "bernoulli" in op["target"] or "dropout" in op["target"]]
    assert len(rand) >= 2
    g = copy.deepcopy(step.captured.graph)
    assert add_rng_order_edges(g) == 0
    pos = {oid: k for k, oid in enumerate(step.plan["order"])}
    assert [pos[r] for r in rand] == sorted(pos[r] for r in rand)


def _rng_graph(ops):
    """A graph dict of (id, target, inputs, outputs[, after]) tuples (sizes do not matter)."""
    tensors = {t for op in ops for t in op[2] + op[3]}
    return {"tensors": [{"id": t, "size": 4} for t in sorted(tensors)],
            "ops": [dict(id=op[0], target=op[1], inputs=list(op[2]), outputs=list(op[3]),
                         **({"after": list(op[4])} if len(op) > 4 else {})) for op in ops]}


@pytest.mark.parametrize("ops,edges", [
    # a mask drawn from the previous one's result: ordered by the data flow
    ([("n0", "aten.rand.default", [], ["t0"]), ("n1", "aten.relu.default", ["t0"], ["t1"]),
      ("n2", "aten.bernoulli.p", ["t1"], ["t2"])], {}),
    # two draws on parallel branches: the second waits for the first
    ([("n0", "aten.rand.default", [], ["t0"]), ("n1", "aten.rand.default", [], ["t1"]),
      ("n2", "aten.add.Tensor", ["t0", "t1"], ["t2"])], {"n1": ["n0"]}),
    # ordered through an existing after edge
    ([("n0", "aten.rand.default", [], ["t0"]), ("n1", "aten.mm.default", ["x"], ["t1"], ["n0"]),
      ("n2", "aten.bernoulli.p", ["t1"], ["t2"])], {"n1": ["n0"]}),
    # the second reads only what existed before the first: an edge; the third follows the
    # second through data
    ([("n0", "aten.relu.default", ["x"], ["t0"]), ("n1", "aten.bernoulli.p", ["x"], ["t1"]),
      ("n2", "aten.bernoulli.p", ["t0"], ["t2"]), ("n3", "aten.mul.Tensor", ["t2"], ["t3"]),
      ("n4", "aten.bernoulli.p", ["t3"], ["t4"])], {"n2": ["n1"]}),
])
def test_rng_order_edges_only_where_the_data_flow_does_not_order(ops, edges):
    g = _rng_graph(ops)
    before = {op["id"]: list(op.get("after", [])) for op in g["ops"]}
    added = add_rng_order_edges(g)
    got = {op["id"]: op.get("after", []) for op in g["ops"] if op.get("after")}
    want = {k: before.get(k, []) + [v for v in edges.get(k, []) if v not in before.get(k, [])]
            for k in set(edges) | {k for k, v in before.items() if v}}
    assert got == {k: v for k, v in want.items() if v}
    assert added == sum(len(v) for v in got.values()) - sum(len(v) for v in before.values())


# ---------------------------------------------------------------- wrong plans

def _swap_two_sizes(graph):
    """A copy of ``graph`` with the sizes of two planned storages of different sizes swapped
    (the largest and the smallest non-resident roots)."""
    g = copy.deepcopy(graph)
    roots = [t for t in g["tensors"] if "alias_of" not in t and "role" not in t and t["size"] > 0]
    big = max(roots, key=lambda t: t["size"])
    small = min(roots, key=lambda t: t["size"])
    assert big["size"] != small["size"]
    big["size"], small["size"] = small["size"], big["size"]
    return g


def test_plan_with_swapped_sizes_is_refused_and_loss_is_right():
    model, o, loss_fn, batch = make("conv_bn")
    ref_m, ref_o = copy.deepcopy((model, o))
    probe = optimize(*copy.deepcopy((model, o)), loss_fn, batch(1))
    bad = plan_graph(_swap_two_sizes(probe.graph), "program", "llfb")
    assert not validate_plan(probe.graph, bad)["valid"]
    with pytest.warns(UserWarning, match="not valid"):
        step = optimize(model, o, loss_fn, batch(1), plan=bad, debug=True,
                        captured=probe.captured)
    torch.manual_seed(1)
    lr = step.reference_step(*batch(2), model=ref_m, optimizer=ref_o)
    torch.manual_seed(1)
    l = step(*batch(2))
    assert step.last_report.mode == "unplanned"
    assert torch.equal(l, lr) and same_params(model, ref_m)


def test_trusted_plan_with_swapped_sizes_diverges_at_run_time():
    """The validator bypassed: the allocator sees requests that do not match the plan,
    switches to ordinary allocation, warns once, and the step is still exact."""
    model, o, loss_fn, batch = make("conv_bn")
    ref_m, ref_o = copy.deepcopy((model, o))
    probe = optimize(*copy.deepcopy((model, o)), loss_fn, batch(1))
    bad = plan_graph(_swap_two_sizes(probe.graph), "program", "llfb")
    step = optimize(model, o, loss_fn, batch(1), plan=bad, debug=True, trust_plan=True,
                    captured=probe.captured)
    for i in range(2):
        torch.manual_seed(i)
        lr = step.reference_step(*batch(2 + i), model=ref_m, optimizer=ref_o)
        torch.manual_seed(i)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            l = step(*batch(2 + i))
        rep = step.last_report
        if i == 0:
            assert rep.mode == "diverged" and rep.mismatch
        else:  # the diverged step 1 may measure above eager: program order from then on
            assert (rep.mode == "diverged" and rep.mismatch) or (
                rep.mode == "program" and step.reports[0].saved_bytes < 0)
        assert [str(x.message) for x in w if "diverged" in str(x.message)] == (
            [] if i else [str(w[0].message)])  # warned once, on the first step
        assert rep.debug_violations == 0
        assert torch.equal(l, lr)
    assert same_params(model, ref_m)


def test_plan_with_changed_order_is_refused_and_loss_is_right():
    model, o, loss_fn, batch = make("depthwise_se")
    ref_m, ref_o = copy.deepcopy((model, o))
    probe = optimize(*copy.deepcopy((model, o)), loss_fn, batch(1))
    bad = copy.deepcopy(probe.plan)
    # move the loss's producer to the front: it now runs before its inputs exist
    loss_op = next(op["id"] for op in probe.graph["ops"] if probe.graph["outputs"][0]
                   in op["outputs"])
    bad["order"].remove(loss_op)
    bad["order"].insert(0, loss_op)
    for trust in (False, True):
        m2, o2 = copy.deepcopy((model, o))
        r2, ro2 = copy.deepcopy((ref_m, ref_o))
        with pytest.warns(UserWarning):
            step = optimize(m2, o2, loss_fn, batch(1), plan=bad, trust_plan=trust,
                            captured=probe.captured)
        torch.manual_seed(3)
        lr = step.reference_step(*batch(2), model=r2, optimizer=ro2)
        torch.manual_seed(3)
        l = step(*batch(2))
        assert step.last_report.mode == "unplanned"
        assert torch.equal(l, lr) and same_params(m2, r2)
    with pytest.raises(PlanMismatch, match="before"):
        Program.build(probe.captured.traced.gm, probe.graph, probe.captured.op_nodes,
                      bad["order"], bad["offsets"], bad["stats"]["arena_bytes"], 64)


def test_plan_of_another_graph_is_refused():
    model, o, loss_fn, batch = make("conv_bn")
    other = optimize(*make("depthwise_se")[:3], dw_batch(1))
    ref_m, ref_o = copy.deepcopy((model, o))
    with pytest.warns(UserWarning, match="not valid"):
        step = optimize(model, o, loss_fn, batch(1), plan=other.plan)
    torch.manual_seed(0)
    lr = step.reference_step(*batch(2), model=ref_m, optimizer=ref_o)
    torch.manual_seed(0)
    assert torch.equal(step(*batch(2)), lr)
    assert step.last_report.mode == "unplanned" and same_params(model, ref_m)


def test_allocations_announced_at_the_wrong_op_are_detected():
    """The schedule shifted by one op (the allocator expects each op's outputs one op
    early): detected on the first planned op, ordinary allocation after, exact result."""
    model, o, loss_fn, batch = make("attention")
    ref_m, ref_o = copy.deepcopy((model, o))
    step = optimize(model, o, loss_fn, batch(1), debug=True)
    sched = step.program.session_schedule(step.ranks)
    step.session.configure(step.planned_arena_bytes, step.alignment, sched[1:] + [[]])
    torch.manual_seed(0)
    lr = step.reference_step(*batch(2), model=ref_m, optimizer=ref_o)
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="diverged"):
        l = step(*batch(2))
    assert step.last_report.mode == "diverged"
    assert torch.equal(l, lr) and same_params(model, ref_m)


def test_overlapping_offsets_never_share_live_bytes():
    """Every storage planned at offset 0 (trusted): the allocator refuses every slot that a
    live block still occupies; no two live blocks ever overlap (debug mode checks each
    allocation against the live set) and the loss is exact."""
    model, o, loss_fn, batch = make("conv_bn")
    ref_m, ref_o = copy.deepcopy((model, o))
    probe = optimize(*copy.deepcopy((model, o)), loss_fn, batch(1))
    bad = copy.deepcopy(probe.plan)
    bad["offsets"] = {k: 0 for k in bad["offsets"]}
    step = optimize(model, o, loss_fn, batch(1), plan=bad, trust_plan=True, debug=True,
                    captured=probe.captured)
    torch.manual_seed(0)
    lr = step.reference_step(*batch(2), model=ref_m, optimizer=ref_o)
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="still occupied"):
        l = step(*batch(2))
    rep = step.last_report
    assert rep.mode == "diverged" and "still occupied" in rep.mismatch
    assert rep.debug_checks > 50 and rep.debug_violations == 0
    assert torch.equal(l, lr)


# ---------------------------------------------------------------- the allocator itself

def test_session_serves_planned_blocks_and_refuses_occupied_bytes():
    N = native()
    s = N.Session()
    # step 0: two 256-byte blocks (the first and the second request of that size), the
    # second planned over the first (overlap)
    s.configure(1024, 64, [[(256, 0, 0), (256, 128, 1)], [(256, 512, 0)]])
    s.debug = True
    s.install(100)
    try:
        assert N.cpu_allocator_is_roam()
        s.begin_op(0)
        a = torch.empty(64)               # 256 bytes -> arena offset 0
        ws = torch.empty(10)              # 40 bytes: not planned -> fallback heap
        b = torch.empty(64)               # planned at 128, but [0, 256) is live -> fallback
        s.end_op(0, [a.data_ptr(), b.data_ptr()], "op0")
        s.begin_op(1)
        c = torch.empty(64)
        s.end_op(1, [c.data_ptr()], "op1")
        st = s.stats()
    finally:
        s.uninstall()
    base = s.arena_base
    assert not N.cpu_allocator_is_roam()
    assert a.data_ptr() == base
    assert not base <= b.data_ptr() < base + 1024
    assert st["mode"] == "diverged" and "still occupied" in st["first_mismatch"]
    assert st["first_mismatch_step"] == 0
    assert c.data_ptr() != base + 512  # ordinary allocation after the divergence
    assert st["arena_allocs"] == 1 and st["fallback_allocs"] == 3
    assert st["debug_violations"] == 0 and st["debug_checks"] == 4
    ranges = sorted(s.live_ranges())
    assert all(e1 <= b2 for (_, e1), (b2, _) in zip(ranges, ranges[1:]))
    del a, b, c, ws
    assert s.arena_live_blocks == 0 and s.stats()["fallback_live"] == 0


def test_session_rank_skips_a_workspace_of_the_output_size():
    """A kernel that first allocates a workspace of the output's size: with rank 1 the
    second request of that size gets the planned slot; a planned block freed inside its op
    is re-armed for the next request."""
    N = native()
    s = N.Session()
    s.configure(512, 64, [[(256, 256, 1)], [(256, 0, 0)]])
    s.install(100)
    try:
        s.begin_op(0)
        w = torch.empty(64)
        out = torch.empty(64)
        del w
        s.end_op(0, [out.data_ptr()], "op0")
        s.begin_op(1)
        w2 = torch.empty(64)              # rank 0: gets the slot ...
        del w2                            # ... freed inside the op: re-armed
        out2 = torch.empty(64)
        s.end_op(1, [out2.data_ptr()], "op1")
        st = s.stats()
    finally:
        s.uninstall()
    assert out.data_ptr() == s.arena_base + 256 and out2.data_ptr() == s.arena_base
    assert st["mode"] == "planned" and st["rearmed"] == 1 and st["mismatches"] == 0
    assert st["arena_high_water"] == 512


def test_session_workspaces_use_free_arena_bytes_only():
    """Unplanned requests of >= 4 KiB go to arena bytes free at that moment: never over a
    live block nor over an output of the running op that is still to come; what does not fit
    goes to the fallback heap."""
    N = native()
    s = N.Session()
    # arena 16 KiB; op 0 makes a 4 KiB output at 0; op 1 an 8 KiB output at 8192
    s.configure(16384, 64, [[(4096, 0, 0)], [(8192, 8192, 0)]])
    s.set_workspaces_in_arena(True)
    s.debug = True
    s.install(100)
    try:
        s.begin_op(0)
        out0 = torch.empty(1024)
        s.end_op(0, [out0.data_ptr()], "op0")
        s.begin_op(1)
        ws = torch.empty(1536, dtype=torch.float64)  # 12 KiB: no such free range -> heap
        ws1 = torch.empty(1025)           # 4100 bytes -> 4160: no gap that large -> heap
        ws2 = torch.empty(1024)           # 4096: the free range [4096, 8192)
        small = torch.empty(16)           # under 4 KiB: heap
        out1 = torch.empty(2048)          # its planned place was kept free
        ptrs = (ws.data_ptr(), ws1.data_ptr(), ws2.data_ptr())
        del ws, ws1, ws2, small
        s.end_op(1, [out1.data_ptr()], "op1")
        st = s.stats()
    finally:
        s.uninstall()
    base = s.arena_base
    assert st["mode"] == "planned" and st["arena_workspaces"] == 1
    assert out0.data_ptr() == base and out1.data_ptr() == base + 8192
    assert ptrs[2] == base + 4096
    assert not any(base <= p < base + 16384 for p in ptrs[:2])
    assert st["fallback_allocs"] == 3 and st["debug_violations"] == 0
    assert st["arena_high_water"] == 16384  # planned blocks only


def test_session_serves_a_workspace_from_its_block():
    """An op's requests that are not its planned outputs are sub-allocated from its planned
    workspace block in request order (first fit among the block's free bytes); what does not
    fit goes on to the fallback heap; other ops' requests never use the block."""
    N = native()
    s = N.Session()
    # arena 8 KiB: op 0 has an output of 1 KiB at 0 and a workspace block [1024, 4096);
    # op 1 an output of 1 KiB at 4096 and no workspace
    s.configure(8192, 64, [[(1024, 0, 0)], [(1024, 4096, 0)]],
                [(1024, 3072), (0, 0)])
    s.debug = True
    s.install(100)
    try:
        s.begin_op(0)
        w1 = torch.empty(200)             # 800 B (832) -> block offset 1024
        w2 = torch.empty(10)              # 40 B -> 64 B at 1856 (request order)
        out0 = torch.empty(256)           # the planned output at 0
        del w1                            # [1024, 1856) free again
        w3 = torch.empty(128)             # 512 B -> first fit: 1024
        w4 = torch.empty(600)             # 2400 B: gaps of 320 and 2176 B left -> heap
        ptrs = (w2.data_ptr(), w3.data_ptr(), w4.data_ptr())
        del w2, w3, w4
        s.end_op(0, [out0.data_ptr()], "op0")
        s.begin_op(1)
        small = torch.empty(10)           # op 1 has no block: heap
        out1 = torch.empty(256)
        p_small = small.data_ptr()
        del small
        s.end_op(1, [out1.data_ptr()], "op1")
        st = s.stats()
    finally:
        s.uninstall()
    base = s.arena_base
    assert st["mode"] == "planned" and st["mismatches"] == 0 and st["debug_violations"] == 0
    assert out0.data_ptr() == base and out1.data_ptr() == base + 4096
    assert ptrs[0] == base + 1856 and ptrs[1] == base + 1024
    assert not base <= ptrs[2] < base + 8192 and not base <= p_small < base + 8192
    assert st["block_workspaces"] == 3 and st["block_workspace_bytes"] == 832 + 64 + 512
    assert st["fallback_allocs"] == 2 and st["fallback_peak"] == 2432
    assert st["arena_high_water"] == 4096 + 1024
    with pytest.raises(ValueError):  # a block outside the arena
        s.configure(8192, 64, [[]], [(8192, 64)])


def test_pass_through_counts_like_the_arena():
    N = native()
    s = N.Session()
    s.configure(0, 64, [])
    s.set_pass_through(True)
    s.install(100)
    try:
        a = torch.empty(10)               # 40 -> 64 bytes counted
        b = torch.empty(100)              # 400 -> 448
        del a
        c = torch.empty(16)               # 64
        st = s.stats()
    finally:
        s.uninstall()
    assert st["fallback_peak"] == 64 + 448 and st["fallback_live"] == 448 + 64
    assert st["mode"] == "pass_through" and st["arena_bytes"] == 0
    del b, c


# ---------------------------------------------------------------- other divergences

def test_other_batch_shape_runs_an_eager_step():
    model, o, loss_fn, batch = make("conv_bn")
    eag_m, eag_o = copy.deepcopy((model, o))
    step = optimize(model, o, loss_fn, batch(1))
    b = batch(2, b=3)
    torch.manual_seed(0)
    le = eager_step(eag_m, eag_o, loss_fn, b)
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="differs from the captured"):
        l = step(*b)
    assert step.last_report.mode == "eager" and "differs" in step.last_report.reason
    assert torch.equal(l, le) and same_params(model, eag_m)
    l = step(*batch(3))
    assert step.last_report.mode == "planned"


def test_fresh_optimizer_first_step_eager_then_planned():
    model, o, loss_fn, batch = make("depthwise_se", warm=False)
    eag_m, eag_o = copy.deepcopy((model, o))
    step = optimize(model, o, loss_fn, batch(1), debug=True)
    assert not o.state  # nothing modified by optimize
    modes = []
    for i in range(3):
        torch.manual_seed(i)
        le = eager_step(eag_m, eag_o, loss_fn, batch(2 + i))
        torch.manual_seed(i)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            l = step(*batch(2 + i))
        modes.append(step.last_report.mode)
        assert abs(float(l) - float(le)) <= 1e-5 * abs(float(le))
    assert modes == ["eager", "planned", "planned"]
    assert rel_diff(model, eag_m) <= 1e-5
    # why the first step was not planned: the new state beside the arena would be more than
    # an eager first step holds
    assert "more than an eager first step" in step.reports[0].reason


class WideMLP(nn.Module):
    """Many parameter bytes, few activation bytes: Adam's state and the gradients dominate an
    eager first step, so a planned first step with the state created first holds less."""

    def __init__(self, depth=8):
        super().__init__()
        self.fc_in = nn.Linear(64, 256)
        self.hidden = nn.ModuleList(nn.Linear(256, 256) for _ in range(depth))
        self.fc_out = nn.Linear(256, 5)

    def forward(self, x):
        x = F.relu(self.fc_in(x))
        for fc in self.hidden:
            x = F.relu(fc(x))
        return self.fc_out(x)


def test_fresh_optimizer_first_step_planned_and_below_eager():
    """Issue 13: a fresh Adam's first step is planned too: its state is created as zeros (what
    Adam's own first step starts from) before the step, and the step then holds that state +
    the arena, measured below the ordinary eager first step (same pass-through counting);
    loss and parameters equal the eager loop's."""
    from roam.executor.api import zero_state_template
    from roam.run import measured
    torch.manual_seed(0)
    model = WideMLP()
    o = torch.optim.Adam(model.parameters(), lr=1e-2)
    eag_m, eag_o = copy.deepcopy((model, o))
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(2, 64, generator=g), torch.randint(0, 5, (2,), generator=g))
               for _ in range(3)]
    step = optimize(model, o, F.cross_entropy, batches[0], debug=True)
    assert not o.state
    le, eager_first = measured(lambda: eager_step(eag_m, eag_o, F.cross_entropy, batches[1]))
    l = step(*batches[1])
    rep = step.last_report
    params = sum(p.numel() * 4 for p in model.parameters())
    assert rep.mode == "planned", rep.reason
    # Adam's state: exp_avg and exp_avg_sq shaped like each parameter, a float32 step each
    assert rep.state_created_bytes == 2 * params + 4 * len(list(model.parameters()))
    assert rep.total_peak_bytes == rep.state_created_bytes + rep.arena_bytes + \
        rep.fallback_peak_bytes
    assert rep.total_peak_bytes <= eager_first
    # the estimate it planned on is a lower bound of the measured eager first step
    assert rep.state_created_bytes + params <= rep.eager_first_step_bytes <= eager_first
    assert "first step of a fresh optimizer" in rep.describe()
    assert torch.equal(l, le) and same_params(model, eag_m)
    assert same_state(o, eag_o, model, eag_m)
    le2 = eager_step(eag_m, eag_o, F.cross_entropy, batches[2])
    l2 = step(*batches[2])
    assert step.last_report.mode == "planned" and step.last_report.state_created_bytes == 0
    assert torch.equal(l2, le2) and same_params(model, eag_m)
    # zeros are exact for Adam, AdamW and SGD with momentum; SGD with dampening copies the
    # gradient on its first step, so zeros are not exact and its first step runs eagerly
    tpl, why = zero_state_template(torch.optim.Adam(model.parameters()))
    assert why is None and tpl[0]["exp_avg"] == ("param", None) and tpl[0]["step"][0] == "scalar"
    assert zero_state_template(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))[1] \
        is None
    tpl, why = zero_state_template(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                                   dampening=0.5))
    assert tpl is None and "does not start from zeros" in why


def test_optimize_leaves_model_and_rng_untouched():
    model, o, loss_fn, batch = make("attention")
    before = copy.deepcopy(model)
    rng = torch.get_rng_state()
    optimize(model, o, loss_fn, batch(1))
    assert torch.equal(torch.get_rng_state(), rng)
    assert same_params(model, before)
    assert not native().cpu_allocator_is_roam()


def test_eager_peak_is_measured_like_the_arena():
    """The program-order run measured in pass-through mode is within 0.5 % below
    Tp(program order) with the measured workspaces (every planned storage counted at its size
    rounded to 64 bytes), and roam's total peak beats it by what was planned, less the
    fallback peak and less that difference."""
    model, o, loss_fn, batch = make("attention")
    ref_m, ref_o = copy.deepcopy((model, o))
    step = optimize(model, o, loss_fn, batch(1), measure_eager="every")
    assert step.tp_program * 0.995 - 4096 <= step.eager_peak_bytes <= step.tp_program
    torch.manual_seed(0)
    lr = step.reference_step(*batch(2), model=ref_m, optimizer=ref_o)
    torch.manual_seed(0)
    l = step(*batch(2))  # measured eagerly on copies first: RNG and tensors untouched
    assert torch.equal(l, lr) and same_params(model, ref_m)
    rep = step.last_report
    assert rep.eager_peak_bytes == step.eager_peak_bytes
    assert rep.planned_saving_bytes == step.tp_program - step.plan["stats"]["arena_bytes"]
    assert rep.saved_bytes == rep.eager_peak_bytes - rep.total_peak_bytes
    assert rep.saved_bytes >= (rep.planned_saving_bytes - rep.fallback_peak_bytes
                               - (step.tp_program - step.eager_peak_bytes))


# ---------------------------------------------------------------- command line and build

def test_run_cli_prints_loss_and_peaks(capsys, tmp_path):
    from roam.headline import live_at_peak, peak_line
    from roam.run import main
    js = tmp_path / "run.json"
    assert main(["--model", "bert-tiny", "--batch-size", "1", "--seq-len", "8", "--steps", "2",
                 "--check", "--debug", "--quiet", "--json", str(js)]) == 0
    cap = capsys.readouterr()
    out = cap.out
    assert "[roam.run]" not in cap.err  # --quiet: no progress messages
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(("1 ", "2 "))]
    assert len(lines) == 2 and all(ln.rstrip().endswith("planned") for ln in lines)
    assert "bit-identical to the captured graph in program order: yes" in out
    # the first screen: the plan's headline and what is live at its peak, recounted here
    import json
    doc = json.loads(js.read_text())
    st = doc["plan_stats"]
    res = st["resident_bytes"]
    assert f"planned: peak {(res + st['arena_bytes']) / (1 << 20):.2f} MiB; program order on " \
           f"a CPU allocator {(res + doc['tp_program_order_bytes']) / (1 << 20):.2f} MiB" in out
    peak = next(ln for ln in out.splitlines() if ln.startswith("at the plan's peak: "))
    assert peak.startswith("at the plan's peak: op index ")
    assert doc["at_peak"]["live_bytes"] == st["theoretical_peak_bytes"]  # Tp of the plan
    assert peak == "at the plan's peak: " + peak_line(doc["at_peak"])
    # table and measured line on the same bases: resident + the step's bytes
    last = lines[-1].split()
    r = doc["steps"][-1]
    eager, graph, roam = (float(v) for v in last[3:6])
    assert roam == round((res + r["total_peak_bytes"]) / (1 << 20), 3)
    assert graph == round((res + r["eager_peak_bytes"]) / (1 << 20), 3)
    assert eager == round((res + r["eager_loop_peak_bytes"]) / (1 << 20), 3)
    measured = next(ln for ln in out.splitlines() if ln.startswith("measured (last step"))
    assert f"peak {(res + r['total_peak_bytes']) / (1 << 20):.2f} MiB" in measured
    assert f"({last[8]})" in measured and f"({last[9]})" in measured  # vs eager, vs graph
    assert any(ln.startswith(("met: ", "not met: ")) for ln in out.splitlines())


def test_run_cli_unknown_model(capsys):
    from roam.run import main
    assert main(["--model", "no-such-net", "--steps", "1"]) == 2
    assert "no-such-net" in capsys.readouterr().err


def test_extension_builds_from_a_fresh_configure(tmp_path):
    """A fresh CMake configure finds Torch and pybind11 and generates roam._native. The
    full build (a few minutes on two cores) runs with ROAM_SLOW_TESTS=1."""
    build = tmp_path / "build"
    r = subprocess.run(["cmake", "-S", REPO_ROOT, "-B", str(build), "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DBUILD_TESTING=OFF"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "roam executor: building roam._native" in r.stdout
    targets = subprocess.run(["cmake", "--build", str(build), "--target", "help"],
                             capture_output=True, text=True, timeout=120).stdout
    assert "roam_native" in targets
    if os.environ.get("ROAM_SLOW_TESTS") != "1":
        return
    r = subprocess.run(["cmake", "--build", str(build), "--target", "roam_native"],
                       capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    code = ("import sys; sys.path.insert(0, %r); import torch; from roam import _native as N; "
            "print(sorted(N.order_methods()))" % PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "program" in r.stdout, r.stderr


def test_step_in_eval_mode_runs_eagerly_and_matches_the_eager_loop():
    """The graph fixes train-mode dropout and BatchNorm: called after model.eval(), the step must
    not run the captured train-mode graph (found by a fresh reader: loss 2.937 vs 2.540 eager,
    silently). It runs an ordinary eager step in eval mode, and the plan again after train()."""
    model, o, loss_fn, batch = make("conv_bn")
    eag_m, eag_o = copy.deepcopy((model, o))
    step = optimize(model, o, loss_fn, batch(1))
    model.eval()
    eag_m.eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        l = step(*batch(2))
    le = eager_step(eag_m, eag_o, loss_fn, batch(2))
    assert step.reports[-1].mode == "eager"
    assert "train/eval mode" in step.reports[-1].reason
    assert any("train/eval mode" in str(w.message) for w in caught)
    assert torch.equal(l, le) and same_params(model, eag_m)
    model.train()
    step(*batch(3))
    assert step.reports[-1].mode == "planned"


def test_headline_names_the_simulated_cuda_caching_allocator_like_roam_plan(tmp_path):
    """The step's headline has the GPU reference that roam plan and roam compare print: the
    segments PyTorch's CUDA caching allocator would reserve (simulated) for the program order,
    resident included; recounted here by `roam compare --orders program --layouts pytorch`."""
    import gzip
    import json
    model, o, loss_fn, batch = make("conv_bn")
    step = optimize(model, o, loss_fn, batch(1))
    graph_file = tmp_path / "g.json.gz"
    with gzip.open(graph_file, "wt") as f:
        json.dump(step.graph, f)
    rows = tmp_path / "rows.json"
    roam_bin = os.environ.get("ROAM_BIN", os.path.join(REPO_ROOT, "build", "roam"))
    subprocess.run([roam_bin, "-q", "compare", str(graph_file), "--orders", "program",
                    "--layouts", "pytorch", "--json", str(rows)], check=True, capture_output=True)
    held = json.loads(rows.read_text())["reference_held_bytes"]
    assert (f"on PyTorch's CUDA caching allocator (simulated) {held / (1 << 20):.2f} MiB"
            in step.headline())


def test_small_fallback_is_printed_in_bytes_not_as_zero_mib():
    from roam.executor.report import _mib_or_bytes
    assert _mib_or_bytes(0) == "0.00 MiB"
    assert _mib_or_bytes(1024) == "1024 B"          # 0.00098 MiB would print as 0.00
    assert _mib_or_bytes(5242) == "5242 B"          # 0.004999 MiB
    assert _mib_or_bytes(5243) == "0.01 MiB"        # 0.0050001 MiB rounds to 0.01
    assert _mib_or_bytes(3 << 20) == "3.00 MiB"
