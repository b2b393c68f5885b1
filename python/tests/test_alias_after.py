"""Aliases from operator schemas and `after` edges from writes, on hand-checked programs."""

import operator

import pytest
import torch
import torch.fx
import torch.nn as nn

from conftest import capture_small, real_tensor_of_every_graph_tensor, storage_ptr
from roam.capture import CaptureError
from roam.capture.edges import add_order_edges
from roam.capture.export import GraphBuilder
from roam.capture.schema import return_alias_sets
from test_capture_tiny import _check_aliases_match_storage


class InplaceNet(nn.Module):
    """y = lin(x); z = y * 2; v = y.view(-1); y.add_(1); w = v * 3; out = z + w."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        z = y * 2
        v = y.view(-1)
        y.add_(1)
        w = v * 3
        return z + w.view(z.shape)


class ViewChainNet(nn.Module):
    """conv -> view -> t -> clone (fresh) -> t -> slice -> relu_ -> linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):  # x: (3, 2, 2, 2) -> conv (3, 3, 2, 2)
        h = self.conv(x)
        a = h.view(3, 12)
        b = a.t()                  # (12, 3) view
        c = b.contiguous()         # fresh copy
        d = c.t()                  # (3, 12) view of c
        e = d[:, 2:8]              # (3, 6) view of c
        f = torch.relu_(e.clone())  # fresh, then in place
        return self.fc(f)


@pytest.fixture(scope="module")
def inplace_capture():
    torch.manual_seed(0)
    return capture_small(InplaceNet(), torch.randn(2, 4), torch.tensor([1, 3]),
                         warmup=(torch.randn(2, 4), torch.tensor([0, 2])))


@pytest.fixture(scope="module")
def viewchain_capture():
    torch.manual_seed(0)
    return capture_small(ViewChainNet(), torch.randn(3, 2, 2, 2), torch.tensor([0, 4, 2]),
                         warmup=(torch.randn(3, 2, 2, 2), torch.tensor([1, 1, 3])))


def _forward_ops(g):
    return [op for op in g["ops"] if op["phase"] == "forward"]


def test_inplace_write_is_a_permission_by_hand(inplace_capture):
    """y.add_(1) on an intermediate becomes a functional add with the permission to write over
    y; v = y.view(-1), made before the write and read after it, is made again from the new
    value (functionalization), so w = v * 3 reads what eager PyTorch read."""
    from roam.capture import inplace_in_order
    g = inplace_capture.graph
    by_id = {t["id"]: t for t in g["tensors"]}
    f = _forward_ops(g)
    targets = [op["target"] for op in f[:8]]
    assert targets == ["aten.t.default", "aten.addmm.default", "aten.mul.Tensor",
                       "aten.add.Tensor", "aten.view.default", "aten.mul.Tensor",
                       "aten.view.default", "aten.add.Tensor"]
    t_op, addmm, mul_z, add, view_v, mul_w, view_w, out = f[:8]
    y = addmm["outputs"][0]
    assert mul_z["inputs"] == [y] and add["inputs"] == [y]
    assert add["inplace"] == [[0, 0]] and "alias_of" not in by_id[add["outputs"][0]]
    assert add["recomputable"]
    assert view_v["inputs"] == add["outputs"] and by_id[view_v["outputs"][0]]["alias_of"] == \
        add["outputs"][0]
    assert mul_w["inputs"] == view_v["outputs"]
    # no write to an intermediate is left, so no after edge in the forward
    assert not any("after" in op for op in f)
    # program order: y is last read by the add, which may write over it (and Adam's two
    # denominators, denom.add_(eps), one per parameter)
    used = inplace_in_order(g)
    assert used[add["outputs"][0]] == y and len(used) == 3
    assert all(next(op for op in g["ops"] if o in op["outputs"])["phase"] == "update"
               for o in used if o != add["outputs"][0])
    # the weight update runs after every earlier reader of lin.weight (t, and addmm via t)
    upd_w = [op for op in g["ops"] if op["target"] == "aten.addcdiv_.default"]
    assert [by_id[op["inputs"][0]]["name"] for op in upd_w] == ["lin.weight", "lin.bias"]
    assert {t_op["id"], addmm["id"]} <= set(upd_w[0]["after"])
    assert addmm["id"] in upd_w[1]["after"]


