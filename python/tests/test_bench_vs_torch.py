"""The pieces of bench/vs_torch, on tiny models, with values worked out by hand or recounted
independently: the selective-checkpoint policy and what it recomputes, the compile backend's
partitions at activation_memory_budget 1.0 and 0.0 (each budget its own compilation), the
vit_b_16 blocks, the state restore after a budget step, and the SVG writer's coordinates."""

import copy
import importlib.util
import os
import xml.etree.ElementTree as ET
from importlib.machinery import SourceFileLoader

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import REPO_ROOT

_LOADER = SourceFileLoader("vs_torch", os.path.join(REPO_ROOT, "bench", "vs_torch"))
_SPEC = importlib.util.spec_from_loader("vs_torch", _LOADER)
BENCH = importlib.util.module_from_spec(_SPEC)
_LOADER.exec_module(BENCH)

aten = torch.ops.aten


def test_sac_policy_saves_matmuls_and_convolutions_and_recomputes_the_rest():
    from torch.utils.checkpoint import CheckpointPolicy
    for op in (aten.mm.default, aten.addmm.default, aten.bmm.default,
               aten.convolution.default):
        assert BENCH.sac_policy(None, op) == CheckpointPolicy.MUST_SAVE, op
    for op in (aten.relu.default, aten.add.Tensor, aten.gelu.default,
               aten.native_dropout.default, aten.native_layer_norm.default):
        assert BENCH.sac_policy(None, op) == CheckpointPolicy.PREFER_RECOMPUTE, op


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func] = self.ops.get(func, 0) + 1
        return func(*args, **(kwargs or {}))


class _Two(nn.Module):
    """Linear(4, 4, no bias) -> ReLU -> Linear(4, 4, no bias): two mm in the forward."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("how,mm,relu", [("eager", 3, 0), ("ckpt", 4, 1), ("sac", 3, 1)])
def test_what_each_checkpointing_recomputes_in_the_backward(how, mm, relu):
    # the backward of b(relu(a(x))) (x needs no gradient) runs 3 mm: dW_b, dh, dW_a;
    # checkpoint recomputes a's mm and the relu (the backward needs h = relu(a(x)) and a's
    # output for the relu's mask; b's output is saved by nobody, and non-reentrant
    # checkpoint stops recomputing after the last tensor the backward needs); SAC keeps a's
    # mm (MUST_SAVE) and recomputes only the relu
    torch.manual_seed(0)
    blk = _Two()
    x = torch.randn(3, 4)
    ref = copy.deepcopy(blk)
    F.mse_loss(ref(x), torch.zeros(3, 4)).backward()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.blk = blk

        def forward(self, x):
            return self.blk(x)
    model = M()
    if how == "eager":
        fwd = BENCH.loss_of(model, F.mse_loss)
    else:
        orig = BENCH.blocks_of  # one block: the whole of _Two
        BENCH.blocks_of = lambda name, m: (nn.Identity(), [m.blk])
        try:
            fwd = BENCH.blockwise("_two", model, F.mse_loss, selective=(how == "sac"))
        finally:
            BENCH.blocks_of = orig
    loss = fwd(x, torch.zeros(3, 4))
    with _Count() as c:
        loss.backward()
    assert c.ops.get(aten.mm.default, 0) == mm
    assert c.ops.get(aten.relu.default, 0) == relu
    for p, q in zip(blk.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=0, atol=1e-7)


class _MLP(nn.Module):
    """8 -> 16 -> 16 -> 4, no biases, relu then tanh."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16, bias=False)
        self.fc2 = nn.Linear(16, 16, bias=False)
        self.fc3 = nn.Linear(16, 4, bias=False)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


