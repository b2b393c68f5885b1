"""Models a user writes, each captured, planned and run with roam.optimize on torch 2.x: an LSTM
language model; a transformer returning a dict; a U-Net with BatchNorm, ReLU(inplace=True) and
torch.cat skips; a GPT with tied embeddings trained with AdamW and weight decay; a CNN with SGD
momentum and gradient clipping in the user's own step; nn.MultiheadAttention + LayerNorm + GELU.

Each runs three steps beside the user's own eager loop on a copy: the step's result and every
parameter and buffer are bit for bit those of the captured graph run in program order
(reference_step on a third copy), within 1e-6 (relative) of the eager loop, and the step's
measured bytes (arena + fallback heap) are no more than the eager loop's, both counted by the
executor's CPU allocator in the same way."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import roam
from roam.executor.native import native


def lm_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


class LSTMLM(nn.Module):
    def __init__(self, V=50, E=16, H=24):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.lstm = nn.LSTM(E, H, num_layers=2, batch_first=True)
        self.out = nn.Linear(H, V)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.out(h)


class DictTransformer(nn.Module):
    def __init__(self, V=40, D=32):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        layer = nn.TransformerEncoderLayer(D, 4, 64, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, V)

    def forward(self, x):
        h = self.enc(self.emb(x))
        return {"logits": self.head(h), "hidden": h}


class UNet(nn.Module):
    def __init__(self, c=8, classes=3):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o),
                                 nn.ReLU(inplace=True), nn.Conv2d(o, o, 3, padding=1),
                                 nn.BatchNorm2d(o), nn.ReLU(inplace=True))
        self.d1, self.d2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.u2 = block(4 * c, 2 * c)
        self.up1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.u1 = block(2 * c, c)
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(self.pool(a))
        m = self.mid(self.pool(b))
        u = self.u2(torch.cat([self.up2(m), b], 1))
        return self.out(self.u1(torch.cat([self.up1(u), a], 1)))


class TiedGPT(nn.Module):
    def __init__(self, V=64, D=32, L=2, T=16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True,
                                       norm_first=True, activation="gelu") for _ in range(L)])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight  # tied

    def forward(self, x):
        T = x.shape[1]
        h = self.wte(x) + self.wpe(torch.arange(T))
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        for b in self.blocks:
            h = b(h, src_mask=mask, is_causal=True)
        return self.head(self.ln(h))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(),
                               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x):
        return self.f(x)


class MHABlock(nn.Module):
    def __init__(self, D=32):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.mha = nn.MultiheadAttention(D, 4, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.head = nn.Linear(D, 5)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.mha(h, h, h, need_weights=False)[0]
        x = x + self.ff(self.ln2(x))
        return self.head(x.mean(1))


def _tokens(V, B, T):
    def make(g):
        return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
    return make


CASES = {
    "lstm_lm": (LSTMLM, lambda p: torch.optim.Adam(p), lm_loss, _tokens(50, 2, 12)),
    "dict_transformer": (DictTransformer, lambda p: torch.optim.Adam(p),
                         lambda out, y: lm_loss(out["logits"], y), _tokens(40, 2, 10)),
    "unet_bn_inplace_cat": (UNet, lambda p: torch.optim.Adam(p), F.cross_entropy,
                            lambda g: (torch.randn(2, 3, 16, 16, generator=g),
                                       torch.randint(0, 3, (2, 16, 16), generator=g))),
    "tied_gpt_adamw": (TiedGPT, lambda p: torch.optim.AdamW(p, weight_decay=0.1), lm_loss,
                       _tokens(64, 2, 16)),
    "mha_ln_gelu": (MHABlock, lambda p: torch.optim.Adam(p), F.cross_entropy,
                    lambda g: (torch.randn(2, 6, 32, generator=g),
                               torch.randint(0, 5, (2,), generator=g))),
}


def _measured(fn):
    """``(fn(), bytes allocated above what existed, at the peak)``: a pass-through session of
    the executor's allocator (64 bytes per allocation), as the step reports count."""
    from roam.executor.native import pass_through_peak
    return pass_through_peak(fn)


