"""Recomputation on convolution nets (torch 2.x functional graphs).

- BatchNorm in training is recomputable: a plan that runs its op twice gives the same bits as
  the captured graph in program order, and leaves the running statistics (and
  ``num_batches_tracked``) exactly as that graph and as the eager loop leave them after 3 steps
  (the recomputation's own statistics outputs are read by nothing).
- Feasibility is a question of bytes: on captured conv + ReLU, conv + BatchNorm + ReLU and
  transformer nets, the smallest budget libroam names is the same with the capture's measured
  costs, its roofline estimates, no costs and all costs equal; planning at it succeeds with
  each of them.

Needs the extension ``roam._native``; skipped without it.
"""

import copy
import os
import sys

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

from roam import capture as roam_capture  # noqa: E402
from roam.executor import BudgetInfeasible, optimize, plan_graph, validate_plan  # noqa: E402

BN_TARGET = "aten._native_batch_norm_legit_functional.default"


class ConvBNReLU(nn.Module):
    """Four conv -> BatchNorm -> ReLU blocks (in-place ReLU, as torchvision writes them), a
    residual add in the middle two, pooling and a linear head; (B, 3, 16, 16)."""

    def __init__(self, c=8, classes=5, bn=True, inplace=True):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, c, 3, padding=1),
                          nn.BatchNorm2d(c) if bn else nn.Identity(),
                          nn.ReLU(inplace=inplace))
            for _ in range(4))
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        for i, b in enumerate(self.blocks):
            x = x + b(x) if i in (1, 2) else b(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class PlainConvReLU(nn.Module):
    """Nine 3x3 conv -> ReLU layers of 16 channels, pooling and a linear head; (B, 3, 32, 32).
    With the capture's measured costs, the search before feasibility was made a question of
    bytes named 6.66 MB at batch 8, without costs 4.04 MB."""

    def __init__(self, c=16, n=8, classes=5):
        super().__init__()
        layers = [nn.Conv2d(3, c, 3, padding=1), nn.ReLU()]
        for _ in range(n):
            layers += [nn.Conv2d(c, c, 3, padding=1), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class TinyTransformer(nn.Module):
    """Two pre-norm transformer blocks (attention + GELU MLP) over 12 tokens of width 16."""

    def __init__(self, d=16, classes=5):
        super().__init__()
        self.inp = nn.Linear(8, d)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, nhead=2, dim_feedforward=4 * d, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(2))
        self.out = nn.Linear(d, classes)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x.mean(dim=1))


def _images(seed, batch=4, size=16, classes=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, size, size, generator=g),
            torch.randint(0, classes, (batch,), generator=g))


def _tokens(seed, batch=4, classes=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 12, 8, generator=g), torch.randint(0, classes, (batch,), generator=g)


def _setup(model_cls, batch, **kw):
    torch.manual_seed(0)
    model = model_cls(**kw)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    eager_step(model, opt, F.cross_entropy, batch(0))  # steady state: Adam's state exists
    return model, opt


def _smallest(graph):
    """The smallest budget libroam names for ``graph`` (refused at 1 byte)."""
    with pytest.raises(BudgetInfeasible) as e:
        plan_graph(graph, budget_bytes=1, time_limit_seconds=60)
    return e.value.smallest_budget_bytes


def _buffers(m):
    return {k: v.detach().clone() for k, v in m.named_buffers()}


# ---------------------------------------------------------------- BatchNorm recomputation

