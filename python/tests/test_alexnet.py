"""torchvision alexnet: capture at a small image size checked against eager PyTorch, and the
committed bench graph (bench/graphs/alexnet-b1-adam.json.gz) checked against the tool and
the C++ validator."""

import os
import subprocess

import pytest
import torch

from conftest import REPO_ROOT, real_tensor_of_every_graph_tensor, roam_binary
from roam.capture import capture_torchvision, check_graph, read_graph, summary
from roam.capture.io import dumps_graph
from test_capture_tiny import _check_aliases_match_storage

COMMITTED = os.path.join(REPO_ROOT, "bench", "graphs", "alexnet-b1-adam.json.gz")

# alexnet with 10 classes: features 2,469,696 + classifier 54,568,970 parameters
ALEXNET_10_PARAMS = 2469696 + 9216 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10


def test_alexnet_small_sizes_and_aliases(alexnet_small_capture):
    res = alexnet_small_capture
    real = real_tensor_of_every_graph_tensor(res)
    for t in res.graph["tensors"]:
        r = real[t["id"]]
        assert t["size"] == r.numel() * r.element_size(), t
    _check_aliases_match_storage(res, real)
    params = [t for t in res.graph["tensors"] if t.get("role") == "param"]
    assert sum(t["size"] for t in params) == 4 * ALEXNET_10_PARAMS
    assert len(params) == 16


def test_alexnet_small_numerics(alexnet_small_capture):
    state = alexnet_small_capture.state
    loss_ref, (params_ref, _, _) = state.eager_reference_step()
    inputs = state.step_inputs()
    loss = inputs.run(alexnet_small_capture.traced.gm)  # dropout: same seed, same masks
    assert loss.item() > 0
    assert torch.equal(loss, loss_ref)
    for p, q in zip(inputs.params, params_ref):
        assert torch.equal(p, q.detach())


def test_alexnet_small_phases(alexnet_small_capture):
    g = alexnet_small_capture.graph
    phases = [op["phase"] for op in g["ops"]]
    n = {p: phases.count(p) for p in ("forward", "backward", "update")}
    assert phases == ["forward"] * n["forward"] + ["backward"] * n["backward"] + \
        ["update"] * n["update"]
    assert n["update"] == 8 * 16  # single-tensor Adam (torch 2.x: exp_avg.lerp_), 16 params
    assert sum(op["target"] == "aten.convolution.default" for op in g["ops"]) == 5
    assert sum(op["target"] == "aten.convolution_backward.default" for op in g["ops"]) == 5


def test_committed_graph_is_what_the_tool_writes():
    assert os.path.exists(COMMITTED), f"{COMMITTED} is missing; regenerate it with " \
        "python -m roam.capture --model alexnet --batch-size 1 -o " + COMMITTED
    committed = read_graph(COMMITTED)
    check_graph(committed, require_monotone_phases=True)
    s = summary(committed)
    assert committed["name"] == "alexnet-b1-adam"
    assert committed["meta"]["model"] == "torchvision.alexnet"
    assert committed["meta"]["batch_size"] == 1
    # parameters, exp_avg, exp_avg_sq of 61,100,840 floats; 16 step counters; one
    # 3x224x224 image and its label
    assert s["resident_bytes"] == 3 * 4 * 61100840 + 16 * 4 + 3 * 224 * 224 * 4 + 8
    fresh = capture_torchvision("alexnet", batch_size=1).graph
    # cost and workspace are measured on the machine that captures: compare the rest.
    for g in (committed, fresh):
        for op in g["ops"]:
            op.pop("cost", None)
            op.pop("workspace", None)
        g["meta"]["capture"].pop("workspace", None)
        g["meta"].pop("tp_program_order_bytes", None)  # counts the measured workspaces
    committed["meta"]["capture"]["notes"] = fresh["meta"]["capture"]["notes"]
    assert dumps_graph(fresh) == dumps_graph(committed)


def test_committed_graph_validates_with_cpp(tmp_path):
    exe = roam_binary()
    if not os.access(exe, os.X_OK):
        pytest.fail(f"C++ roam binary not found at {exe}: build it (cmake -S . -B build && "
                    f"cmake --build build) or point ROAM_BIN at it")
    plan = tmp_path / "plan.json"
    r = subprocess.run([exe, "plan", COMMITTED, "-o", str(plan)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"roam plan failed ({r.returncode}): {r.stderr}"
    assert plan.exists()
    r = subprocess.run([exe, "validate", COMMITTED, str(plan)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"roam validate failed ({r.returncode}): {r.stdout}{r.stderr}"


def test_alexnet_small_eager_peak_matches_tp(alexnet_small_capture):
    from roam.capture import program_order_peak
    tp = program_order_peak(alexnet_small_capture.graph)
    # every byte the eager step allocates is a graph storage or a measured workspace (a few
    # bytes more: 0-d scalar temporaries of the Adam arithmetic, 84 B measured)
    assert 0 <= alexnet_small_capture.eager_peak - tp <= 256
    assert tp > 4 * ALEXNET_10_PARAMS  # all gradients are live together at least
