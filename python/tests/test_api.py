"""roam.capture(model, optimizer, loss_fn, example_inputs, fake=...) -> Graph, and the per-op
cost estimate."""

import gzip
import json

import pytest
import torch
import torch.nn as nn

import roam
from conftest import TinyCNN, tiny_batch
from roam.capture import CaptureError, CostModel, Graph, read_graph
from roam.capture.cost import DEFAULT_COST_MODEL, estimate_op, op_seconds
from roam.capture.fake import new_fake_mode


def test_roam_capture_is_callable_and_graph_saves(tmp_path):
    torch.manual_seed(0)
    model = TinyCNN()
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    g = roam.capture(model, opt, nn.CrossEntropyLoss(), tiny_batch(1), cost="none")
    assert isinstance(g, Graph) and isinstance(g, roam.Graph)
    assert g.name == "tinycnn-b2-adam" and g.meta["loss"] == "CrossEntropyLoss"
    assert repr(g).startswith("<roam Graph 'tinycnn-b2-adam': ")
    g.save(tmp_path / "g.json.gz")
    g.save(str(tmp_path / "g.json"))
    assert read_graph(str(tmp_path / "g.json.gz")) == g.graph == json.loads(
        (tmp_path / "g.json").read_text())
    with gzip.open(tmp_path / "g.json.gz", "rb") as f:
        assert f.read() == g.to_json()
    # the module still reaches its names
    assert roam.capture.capture is roam.capture.api.capture
    assert "optimizer state created by one warm-up" in g.meta["capture"]["notes"][0]


class TwoHeads(nn.Module):
    """Returns (logits, aux) like GoogLeNet in training: the loss uses the primary output."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 4)
        self.aux = nn.Linear(6, 4)

    def forward(self, x):
        return self.body(x), self.aux(x)


def test_tuple_output_unused_parameters_and_custom_inputs():
    torch.manual_seed(0)
    model = TwoHeads()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    x = torch.randn(3, 6)
    g = roam.capture(model, opt, lambda out: out.pow(2).mean(), (x,), n_loss_inputs=0,
                     cost="none")
    assert [t["name"] for t in g.tensors if t.get("role") == "input"] == ["input0"]
    notes = " ".join(g.meta["capture"]["notes"])
    assert "2 parameters have no optimizer state (no gradient) and are not updated: " \
           "['aux.weight', 'aux.bias']" in notes
    assert g.meta["loss"] == "<lambda>"


def test_fake_model_needs_fake_true():
    with new_fake_mode():
        model = TinyCNN()
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    with pytest.raises(CaptureError, match="fake=True"):
        roam.capture(model, opt, nn.CrossEntropyLoss(), tiny_batch(1))
    g = roam.capture(model, opt, nn.CrossEntropyLoss(), tiny_batch(1), fake=True)
    assert g.meta["capture"]["mode"] == "fake" and g.eager_peak is None


def test_estimated_cost_by_hand():
    """One linear layer 3 -> 2 on a (4, 3) batch: the forward addmm does 2*4*3*2 + 4*2 = 56
    FLOPs and moves bias 8 + x 48 + weight^T 24 + result 32 = 112 bytes."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    cm = CostModel(name="test", flops_per_second=1e3, bytes_per_second=1e3, seconds_per_op=1.0)
    g = roam.capture(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                            foreach=False),
                     nn.CrossEntropyLoss(), (torch.randn(4, 3), torch.tensor([0, 1, 1, 0])),
                     fake=True, cost_model=cm)
    (addmm,) = [op for op in g.ops if op["target"] == "aten.addmm.default"]
    assert addmm["cost"] == pytest.approx(1.0 + 112 / 1e3)
    (t,) = [op for op in g.ops if op["target"] == "aten.t.default" and op["phase"] == "forward"]
    assert t["cost"] == 1.0  # a view moves no bytes
    assert g.meta["capture"]["notes"][-1].startswith("cost: estimated (test): max(flops / 1000")
    assert op_seconds(56, 112) == pytest.approx(
        max(56 / 19.5e12, 112 / 1.555e12) + 5e-6) == op_seconds(56, 112, DEFAULT_COST_MODEL)


def test_convolution_flops_by_hand():
    with new_fake_mode():
        x = torch.empty(2, 3, 8, 8)
        w = torch.empty(4, 3, 3, 3)
        b = torch.empty(4)
        out = torch.ops.aten.convolution.default(x, w, b, [1, 1], [0, 0], [1, 1], False,
                                                 [0, 0], 1)
        go = torch.empty(2, 4, 6, 6)
    conv = torch.ops.aten.convolution.default
    args = {"input": x, "weight": w, "bias": b, "transposed": False}
    flops, nbytes = estimate_op(conv, args, [x, w, b], [out], [])
    # 2 x 288 output elements x 27 MACs + 288 bias additions
    assert flops == 2 * 288 * 27 + 288
    assert nbytes == 4 * (384 + 108 + 4 + 288)
    bwd = torch.ops.aten.convolution_backward.default
    args = {"grad_output": go, "input": x, "weight": w, "transposed": False,
            "output_mask": [False, True, True]}
    with new_fake_mode():
        gw, gb = torch.empty(4, 3, 3, 3), torch.empty(4)
    flops, _ = estimate_op(bwd, args, [go, x, w], [gw, gb], [])
    assert flops == 2 * 288 * 27 + 288  # weight gradient + bias gradient, no input gradient
