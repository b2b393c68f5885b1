"""The committed benchmark graphs (bench/graphs/, DESIGN.md "Benchmarks"): the paper's 17 and
the small-batch captures of bench/regenerate (issue 15) present,
listed in MANIFEST.md with their sha256, structurally valid, planned and validated by the C++
tool, and small enough to commit."""

import hashlib
import os
import re
import subprocess

import pytest

from conftest import REPO_ROOT, roam_binary
from roam.capture import check_graph, read_graph, summary

GRAPHS = os.path.join(REPO_ROOT, "bench", "graphs")
CNNS = ["alexnet", "vgg11", "mnasnet0_5", "mobilenet_v2", "efficientnet_b0"]
EXPECTED = ([f"{m}-b1-adam" for m in CNNS] + [f"{m}-b32-adam" for m in CNNS]
            + ["vit_b_16-b1-adam", "vit_b_16-b32-adam", "bert-base-b1-adam",
               "bert-base-b32-adam", "gpt2-xl-b1-adam", "gpt2-xl-b2-adam", "gpt2-xl-b4-adam"]
            + ["resnet50-b2-64px-adam", "resnet50-b2-64px-noworkspace-adam",
               "efficientnet_b0-b2-96px-adam"])
REAL = {f"{m}-b1-adam" for m in CNNS}


def _manifest():
    rows = {}
    with open(os.path.join(GRAPHS, "MANIFEST.md")) as f:
        for line in f:
            m = re.match(r"\| ([a-z0-9_.\-]+) \| (real|fake) \| (\d+) \| (\d+) \| ", line)
            if m:
                sha = re.search(r"`([0-9a-f]{64})`", line).group(1)
                rows[m.group(1)] = (m.group(2), int(m.group(3)), int(m.group(4)), sha)
    return rows


def test_manifest_lists_the_graphs_with_their_sha256():
    rows = _manifest()
    assert sorted(rows) == sorted(EXPECTED)
    files = sorted(f[:-len(".json.gz")] for f in os.listdir(GRAPHS) if f.endswith(".json.gz"))
    assert files == sorted(EXPECTED)
    total = 0
    for name, (mode, _, _, sha) in rows.items():
        with open(os.path.join(GRAPHS, name + ".json.gz"), "rb") as f:
            data = f.read()
        total += len(data)
        assert hashlib.sha256(data).hexdigest() == sha, name
        assert mode == ("real" if name in REAL else "fake")
        assert len(data) < (20 << 20 if name.startswith("gpt2-xl") else 5 << 20), name
    assert total < 60 << 20


@pytest.mark.parametrize("name", EXPECTED)
def test_graph_is_valid_and_matches_the_manifest(name, tmp_path):
    path = os.path.join(GRAPHS, name + ".json.gz")
    g = read_graph(path)
    check_graph(g, require_monotone_phases=True)
    s = summary(g)
    mode, ops, tensors, _ = _manifest()[name]
    assert (s["ops"], s["tensors"]) == (ops, tensors)
    assert g["name"] == name and g["meta"]["capture"]["mode"] == mode
    assert g["meta"]["resident_bytes"] == s["resident_bytes"]
    assert g["meta"]["tp_program_order_bytes"] == s["tp_program_order_bytes"]
    assert g["meta"]["optimizer"] == "Adam" and g["meta"]["dtype"] == "float32"
    assert all(op["cost"] > 0 for op in g["ops"])
    note = g["meta"]["capture"]["notes"][-1]
    assert note.startswith("cost: median seconds" if mode == "real" else "cost: estimated")
    assert all(s["ops_per_phase"][p] > 0 for p in ("forward", "backward", "update"))
    if name.startswith("gpt2-xl"):
        batch = int(name.split("-b")[1].split("-")[0])
        # parameters, exp_avg, exp_avg_sq of 1,557,611,200 floats; 580 step counters; the
        # causal mask (1024 x 1024 bool); input ids and labels (int64)
        assert s["resident_bytes"] == 12 * 1_557_611_200 + 580 * 4 + 1024 * 1024 + \
            2 * 8 * batch * 1024
    if "-noworkspace-" in name:  # the capture without its kernel scratch (bench/regenerate)
        assert not any("workspace" in op for op in g["ops"])
        assert "workspace" not in g["meta"]["capture"]
    exe = roam_binary()
    if not os.access(exe, os.X_OK):
        pytest.fail(f"C++ roam binary not found at {exe}")
    plan = tmp_path / "plan.json"
    r = subprocess.run([exe, "--quiet", "plan", path, "--order", "program", "--layout", "llfb",
                        "-o", str(plan)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe, "validate", path, str(plan)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
