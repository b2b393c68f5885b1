"""Capture of a tiny CNN (conv + BatchNorm + ReLU + pool + linear): sizes, numerics, tuple
outputs, phases, determinism."""

import torch

from conftest import (TinyCNN, capture_small, real_tensor_of_every_graph_tensor, storage_ptr,
                      tiny_batch)
from roam.capture import check_graph, program_order_peak, resident_bytes, write_graph
from roam.capture.io import dumps_graph, read_graph


def _ops(graph, target):
    return [op for op in graph["ops"] if op["target"] == target]


def test_sizes_equal_real_nbytes(tiny_capture):
    real = real_tensor_of_every_graph_tensor(tiny_capture)
    for t in tiny_capture.graph["tensors"]:
        r = real[t["id"]]
        assert t["size"] == r.numel() * r.element_size(), t
        assert t["shape"] == list(r.shape), t
        assert t["dtype"] == str(r.dtype).replace("torch.", "")


def test_resident_tensors_and_bytes(tiny_capture):
    g = tiny_capture.graph
    roles = {}
    for t in g["tensors"]:
        if "role" in t:
            roles.setdefault(t["role"], []).append(t)
    # conv 4x3x3x3 + 4, bn 4 + 4, fc 5x36 + 5 = 108 + 4 + 4 + 4 + 180 + 5 = 305 floats
    assert sum(t["size"] for t in roles["param"]) == 305 * 4
    assert [t["name"] for t in roles["param"]] == [
        "conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]
    # running_mean, running_var (4 floats each), num_batches_tracked (int64)
    assert [(t["name"], t["size"]) for t in roles["buffer"]] == [
        ("bn.running_mean", 16), ("bn.running_var", 16), ("bn.num_batches_tracked", 8)]
    # exp_avg + exp_avg_sq per parameter, plus a 0-d float32 step each
    assert sum(t["size"] for t in roles["optimizer_state"]) == 2 * 305 * 4 + 6 * 4
    assert [(t["name"], t["size"], t["shape"]) for t in roles["input"]] == [
        ("data", 2 * 3 * 8 * 8 * 4, [2, 3, 8, 8]), ("labels", 16, [2])]
    assert resident_bytes(g) == 305 * 4 * 3 + 24 + 40 + 2 * 3 * 64 * 4 + 16
    assert g["meta"]["resident_bytes"] == resident_bytes(g)


def test_traced_step_equals_eager_adam_step(tiny_capture):
    state = tiny_capture.state
    loss_ref, (params_ref, buffers_ref, state_ref) = state.eager_reference_step()
    inputs = state.step_inputs()
    loss = inputs.run(tiny_capture.traced.gm)
    assert loss.item() > 0.1
    assert torch.equal(loss, loss_ref)
    assert torch.equal(tiny_capture.loss, loss_ref)
    for p, q in zip(inputs.params, params_ref):
        assert torch.equal(p.detach(), q.detach())
    before = list(state.params)
    assert not all(torch.equal(p.detach(), q.detach()) for p, q in zip(inputs.params, before))
    # running statistics and num_batches_tracked: written back at the end, as eager wrote them
    for b, q in zip(inputs.buffers, buffers_ref):
        assert torch.equal(b, q)
    assert not torch.equal(inputs.buffers[0], state.buffers[0])
    for k, i in enumerate(state.state_index):
        st = state_ref[i]
        ea, eas, step = inputs.optimizer_state[k]
        assert torch.equal(ea, st["exp_avg"]) and torch.equal(eas, st["exp_avg_sq"])
        assert step.item() == st["step"].item() == 2.0


def test_functional_batch_norm_and_its_write_backs(tiny_capture):
    """Training BatchNorm is functional: it returns the new running statistics (5 results),
    writes nothing and is recomputable; the statistics are written back by copy_ ops at the
    end of the step, after the loss; the backward reads save_mean / save_invstd only."""
    g = tiny_capture.graph
    by_id = {t["id"]: t for t in g["tensors"]}
    (bn,) = _ops(g, "aten._native_batch_norm_legit_functional.default")
    assert bn["recomputable"] and not bn.get("inplace")
    sizes = [by_id[o]["size"] for o in bn["outputs"]]
    # output, save_mean, save_invstd, new running_mean, new running_var
    assert sizes == [2 * 4 * 6 * 6 * 4, 4 * 4, 4 * 4, 4 * 4, 4 * 4]
    assert all("alias_of" not in by_id[o] for o in bn["outputs"])
    assert [by_id[i].get("name") for i in bn["inputs"]][1:] == [
        "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"]
    assert not any("getitem" in op["target"] for op in g["ops"])
    (bnb,) = _ops(g, "aten.native_batch_norm_backward.default")
    assert bn["outputs"][1] in bnb["inputs"] and bn["outputs"][2] in bnb["inputs"]
    assert not {bn["outputs"][3], bn["outputs"][4]} & set(bnb["inputs"])
    assert not any(by_id[i].get("role") == "buffer" for i in bnb["inputs"])
    # the write-backs: the last three ops, after the loss op
    (nll,) = _ops(g, "aten.nll_loss_forward.default")
    wb = g["ops"][-3:]
    assert [op["target"] for op in wb] == ["aten.copy_.default"] * 3
    assert [(by_id[op["inputs"][0]]["name"], op["inputs"][1]) for op in wb[:2]] == [
        ("bn.running_mean", bn["outputs"][3]), ("bn.running_var", bn["outputs"][4])]
    assert by_id[wb[2]["inputs"][0]]["name"] == "bn.num_batches_tracked"
    assert all(nll["id"] in op["after"] and op["phase"] == "update" for op in wb)
    assert all(by_id[op["outputs"][0]]["alias_of"] == op["inputs"][0] for op in wb)
    # (4 + 4 floats + one int64) held from the forward to the end: the deferred bytes
    assert g["meta"]["capture"]["functional"]["deferred_writeback_bytes"] == 3 * 64
    # convolution_backward of the first conv: grad_input is None (data needs no grad)
    (cb,) = _ops(g, "aten.convolution_backward.default")
    assert [by_id[o]["shape"] for o in cb["outputs"]] == [[4, 3, 3, 3], [4]]
    # max_pool2d_with_indices: values float32 and indices int64
    (mp,) = _ops(g, "aten.max_pool2d_with_indices.default")
    assert [(by_id[o]["dtype"], by_id[o]["size"]) for o in mp["outputs"]] == [
        ("float32", 2 * 4 * 3 * 3 * 4), ("int64", 2 * 4 * 3 * 3 * 8)]


def test_inplace_relu_is_a_permission(tiny_capture):
    """nn.ReLU(inplace=True) ran relu_ on BatchNorm's output: the graph has a functional relu
    (a new storage) with the permission [[0, 0]], and program order uses it (the eager peak)."""
    from roam.capture import inplace_in_order
    g = tiny_capture.graph
    (relu,) = _ops(g, "aten.relu.default")
    (bn,) = _ops(g, "aten._native_batch_norm_legit_functional.default")
    assert relu["inplace"] == [[0, 0]] and relu["inputs"] == [bn["outputs"][0]]
    assert relu["recomputable"]
    assert inplace_in_order(g)[relu["outputs"][0]] == bn["outputs"][0]
    # Adam's denom.add_(eps) on the intermediate denominator: a permission too
    adds = [op for op in _ops(g, "aten.add.Tensor") if op["phase"] == "update"]
    assert len(adds) == 6 and all(op["inplace"] == [[0, 0]] for op in adds)


def test_phases_in_order_and_counts(tiny_capture):
    g = tiny_capture.graph
    phases = [op["phase"] for op in g["ops"]]
    n_f, n_b, n_u = (phases.count(p) for p in ("forward", "backward", "update"))
    assert n_f > 0 and n_b > 0 and n_u > 0 and n_f + n_b + n_u == len(phases)
    assert phases == ["forward"] * n_f + ["backward"] * n_b + ["update"] * n_u
    fwd = [op["target"] for op in g["ops"][:n_f]]
    assert fwd[0] == "aten.convolution.default"
    assert fwd[-1] == "aten.nll_loss_forward.default"
    # backward starts with the seed gradient of the loss
    assert g["ops"][n_f]["target"] == "aten.ones_like.default"
    # single-tensor Adam: 8 ops per parameter (step += 1, exp_avg.lerp_, exp_avg_sq.mul_ and
    # addcmul_, sqrt, div, add eps (functional: an inplace permission), param.addcdiv_), in the
    # order of the parameters; then the write-backs of the BatchNorm buffers
    upd = [op["target"] for op in g["ops"][n_f + n_b:]]
    per_param = ["aten.add_.Tensor", "aten.lerp_.Scalar", "aten.mul_.Tensor",
                 "aten.addcmul_.default", "aten.sqrt.default", "aten.div.Tensor",
                 "aten.add.Tensor", "aten.addcdiv_.default"]
    assert upd == per_param * 6 + ["aten.copy_.default"] * 3
    by_id = {t["id"]: t for t in g["tensors"]}
    written = [by_id[op["inputs"][0]]["name"] for op in g["ops"]
               if op["target"] == "aten.addcdiv_.default"]
    assert written == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]
    # every op writing a resident tensor runs after the loss (after edge or data path)
    (nll,) = _ops(g, "aten.nll_loss_forward.default")
    for op in g["ops"][n_f + n_b:]:
        if op["target"] in ("aten.add_.Tensor", "aten.mul_.Tensor", "aten.copy_.default"):
            assert nll["id"] in op["after"], op


