"""The ``recomputable`` and ``module`` fields of captured ops (GRAPH_FORMAT.md): the exact
value for each kind of op on tiny hand-made models, and the rules of
:func:`roam.capture.schema.recompute_blocker` on operator schemas alone."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import roam
from conftest import TinyCNN, tiny_batch
from roam.capture.schema import is_random_op, recompute_blocker, schema_mutates

aten = torch.ops.aten


def _capture(model, inputs, fake=False, eval_mode=False):
    torch.manual_seed(0)
    model.train(not eval_mode)
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    return roam.capture(model, opt, nn.CrossEntropyLoss(), inputs, cost="none", fake=fake,
                        check_peak=not fake)


def _vector_batch(features=6, batch=4, classes=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, features, generator=g),
            torch.randint(0, classes, (batch,), generator=g))


def _root(graph, tid):
    by_id = {t["id"]: t for t in graph["tensors"]}
    while "alias_of" in by_id[tid]:
        tid = by_id[tid]["alias_of"]
    return by_id[tid]


def _check_common(g):
    """Every op has a boolean ``recomputable``; meta counts them; writes, resident aliases
    and phases agree with the rules."""
    graph = g.graph
    assert all(isinstance(op["recomputable"], bool) for op in graph["ops"])
    n = sum(op["recomputable"] for op in graph["ops"])
    assert graph["meta"]["recomputable_ops"] == n
    info = graph["meta"]["capture"]["recomputable"]
    assert info["ops"] == n
    assert sum(info["not_recomputable"].values()) == len(graph["ops"]) - n
    for op in graph["ops"]:
        if g.op_writes[op["id"]]:
            assert op["recomputable"] is False, op
        for o in op["outputs"]:
            t = next(x for x in graph["tensors"] if x["id"] == o)
            if "alias_of" in t and "role" in _root(graph, o):
                assert op["recomputable"] is False, op
        if op["phase"] == "update" and op["target"].split(".")[1].endswith("_"):
            assert op["recomputable"] is False, op
        if "module" in op:
            assert isinstance(op["module"], str) and op["module"]
            assert op["phase"] in ("forward", "backward")
        if op.get("inplace"):  # a permission: a functional op, recomputable
            assert op["recomputable"] is True and not g.op_writes[op["id"]], op
    assert graph["meta"]["capture"]["module"]["ops"] == sum("module" in op
                                                          for op in graph["ops"])


def _ops(g, target, phase=None):
    return [op for op in g.graph["ops"]
            if op["target"] == target and (phase is None or op["phase"] == phase)]


def _values(g, target, phase=None):
    return {op["recomputable"] for op in _ops(g, target, phase)}


def _modules(g, target, phase=None):
    return [op.get("module") for op in _ops(g, target, phase)]


# ---------------------------------------------------------------- Linear + ReLU

@pytest.fixture(scope="module")
def mlp_capture():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    return _capture(model, _vector_batch())


def test_linear_relu(mlp_capture):
    g = mlp_capture
    _check_common(g)
    # t(weight) is a view of a parameter: its output aliases a resident tensor
    assert _values(g, "aten.t.default", "forward") == {False}
    assert _values(g, "aten.addmm.default") == {True}
    assert _values(g, "aten.relu.default") == {True}
    assert _values(g, "aten.threshold_backward.default") == {True}
    assert _values(g, "aten.mm.default") == {True}
    assert _values(g, "aten._log_softmax.default") == {True}
    assert _values(g, "aten.nll_loss_backward.default") == {True}
    # views of intermediate tensors (the gradients' transposes) are recomputable
    views = [op for op in _ops(g, "aten.t.default", "backward")
             if "role" not in _root(g.graph, op["outputs"][0])]
    assert views and all(op["recomputable"] for op in views)
    # Adam: in-place updates of parameters and state are not; sqrt / div of the state are
    for t in ("aten.add_.Tensor", "aten.mul_.Tensor", "aten.addcmul_.default",
              "aten.addcdiv_.default"):
        assert _values(g, t, "update") == {False}, t
    assert _values(g, "aten.sqrt.default", "update") == {True}
    assert _values(g, "aten.div.Tensor", "update") == {True}
    info = g.meta["capture"]["recomputable"]["not_recomputable"]
    assert info["random"] == 0 and info["aliases_resident"] >= 2 and info["writes"] > 0


def test_linear_relu_modules(mlp_capture):
    g = mlp_capture
    assert _modules(g, "aten.addmm.default") == ["0", "2"]
    assert _modules(g, "aten.relu.default") == ["1"]
    assert _modules(g, "aten.t.default", "forward") == ["0", "2"]
    # backward ops get the module of the forward op they differentiate
    assert _modules(g, "aten.threshold_backward.default") == ["1"]
    assert sorted(_modules(g, "aten.mm.default", "backward")) == ["0", "2", "2"]
    # the loss is not part of the model; the optimizer update is in no module's forward
    for t in ("aten._log_softmax.default", "aten.nll_loss_forward.default",
              "aten.nll_loss_backward.default", "aten.ones_like.default"):
        assert _modules(g, t) == [None], t
    assert all("module" not in op for op in g.ops if op["phase"] == "update")


# ---------------------------------------------------------------- Conv + BatchNorm + ReLU_

@pytest.fixture(scope="module")
def cnn_capture():
    torch.manual_seed(0)
    return _capture(TinyCNN(), tiny_batch(1))


def test_conv_batchnorm_inplace_relu(cnn_capture):
    g = cnn_capture
    _check_common(g)
    assert _values(g, "aten.convolution.default") == {True}
    # training-mode batch norm is functional: it returns the new running statistics and
    # writes nothing (the write-backs copy_ them into the buffers at the end), so it is
    # recomputable; so is num_batches_tracked + 1
    (bn,) = _ops(g, "aten._native_batch_norm_legit_functional.default")
    assert bn["recomputable"] is True and not g.op_writes[bn["id"]]
    (nbt,) = _ops(g, "aten.add.Tensor", "forward")
    assert nbt["recomputable"] is True
    wb = _ops(g, "aten.copy_.default", "update")
    assert len(wb) == 3 and all(not op["recomputable"] for op in wb)
    assert sorted(_root(g.graph, op["inputs"][0])["name"] for op in wb) == [
        "bn.num_batches_tracked", "bn.running_mean", "bn.running_var"]
    # relu_ is a functional relu with the permission to write over its input
    (relu,) = _ops(g, "aten.relu.default")
    assert relu["recomputable"] is True and relu["inplace"] == [[0, 0]]
    assert _values(g, "aten.empty.memory_format") == {False}  # contents unspecified
    assert _values(g, "aten.max_pool2d_with_indices.default") == {True}
    assert _values(g, "aten.view.default", "forward") == {True}  # view of pooled
    for t in ("aten.convolution_backward.default", "aten.native_batch_norm_backward.default",
              "aten.threshold_backward.default", "aten.max_pool2d_with_indices_backward.default"):
        assert _values(g, t) == {True}, t
    assert g.meta["capture"]["recomputable"]["not_recomputable"]["uninitialized"] == 1


def test_conv_batchnorm_modules(cnn_capture):
    g = cnn_capture
    expect = {"aten.convolution.default": ["conv"],
              "aten._native_batch_norm_legit_functional.default": ["bn"],
              "aten.relu.default": ["relu"], "aten.max_pool2d_with_indices.default": ["pool"],
              "aten.addmm.default": ["fc"], "aten.convolution_backward.default": ["conv"],
              "aten.native_batch_norm_backward.default": ["bn"],
              "aten.threshold_backward.default": ["relu"],
              "aten.max_pool2d_with_indices_backward.default": ["pool"]}
    for t, m in expect.items():
        assert _modules(g, t) == m, t
    # torch.flatten runs in the root module's own forward: no module, forward and backward
    assert _modules(g, "aten.view.default", "forward") == [None]
    # the write-backs at the end are in no module's forward
    assert _modules(g, "aten.copy_.default") == [None] * 3


def test_batchnorm_in_eval_mode_is_recomputable():
    torch.manual_seed(0)
    g = _capture(TinyCNN(), tiny_batch(1), eval_mode=True)
    _check_common(g)
    (bn,) = _ops(g, "aten.native_batch_norm.default")
    assert not g.op_writes[bn["id"]] and bn["recomputable"] is True


# ---------------------------------------------------------------- dropout

class NativeDropout(nn.Module):
    """``torch.native_dropout`` called directly (what CUDA's fused dropout runs)."""

    def forward(self, x):
        return torch.native_dropout(x, 0.5, True)[0]


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(8, 8)
        self.ndrop = NativeDropout()
        self.fc3 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc3(self.ndrop(self.fc2(self.drop(F.relu(self.fc1(x))))))


@pytest.mark.parametrize("fake", [False, True])
def test_dropout_mask_is_recomputable(fake):
    torch.manual_seed(0)
    g = _capture(DropoutNet(), _vector_batch(), fake=fake)
    _check_common(g)
    # nn.Dropout on the CPU is empty_like, bernoulli_ (random, in place), div_ (in place) and
    # mul; the capture draws the mask out of place (functional_dropout_masks) and div_ is a
    # functional div with an inplace permission: every op of it is recomputable, the random
    # one because the executor replays its generator state
    fwd = [(op["target"], op["recomputable"], op.get("inplace")) for op in g.ops
           if op.get("module") == "drop" and op["phase"] == "forward"]
    assert fwd == [("aten.new_zeros.default", True, None), ("aten.expand.default", True, None),
                   ("aten.bernoulli.p", True, None), ("aten.div.Scalar", True, [[0, 0]]),
                   ("aten.mul.Tensor", True, None)]
    assert any(n.startswith("1 dropout masks drawn out of place") for n in
               g.graph["meta"]["capture"]["notes"])
    # the 4-byte zero that gives the mask its dtype, its expanded view (no bytes of its own),
    # then the mask's bytes: batch 4 x 8 features, float32
    by_id = {t["id"]: t for t in g.graph["tensors"]}
    outs = [by_id[op["outputs"][0]] for op in g.ops
            if op.get("module") == "drop" and op["phase"] == "forward"]
    assert outs[0]["size"] == 4 and "alias_of" not in outs[0]
    assert outs[1]["alias_of"] == outs[0]["id"]
    assert [t["size"] for t in outs[2:]] == [4 * 8 * 4] * 3
    assert not any("alias_of" in t for t in outs[2:])
    (drop,) = _ops(g, "aten.native_dropout.default")  # out of place, default generator
    assert drop["recomputable"] is True and drop["module"] == "ndrop"
    counts = g.graph["meta"]["capture"]["recomputable"]["not_recomputable"]
    assert counts["random"] == 0 and counts["uninitialized"] == 0
    # the backward of each is a deterministic product with the saved mask
    (back,) = _ops(g, "aten.native_dropout_backward.default")
    assert back["recomputable"] is True and back["module"] == "ndrop"
    assert [op["recomputable"] for op in g.ops
            if op.get("module") == "drop" and op["phase"] == "backward"] == [True]
    # F.relu called in the root's forward: no module
    assert _modules(g, "aten.relu.default") == [None]


def _dropout_twice(x):
    return F.dropout(x, 0.3, True) * 2 + F.dropout(x.t(), 0.5, True).t()


@pytest.mark.parametrize("shape,permute", [((5, 7), False), ((6, 4), True), ((33, 65), False)])
def test_functional_dropout_masks_draw_the_same_bits(shape, permute):
    """The rewritten graph gives the bits of the traced one (same seed) and leaves the
    generator where the traced one leaves it. torch 2.x draws a mask into empty_like of the
    input (its layout); bernoulli_ fills it in memory order: the mask of the transposed one of
    x, x.t() is drawn contiguously in that order and viewed in the input's layout."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from roam.capture.trace import functional_dropout_masks
    x = torch.randn(*shape)
    if permute:
        x = x.t()
    gm = make_fx(_dropout_twice)(x)
    ref_targets = [n.target for n in gm.graph.nodes]
    assert ref_targets.count(aten.bernoulli_.float) == 2
    results = []
    for rewrite in (False, True):
        g = make_fx(_dropout_twice)(x)
        if rewrite:
            assert functional_dropout_masks(g) == 2
            targets = [n.target for n in g.graph.nodes]
            assert aten.bernoulli_.float not in targets and aten.empty_like.default not in targets
            assert targets.count(aten.bernoulli.p) == 2
            assert targets.count(aten.permute.default) == 1  # the transposed input's mask
        torch.manual_seed(11)
        y = g(x)
        results.append((y, torch.rand(3)))
    (y0, r0), (y1, r1) = results
    assert torch.equal(y0, y1) and torch.equal(r0, r1)
    assert torch.equal(y0, (torch.manual_seed(11), _dropout_twice(x))[1])


def test_functional_dropout_masks_leave_other_patterns_alone():
    """A mask read before its ``div_`` (the values read could differ) is not rewritten; a mask
    in a transposed layout and one multiplied in place (nn.Dropout(inplace=True): the mask is
    held once either way) are, with the same bits. (A ``bernoulli_`` with a generator of its
    own is skipped too, but make_fx cannot trace a Generator.)"""
    from torch.fx.experimental.proxy_tensor import make_fx
    from roam.capture.trace import functional_dropout_masks
    x = torch.randn(6, 4).t()

    def preserve(x):
        return x * torch.empty_like(x).bernoulli_(0.5).div_(0.5)

    def read_early(x):
        m = torch.empty_like(x, memory_format=torch.contiguous_format).bernoulli_(0.5)
        s = m.sum()
        return x * m.div_(0.5) + s

    def in_place(x):  # nn.Dropout(inplace=True)
        return F.dropout(x.clone(), 0.5, True, inplace=True)

    for f, n in ((preserve, 1), (read_early, 0), (in_place, 1)):
        g = make_fx(f)(x)
        ref = make_fx(f)(x)
        assert functional_dropout_masks(g) == n, f.__name__
        torch.manual_seed(3)
        a = g(x)
        torch.manual_seed(3)
        assert torch.equal(a, ref(x)), f.__name__


def test_fake_and_real_captures_agree_on_both_fields():
    torch.manual_seed(0)
    model = TinyCNN()
    real = _capture(model, tiny_batch(1))
    fake = _capture(model, tiny_batch(1), fake=True)
    assert [(op["recomputable"], op.get("module")) for op in real.ops] == \
        [(op["recomputable"], op.get("module")) for op in fake.ops]


# ---------------------------------------------------------------- x += y

class InplaceAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.b = nn.Linear(6, 8)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        y = self.a(x)
        y += self.b(x)
        return self.fc(y)


def test_inplace_add():
    torch.manual_seed(0)
    g = _capture(InplaceAdd(), _vector_batch())
    _check_common(g)
    (add,) = _ops(g, "aten.add.Tensor", "forward")
    # functional, with the permission to write over y, as eager PyTorch did
    assert add["recomputable"] is True and "module" not in add  # root forward
    assert add["inplace"] == [[0, 0]]
    assert _values(g, "aten.addmm.default") == {True}
    assert _modules(g, "aten.addmm.default") == ["a", "b", "fc"]
    # the gradient of x += y passes through unchanged: both Linear backward mm's of a and b
    mods = _modules(g, "aten.mm.default", "backward")
    assert sorted(m for m in mods if m) == ["a", "b", "fc", "fc"]


# ---------------------------------------------------------------- module paths

class Shared(nn.Module):
    """One ReLU registered under two names (ambiguous path), one nested block."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 8), nn.Tanh())
        self.act = nn.ReLU()
        self.act2 = self.act
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.act2(self.act(self.block(x))))


