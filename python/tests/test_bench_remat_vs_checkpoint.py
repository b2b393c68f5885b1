"""bench/remat_vs_checkpoint's checkpoint baseline is the model itself: the stem then the
sequential blocks compute exactly model.forward, and checkpoint_sequential over them gives every
parameter the gradient of the ordinary backward (bit for bit), for each model family the bench
runs (small configurations)."""

import copy
import importlib.util
import os
from importlib.machinery import SourceFileLoader

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO_ROOT

_LOADER = SourceFileLoader("remat_vs_checkpoint",
                           os.path.join(REPO_ROOT, "bench", "remat_vs_checkpoint"))
_SPEC = importlib.util.spec_from_loader("remat_vs_checkpoint", _LOADER)
BENCH = importlib.util.module_from_spec(_SPEC)
_LOADER.exec_module(BENCH)


def _model(name):
    import torchvision
    from roam import zoo
    torch.manual_seed(0)
    if name == "resnet50":
        return torchvision.models.resnet50(num_classes=7), torch.randn(2, 3, 64, 64)
    if name == "vgg11":
        m = torchvision.models.vgg11(num_classes=7)
        return m, torch.randn(1, 3, 32, 32)
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(num_classes=7), torch.randn(2, 3, 32, 32)
    if name == "bert-small":
        cfg = zoo.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=16)
        return zoo.Bert(cfg), torch.randint(0, 50, (2, 8))
    cfg = zoo.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=3, n_head=2)
    return zoo.GPT2(cfg), torch.randint(0, 50, (2, 8))


@pytest.mark.parametrize("name", sorted(BENCH.MODELS))
def test_blocks_are_the_model_and_checkpointing_keeps_every_gradient(name):
    model, x = _model(name)
    model.train()
    stem, blocks = BENCH.blocks_of(name, model)
    torch.manual_seed(1)
    ref = model(x)
    torch.manual_seed(1)
    y = stem(x)
    for b in blocks:
        y = b(y)
    assert torch.equal(y, ref)

    def grads(fwd, m):
        m.zero_grad(set_to_none=True)
        torch.manual_seed(2)
        out = fwd(x)
        F.cross_entropy(out.reshape(-1, out.shape[-1]),
                        torch.zeros(out.reshape(-1, out.shape[-1]).shape[0],
                                    dtype=torch.long)).backward()
        return [p.grad for p in m.parameters()]

    eager = grads(model, model)
    for segments in (2, len(blocks)):
        m2 = copy.deepcopy(model)
        g = grads(BENCH.checkpointed(name, m2, segments), m2)
        assert all(a is not None for a in g), "a parameter got no gradient"
        assert all(torch.equal(a, b) for a, b in zip(g, eager))


def test_paired_ratio_and_target_lines_by_hand():
    # step 1 is warm-up; ratios of steps 2..4: 2/1, 3/3, 4/2 -> median 2 -> +100%
    assert BENCH.paired([9, 2, 3, 4], [9, 1, 3, 2]) == pytest.approx(100.0)
    mib = 1 << 20
    d = {"rows": [
        {"row": "eager", "times": [1, 1.0, 1.0, 1.0], "peak_bytes": 10 * mib},
        {"row": "ckpt 2", "times": [1, 1.2, 1.2, 1.2], "peak_bytes": 8 * mib},
        {"row": "ckpt 4", "times": [1, 1.0, 1.0, 1.0], "peak_bytes": 6 * mib},
        {"row": "roam", "times": [1, 1.1, 1.1, 1.1], "peak_bytes": 7 * mib},
        {"row": "roam @ ckpt 2", "times": [1, 1.1, 1.1, 1.1], "peak_bytes": 7 * mib},
        {"row": "roam @ ckpt 4", "times": [1, 1.5, 1.5, 1.5], "peak_bytes": 5 * mib},
    ]}
    lines = BENCH.verdicts(d)
    assert len(lines) == 2
    # ckpt 2: roam @ ckpt 2 is 1.1 / 1.2 - 1 = -8.3%; the runs not slower than ckpt 2 are
    # roam and roam @ ckpt 2 (7 MiB < 8 MiB)
    assert "roam at its peak FASTER (-8.3% step time, 7.00 MiB)" in lines[0]
    assert "lowest peak is 7.00 MiB" in lines[0] and lines[0].endswith("LOWER")
    # ckpt 4: roam @ ckpt 4 is +50%; no roam run is as fast as 1.0
    assert "roam at its peak SLOWER (+50.0% step time, 5.00 MiB)" in lines[1]
    assert "NOT met at its step time" in lines[1]


