"""The command line: python -m roam.capture."""

import os
import subprocess
import sys

from conftest import PYTHON_DIR, REPO_ROOT
from roam.capture import capture_torchvision
from roam.capture.io import dumps_graph, read_graph


def _run(args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR
    return subprocess.run([sys.executable, "-m", "roam.capture"] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_unknown_model_exits_2_and_lists_names(tmp_path):
    out = tmp_path / "x.json"
    r = _run(["--model", "no_such_net", "-o", str(out)], cwd=str(tmp_path))
    assert r.returncode == 2
    assert "unknown model 'no_such_net'" in r.stderr
    for name in ("alexnet", "resnet18", "vit_b_16", "mobilenet_v2"):
        assert name in r.stderr
    assert not out.exists()
    assert os.listdir(tmp_path) == []


def test_bad_output_name_exits_2(tmp_path):
    r = _run(["--model", "alexnet", "-o", str(tmp_path / "x.txt")], cwd=str(tmp_path))
    assert r.returncode == 2 and ".json" in r.stderr


def test_cli_writes_the_api_graph(tmp_path):
    out = tmp_path / "sq.json.gz"
    # from the repo root with PYTHONPATH=python, as documented
    # --cost none: byte-reproducible (the default, --cost auto, measures per-op CPU times)
    r = _run(["--model", "squeezenet1_1", "--batch-size", "2", "--image-size", "64",
              "--num-classes", "10", "--cost", "none", "-o", str(out)], cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and "ops" in r.stderr
    g = read_graph(str(out))
    assert g["name"] == "squeezenet1_1-b2-adam"
    assert g["meta"]["image_size"] == 64 and g["meta"]["num_classes"] == 10
    api = capture_torchvision("squeezenet1_1", batch_size=2, image_size=64, num_classes=10)
    assert dumps_graph(api.graph) == dumps_graph(g)
    assert sorted(os.listdir(tmp_path)) == ["sq.json.gz"]  # no temporary left behind


def test_unknown_model_lists_zoo_models_too(tmp_path):
    r = _run(["--model", "gpt3", "-o", str(tmp_path / "x.json")], cwd=str(tmp_path))
    assert r.returncode == 2
    assert "unknown model 'gpt3'" in r.stderr
    names = set(r.stderr.split("models): ", 1)[1].strip().split(", "))
    assert {"bert-base", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "resnet18",
            "vit_b_16"} <= names
    assert os.listdir(tmp_path) == []


def test_bad_option_combinations_exit_2(tmp_path):
    out = str(tmp_path / "x.json")
    r = _run(["--model", "alexnet", "--fake", "--cost", "measured", "-o", out], cwd=str(tmp_path))
    assert r.returncode == 2 and "needs real tensors" in r.stderr
    r = _run(["--model", "alexnet", "--optimizer", "lion", "-o", out], cwd=str(tmp_path))
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = _run(["--model", "gpt2", "--seq-len", "0", "-o", out], cwd=str(tmp_path))
    assert r.returncode == 2
    assert os.listdir(tmp_path) == []


def test_resnet18_real_mode_with_measured_costs(tmp_path):
    """A model nobody tuned roam for (not in the zoo list) captures from the command line; the
    default cost is the per-op CPU time measured in real mode."""
    out = tmp_path / "r.json.gz"
    r = _run(["--model", "resnet18", "--batch-size", "2", "--image-size", "32",
              "--num-classes", "10", "--optimizer", "sgd", "-o", str(out)], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    # not a terminal and no --progress: only the result line
    assert r.stderr.count("\n") == 1 and "wrote" in r.stderr
    g = read_graph(str(out))
    assert g["name"] == "resnet18-b2-sgd" and g["meta"]["optimizer"] == "SGD"
    assert g["meta"]["capture"]["mode"] == "real"
    assert all(op["cost"] > 0 for op in g["ops"])
    assert g["meta"]["capture"]["notes"][-1].startswith("cost: median seconds over 3 CPU runs")
    assert sum(op["target"] == "aten.convolution.default" for op in g["ops"]) == 20
    states = [t["name"] for t in g["tensors"] if t.get("role") == "optimizer_state"]
    assert len(states) == 62 and all(n.endswith(".momentum_buffer") for n in states)
    buffers = [t["name"] for t in g["tensors"] if t.get("role") == "buffer"]
    assert len(buffers) == 3 * 20  # running_mean, running_var, num_batches_tracked per BN


def test_zoo_model_fake_mode_with_progress(tmp_path):
    out = tmp_path / "g.json"
    r = _run(["--model", "gpt2", "--batch-size", "1", "--seq-len", "16", "--fake",
              "--optimizer", "adamw", "--progress", "-o", str(out)], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "tracing the training step with make_fx (fake tensors)" in r.stderr
    assert "building roam.zoo gpt2 (fake tensors)" in r.stderr
    g = read_graph(str(out))
    assert g["name"] == "gpt2-b1-adamw" and g["meta"]["model"] == "roam.zoo.gpt2"
    assert g["meta"]["seq_len"] == 16 and g["meta"]["capture"]["mode"] == "fake"
    assert g["meta"]["optimizer"] == "AdamW"
    assert g["meta"]["capture"]["notes"][-1].startswith("cost: estimated (roofline")
    assert all(op["cost"] > 0 for op in g["ops"])
    params = [t for t in g["tensors"] if t.get("role") == "param"]
    assert sum(t["size"] for t in params) == 4 * 124_439_808  # wpe keeps 1024 positions
    inputs = [(t["name"], t["shape"], t["dtype"]) for t in g["tensors"] if t.get("role") == "input"]
    assert inputs == [("input_ids", [1, 16], "int64"), ("labels", [1, 16], "int64")]
    # 12 blocks: one causal masked_fill and one softmax per block in the forward pass (the
    # backward of masked_fill is a masked_fill of the gradient)
    fwd = [op["target"] for op in g["ops"] if op["phase"] == "forward"]
    assert fwd.count("aten.masked_fill.Scalar") == 12 and fwd.count("aten._softmax.default") == 12
    assert fwd.count("aten.native_layer_norm.default") == 2 * 12 + 1


def test_input_too_small_for_the_model_exits_2_with_one_line(tmp_path):
    # resnet18 at 32x32 reaches its BatchNorm after the last stage with 1x1 spatial size: one
    # value per channel at batch 1, which PyTorch refuses in training mode.
    out = tmp_path / "x.json.gz"
    r = _run(["--model", "resnet18", "--batch-size", "1", "--image-size", "32", "-o", str(out)],
             cwd=str(tmp_path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--image-size 32" in lines[0] and "Traceback" not in r.stderr
    assert not out.exists()


def test_list_models_into_a_closed_pipe(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR
    r = subprocess.run(f"'{sys.executable}' -m roam.capture --list-models | head -1",
                       shell=True, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.stdout.strip() and "Error" not in r.stderr