def test_recomputed_batchnorm_is_bit_identical_and_keeps_running_statistics():
    model, opt = _setup(ConvBNReLU, _images)
    probe = optimize(*copy.deepcopy((model, opt)), F.cross_entropy, _images(1), cost="estimate")
    graph = probe.captured.graph
    bn_ops = {op["id"] for op in graph["ops"] if op["target"] == BN_TARGET}
    assert len(bn_ops) == 4 and all(op.get("recomputable") for op in graph["ops"]
                                    if op["id"] in bn_ops)
    with pytest.raises(BudgetInfeasible) as e:  # the smallest budget optimize meets
        optimize(model, opt, F.cross_entropy, _images(1), budget=1, captured=probe.captured)
    smallest = e.value.smallest_budget_bytes
    v1 = probe.plan["stats"]
    assert smallest < v1["resident_bytes"] + v1["arena_bytes"]
    ref_m, ref_o = copy.deepcopy((model, opt))
    eag_m, eag_o = copy.deepcopy((model, opt))
    step = optimize(model, opt, F.cross_entropy, _images(1), budget=smallest, debug=True,
                    captured=probe.captured)
    order = step.plan["order"]
    recomputed_bn = {o for o in bn_ops if order.count(o) > 1}
    assert step.plan["version"] == 2 and recomputed_bn, "no BatchNorm recomputed at the smallest budget"
    before = _buffers(model)
    for i in range(3):
        b = _images(2 + i)
        lr = step.reference_step(*b, model=ref_m, optimizer=ref_o)
        le = eager_step(eag_m, eag_o, F.cross_entropy, b)
        loss = step(*b)
        rep = step.last_report
        assert rep.mode == "planned" and rep.mismatch is None, rep
        assert rep.debug_violations == 0
        assert torch.equal(loss, lr)
        assert abs(float(loss) - float(le)) <= 1e-6 * abs(float(le))
    after, ref, eager = _buffers(model), _buffers(ref_m), _buffers(eag_m)
    assert set(after) == set(ref) == set(eager)
    for k in after:
        assert not torch.equal(after[k], before[k]), k  # the steps did update the statistics
        assert torch.equal(after[k], ref[k]), k
        if k.endswith("num_batches_tracked"):
            assert int(after[k]) == int(eager[k]) == int(before[k]) + 3, k
        else:
            assert torch.allclose(after[k], eager[k], rtol=1e-6, atol=1e-7), k
    assert same_params(model, ref_m)


# ---------------------------------------------------------------- feasibility is bytes alone

NETS = {
    "conv_relu": (PlainConvReLU, lambda i: _images(i, batch=8, size=32), {}),
    "conv_bn_relu": (ConvBNReLU, lambda i: _images(i, batch=8, size=32), dict(c=16)),
    "transformer": (TinyTransformer, lambda i: _tokens(i, batch=16), dict(d=32)),
}


@pytest.mark.parametrize("net", sorted(NETS))
def test_smallest_budget_is_the_same_whatever_the_costs(net):
    cls, batch, kw = NETS[net]
    model, opt = _setup(cls, batch, **kw)
    measured = roam_capture.capture(*copy.deepcopy((model, opt)), F.cross_entropy, batch(1),
                                    cost="measured", check_peak=False).graph
    estimated = roam_capture.capture(*copy.deepcopy((model, opt)), F.cross_entropy, batch(1),
                                     cost="estimate", check_peak=False).graph
    est = {op["id"]: op.get("cost") for op in estimated["ops"]}
    variants = {"measured": measured}
    variants["estimate"] = copy.deepcopy(measured)
    variants["none"] = copy.deepcopy(measured)
    variants["equal"] = copy.deepcopy(measured)
    for op in variants["estimate"]["ops"]:
        op["cost"] = est[op["id"]]
    for op in variants["none"]["ops"]:
        op.pop("cost", None)
    for op in variants["equal"]["ops"]:
        op["cost"] = 1e-4
    assert any(op.get("cost") for op in measured["ops"])
    assert [op["cost"] for op in variants["estimate"]["ops"]] != \
        [op["cost"] for op in measured["ops"]]
    smallest = {name: _smallest(g) for name, g in variants.items()}
    assert len(set(smallest.values())) == 1, smallest
    s = smallest["measured"]
    no_remat = plan_graph(measured)["stats"]
    assert s < no_remat["resident_bytes"] + no_remat["arena_bytes"], "nothing to recompute"
    for name, g in variants.items():
        plan = plan_graph(g, budget_bytes=s, time_limit_seconds=60)
        assert plan["version"] == 2 and plan["stats"]["peak_bytes"] <= s, name
        assert validate_plan(g, plan)["valid"], name
