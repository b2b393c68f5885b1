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
    r = _run(["--model", "squeezenet1_1", "--batch-size", "2", "--image-size", "64",
              "--num-classes", "10", "-o", str(out)], cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and "ops" in r.stderr
    g = read_graph(str(out))
    assert g["name"] == "squeezenet1_1-b2-adam"
    assert g["meta"]["image_size"] == 64 and g["meta"]["num_classes"] == 10
    api = capture_torchvision("squeezenet1_1", batch_size=2, image_size=64, num_classes=10)
    assert dumps_graph(api.graph) == dumps_graph(g)
    assert sorted(os.listdir(tmp_path)) == ["sq.json.gz"]  # no temporary left behind
