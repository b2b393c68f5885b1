"""Any torch.optim optimizer, traced through its own step() in the steady state: parameters
(and BatchNorm buffers, and optimizer state) after two captured steps equal those after two
ordinary eager ``optimizer.step()`` calls."""

import copy

import pytest
import torch

import roam
from conftest import TinyCNN, tiny_batch
from roam.capture import CaptureError, cross_entropy_loss

OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=False),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=False),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=False),
    # torch.maximum(..., out=max_exp_avg_sqs): an in-place write through an out= keyword
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, foreach=False),
    "adamw_amsgrad_foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True,
                                                         foreach=True),
}


def _eager_step(model, opt, batch):
    opt.zero_grad(set_to_none=True)
    loss = cross_entropy_loss(model(batch[0]), batch[1])
    loss.backward()
    opt.step()
    return loss.detach()


def _load(model, opt, state, inputs):
    """Write a captured step's results (params, buffers, optimizer state) into ``model`` and
    ``opt``, as the next eager step would find them."""
    plist = list(model.parameters())
    with torch.no_grad():
        for p, v in zip(plist, inputs.params):
            p.copy_(v)
        for b, v in zip(model.buffers(), inputs.buffers):
            b.copy_(v)
        for k, i in enumerate(state.state_index):
            for key, v in zip(state.state_keys[k], inputs.optimizer_state[k]):
                opt.state[plist[i]][key].copy_(v)


