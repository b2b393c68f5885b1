"""What a new user sees from the Python tools (issue 14): python -m roam.run --help in plain
text with every option explained, one list of models for roam.capture and roam.run, and the
headline helper that prints the same line as roam plan."""

import argparse
import os
import subprocess
import sys

from conftest import PYTHON_DIR


def _run(module, args):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR
    return subprocess.run([sys.executable, "-m", module] + args, env=env, capture_output=True,
                          text=True, timeout=600)


def test_run_help_is_plain_text_with_every_option_explained():
    r = _run("roam.run", ["--help"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for rest in ("``", ":func:", ":mod:", ":class:", "* ``"):
        assert rest not in out, rest
    assert "roam.optimize" in out and "eager" in out and "CPU only" in out
    from roam.run import _parser
    for action in _parser()._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{action.option_strings} has no help"
        assert action.option_strings[0] in out


def test_one_list_of_models():
    from roam.capture.models import BERT_PRESETS, model_names
    names = model_names()
    listed = _run("roam.capture", ["--list-models"])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == names
    for preset in BERT_PRESETS:
        assert preset in names
    assert "bert-base" in names and "gpt2" in names and "resnet18" in names
    # roam.run refuses an unknown model with the same list
    r = _run("roam.run", ["--model", "no_such_net", "--steps", "1"])
    assert r.returncode == 2
    assert "no_such_net" in r.stderr
    for name in names[:8] + ["resnet18"]:
        assert name in r.stderr, name


def test_capture_takes_a_bert_preset():
    from roam.capture.models import capture_named
    res = capture_named("bert-tiny", 1, seq_len=8, fake=True, cost="none")
    assert res.graph["name"] == "bert-tiny-b1-adam"
    assert res.graph["meta"]["config"]["hidden_size"] == 128


def test_headline_helper_matches_roam_plan():
    from roam.headline import KEY, headline
    MiB = 1 << 20
    # The same line as tests/test_headline.cpp (Headline.FormatOfTheLibrary).
    assert headline(75 * MiB, 100 * MiB, 150 * MiB, 70 * MiB) == (
        "peak 75.00 MiB; program order on a CPU allocator 100.00 MiB (-25.0%); on PyTorch's "
        "CUDA caching allocator (simulated) 150.00 MiB (-50.0%); lower bound 70.00 MiB")
    assert headline(75 * MiB, 100 * MiB, budget_bytes=80 * MiB, recompute_overhead=0.125,
                    recomputations=3).startswith(
        "peak 75.00 MiB (budget 80.00 MiB, recompute overhead 12.5%); program order on a CPU "
        "allocator 100.00 MiB (-25.0%)")
    assert headline(110, 100) == ("peak 0.00 MiB; program order on a CPU allocator 0.00 MiB "
                                  "(+10.0%)")
    assert "CPU allocator = resident + Tp" in KEY


# ---------------------------------------------------------------- what is live at the peak

def _peak_graph():
    """Worked by hand (alignment 64, every size a multiple): in program order n0 n1 n2 n3,
    a (1 MiB, m0) lives from n0 to n3 (its alias av, output of n1, is read by n3); b (2 MiB,
    m1) from n1 to n2; n1's workspace (1.5 MiB) at n1 only; c (0.5 MiB) from n2 to n3; the
    loss (64 B) is a graph output. Live bytes per step: 1, 4.5, 3.5, 1.5 MiB (+64 B at n3):
    the peak is at op index 1, op n1 in m1, with b, the workspace and a live."""
    MiB = 1 << 20
    return {
        "format": "roam-graph", "version": 1, "name": "peak-by-hand",
        "tensors": [
            {"id": "x", "size": 4096, "role": "input"},
            {"id": "a", "size": MiB}, {"id": "b", "size": 2 * MiB},
            {"id": "av", "size": MiB, "alias_of": "a"},
            {"id": "c", "size": MiB // 2}, {"id": "loss", "size": 64}],
        "ops": [
            {"id": "n0", "target": "aten.relu.default", "phase": "forward", "inputs": ["x"],
             "outputs": ["a"], "module": "m0"},
            {"id": "n1", "target": "aten.mm.default", "phase": "forward", "inputs": ["a"],
             "outputs": ["b", "av"], "module": "m1", "workspace": 3 * MiB // 2},
            {"id": "n2", "target": "aten.sum.default", "phase": "forward", "inputs": ["b"],
             "outputs": ["c"], "module": "m2"},
            {"id": "n3", "target": "aten.add.Tensor", "phase": "forward",
             "inputs": ["c", "av"], "outputs": ["loss"]}],
        "outputs": ["loss"]}


def test_live_at_peak_worked_by_hand():
    from roam.headline import live_at_peak, peak_line
    MiB = 1 << 20
    pk = live_at_peak(_peak_graph(), ["n0", "n1", "n2", "n3"], 64)
    assert pk["index"] == 1 and pk["op"] == "n1" and pk["module"] == "m1"
    assert pk["live_bytes"] == 4 * MiB + MiB // 2
    assert [(s["name"], s["bytes"], s["module"]) for s in pk["storages"]] == [
        ("b", 2 * MiB, "m1"), ("workspace of op 'n1'", 3 * MiB // 2, "m1"), ("a", MiB, "m0")]
    assert peak_line(pk) == (
        "op index 1 (n1 aten.mm.default, m1): 3 storages; largest b 2.00 MiB (m1), workspace of "
        "op 'n1' 1.50 MiB (m1), a 1.00 MiB (m0)")
    # a recomputation (plan version 2), worked by hand: n0 gets a 3.5 MiB workspace and runs
    # again after n2; n3 reads a, bound then to the new instance a#1, so instance 0 of a dies
    # at n1. Live per step: a + workspace = 4.5; a + b + n1's workspace = 4.5; b + c = 2.5;
    # c + a#1 + n0#1's workspace = 5; c + a#1 + loss = 1.5 MiB + 64 B. The peak is op index 3,
    # the recomputation, with the new instance and the second run's workspace.
    g = _peak_graph()
    g["ops"][0].update(recomputable=True, workspace=7 * MiB // 2)
    g["ops"][3]["inputs"] = ["c", "a"]
    pk2 = live_at_peak(g, ["n0", "n1", "n2", "n0", "n3"], 64)
    assert pk2["live_bytes"] == 5 * MiB
    assert peak_line(pk2) == (
        "op index 3 (n0#1 aten.relu.default, m0): 3 storages; largest workspace of op 'n0#1' "
        "3.50 MiB (m0), a#1 1.00 MiB (m0), c 0.50 MiB (m2)")
    # the order must list every op
    import pytest
    with pytest.raises(ValueError):
        live_at_peak(_peak_graph(), ["n0", "n1", "n2"], 64)


def _cli_peak_line(graph_path, plan_path, extra):
    from conftest import roam_binary
    r = subprocess.run([roam_binary(), "plan", str(graph_path), "-o", str(plan_path),
                        ] + (extra if "--time-limit" in extra else extra + ["--time-limit", "10"]), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("at the peak"))
    return line[len("at the peak"):].strip()


def test_live_at_peak_is_roam_plans_line(tmp_path):
    """The Python recount (the executor's report) prints what roam plan prints, for the
    hand-worked graph in program order, a benchmark graph with its workspaces, and a plan with
    recomputation (version 2, under a budget)."""
    import gzip
    import json
    from conftest import REPO_ROOT
    from roam.headline import live_at_peak, peak_line
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(_peak_graph()))
    bench = os.path.join(REPO_ROOT, "bench", "graphs", "mobilenet_v2-b1-adam.json.gz")
    cases = [(gpath, ["--order", "program", "--layout", "llfb"]), (bench, []),
             (bench, ["--budget", "112MiB", "--time-limit", "30"])]
    versions = set()
    for graph_path, extra in cases:
        plan_path = tmp_path / "p.json"
        cli = _cli_peak_line(graph_path, plan_path, extra)
        opener = gzip.open if str(graph_path).endswith(".gz") else open
        with opener(graph_path, "rt") as f:
            graph = json.load(f)
        plan = json.loads(plan_path.read_text())
        versions.add(plan["version"])
        pk = live_at_peak(graph, plan["order"], plan["alignment"], plan.get("inplace"))
        assert cli == peak_line(pk) + "; roam viz draws it"
        assert pk["live_bytes"] == plan["stats"]["theoretical_peak_bytes"]
    assert versions == {1, 2}


def test_run_takes_the_users_own_model(tmp_path):
    """python -m roam.run --model package.module:Name: the user's nn.Module class (its batch
    from example_batch, its loss from loss_fn beside it), planned and run beside the eager
    loop; a wrong name is one line and exit 2."""
    (tmp_path / "mynets.py").write_text(
        "import torch, torch.nn as nn\n"
        "class TinyLM(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.emb = nn.Embedding(30, 16)\n"
        "        self.ff = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 30))\n"
        "    def forward(self, x):\n"
        "        return self.ff(self.emb(x))\n"
        "def example_batch(batch_size, generator):\n"
        "    return (torch.randint(0, 30, (batch_size, 12), generator=generator),\n"
        "            torch.randint(0, 30, (batch_size, 12), generator=generator))\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + str(tmp_path)
    r = subprocess.run([sys.executable, "-m", "roam.run", "--model", "mynets:TinyLM",
                        "--batch-size", "4", "--steps", "2", "--check", "--quiet"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "mynets:TinyLM batch 4" in r.stdout
    assert "bit-identical" in r.stdout
    for bad, why in (("mynets:Nope", "has no 'Nope'"), ("no_such_pkg:Net", "cannot import")):
        r = subprocess.run([sys.executable, "-m", "roam.run", "--model", bad, "--steps", "1"],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 2 and why in r.stderr, r.stderr
        assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1