def test_compile_budgets_partition_differently_and_keep_the_loss():
    import torch._dynamo
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _MLP()
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    eager = copy.deepcopy(model)
    le = F.cross_entropy(eager(x), y)
    le.backward()
    records = {}
    for budget in (1.0, 0.0):  # the same function, two compiled objects, one after the other
        m = copy.deepcopy(model)
        rec = records[budget] = {}
        fwd = BENCH.compiled(m, F.cross_entropy, budget, rec)
        loss = fwd(x, y)
        loss.backward()
        assert abs(loss.item() - le.item()) <= 1e-6 * abs(le.item())
        for p, q in zip(m.parameters(), eager.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)
        assert rec["compiles"] == 1 and len(rec["partitions"]) == 1
    # budget 0.0 saves only graph inputs: by hand, the backward of the recomputed forward
    # needs x, the three weights and the labels y: 5 tensors, 4 * (5*8 + 16*8 + 16*16 + 4*16)
    # + 8 * 5 bytes. Budget 1.0 (no recomputation) saves what each op's backward reads: x
    # (for dW1), W2 and W3 (for the input gradients; dx is not needed, so W1 is not), y, the
    # relu and tanh outputs (5 x 16 each), log_softmax's output (5 x 4) and the loss's 0-dim
    # normaliser: 8 tensors
    p0, p1 = records[0.0]["partitions"][0], records[1.0]["partitions"][0]
    assert p0["saved"] == 5
    assert p0["saved_bytes"] == 4 * (5 * 8 + 16 * 8 + 16 * 16 + 4 * 16) + 8 * 5
    assert p1["saved"] == 8
    assert p1["saved_bytes"] == 4 * (5 * 8 + 16 * 16 + 4 * 16 + 5 * 16 * 2 + 5 * 4 + 1) + 8 * 5
    assert p1["rng_in_bw"] == 0 and p0["rng_in_bw"] == 0
    # of those, the activations (not graph inputs): none at 0.0; relu, tanh, log_softmax and
    # the normaliser at 1.0
    assert p0["saved_act_bytes"] == 0
    assert p1["saved_act_bytes"] == 4 * (5 * 16 * 2 + 5 * 4 + 1)
    # budget 0.0 recomputes the forward in the backward: fc1 and fc2 (addmm) run again there
    assert p0["bw_ops"] > p1["bw_ops"]


def test_partition_summary_recounts_the_backward_inputs():
    # independent recount: every tensor the forward graph saves is an input of the backward
    # graph (its placeholders less the tangents)
    from functorch.compile import aot_function, make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    seen = []

    def part(joint, inputs, **kw):
        fw, bw = min_cut_rematerialization_partition(joint, inputs, **kw)
        s = BENCH.partition_summary(fw, bw, kw["num_fwd_outputs"])
        ph = [n for n in bw.graph.nodes if n.op == "placeholder"
              and not n.name.startswith("tangents")]
        seen.append((s["saved"], len(ph)))
        return fw, bw

    def f(a, b):
        return (torch.sin(a) * torch.cos(b)).sum()
    g = aot_function(f, fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                     partition_fn=part)
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    g(a, b).backward()
    assert len(seen) == 1 and seen[0][0] == seen[0][1] > 0


def test_vit_blocks_are_the_model():
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2,
                                             num_heads=2, hidden_dim=16, mlp_dim=32,
                                             num_classes=5)
    m.train()
    x = torch.randn(2, 3, 32, 32)
    stem, blocks = BENCH.blocks_of("vit_b_16", m)
    assert len(blocks) == 3  # 2 encoder layers + the head
    y = stem(x)
    for b in blocks:
        y = b(y)
    assert torch.equal(y, m(x))


def test_restore_puts_back_the_state_bit_for_bit():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    o = torch.optim.Adam(m.parameters(), foreach=False)
    step = BENCH.loss_of(m, F.mse_loss)
    batch = (torch.randn(4, 3), torch.zeros(4, 3))
    BENCH.torch_step(step, o, batch)
    snap = BENCH.snapshot(m, o)
    assert BENCH.same_state(m, o, snap)
    BENCH.torch_step(step, o, batch)
    assert not BENCH.same_state(m, o, snap)  # parameters, running stats, Adam state moved
    BENCH.restore(m, o, snap)
    assert BENCH.same_state(m, o, snap)


def test_nice_axis_maxima_by_hand():
    assert BENCH.nice_max(1.3) == 2.0
    assert BENCH.nice_max(0.37) == 0.5
    assert BENCH.nice_max(243) == 250.0
    assert BENCH.nice_max(5) == 5.0
    assert BENCH.nice_max(0.011) == pytest.approx(0.02)
    assert BENCH.nice_max(0) == 1.0