def test_inplace_numerics_and_storage(inplace_capture):
    state = inplace_capture.state
    loss_ref, (params_ref, _, _) = state.eager_reference_step()
    inputs = state.step_inputs()
    loss = inputs.run(inplace_capture.traced.gm)
    assert torch.equal(loss, loss_ref)
    for p, q in zip(inputs.params, params_ref):
        assert torch.equal(p, q.detach())
    _check_aliases_match_storage(inplace_capture)


def test_view_chain_aliases(viewchain_capture):
    g = viewchain_capture.graph
    by_id = {t["id"]: t for t in g["tensors"]}
    f = _forward_ops(g)
    targets = [op["target"] for op in f]
    i = targets.index("aten.convolution.default")
    conv = f[i]
    h = conv["outputs"][0]
    chain = f[i + 1:i + 8]
    # d[:, 2:8]: one slice (of dim 1)
    assert [op["target"] for op in chain] == [
        "aten.view.default", "aten.t.default", "aten.clone.default", "aten.t.default",
        "aten.slice.Tensor", "aten.clone.default", "aten.relu.default"]
    out = [op["outputs"][0] for op in chain]
    assert by_id[out[0]]["alias_of"] == h                      # view of conv output
    assert by_id[out[1]]["alias_of"] == out[0]                 # t of the view
    assert "alias_of" not in by_id[out[2]]                     # clone: fresh storage
    assert by_id[out[3]]["alias_of"] == out[2]                 # t of the copy
    assert by_id[out[4]]["alias_of"] == out[3]                 # slice
    assert "alias_of" not in by_id[out[5]]                     # clone
    # relu_ on the clone: a new storage that may be written over the clone
    assert "alias_of" not in by_id[out[6]] and chain[6]["inplace"] == [[0, 0]]
    # sizes of views are numel x element size of the view itself
    assert [by_id[o]["size"] for o in out] == [144, 144, 144, 144, 72, 72, 72]
    # every alias really shares its root's storage, and distinct roots do not
    _check_aliases_match_storage(viewchain_capture)
    real = real_tensor_of_every_graph_tensor(viewchain_capture)
    assert storage_ptr(real[out[4]]) == storage_ptr(real[out[2]])
    assert storage_ptr(real[out[2]]) != storage_ptr(real[h])


def test_list_return_alias_sets():
    # the C++ binding drops the element alias of "Tensor(a)[]"; it is parsed back
    assert return_alias_sets(torch.ops.aten.split.Tensor._schema) == [{"a"}]
    assert return_alias_sets(torch.ops.aten.unbind.int._schema) == [{"a"}]
    assert return_alias_sets(torch.ops.aten.native_batch_norm.default._schema) == [set()] * 3
    assert return_alias_sets(torch.ops.aten.add_.Tensor._schema) == [{"a"}]


