"""bench/run on two small graphs: every row of `roam compare --json` in the table, the
reductions against the pytorch row and the paper-style means computed from those rows."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

import roam
from conftest import REPO_ROOT, TinyCNN, roam_binary, tiny_batch
from roam.capture import cross_entropy_loss


def test_bench_run_table_and_means(tmp_path):
    exe = roam_binary()
    if not os.access(exe, os.X_OK):
        pytest.fail(f"C++ roam binary not found at {exe}")
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    for name, batch in [("tinycnn-b2-adam", tiny_batch(1)),
                        ("alexnet-b1-adam", tiny_batch(1, batch=4))]:
        torch.manual_seed(0)
        model = TinyCNN()
        g = roam.capture(model, torch.optim.Adam(model.parameters(), foreach=False),
                         cross_entropy_loss, batch, cost="none", name=name)
        g.save(graphs / f"{name}.json.gz")
    out = tmp_path / "RESULTS.md"
    raw = tmp_path / "raw"
    r = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "bench", "run"), "--roam", exe,
                        "--graphs-dir", str(graphs), "--orders", "program,lescea,roam",
                        "--layouts", "pytorch,llfb,roam", "--time-limit", "1",
                        "--keep-json", str(raw), "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    docs = {f[:-5]: json.loads((raw / f).read_text()) for f in os.listdir(raw)}
    assert sorted(docs) == ["alexnet-b1-adam", "tinycnn-b2-adam"]
    reductions = {}
    for name, doc in docs.items():
        rows = {(x["order"], x["layout"]): x for x in doc["rows"]}
        assert len(rows) == 9
        base = rows[("program", "pytorch")]["held_bytes"]
        for (o, lay), x in rows.items():
            red = (base - x["held_bytes"]) / base
            reductions.setdefault((o, lay), []).append(red)
            line = re.search(rf"^\| {name} \| {o} \| {lay} \| .*$", text, re.M).group(0)
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert float(cells[6]) == pytest.approx(x["held_bytes"] / 2**20, abs=0.006)
            assert cells[10] == f"{100 * red:.1f}%"
    for (o, lay), reds in reductions.items():
        label = {("program", "pytorch"): "**pytorch** (program + pytorch)",
                 ("lescea", "llfb"): "**heuristics** (lescea + llfb)",
                 ("roam", "roam"): "**roam** (roam + roam)"}.get((o, lay), f"{o} + {lay}")
        line = [ln for ln in text.splitlines() if ln.startswith(f"| {label} |")][0]
        assert line.split("|")[2].strip() == f"{100 * sum(reds) / 2:.1f}%"
    # the graph named like a paper graph is compared with the published ratios
    assert re.search(r"^\| alexnet-b1-adam \| .* \| 13\.7% \| .* \| 17\.8% \|$", text, re.M)
    assert "## Against ROAM's published figures" in text
    # order section: LB, Tp per order and roam's gap, recomputed from the raw rows
    gaps = []
    for name, doc in docs.items():
        lb = doc["lower_bound_bytes"]
        tp = {x["order"]: x["theoretical_peak_bytes"] for x in doc["rows"]}
        line = re.search(rf"^\| {name} \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| .*$",
                         text.split("## Orders")[1], re.M).group(0)
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[1]) == pytest.approx(lb / 2**20, abs=0.006)
        assert [float(c) for c in cells[2:5]] == pytest.approx(
            [tp[o] / 2**20 for o in ("program", "lescea", "roam")], abs=0.006)
        gaps.append(tp["roam"] / lb - 1)
        assert float(cells[5]) == pytest.approx(100 * gaps[-1], abs=0.006)
        assert tp["roam"] <= min(tp.values())
    assert f"over the 2 graphs: {100 * sum(gaps) / 2:.2f}%" in text
    # ablation: three configurations per graph, the returned Tp never above the pipeline's
    abl = text.split("## Ablation of the roam order")[1].split("\n## ")[0]
    for name in docs:
        line = re.search(rf"^\| {name} \| .*$", abl, re.M).group(0)
        cells = [c.strip() for c in line.strip("|").split("|")][2:]
        assert len(cells) == 3
        for c in cells:
            pipeline, returned, _ = (float(v) for v in c.split(" / "))
            assert returned <= pipeline
    # layouts for the roam order: roam's arena is the smallest of the five
    lay = text.split("## Layouts for the roam order")[1].split("\n## ")[0]
    for name in docs:
        line = re.search(rf"^\| {name} \| .*$", lay, re.M).group(0)
        arenas = [float(c.split(" (")[0]) for c in line.strip("|").split("|")[2:7]]
        assert arenas[4] <= min(arenas[1:4]) and arenas[4] >= float(line.split("|")[2])
    assert "## End-to-end peak per graph" in text
