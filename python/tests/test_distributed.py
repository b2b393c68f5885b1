"""Data-parallel rank steps (roam.capture.collectives, optimize(process_group=...)).

The unit tests run in this process on a one-rank gloo group; the comparison with PyTorch's
DistributedDataParallel spawns two ranks with torchrun (roam.compare_ddp)."""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import roam
from roam.capture.collectives import DataParallel, gradient_buckets
from roam.executor.planning import plan_graph, validate_plan

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """A gloo process group of one rank in this process."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _with_grads(sizes, dtype=torch.float32):
    ps = []
    for n in sizes:
        p = torch.zeros(n, dtype=dtype, requires_grad=True)
        p.grad = torch.ones(n, dtype=dtype)
        ps.append(p)
    return ps


def test_a_rank_without_a_group_is_warned(monkeypatch):
    # first in this file: before the one-rank group of the fixture exists
    assert not dist.is_initialized()
    monkeypatch.setenv("WORLD_SIZE", "2")
    m = nn.Linear(8, 4)
    with pytest.warns(UserWarning, match="each rank trains alone"):
        roam.optimize(m, torch.optim.SGD(m.parameters(), lr=0.1), F.cross_entropy,
                      (torch.randn(2, 8), torch.randint(0, 4, (2,))))


def test_buckets_follow_ddp_assignment_by_size():
    # float32: sizes in elements 100, 300, 50, 200, 10 -> bytes 400, 1200, 200, 800, 40.
    # Reverse order: p4 (40), p3 (800) -> 840 < first cap 1000; p2 (200) -> 1040 >= 1000:
    # bucket [4, 3, 2] closed; then cap 1500: p1 (1200) -> 1200; p0 (400) -> 1600 >= 1500:
    # bucket [1, 0]. A parameter without a gradient is in no bucket.
    ps = _with_grads([100, 300, 50, 200, 10])
    dp = DataParallel(None, bucket_cap_bytes=1500, first_bucket_bytes=1000)
    assert gradient_buckets(ps, dp) == [[4, 3, 2], [1, 0]]
    ps[3].grad = None
    # p4 40, p2 200, p1 1200 -> 1440 >= 1000 closes [4, 2, 1]; p0 400 left open: [0]
    assert gradient_buckets(ps, dp) == [[4, 2, 1], [0]]


def test_buckets_hold_one_dtype_each():
    a = _with_grads([10, 10])
    b = _with_grads([10], torch.float64)
    ps = [a[0], b[0], a[1]]
    dp = DataParallel(None, bucket_cap_bytes=10 ** 6, first_bucket_bytes=10 ** 6)
    # nothing reaches a cap: the open buckets, float32 first (opened first, by p2)
    assert gradient_buckets(ps, dp) == [[2, 0], [1]]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)   # weight 512 B, bias 64 B
        self.b = nn.Linear(16, 4)   # weight 256 B, bias 16 B

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_captured_rank_has_the_bucket_all_reduces_as_collectives(one_rank):
    torch.manual_seed(0)
    m = _Net()
    opt = torch.optim.Adam(m.parameters())
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    dp = DataParallel(one_rank, bucket_cap_bytes=300, first_bucket_bytes=300)
    g = roam.capture(m, opt, F.cross_entropy, (x, y), process_group=dp, cost="none")
    ops = g.ops
    tensors = {t["id"]: t for t in g.tensors}
    coll = [op for op in ops if "collective" in op]
    # reverse order: b.bias 16, b.weight 256 -> 272 < 300; a.bias 64 -> 336: bucket 1 of
    # 336 B; a.weight 512 >= 300: bucket 2 of 512 B
    assert [op["collective"] for op in coll] == [{"kind": "all_reduce", "group": "0"}] * 2
    assert [tensors[op["outputs"][0]]["size"] for op in coll] == [336, 512]
    assert all(op["phase"] == "backward" and not op["recomputable"] for op in coll)
    waits = [op for op in ops if op["target"].startswith("_c10d_functional.wait_tensor")]
    assert len(waits) == 2
    for w, c in zip(waits, coll):
        assert w["inputs"] == c["outputs"] and not w["recomputable"]
        assert tensors[w["outputs"][0]]["alias_of"] == c["outputs"][0]
    # every parameter's update reads its gradient from a bucket: the optimizer runs after
    # both collectives in program order
    idx = {op["id"]: k for k, op in enumerate(ops)}
    first_update = min(k for k, op in enumerate(ops) if op["phase"] == "update")
    assert max(idx[c["id"]] for c in coll) < first_update
    assert g.meta["distributed"]["world_size"] == 1
    assert g.meta["distributed"]["kind"] == "data_parallel"
    # the plan lists the collectives in program order; swapping them is refused
    plan = plan_graph(g.data, "roam", "roam", 64, 30.0, 1)
    assert plan["collectives"] == [c["id"] for c in coll]
    assert validate_plan(g.data, plan)["valid"]
    bad = copy.deepcopy(plan)
    i, j = plan["order"].index(coll[0]["id"]), plan["order"].index(coll[1]["id"])
    bad["order"][i], bad["order"][j] = bad["order"][j], bad["order"][i]
    rep = validate_plan(g.data, bad)
    assert not rep["valid"]
    assert any(coll[0]["id"] in p and coll[1]["id"] in p for p in rep["problems"])
    # the independent recount agrees on both
    from roam.reference.recount import recount
    assert recount(g.data, plan["order"]).tp_bytes == plan["stats"]["theoretical_peak_bytes"]
    with pytest.raises(ValueError, match="collective op"):
        recount(g.data, bad["order"])


def test_one_rank_step_equals_eager_training(one_rank):
    # one rank: the average over the group is the gradient itself, so the planned step must
    # equal plain eager training bit for bit (BatchNorm buffers broadcast from rank 0 =
    # themselves)
    torch.manual_seed(1)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Flatten(), nn.Linear(8 * 8 * 8, 5))
    ref = copy.deepcopy(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))) for _ in range(3)]
    step = roam.optimize(m, opt, F.cross_entropy, batches[0], process_group=one_rank)
    for x, y in batches:
        loss = step(x, y)
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        assert torch.equal(loss, ref_loss.detach())
    assert step.last_report.mode == "planned"
    for p, q in zip(m.parameters(), ref.parameters()):
        assert torch.equal(p, q)
    for p, q in zip(m.buffers(), ref.buffers()):
        assert torch.equal(p, q)


def test_step_function_form_leaves_no_gradients(one_rank):
    # the first step of a fresh optimizer may run the user's function eagerly; it leaves
    # .grad set, which no later (planned) step would update: roam clears it
    torch.manual_seed(2)
    m = _Net()
    opt = torch.optim.Adam(m.parameters())

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss

    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    step = roam.optimize(train_step, (x, y), process_group=one_rank)
    for _ in range(2):
        step(x, y)
        assert all(p.grad is None for p in m.parameters())
    assert [r.mode for r in step.reports][-1] == "planned"


def test_process_group_must_be_a_group():
    m = _Net()
    with pytest.raises(TypeError, match="process_group"):
        roam.capture(m, torch.optim.SGD(m.parameters(), lr=0.1), F.cross_entropy,
                     (torch.randn(2, 8), torch.randint(0, 4, (2,))), process_group="world")


@pytest.mark.parametrize("argv, word", [
    (["--model", "resnet"], "--model: invalid choice"),
    (["--width", "0"], "--width: 0 is not positive"),
    (["--steps", "x"], "--steps: 'x' is not an integer"),
    (["--budget", "12parsecs"], "--budget: not a memory size"),
    (["--against", "zero"], "--against: invalid choice")])
def test_compare_bad_arguments_exit_2_before_any_rank_starts(argv, word, capsys):
    """roam.compare_ddp refuses a bad argument with one line and exit 2, before
    init_process_group (which would wait for the other ranks)."""
    from roam import compare_ddp
    with pytest.raises(SystemExit) as e:
        compare_ddp.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert word in err and err.strip().splitlines()[-1].startswith("roam.compare_ddp: error:")


def test_two_ranks_equal_ddp_and_hold_less(tmp_path):
    """torchrun, 2 ranks, gloo: roam's planned rank steps against DistributedDataParallel on
    the same batches (roam.compare_ddp)."""
    out = tmp_path / "ddp.json"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), OMP_NUM_THREADS="1")
    r = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2",
                        "-m", "roam.compare_ddp", "--model", "convnet", "--width", "16",
                        "--batch-size", "16", "--steps", "5", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = json.loads(out.read_text())
    assert [x["rank"] for x in ranks] == [0, 1]
    for x in ranks:
        assert x["max_loss_rel_diff"] <= 1e-6
        assert x["max_param_rel_diff"] <= 1e-6
        # the convnet's 14 parameters hold < 1 MiB: one bucket; and 9 BatchNorm buffers
        # (3 x running mean, var, count) broadcast at the start
        assert x["collectives"] == 1 + 9
        steady = x["steps"][1:]
        assert all(s["mode"] == "planned" for s in steady)
        for s in steady:
            assert s["arena_bytes"] == x["planned_arena_bytes"]
            assert s["fallback_peak"] <= 0.01 * x["planned_arena_bytes"]
        assert x["roam_peak"] < x["ref_peak"]
    assert ranks[0]["plan_collectives"] == ranks[1]["plan_collectives"]
    # the two ranks trained on different batches, so their losses differ, and yet their
    # parameters agree with DDP's: the gradients were averaged
    assert ranks[0]["steps"][1]["roam_loss"] != ranks[1]["steps"][1]["roam_loss"]