class SplitCatNet(nn.Module):
    """split (list of views), cat (list input), index with a None entry, a string argument."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):  # (2, 8)
        a, b = torch.split(x * 1.0, 4, dim=1)
        y = torch.cat([b, a, self.fc.weight[:, :0].sum() + a], dim=1)  # (2, 12)
        idx = torch.tensor([1, 0])
        z = nn.functional.gelu(y[:, idx], approximate="tanh")  # aten.index with [None, idx]
        return self.fc(torch.cat([z, y[:, :6]], dim=1))


def test_split_cat_index_lists():
    torch.manual_seed(0)
    res = capture_small(SplitCatNet(), torch.randn(2, 8), torch.tensor([0, 2]),
                        warmup=(torch.randn(2, 8), torch.tensor([1, 1])))
    g = res.graph
    by_id = {t["id"]: t for t in g["tensors"]}
    (split,) = [op for op in g["ops"] if op["target"] == "aten.split.Tensor"]
    assert len(split["outputs"]) == 2
    assert all(by_id[o]["alias_of"] == split["inputs"][0] for o in split["outputs"])
    assert all(by_id[o]["size"] == 2 * 4 * 4 for o in split["outputs"])
    cat = [op for op in g["ops"] if op["target"] == "aten.cat.default"][0]
    assert cat["inputs"][:2] == [split["outputs"][1], split["outputs"][0]]
    assert len(cat["inputs"]) == 3
    (index,) = [op for op in g["ops"] if op["target"] == "aten.index.Tensor"]
    assert len(index["inputs"]) == 2  # self and the index tensor; None is not a tensor
    assert by_id[index["inputs"][1]]["dtype"] == "int64"
    (gelu,) = [op for op in g["ops"] if op["target"] == "aten.gelu.default"]
    assert gelu["inputs"] == index["outputs"]
    _check_aliases_match_storage(res)
    loss_ref, _ = res.state.eager_reference_step()
    assert torch.equal(res.state.step_inputs().run(res.traced.gm), loss_ref)


# ---------------------------------------------------------------- error paths

_lib = torch.library.Library("roamtest", "DEF")
_lib.define("fresh_but_shares(Tensor x) -> Tensor")
_lib.define("alias_but_copies(Tensor(a) x) -> Tensor(a)")
_lib.impl("fresh_but_shares", lambda x: x.view(x.shape), "CPU")
_lib.impl("alias_but_copies", lambda x: x.clone(), "CPU")


def _one_op_module(target, extra_args=()):
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(target, (x,) + tuple(extra_args))
    g.output(y)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_undeclared_storage_sharing_raises():
    gm = _one_op_module(torch.ops.roamtest.fresh_but_shares.default)
    with pytest.raises(CaptureError, match="shares the storage .* schema declares no alias"):
        GraphBuilder(gm, [("input", "x")]).run(torch.randn(3))


def test_declared_alias_with_different_storage_raises():
    gm = _one_op_module(torch.ops.roamtest.alias_but_copies.default)
    with pytest.raises(CaptureError, match="aliases argument t0 but the storages differ"):
        GraphBuilder(gm, [("input", "x")]).run(torch.randn(3))


def test_unmappable_tensor_argument_raises():
    # a tensor literal in the node arguments has no tensor id: never dropped silently
    gm = _one_op_module(torch.ops.aten.add.Tensor, (torch.ones(3),))
    with pytest.raises(CaptureError, match="cannot be mapped to a tensor id"):
        GraphBuilder(gm, [("input", "x")]).run(torch.randn(3))
    gm = _one_op_module(torch.ops.aten.cat.default)
    g = gm.graph
    (node,) = [n for n in g.nodes if n.op == "call_function"]
    node.args = ([node.args[0], torch.ones(3)],)
    gm.recompile()
    with pytest.raises(CaptureError, match="argument 'tensors'.*cannot be mapped"):
        GraphBuilder(gm, [("input", "x")]).run(torch.randn(3))


def test_unsupported_node_raises():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(operator.add, (x, x)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    with pytest.raises(CaptureError, match="unsupported fx node"):
        GraphBuilder(gm, [("input", "x")]).run(torch.randn(3))


def test_add_order_edges_hand_graph():
    # t0 resident; n0: a = f(t0); n1: v = view(a); n2: r = read(a); n3: a.add_() -> w;
    # n4: read(v) -> must come after n3; n5: write t0 -> after n0 (reader of t0)
    tensors = [{"id": "t0", "size": 4, "role": "param"}, {"id": "a", "size": 4},
               {"id": "v", "size": 4, "alias_of": "a"}, {"id": "r", "size": 4},
               {"id": "w", "size": 4, "alias_of": "a"}, {"id": "s", "size": 4},
               {"id": "u", "size": 4, "alias_of": "t0"}]
    ops = [{"id": "n0", "inputs": ["t0"], "outputs": ["a"]},
           {"id": "n1", "inputs": ["a"], "outputs": ["v"]},
           {"id": "n2", "inputs": ["a"], "outputs": ["r"]},
           {"id": "n3", "inputs": ["a"], "outputs": ["w"]},
           {"id": "n4", "inputs": ["v", "r"], "outputs": ["s"]},
           {"id": "n5", "inputs": ["t0", "s"], "outputs": ["u"]}]
    add_order_edges(tensors, ops, {"n3": ["a"], "n5": ["t0"]})
    after = {op["id"]: op.get("after") for op in ops}
    # n3 overwrites a: n1 and n2 read it before; n4 reads a (via v) after the write;
    # n5 overwrites t0, read by n0 (n0 is not a direct producer of n5's inputs)
    assert after == {"n0": None, "n1": None, "n2": None, "n3": ["n1", "n2"], "n4": ["n3"],
                     "n5": ["n0"]}
