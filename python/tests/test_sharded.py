"""Fully-sharded (FSDP2 / ZeRO-3) rank steps: roam.capture.sharded.

* shard arithmetic, hand-worked, no process group;
* the graph of a sharded step on the fake backend (world size 8, fake tensors, in this
  process): collectives per parameter, resident bytes;
* two ranks on gloo under torchrun (python/tests/sharded_worker.py, one spawn): the captured
  graph's collectives and resident bytes, roam's steps against eager PyTorch FSDP2
  (``fully_shard``) after 3 steps, and ``roam plan`` / ``roam validate`` on the rank graph.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import roam
from roam import zoo
from roam.capture.errors import CaptureError
from roam.capture.sharded import ShardedModel, ShardSpec, gradient_divide_factors
from roam.executor.planning import plan_graph, validate_plan
from roam.executor.api import RoamStep

from conftest import roam_binary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharded_worker.py")


# ---------------------------------------------------------------- shard arithmetic

def test_dim0_layout_of_a_parameter_not_a_multiple_of_world_size():
    # (5, 3) over 4 ranks, FSDP2's layout: chunks of ceil(5 / 4) = 2 rows of 3 elements, so
    # each shard is (2, 3) = 6 elements; 4 x 6 = 24 padded elements (8 rows) of which 15 are
    # the parameter's, 9 zeros. Rows [0, 2), [2, 4), [4, 5) + one zero row, then two zero rows.
    s = ShardSpec((5, 3), 4)
    assert (s.numel, s.rows, s.row_numel, s.shard_rows) == (15, 5, 3, 2)
    assert s.shard_shape == (2, 3) and s.shard_numel == 6
    assert s.padded_numel == 24 and s.pad == 9 and s.gathered_shape == (8, 3)
    assert [s.valid_numel(r) for r in range(4)] == [6, 6, 3, 0]
    full = torch.arange(15.0).view(5, 3)
    shards = [s.shard(full, r) for r in range(4)]
    assert torch.equal(shards[0], torch.tensor([[0.0, 1, 2], [3, 4, 5]]))
    assert torch.equal(shards[2], torch.tensor([[12.0, 13, 14], [0, 0, 0]]))
    assert torch.equal(shards[3], torch.zeros(2, 3))
    # what torch.chunk (FSDP2's split) gives each rank: 3 chunks of 2, 2, 1 rows
    for r, c in enumerate(torch.chunk(full, 4)):
        assert torch.equal(shards[r][:c.shape[0]], c)
    gathered = torch.cat(shards)  # what the all-gather returns
    assert gathered.shape == s.gathered_shape
    view = s.unshard(gathered)
    assert torch.equal(view, full) and view.untyped_storage().data_ptr() == \
        gathered.untyped_storage().data_ptr()
    # the reduce-scatter input: the gradient zero-padded to 8 rows, each rank's 2 rows its
    # shard of the gradient
    padded = s.pad_gradient(full)
    assert padded.shape == (8, 3)
    assert torch.equal(padded.reshape(-1)[:15], full.reshape(-1))
    assert torch.equal(padded.reshape(-1)[15:], torch.zeros(9))
    assert all(torch.equal(c, shards[r]) for r, c in enumerate(padded.chunk(4)))


def test_flat_layout_pads_to_a_multiple_of_world_size_elements():
    # FSDP1 / ZeRO-3: 15 elements over 4 ranks: ceil(15 / 4) = 4 per shard, 16 padded, 1 zero
    s = ShardSpec((5, 3), 4, "flat")
    assert s.shard_shape == (4,) and s.shard_numel == 4 and s.gathered_shape == (16,)
    assert s.padded_numel == 16 and s.pad == 1
    assert [s.valid_numel(r) for r in range(4)] == [4, 4, 4, 3]
    full = torch.arange(15.0).view(5, 3)
    assert torch.equal(s.shard(full, 3), torch.tensor([12.0, 13, 14, 0]))
    assert torch.equal(s.unshard(torch.cat([s.shard(full, r) for r in range(4)])), full)


def test_scalar_and_unpadded_parameters():
    s = ShardSpec((), 2)  # a 0-d parameter is one row: rank 0 holds it, rank 1 a zero
    assert s.shard_shape == (1,) and s.pad == 1 and [s.valid_numel(r) for r in (0, 1)] == [1, 0]
    x = torch.tensor(2.5)
    assert torch.equal(s.unshard(torch.cat([s.shard(x, 0), s.shard(x, 1)])), x)
    s = ShardSpec((8, 2), 2)  # no padding: the gradient goes to the reduce-scatter as is
    g = torch.randn(8, 2)
    assert s.pad == 0 and s.pad_gradient(g).data_ptr() == g.data_ptr()
    with pytest.raises(ValueError):
        ShardSpec((4,), 0)
    with pytest.raises(ValueError):
        ShardSpec((4,), 2, "rows")


def test_gradient_average_is_fsdp2s():
    # float32 / bfloat16: FSDP2 reduce-scatters with ReduceOp.AVG (the sum / world size on
    # gloo): a post-division by the world size; world size 1: nothing
    assert gradient_divide_factors(1, torch.float32) == (None, None)
    assert gradient_divide_factors(2, torch.float32) == (None, 2.0)
    assert gradient_divide_factors(8, torch.bfloat16) == (None, 8.0)
    # other dtypes: pre doubles while it divides N and N / pre > pre (8: 1 -> 2 -> 4, stop at
    # 8 / 4 = 2 < 4), post = N / pre
    assert gradient_divide_factors(8, torch.float16) == (4.0, 2.0)
    assert gradient_divide_factors(2, torch.float16) == (2.0, None)
    assert gradient_divide_factors(6, torch.float64) == (4.0, 1.5)
    try:  # the private function of this torch (2.14: _get_gradient_divide_factors)
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import \
            _get_gradient_divide_factors
    except ImportError:
        return

    class Group:
        def __init__(self, n):
            self.n = n

        def size(self):
            return self.n
    for n in (2, 3, 6, 8):
        for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            pre, post, rs_op, _ = _get_gradient_divide_factors(Group(n), None, dt, "cpu")
            if rs_op == dist.ReduceOp.AVG:
                pre, post = None, float(n)
            mine = gradient_divide_factors(n, dt)
            assert mine == (pre if pre not in (None, 1) else None,
                            post if post not in (None, 1) else None), (n, dt)


def test_sharded_model_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group exists in this process")
    with pytest.raises(CaptureError, match="not initialized"):
        ShardedModel(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------- fake backend, 8 ranks

@pytest.fixture(scope="module")
def fake_world():
    """A fake process group of 8 ranks in this process (this is rank 0)."""
    # torch.testing._internal.distributed.fake_pg (private: PyTorch's own tests use it to
    # trace distributed programs without peers; checked on torch 2.14.1): a backend whose
    # collectives do nothing, so that world size 8 needs no other process.
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=8)
    yield dist.group.WORLD
    _FAKE_CAPTURES.clear()
    dist.destroy_process_group()


TINY_GPT = zoo.GPT2Config(vocab_size=61, n_positions=16, n_embd=16, n_layer=2, n_head=2)


_FAKE_CAPTURES = {}


def _fake_gpt_capture(reshard):
    """(ShardedModel, Graph) of a tiny GPT-2's rank-0 step over the fake 8-rank group (one
    capture per variant, kept for the module)."""
    if reshard not in _FAKE_CAPTURES:
        _FAKE_CAPTURES[reshard] = _fake_gpt_capture_now(reshard)
    return _FAKE_CAPTURES[reshard]


def _fake_gpt_capture_now(reshard):
    from roam.capture.fake import new_fake_mode
    mode = new_fake_mode()
    with mode:
        torch.manual_seed(0)
        sm = ShardedModel(zoo.GPT2(TINY_GPT), reshard_after_forward=reshard)
        opt = torch.optim.Adam(sm.parameters(), foreach=False)
        batch = zoo.example_batch("gpt2", 1, 12, generator=torch.Generator().manual_seed(0),
                                  config=TINY_GPT)
    return sm, roam.capture(sm, opt, zoo.lm_loss, batch, fake=True, cost="none")


def _collectives(g):
    return [op for op in g.ops if "collective" in op]


def test_fake_eight_ranks_gpt2_collectives_and_resident(fake_world):
    sm, g = _fake_gpt_capture(reshard=False)
    names = [t["name"] for t in g.tensors if t.get("role") == "param"]
    assert len(names) == len(sm.specs) == 2 + 12 * 2 + 2  # wte, wpe, 12 per block, ln_f
    coll = _collectives(g)
    ag = [op for op in coll if op["collective"]["kind"] == "all_gather"]
    rs = [op for op in coll if op["collective"]["kind"] == "reduce_scatter"]
    # one all-gather per parameter, and wte's again for the tied LM head (read by the root's
    # forward, outside the embedding's); one reduce-scatter per parameter
    assert len(ag) == len(names) + 1 and len(rs) == len(names)
    assert len(coll) == 2 * len(names) + 1
    assert all(op["phase"] == "forward" for op in ag)
    assert all(op["phase"] == "backward" for op in rs)
    assert coll == ag + rs  # every all-gather before the first reduce-scatter
    assert all(not op["recomputable"] for op in coll)
    by_id = {t["id"]: t for t in g.tensors}
    gathered = [by_id[op["inputs"][0]]["name"] for op in ag]
    assert sorted(set(gathered)) == sorted(names)
    assert gathered[:2] == ["module.wte.weight", "module.wpe.weight"]
    assert gathered[-1] == "module.wte.weight" and gathered.count("module.wte.weight") == 2
    # no gathered tensor is read by the forward after the next module's gathers: a gathered
    # parameter does not stay live across the forward (roam's recomputation cuts the forward
    # where at most one tensor crosses)
    pos = {op["id"]: k for k, op in enumerate(g.ops)}
    readers = {}
    for op in g.ops:
        for i in op["inputs"]:
            readers.setdefault(i, []).append(op)
    root = {t["id"]: t.get("alias_of") or t["id"] for t in g.tensors}
    while any(root[v] != v for v in root.values()):
        root = {k: root[v] for k, v in root.items()}
    for j, op in enumerate(ag):
        out = root[op["outputs"][0]]
        ids = [t for t, r in root.items() if r == out]
        last = max((pos[u["id"]] for t in ids for u in readers.get(t, [])
                    if u["phase"] == "forward"), default=pos[op["id"]])
        later = [pos[o["id"]] for o in ag[j + 1:] if o.get("module") != op.get("module")]
        assert not later or last < later[0], (op["id"], gathered[j])
    # resident: shards + Adam's exp_avg and exp_avg_sq (shard-sized) + step counters
    # (4 B each) + the causal-mask buffer (16 x 16 bool) + the two (1, 12) int64 inputs
    shard = sum(s.shard_numel * 4 for s in sm.specs)
    assert g.meta["resident_bytes"] == 3 * shard + 4 * len(names) + 16 * 16 + 2 * 12 * 8
    assert sm.shard_bytes() == shard
    # wte (61 x 16) over 8 ranks: 8 rows each (64 padded), 8 x 16 x 4 B = 512 B
    assert sm.specs[0].shard_shape == (8, 16) and sm.specs[0].pad == 3 * 16
    d = g.meta["distributed"]
    assert (d["kind"], d["world_size"], d["rank"], d["backend"]) == ("fully_sharded", 8, 0,
                                                                       "fake")
    assert d["reshard_after_forward"] is False and d["layout"] == "dim0"


def test_fake_reshard_after_forward_gathers_saved_weights_again(fake_world):
    sm, g = _fake_gpt_capture(reshard=True)
    coll = _collectives(g)
    ag_f = [op for op in coll if op["collective"]["kind"] == "all_gather"
            and op["phase"] == "forward"]
    ag_b = [op for op in coll if op["collective"]["kind"] == "all_gather"
            and op["phase"] == "backward"]
    rs = [op for op in coll if op["collective"]["kind"] == "reduce_scatter"]
    assert len(ag_f) == len(rs) + 1 == len(sm.specs) + 1  # wte twice (the LM head)
    by_id = {t["id"]: t for t in g.tensors}
    again = sorted(by_id[op["inputs"][0]]["name"][len("module."):] for op in ag_b)
    # what autograd saves of the parameters: per block the LayerNorm weights and biases
    # (native_layer_norm saves both) and the four linear weights (for the input gradient);
    # ln_f's two; wte for the LM head. wpe (an embedding: only its indices are saved) and
    # the biases of linears are not gathered again
    per_block = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_proj.weight",
                 "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_proj.weight"]
    want = sorted([f"h.{i}.{n}" for i in range(2) for n in per_block]
                  + ["ln_f.weight", "ln_f.bias", "wte.weight"])
    assert again == want
    assert g.meta["distributed"]["reshard_after_forward"] is True
    # a gathered parameter of the forward dies at its last forward use: Tp(program order)
    # is below that of the step that keeps them
    _, kept = _fake_gpt_capture(reshard=False)
    assert g.meta["tp_program_order_bytes"] < kept.meta["tp_program_order_bytes"]
    assert g.meta["resident_bytes"] == kept.meta["resident_bytes"]


def test_process_group_and_sharded_model_refused(fake_world):
    from roam.capture.fake import new_fake_mode
    with new_fake_mode():
        sm = ShardedModel(torch.nn.Linear(4, 2))
        opt = torch.optim.Adam(sm.parameters())
        batch = (torch.randn(2, 4), torch.randint(0, 2, (2,)))
    with pytest.raises(CaptureError, match="do not combine"):
        roam.capture(sm, opt, torch.nn.functional.cross_entropy, batch, fake=True,
                     process_group=fake_world)


# ---------------------------------------------------------------- two ranks, gloo

@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One torchrun of the worker (2 ranks, gloo): the FSDP2 comparison of two variants
    (layout dim0; layout flat with reshard_after_forward) and rank 0's graphs."""
    d = tmp_path_factory.mktemp("sharded")
    out = d / "ranks.json"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), OMP_NUM_THREADS="1")
    r = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", WORKER,
                        "--steps", "3", "--variants", "dim0,flat+reshard",
                        "--out", str(out), "--graph", str(d / "rank0-VARIANT.json")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text()), d