def test_budget_is_the_table_peak_and_in_between_budgets_by_hand():
    mib = 1 << 20
    res = 100 * mib
    d = {"resident_bytes": res, "rows": [
        {"row": "eager", "times": [1, 1.0, 1.0, 1.0], "peak_bytes": 10 * mib},
        {"row": "ckpt 2", "times": [1, 1.2, 1.2, 1.2], "peak_bytes": 8 * mib},
        {"row": "ckpt 4", "times": [1, 1.3, 1.3, 1.3], "peak_bytes": 6 * mib},
        {"row": "roam", "times": [1, 1.1, 1.1, 1.1], "peak_bytes": 7 * mib},
        {"row": "roam @ ckpt 2", "budget_bytes": res + 8 * mib,
         "times": [1, 1.1, 1.1, 1.1], "peak_bytes": 7 * mib},
        {"row": "roam @ ckpt 4", "budget_bytes": res + 6 * mib - 1,
         "times": [1, 1.1, 1.1, 1.1], "peak_bytes": 6 * mib - 64},
        {"row": "roam @ smallest", "budget_bytes": res + 4 * mib,
         "times": [1, 1.5, 1.5, 1.5], "peak_bytes": 4 * mib},
        {"row": "roam @ 1/2", "budget_bytes": res + 5 * mib,
         "times": [1, 1.3, 1.3, 1.3], "peak_bytes": 5 * mib},
    ]}
    lines = BENCH.verdicts(d)
    # ckpt 2: +20% vs eager; the budget given is 8 MiB = its peak
    assert lines[0].startswith("- ckpt 2 (8.00 MiB, +20.0% vs eager): budget = its peak exactly")
    # ckpt 4: a budget one byte under its peak is reported as such
    assert f"budget {6 * mib - 1} B < its peak {6 * mib} B" in lines[1]
    # at ckpt 4's time (1.3): roam @ 1/2 is as fast (1.3 / 1.3 - 1 = 0) with 5 MiB, the lowest
    # among runs not slower (smallest is +15.4%); roam @ ckpt 4 is -15.4% at 6 MiB - 64 B
    assert "roam at its peak FASTER (-15.4% step time, 6.00 MiB)" in lines[1]
    assert "lowest peak is 5.00 MiB (roam @ 1/2, +0.0%): LOWER" in lines[1]
    # smallest 10, top 20: 12 (1/4), 15 (1/2), 17 (3/4, floor of 17.5)
    assert BENCH.between_budgets(10, 20) == [(1, 4, 12), (1, 2, 15), (3, 4, 17)]
    # 1/4 of 3 bytes is 0: not strictly above smallest, left out; none when top <= smallest
    assert BENCH.between_budgets(10, 13) == [(1, 2, 11), (3, 4, 12)]
    assert BENCH.between_budgets(10, 10) == []


def test_executor_ab_table_by_hand(tmp_path):
    import json
    loader = SourceFileLoader("executor_ab", os.path.join(REPO_ROOT, "bench", "executor_ab"))
    spec = importlib.util.spec_from_loader("executor_ab", loader)
    ab = importlib.util.module_from_spec(spec)
    loader.exec_module(ab)
    ab.OUT = str(tmp_path)
    ab.TABLE = str(tmp_path / "TABLE.md")
    ab.RESULTS = str(tmp_path / "RESULTS.md")
    (tmp_path / "RESULTS.md").write_text("# results\n")
    (tmp_path / "runs").mkdir()
    rows = [{"row": "eager", "times": [5, 1.0, 1.0, 2.0], "time": 1.0, "modes": [],
             "recomputations": None},
            # ratios 1.1, 1.1, 2.4 / 2 = 1.2 -> median 1.1 -> +10.0%
            {"row": "roam after", "times": [5, 1.1, 1.1, 2.4], "time": 1.1,
             "modes": ["planned"] * 4, "recomputations": 0},
            {"row": "roam before", "times": [5, 1.3, 1.3, 2.6], "time": 1.3,
             "modes": ["planned"] * 4, "recomputations": 0, "same_losses_as_after": True}]
    for r in rows:
        r["vs_eager"] = ab.paired(r["times"], rows[0]["times"])
    (tmp_path / "runs" / "m.json").write_text(json.dumps(
        {"model": "m", "batch": 2, "size": 8, "ops": 3, "steps": 4, "rows": rows}))
    ab.render()
    text = (tmp_path / "TABLE.md").read_text()
    assert "| roam after | 0 | 1.100 | +10.0% |  |" in text
    assert "| roam before | 0 | 1.300 | +30.0% | yes |" in text
    assert ab.BEGIN in (tmp_path / "RESULTS.md").read_text()