def test_svg_point_at_the_coordinates_worked_out_by_hand():
    # frame 720 x 440, left 70, right 190, top 40, bottom 50: plot area 460 x 350 px;
    # x in [0, 2], y in [0, 100]: (1, 50) -> (70 + 460 / 2, 440 - 50 - 350 / 2) = (300, 215);
    # (2, 100) -> (530, 40); (0.5, 20) -> (185, 320)
    f = BENCH.Frame(2.0, 100.0)
    assert f.px(1, 50) == (300.0, 215.0)
    text = BENCH.svg_plot("t", [{"label": "roam", "color": "#d62728", "line": True,
                                 "points": [(1, 50, "a"), (2, 100, "b")]},
                                {"label": "eager", "color": "#000000",
                                 "points": [(0.5, 20, "")]}], frame=f)
    root = ET.fromstring(text)
    ns = "{http://www.w3.org/2000/svg}"
    circles = [(c.get("cx"), c.get("cy"), c.get("fill")) for c in root.iter(ns + "circle")
               if c.find(ns + "title") is not None]
    assert circles == [("300.0", "215.0", "#d62728"), ("530.0", "40.0", "#d62728"),
                       ("185.0", "320.0", "#000000")]
    assert any(p.get("d") == "M300.0,215.0 L530.0,40.0" for p in root.iter(ns + "path"))
    # without a frame the axes run to nice_max of the largest values: x 2.5, y 250
    auto = BENCH.svg_plot("t", [{"label": "s", "color": "red", "points": [(2.4, 243, "p")]}])
    c = next(ET.fromstring(auto).iter(ns + "circle"))
    assert (float(c.get("cx")), float(c.get("cy"))) == \
        pytest.approx((70 + 460 * 2.4 / 2.5, 390 - 350 * 243 / 250), abs=0.05)


def test_paired_ratio_and_anchor_lines_by_hand():
    # step 1 is warm-up; ratios of steps 2..4: 2/1, 3/3, 4/2 -> median 2 -> +100%
    assert BENCH.paired([9, 2, 3, 4], [9, 1, 3, 2]) == pytest.approx(100.0)
    mib = 1 << 20
    d = {"resident_bytes": 5 * mib, "blocks": 3, "rows": [
        {"row": "eager", "kind": "eager", "times": [1, 1, 1, 1], "peak_bytes": 10 * mib},
        {"row": "compile 1.0", "kind": "compile", "compile_budget": 1.0, "saved_bytes": 9 * mib,
         "saved_act_bytes": 8 * mib,
         "saved_tensors": 20, "times": [1, 1, 1, 1], "peak_bytes": 10 * mib},
        {"row": "compile 0.5", "kind": "compile", "compile_budget": 0.5, "saved_bytes": 3 * mib,
         "saved_act_bytes": 2 * mib,
         "saved_tensors": 10, "rng_in_bw": 2, "times": [1, 2, 2, 2], "peak_bytes": 4 * mib},
        {"row": "roam @ compile 0.5", "kind": "roam", "budget_bytes": 9 * mib, "met": True,
         "times": [1, 1, 1, 1], "peak_bytes": 4 * mib},
    ]}
    lines = BENCH.anchor_lines(d)
    assert len(lines) == 2
    assert ("the partition saves 2.00 MiB of activations (not inputs) = 0.25 of 1.0's (10 "
            "tensors against 20)") in lines[1]
    assert "measured peak 0.40 of compile 1.0's" in lines[1]
    assert "2 random ops recomputed in the backward" in lines[1]
    assert "roam at its peak: 4.00 MiB, met, FASTER (-50.0% step time)" in lines[1]
    assert "roam: not run" in lines[0]


def test_random_ops_in_the_backward_are_counted_unless_their_p_is_zero():
    # at budget 0.0 the partitioner recomputes the whole forward in the backward, the dropout
    # with it (pytorch/pytorch#190758); a dropout of p = 0 draws nothing and is not counted
    import torch._dynamo
    torch._dynamo.reset()
    counts = {}
    for p in (0.5, 0.0):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(p), nn.Linear(8, 3))
        rec = {}
        BENCH.compiled(m, F.cross_entropy, 0.0, rec)(torch.randn(2, 4),
                                                      torch.tensor([0, 2])).backward()
        counts[p] = rec["partitions"][0]["rng_in_bw"]
    assert counts == {0.5: 1, 0.0: 0}
    # CPU attention carries a dropout_p argument (default 0: nothing drawn), as in vit_b_16

    class Att(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(4, 4)

        def forward(self, x):
            q = self.q(x)
            return F.scaled_dot_product_attention(q, q, q).flatten(1)
    rec = {}
    BENCH.compiled(Att(), F.cross_entropy, 0.0, rec)(torch.randn(2, 1, 3, 4),
                                                     torch.tensor([0, 2])).backward()
    assert rec["partitions"][0]["rng_in_bw"] == 0