# the worker's Net: fc1 Linear(6, 7), norm LayerNorm(7), fc2 Linear(7, 5), head Linear(5, 3)
NET_PARAMS = [("fc1.weight", (7, 6)), ("fc1.bias", (7,)), ("norm.weight", (7,)),
              ("norm.bias", (7,)), ("fc2.weight", (5, 7)), ("fc2.bias", (5,)),
              ("head.weight", (3, 5)), ("head.bias", (3,))]


def test_two_ranks_equal_eager_fsdp2(two_ranks):
    ranks, _ = two_ranks
    assert [x["rank"] for x in ranks] == [0, 1]
    for x in ranks:
        for variant, v in x["variants"].items():
            assert len(v["losses"]) == 3
            assert max(v["loss_rel_diff"]) <= 1e-6, (variant, v)
            assert max(v["param_rel_diff"]) <= 1e-6, (variant, v)
            # the first step of a fresh optimizer is eager (it creates the state); the
            # others run the captured graph (planned, or in program order)
            assert v["modes"][0] == "eager"
            assert all(m in ("planned", "program", "diverged") for m in v["modes"][1:])
            # a planned step served every tensor of the plan in its arena: the measured
            # arena use is the planned arena; on the fallback heap at most the process
            # group's own small buffers (gloo's, under 4 KiB together)
            for mode, (planned, used, fallback) in zip(v["modes"], v["arenas"]):
                if mode == "planned":
                    assert used <= planned and planned - used < 64, v
                    assert fallback <= RoamStep.RANK_NOISE_BYTES, v
            # the ranks decide together (rank_group_of: the ShardedModel's group)
            j = v["joint"]
            assert j["ranks_is_model"] and j["any_last"] and not j["any_none"], j
            assert j["refused"] and "would issue different collectives" in j["refused"], j
            # the last rank's refusal, raised on every rank with its figures
            msg, budget, smallest, bound = j["budget_refused"]
            last = len(ranks) - 1
            assert (budget, smallest, bound) == (100, 1000 + last, 500 + last), j
            assert f"(rank {last})" in msg
            assert (x["rank"] == last) == (not msg.startswith(f"roam: rank {last} of the group"))
    # the ranks trained on different batches: their losses differ, their parameters agree
    # with FSDP2's (the gradients were reduce-scattered and averaged)
    assert ranks[0]["ref_losses"] != ranks[1]["ref_losses"]
    # shard bytes, hand-computed: dim0 rows ceil(d0 / 2): fc1.weight (4, 6), biases and
    # norm (4,), fc2.weight (3, 7), fc2.bias (3,), head.weight (2, 5), head.bias (2,)
    dim0 = (24 + 4 + 4 + 4 + 21 + 3 + 10 + 2) * 4
    # flat: ceil(numel / 2) elements each: 21, 4, 4, 4, 18, 3, 8, 2
    flat = sum(-(-torch.Size(s).numel() // 2) for _, s in NET_PARAMS) * 4
    for x in ranks:
        assert x["variants"]["dim0"]["shard_bytes"] == dim0 == 288
        assert x["variants"]["dim0"]["adam_state_bytes"] == 2 * dim0
        assert x["variants"]["flat+reshard"]["shard_bytes"] == flat == 256


def test_two_ranks_graph_collectives_resident_and_plan(two_ranks):
    _, d = two_ranks
    g = json.loads((d / "rank0-dim0.json").read_text())
    by_id = {t["id"]: t for t in g["tensors"]}
    coll = [op for op in g["ops"] if "collective" in op]
    ag = [op for op in coll if op["collective"]["kind"] == "all_gather"]
    rs = [op for op in coll if op["collective"]["kind"] == "reduce_scatter"]
    assert coll == ag + rs and len(ag) == len(rs) == len(NET_PARAMS)
    assert all(op["phase"] == "forward" for op in ag)
    assert all(op["phase"] == "backward" for op in rs)
    assert all(not op["recomputable"] and op["collective"]["group"] for op in coll)
    # the all-gathers in parameter order (the forward's), each of its shard
    assert [by_id[op["inputs"][0]]["name"] for op in ag] == [
        "module." + n for n, _ in NET_PARAMS]
    world = 2
    shard_shapes = [ShardSpec(s, world).shard_shape for _, s in NET_PARAMS]
    assert [tuple(by_id[op["outputs"][0]]["shape"]) for op in ag] == [
        ShardSpec(s, world).gathered_shape for _, s in NET_PARAMS]
    # the reduce-scatters in the order backward completes the gradients: the reverse
    assert [tuple(by_id[op["outputs"][0]]["shape"]) for op in rs] == shard_shapes[::-1]
    # each is waited for, then divided by the world size (FSDP2's average)
    users = {}
    for op in g["ops"]:
        for i in op["inputs"]:
            users.setdefault(i, []).append(op)
    for op in rs:
        (wait,) = users[op["outputs"][0]]
        assert wait["target"].startswith("_c10d_functional.wait_tensor")
        assert any(u["target"] == "aten.div.Tensor" for u in users[wait["outputs"][0]])
    # resident, hand-computed: shards 288 B, Adam exp_avg + exp_avg_sq 2 x 288 B, 8 step
    # counters of 4 B, the batch: data (8, 6) float32 = 192 B, labels (8,) int64 = 64 B
    assert g["meta"]["resident_bytes"] == 288 + 2 * 288 + 8 * 4 + 192 + 64 == 1152
    assert g["meta"]["distributed"]["kind"] == "fully_sharded"
    assert g["meta"]["distributed"]["world_size"] == 2
    # planned (the extension) and by the CLI: collectives in program order, valid
    plan = plan_graph(g, "roam", "roam", 64, 30.0, 1)
    assert plan["collectives"] == [op["id"] for op in coll]
    assert validate_plan(g, plan)["valid"]
    exe = roam_binary()
    if not os.path.exists(exe):
        pytest.skip(f"{exe} not built")
    gpath, ppath = d / "rank0-dim0.json", d / "rank0-dim0.plan.json"
    r = subprocess.run([exe, "plan", str(gpath), "-o", str(ppath), "--time-limit", "20"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe, "validate", str(gpath), str(ppath)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(ppath.read_text())["collectives"] == [op["id"] for op in coll]
    # the resharding variant: one more all-gather in the backward per saved weight (fc2,
    # head: the linears whose input gradient is needed; norm's weight and bias)
    g2 = json.loads((d / "rank0-flat+reshard.json").read_text())
    by_id2 = {t["id"]: t for t in g2["tensors"]}
    again = [by_id2[op["inputs"][0]]["name"] for op in g2["ops"]
             if op.get("collective", {}).get("kind") == "all_gather"
             and op["phase"] == "backward"]
    assert sorted(again) == sorted(["module.head.weight", "module.fc2.weight",
                                    "module.norm.weight", "module.norm.bias"])
    plan2 = plan_graph(g2, "roam", "roam", 64, 30.0, 1)
    assert validate_plan(g2, plan2)["valid"]