def _max_rel(a, b):
    return max(float(((x - y).abs() / y.abs().clamp_min(1e-12)).max())
               for x, y in zip(a, b) if x.numel())


def _tensors(m):
    return [t.detach() for t in list(m.parameters()) + list(m.buffers())]


@pytest.mark.parametrize("name", sorted(CASES))
def test_user_model_planned_steps(name):
    cls, make_opt, loss_fn, make_batch = CASES[name]
    torch.manual_seed(0)
    model = cls()
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(1)
    batches = [make_batch(g) for _ in range(4)]

    def eager(m, o, b):
        o.zero_grad(set_to_none=True)
        out = m(b[0])
        loss = loss_fn(out, b[1])
        loss.backward()
        o.step()
        return loss.detach()
    eager(model, opt, batches[0])  # steady state: the optimizer's state exists
    ref_model, ref_opt = copy.deepcopy((model, opt))
    prog_model, prog_opt = copy.deepcopy((model, opt))
    torch.manual_seed(7)
    step = roam.optimize(model, opt, loss_fn, batches[1])
    assert step.program is not None, step.unplanned_reason
    g_ = step.captured.graph
    assert any(op.get("inplace") for op in g_["ops"]) or name == "lstm_lm"
    for k, b in enumerate(batches[1:]):
        torch.manual_seed(100 + k)  # dropout draws: the same in all three
        loss = step(*b)
        torch.manual_seed(100 + k)
        ref = step.reference_step(*b, model=prog_model, optimizer=prog_opt)
        torch.manual_seed(100 + k)
        ref_loss, eager_bytes = _measured(lambda: eager(ref_model, ref_opt, b))
        rep = step.last_report
        assert rep.mode in ("planned", "program"), (rep.mode, rep.reason)
        assert torch.equal(loss, ref)
        assert all(torch.equal(x, y) for x, y in zip(_tensors(model), _tensors(prog_model)))
        assert float(abs(loss - ref_loss) / abs(ref_loss)) <= 1e-6
        assert _max_rel(_tensors(model), _tensors(ref_model)) <= 1e-5
        # no more than the user's eager loop, which holds the gradients after its step too
        assert rep.total_peak_bytes <= eager_bytes, (rep.total_peak_bytes, eager_bytes)
    assert step.reports[-1].mode == "planned", step.program_order_reason


def test_cnn_with_momentum_and_clipping_in_the_users_loop():
    """The user's own step with clip_grad_norm_ between backward() and step(): bit for bit
    their eager loop (no more ``.grad`` lost to a roam step: the clipping is in the graph)."""
    import torchvision

    def make():  # a CNN with BatchNorm and residual blocks (small images: quick)
        torch.manual_seed(3)
        m = torchvision.models.resnet18(num_classes=10)
        o = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

        def train_step(x, y):
            o.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.25)
            o.step()
            return loss
        return m, o, train_step
    m, o, fn = make()
    m2, o2, fn2 = make()
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g))
               for _ in range(4)]
    fn(*batches[0])
    fn2(*batches[0])
    step = roam.optimize(fn, batches[1])
    for b in batches[1:]:
        loss = step(*b)
        ref, eager_bytes = _measured(lambda: fn2(*b))
        assert torch.equal(loss, ref.detach())
        assert all(torch.equal(p, q) for p, q in zip(m.parameters(), m2.parameters()))
        assert step.last_report.total_peak_bytes <= eager_bytes
    assert step.last_report.mode == "planned", step.program_order_reason


@pytest.mark.parametrize("kind", ["adam", "adam_foreach", "adam_fused", "adamw_foreach",
                                  "adamw_fused", "sgd", "sgd_foreach", "sgd_fused"])