def _same(a, b):
    return a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_two_captured_steps_equal_two_eager_steps(kind):
    torch.manual_seed(0)
    model = TinyCNN()
    opt = OPTIMIZERS[kind](model.parameters())
    _eager_step(model, opt, tiny_batch(3))  # steady state: the optimizer state exists
    batches = [tiny_batch(4), tiny_batch(5)]

    ref_model, ref_opt = copy.deepcopy((model, opt))
    ref_losses = [_eager_step(ref_model, ref_opt, b) for b in batches]

    before = copy.deepcopy((model.state_dict(), opt.state_dict()))
    losses = []
    for b in batches:
        g = roam.capture(model, opt, cross_entropy_loss, b, cost="none")
        # capture never modifies the model or the optimizer
        assert all(_same(x, y) for x, y in zip(model.state_dict().values(),
                                                before[0].values()))
        inputs = g.state.step_inputs()
        losses.append(inputs.run(g.traced.gm))
        _load(model, opt, g.state, inputs)
        before = copy.deepcopy((model.state_dict(), opt.state_dict()))
        assert g.graph["meta"]["optimizer"] == type(opt).__name__
        opt_state = [t for t in g.graph["tensors"] if t.get("role") == "optimizer_state"]
        assert len(opt_state) == sum(len(k) for k in g.state.state_keys) > 0

    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    for (n, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert _same(p.detach(), q.detach()), n
    for (n, b), q in zip(model.named_buffers(), ref_model.buffers()):
        assert _same(b, q), n
    ref_state = [ref_opt.state[p] for p in ref_model.parameters()]
    for st, rst in zip([opt.state[p] for p in model.parameters()], ref_state):
        assert sorted(st) == sorted(rst)
        for k in st:
            if isinstance(st[k], torch.Tensor):
                assert _same(st[k], rst[k]), k
    # and the parameters really moved
    torch.manual_seed(0)
    fresh = TinyCNN()
    assert not torch.equal(fresh.fc.weight, model.fc.weight)


def test_sgd_graph_replays_exactly():
    """SGD with momentum reads no step counter: one captured graph, run twice, equals two
    eager steps on the same batch."""
    torch.manual_seed(0)
    model = TinyCNN()
    opt = OPTIMIZERS["sgd_momentum"](model.parameters())
    _eager_step(model, opt, tiny_batch(3))
    batch = tiny_batch(4)
    ref_model, ref_opt = copy.deepcopy((model, opt))
    for _ in range(2):
        _eager_step(ref_model, ref_opt, batch)
    g = roam.capture(model, opt, cross_entropy_loss, batch, cost="none")
    assert not any("step counter" in n for n in g.meta["capture"]["notes"])
    inputs = g.state.step_inputs()
    inputs.run(g.traced.gm)
    inputs.run(g.traced.gm)
    for p, q in zip(inputs.params, ref_model.parameters()):
        assert _same(p.detach(), q.detach())
    for b, q in zip(inputs.buffers, ref_model.buffers()):
        assert _same(b, q)
    (mb,) = set(g.state.state_keys)
    assert mb == ("momentum_buffer",)
    upd = [op["target"] for op in g.graph["ops"] if op["phase"] == "update"]
    # single-tensor SGD with momentum: buf.mul_(m).add_(grad, alpha=1 - dampening);
    # param.add_(buf, alpha=-lr); then BatchNorm's write-backs (running statistics, count)
    assert upd == ["aten.mul_.Tensor", "aten.add_.Tensor", "aten.add_.Tensor"] * 6 + \
        ["aten.copy_.default"] * 3


def test_adam_and_adamw_update_ops():
    for kind, per_param in [
            # step += 1, exp_avg.lerp_, exp_avg_sq.mul_().addcmul_(), denom = sqrt / bias
            # correction + eps (functional add: an inplace permission), param.addcdiv_
            ("adam", ["aten.add_.Tensor", "aten.lerp_.Scalar", "aten.mul_.Tensor",
                      "aten.addcmul_.default", "aten.sqrt.default", "aten.div.Tensor",
                      "aten.add.Tensor", "aten.addcdiv_.default"]),
            # AdamW decays the parameter first: param.mul_(1 - lr * weight_decay)
            ("adamw", ["aten.add_.Tensor", "aten.mul_.Tensor", "aten.lerp_.Scalar",
                       "aten.mul_.Tensor", "aten.addcmul_.default", "aten.sqrt.default",
                       "aten.div.Tensor", "aten.add.Tensor", "aten.addcdiv_.default"])]:
        torch.manual_seed(0)
        model = TinyCNN()
        g = roam.capture(model, OPTIMIZERS[kind](model.parameters()), cross_entropy_loss,
                         tiny_batch(1), warmup_inputs=tiny_batch(2), cost="none")
        upd = [op["target"] for op in g.graph["ops"] if op["phase"] == "update"]
        assert upd == per_param * 6 + ["aten.copy_.default"] * 3, kind
        names = [t["name"] for t in g.graph["tensors"] if t.get("role") == "optimizer_state"]
        assert names[:3] == ["conv.weight.exp_avg", "conv.weight.exp_avg_sq", "conv.weight.step"]
        assert len(names) == 18
        assert any("step counter" in n for n in g.meta["capture"]["notes"])


def test_frozen_and_unused_parameters():
    """A frozen parameter is a param input that nothing updates; a parameter outside the
    optimizer gets no update either; the optimizer's own subset is what step() touches."""
    torch.manual_seed(0)
    model = TinyCNN()
    model.conv.bias.requires_grad_(False)
    opt = torch.optim.SGD([p for n, p in model.named_parameters() if not n.startswith("fc")],
                          lr=0.1, momentum=0.9, foreach=False)
    g = roam.capture(model, opt, cross_entropy_loss, tiny_batch(1),
                     warmup_inputs=tiny_batch(2), cost="none")
    by_id = {t["id"]: t for t in g.graph["tensors"]}
    updated = set()
    for op in g.graph["ops"]:
        if op["phase"] == "update" and op["target"] != "aten.copy_.default":
            for tid in g.op_writes[op["id"]]:
                while "alias_of" in by_id[tid]:
                    tid = by_id[tid]["alias_of"]
                updated.add(by_id[tid]["name"])
    assert {n for n in updated if not n.endswith("momentum_buffer")} == {
        "conv.weight", "bn.weight", "bn.bias"}
    params = [t["name"] for t in g.graph["tensors"] if t.get("role") == "param"]
    assert params == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]


def test_optimizer_over_foreign_tensor_raises():
    model = TinyCNN()
    opt = torch.optim.SGD(list(model.parameters()) + [torch.zeros(3, requires_grad=True)],
                          lr=0.1)
    with pytest.raises(CaptureError, match="not a parameter of the model"):
        roam.capture(model, opt, cross_entropy_loss, tiny_batch(1), cost="none")