def test_loss_is_graph_output(tiny_capture):
    g = tiny_capture.graph
    (loss,) = g["outputs"]
    (nll,) = _ops(g, "aten.nll_loss_forward.default")
    assert nll["outputs"][0] == loss


def test_aliases_match_real_storage(tiny_capture):
    _check_aliases_match_storage(tiny_capture)


def _check_aliases_match_storage(res, real=None):
    """Every alias shares its root's storage in a real run; distinct roots do not."""
    g = res.graph
    by_id = {t["id"]: t for t in g["tensors"]}
    real = real if real is not None else real_tensor_of_every_graph_tensor(res)

    def root(t):
        while "alias_of" in by_id[t]:
            t = by_id[t]["alias_of"]
        return t

    root_of_ptr = {}
    for tid, t in by_id.items():
        r = real[tid]
        if r.storage().nbytes() == 0:
            continue
        ptr = storage_ptr(r)
        rt = root(tid)
        assert ptr == storage_ptr(real[rt]), f"{tid} does not share the storage of root {rt}"
        assert root_of_ptr.setdefault(ptr, rt) == rt, \
            f"roots {rt} and {root_of_ptr[ptr]} share a storage but are not aliased"


def test_structural_check_and_peak(tiny_capture):
    check_graph(tiny_capture.graph, require_monotone_phases=True)
    tp = program_order_peak(tiny_capture.graph)
    assert tp == tiny_capture.graph["meta"]["tp_program_order_bytes"] > 0