def test_every_optimizer_form_is_captured_and_runs(kind):
    """Single-tensor, foreach and fused forms of Adam, AdamW and SGD: the update is in the
    graph (its writes to parameters and state in place), the step is bit-identical to the
    eager loop."""
    base, _, form = kind.partition("_")
    kw = {"fused": True} if form == "fused" else {"foreach": form == "foreach"}
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[base]
    extra = {"lr": 0.05, "momentum": 0.9} if base == "sgd" else {"weight_decay": 0.1}

    def make():
        torch.manual_seed(5)
        m = SmallCNN()
        return m, cls(m.parameters(), **extra, **kw)
    m, o = make()
    m2, o2 = make()
    g = torch.Generator().manual_seed(6)
    batches = [(torch.randn(4, 3, 12, 12, generator=g), torch.randint(0, 10, (4,), generator=g))
               for _ in range(3)]
    for mm, oo in ((m, o), (m2, o2)):
        oo.zero_grad()
        F.cross_entropy(mm(batches[0][0]), batches[0][1]).backward()
        oo.step()
    step = roam.optimize(m, o, F.cross_entropy, batches[1])
    graph = step.captured.graph
    upd = [op["target"] for op in graph["ops"] if op["phase"] == "update"]
    if form == "fused":
        assert f"aten._fused_{base}_.default" in upd
    elif form == "foreach":
        assert any(t.startswith("aten._foreach_") for t in upd)
    by_id = {t["id"]: t for t in graph["tensors"]}

    def root(tid):
        while "alias_of" in by_id[tid]:
            tid = by_id[tid]["alias_of"]
        return by_id[tid]
    written = {root(tid)["name"] for oid, tids in step.captured.op_writes.items()
               for tid in tids if root(tid).get("role") == "param"}
    assert written == {n for n, _ in m.named_parameters()}
    for b in batches[1:]:
        loss = step(*b)
        o2.zero_grad()
        ref = F.cross_entropy(m2(b[0]), b[1])
        ref.backward()
        o2.step()
        assert torch.equal(loss, ref.detach())
        assert all(torch.equal(p, q) for p, q in zip(m.parameters(), m2.parameters()))


@pytest.mark.parametrize("name", ["unet_bn_inplace_cat", "tied_gpt_adamw"])
def test_optimize_and_roam_plan_give_the_same_plan_and_headline(tmp_path, name):
    """One planning path: the graph roam.optimize planned, saved and planned by `roam plan`,
    gives optimize's order, offsets and in-place writes, and the headline optimize reports is
    the first line `roam plan` prints (lower bound included: the bound over orders for a plan
    without recomputation). That graph is the capture itself, or, where the plan of the
    capture could not serve some kernel's scratch (the U-Net's convolutions on this CPU), the
    capture with its servable workspaces (roam.executor.planning.servable_workspaces)."""
    import json
    import subprocess
    from conftest import roam_binary
    from roam.capture.io import write_graph
    from roam.executor.planning import servable_workspaces
    cls, make_opt, loss_fn, make_batch = CASES[name]
    torch.manual_seed(0)
    model = cls()
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(1)
    b0, b1 = make_batch(g), make_batch(g)
    opt.zero_grad()
    loss_fn(model(b0[0]), b0[1]).backward()
    opt.step()
    captured = roam.capture(model, opt, loss_fn, b1, cost="none")
    step = roam.optimize(model, opt, loss_fn, b1, captured=captured)
    assert step.program_order_reason is None
    expect = copy.deepcopy(captured.graph)
    if step.replanned_reason is not None:
        assert servable_workspaces(expect) > 0
    assert step.graph == expect
    gpath, ppath = tmp_path / "g.json", tmp_path / "g.plan.json"
    write_graph(step.graph, str(gpath))
    r = subprocess.run([roam_binary(), "plan", str(gpath), "-o", str(ppath), "--time-limit",
                        "60"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    cli = json.loads(ppath.read_text())
    for key in ("order", "offsets", "inplace", "workspace_offsets"):
        assert cli.get(key) == step.plan.get(key), key
    assert r.stdout.splitlines()[0] == step.headline()