def test_module_paths_nested_and_ambiguous():
    torch.manual_seed(0)
    g = _capture(Shared(), _vector_batch())
    _check_common(g)
    assert _modules(g, "aten.addmm.default") == ["block.0", "fc"]
    assert _modules(g, "aten.tanh.default") == ["block.1"]
    assert _modules(g, "aten.tanh_backward.default") == ["block.1"]
    # the ReLU has two names under the same parent: no module rather than a guess
    assert _modules(g, "aten.relu.default") == [None, None]
    assert _modules(g, "aten.threshold_backward.default") == [None, None]


# ---------------------------------------------------------------- rules on schemas

@pytest.mark.parametrize("op,written,resident,expected", [
    (aten.addmm.default, [], [], None),
    (aten.mm.default, [], [], None),
    (aten.view.default, [], [False], None),
    (aten.t.default, [], [True], "aliases_resident"),
    (aten.relu_.default, ["t1"], [False], "writes"),
    (aten.relu_.default, [], [False], "writes"),  # the schema alone says so
    (aten.zero_.default, [], [False], "writes"),
    (aten.copy_.default, [], [False], "writes"),
    (aten.add.out, [], [], "writes"),
    (aten.addcdiv_.default, ["t0"], [True], "writes"),
    (aten.native_batch_norm.default, ["t3", "t4"], [], "writes"),
    (aten.native_batch_norm.default, [], [], None),
    # out of place, default generator: the executor replays its state
    (aten.native_dropout.default, [], [], None),
    (aten.bernoulli.p, [], [], None),
    (aten.rand.default, [], [], None),
    (aten.randn_like.default, [], [], None),
    (aten.randint.low, [], [], None),
    (aten.normal.Tensor_float, [], [], None),
    (aten.multinomial.default, [], [], None),
    (aten.randperm.default, [], [], None),
    (aten.bernoulli_.float, ["t2"], [False], "random"),  # in place: random first
    (aten.uniform_.default, [], [False], "random"),     # the schema says it writes
    (aten.empty.memory_format, [], [], "uninitialized"),
    (aten.empty_like.default, [], [], "uninitialized"),
    (aten.native_dropout_backward.default, [], [], None),
    (aten.__and__.Tensor, [], [], None),
])
def test_recompute_blocker(op, written, resident, expected):
    assert recompute_blocker(op, written, resident) == expected


@pytest.mark.parametrize("op", [aten.bernoulli.p, aten.rand.generator, aten.randn_like.default])
def test_random_op_with_its_own_generator_is_not_recomputable(op):
    # the executor replays the default generator only
    assert recompute_blocker(op, [], [], explicit_generator=True) == "random"
    assert recompute_blocker(aten.mm.default, [], [], explicit_generator=True) is None


def test_schema_helpers():
    assert schema_mutates(aten.relu_.default._schema)
    assert schema_mutates(aten.mm.out._schema)
    assert not schema_mutates(aten.mm.default._schema)
    assert not schema_mutates(aten.t.default._schema)
    assert is_random_op(aten.uniform_.default)
    assert is_random_op(aten.rand.generator)  # Generator argument
    assert not is_random_op(aten.convolution.default)