def test_capture_is_deterministic(tmp_path):
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        res = capture_small(TinyCNN(), *tiny_batch(1), warmup=tiny_batch(2))
        path = tmp_path / f"g{len(outs)}.json.gz"
        write_graph(res.graph, str(path))
        outs.append(path.read_bytes())
    assert outs[0] == outs[1]
    assert read_graph(str(tmp_path / "g0.json.gz")) == res.graph
    write_graph(res.graph, str(tmp_path / "g.json"))
    assert (tmp_path / "g.json").read_bytes() == dumps_graph(res.graph)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json", "g0.json.gz", "g1.json.gz"]


def test_capture_checks_catch_missing_update_and_cut_loss(tiny_capture):
    import copy

    import pytest

    from roam.capture import GraphCheckError, _capture_checks
    g = tiny_capture.graph
    _capture_checks(g, tiny_capture.state, tiny_capture.op_writes)
    # an update op whose write was lost: fc.bias (last addcdiv_) is no longer updated
    writes = dict(tiny_capture.op_writes)
    last = [op["id"] for op in g["ops"] if op["target"] == "aten.addcdiv_.default"][-1]
    writes[last] = []
    with pytest.raises(GraphCheckError, match="fc.bias"):
        _capture_checks(g, tiny_capture.state, writes)
    # the first op loses its data input: the loss no longer depends on the batch
    g2 = copy.deepcopy(g)
    data = [t["id"] for t in g2["tensors"] if t.get("name") == "data"][0]
    g2["ops"][0]["inputs"].remove(data)
    with pytest.raises(GraphCheckError, match="does not depend on the data input"):
        _capture_checks(g2, tiny_capture.state, tiny_capture.op_writes)


def test_eager_peak_check(tiny_capture):
    import pytest

    from roam.capture import GraphCheckError, check_eager_peak
    tp = program_order_peak(tiny_capture.graph)
    # the graph carries the measured workspaces: the peak is within the capture's tolerance
    check_eager_peak(tiny_capture.graph, tiny_capture.eager_peak, with_workspaces=True)
    with pytest.raises(GraphCheckError, match="does not match"):
        check_eager_peak(tiny_capture.graph, tp // 2)
    with pytest.raises(GraphCheckError, match="does not match"):
        check_eager_peak(tiny_capture.graph, 2 * tp + (1 << 20))


def test_measured_cost_is_seconds_per_op():
    torch.manual_seed(0)
    model = TinyCNN()
    res = capture_small(model, *tiny_batch(1), warmup=tiny_batch(2))
    from roam.capture import capture_step
    timed = capture_step(res.state, name="test", measure_cost=True, cost_repeats=2)
    costs = [op["cost"] for op in timed.graph["ops"]]
    assert all(isinstance(c, float) and 0 < c < 1.0 for c in costs)
    assert "cost: median seconds over 2 CPU runs" in " ".join(
        timed.graph["meta"]["capture"]["notes"])
    # apart from cost and the note, the graph is the one captured without timing
    for op in timed.graph["ops"]:
        del op["cost"]
    timed.graph["meta"]["capture"]["notes"] = res.graph["meta"]["capture"]["notes"]
    assert dumps_graph(timed.graph) == dumps_graph(res.graph)
