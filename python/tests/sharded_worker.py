"""One rank of the fully-sharded check (python/tests/test_sharded.py; run under torchrun).

Every rank trains the same small model on its own batches three ways, from the same initial
parameters, with ``torch.optim.Adam``:

* eager PyTorch FSDP2 (``fully_shard`` on each layer and on the root, gloo/CPU);
* roam: ``roam.optimize(ShardedModel(model), Adam(shards), loss_fn, batch)``, the captured
  step (all-gathers and reduce-scatters inside) run planned on the arena;
* the captured graph itself is written for the test (``--graph``) after one
  ``roam.capture`` of the same step.

Rank 0 writes ``--out`` (JSON): losses of both, the largest relative differences of losses
and of the gathered parameters after each step, what each planned step reported, and the
shard / Adam-state bytes of each rank (gathered).

    torchrun --standalone --nproc-per-node 2 python/tests/sharded_worker.py --out r.json
"""

import argparse
import copy
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import roam  # noqa: E402
from roam.capture.sharded import ShardedModel  # noqa: E402


class Net(nn.Module):
    """Dims chosen so that no dim 0 is a multiple of 2 or 4 except one: padded shards."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 7)
        self.norm = nn.LayerNorm(7)
        self.fc2 = nn.Linear(7, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(self.norm(torch.relu(self.fc1(x))))))


def loss_fn(out, y):
    return F.cross_entropy(out, y)


def fully_shard_fn():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    d = (a.double() - b.double()).abs().max().item()
    s = b.double().abs().max().item()
    return d / s if s > 0 else d


def joint_decisions(step, sm, rank: int, world: int) -> dict:
    """The ranks of a sharded step decide together (roam.executor.ranks.rank_group_of): their
    group is the ShardedModel's; a flag raised on the last rank only is raised on every rank; a
    collective order that differs on one rank is refused on every rank; so is a budget that
    only the last rank cannot meet."""
    from roam.executor.ranks import any_rank, check_ranks_agree
    out = {"ranks_is_model": step.rank_group is sm,
           "any_last": any_rank(rank == world - 1, step.rank_group),
           "any_none": any_rank(False, step.rank_group)}
    order = [op["id"] for op in step.graph["ops"]]
    coll = [i for i, oid in enumerate(order) if "collective" in step.graph["ops"][i]]
    if rank == world - 1:  # its last two collectives (reduce-scatters of unequal sizes)
        a, b = coll[-2], coll[-1]
        order[a], order[b] = order[b], order[a]
    try:
        check_ranks_agree(step.graph, order, step.rank_group)
        out["refused"] = None
    except RuntimeError as e:
        out["refused"] = str(e)
    # a budget the last rank alone cannot meet is refused on every rank, with its figures
    from roam import BudgetInfeasible
    from roam.executor.ranks import refuse_together
    mine = (BudgetInfeasible(f"roam: budget 100 B cannot be met (rank {rank})", 100,
                             1000 + rank, 500 + rank) if rank == world - 1 else None)
    try:
        refuse_together(mine, step.rank_group)
        out["budget_refused"] = None
    except BudgetInfeasible as e:
        out["budget_refused"] = [str(e), e.budget_bytes, e.smallest_budget_bytes,
                                 e.lower_bound_bytes]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--graph", default=None, help="write rank 0's captured graph here")
    ap.add_argument("--variants", default="dim0",
                    help="comma-separated LAYOUT[+reshard] (ShardedModel's layout and "
                         "reshard_after_forward); VARIANT in --graph is replaced by each")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--model", default="net", choices=("net", "gpt2"),
                    help="net: Net (the test's); gpt2: a tiny GPT-2 of roam.zoo (tied LM "
                         "head, dropout 0.1), fully_shard per block")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    if args.model == "gpt2":
        from roam import zoo
        cfg = zoo.GPT2Config(vocab_size=61, n_positions=16, n_embd=16, n_layer=2, n_head=2)
        base = zoo.GPT2(cfg)
        g = torch.Generator().manual_seed(100 + rank)
        batches = [zoo.example_batch("gpt2", 2, 12, generator=g, config=cfg)
                   for _ in range(args.steps)]
        units = list(base.h)
        lossf = zoo.lm_loss
    else:
        base = Net()
        g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
        batches = [(torch.randn(args.batch, 6, generator=g),
                    torch.randint(0, 3, (args.batch,), generator=g))
                   for _ in range(args.steps)]
        units = [base.fc1, base.norm, base.fc2, base.head]
        lossf = loss_fn
    adam = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01, foreach=False)

    # eager FSDP2
    fully_shard = fully_shard_fn()
    ref = copy.deepcopy(base)
    names = {id(m): n for n, m in base.named_modules()}
    by_name = dict(ref.named_modules())
    for m in units:
        fully_shard(by_name[names[id(m)]])
    fully_shard(ref)
    ref_opt = torch.optim.Adam(ref.parameters(), **adam)
    ref_losses, ref_params = [], []
    for k, (x, y) in enumerate(batches):
        torch.manual_seed(1000 + k)
        loss = lossf(ref(x), y)
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        ref_losses.append(loss.detach().clone())
        ref_params.append({n: p.full_tensor().detach().clone() for n, p in ref.named_parameters()})

    results = {}
    for variant in args.variants.split(","):
        layout, _, rs = variant.partition("+")
        reshard = rs == "reshard"
        # the captured graph (written for the test's structural checks)
        if args.graph:
            sm = ShardedModel(copy.deepcopy(base), layout=layout,
                              reshard_after_forward=reshard)
            opt = torch.optim.Adam(sm.parameters(), **adam)
            cap = roam.capture(sm, opt, lossf, batches[0], cost="none", check_peak=False)
            if rank == 0:
                cap.save(args.graph.replace("VARIANT", variant))
        # roam's steps
        sm = ShardedModel(copy.deepcopy(base), layout=layout, reshard_after_forward=reshard)
        opt = torch.optim.Adam(sm.parameters(), **adam)
        step = roam.optimize(sm, opt, lossf, batches[0])
        losses, loss_diff, param_diff, modes, arenas = [], [], [], [], []
        for k, (x, y) in enumerate(batches):
            torch.manual_seed(1000 + k)
            loss = step(x, y)
            losses.append(loss.item())
            loss_diff.append(rel(loss, ref_losses[k]))
            full = sm.full_parameters()
            param_diff.append(max(rel(full[n], ref_params[k][n]) for n in ref_params[k]))
            rep = step.last_report
            modes.append(rep.mode)
            arenas.append([int(rep.planned_arena_bytes), int(rep.arena_used_bytes),
                           int(rep.fallback_peak_bytes)])
        state_bytes = sum(v.numel() * v.element_size() for st in opt.state.values()
                          for v in st.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
        results[variant] = {"losses": losses, "loss_rel_diff": loss_diff,
                            "param_rel_diff": param_diff, "modes": modes,
                            "arenas": arenas, "joint": joint_decisions(step, sm, rank, world),
                            "shard_bytes": sm.shard_bytes(), "adam_state_bytes": state_bytes}
    mine = {"rank": rank, "world_size": world, "ref_losses": [x.item() for x in ref_losses],
            "variants": results, "seconds": time.perf_counter() - t0}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(everyone, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
