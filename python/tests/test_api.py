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


def _lazy_cuda_seed_calls():
    """The CUDA seeding queued by torch.manual_seed for CUDA's initialisation (the same
    objects while nobody seeds again)."""
    t = torch.cuda._lazy_seed_tracker
    return t.manual_seed_all_cb, t.manual_seed_cb, list(t.call_order)


def test_capture_leaves_the_global_random_state_as_it_found_it():
    """roam.capture seeds the generators itself (torch.manual_seed(0): warm-up, trace, each
    run) and the dropout draws: afterwards the CPU generator is where the caller left it
    (the next draw is the one it would have been), and so is the CUDA seeding that
    torch.manual_seed queues while CUDA is not initialised; also when the capture raises."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
    torch.manual_seed(1234)  # not the capture's own seed 0
    model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5), nn.Linear(16, 3))  # draws a mask
    opt = torch.optim.Adam(model.parameters(), foreach=False)  # no state: a warm-up step too
    cpu, lazy = torch.get_rng_state(), _lazy_cuda_seed_calls()
    expected_next = torch.rand(3)
    torch.set_rng_state(cpu)
    graph = roam.capture(model, opt, nn.CrossEntropyLoss(), (x, y), cost="none")
    assert any(op["target"].startswith("aten.bernoulli") for op in graph.ops)  # it drew
    assert torch.equal(torch.get_rng_state(), cpu)
    assert _lazy_cuda_seed_calls() == lazy
    assert torch.equal(torch.rand(3), expected_next)

    def failing_loss(out, target):  # after the model drew its mask in the warm-up step
        raise ValueError("loss failed")
    torch.set_rng_state(cpu)
    with pytest.raises(ValueError, match="loss failed"):
        roam.capture(model, torch.optim.Adam(model.parameters(), foreach=False), failing_loss,
                     (x, y), cost="none")
    assert torch.equal(torch.get_rng_state(), cpu)
    assert _lazy_cuda_seed_calls() == lazy


def test_preserved_rng_state_restores_cuda_generators_when_initialised(monkeypatch):
    """Where CUDA is initialised (faked here: this machine has no GPU), every device's
    generator state is read on entry and written back on exit, also on an exception, beside
    the CPU generator's."""
    from roam.capture.rng import preserved_rng_state
    devices = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)]
    written = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [d.clone() for d in devices])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all",
                        lambda states: written.append([s.clone() for s in states]))
    cpu = torch.get_rng_state()
    with pytest.raises(RuntimeError, match="inside"):
        with preserved_rng_state():
            torch.rand(4)         # the CPU generator moves
            devices[0][0] = 9     # as a CUDA draw would
            raise RuntimeError("inside")
    assert torch.equal(torch.get_rng_state(), cpu)
    assert len(written) == 1 and [s.tolist() for s in written[0]] == [[1, 2], [3]]


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
