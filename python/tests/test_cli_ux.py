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
