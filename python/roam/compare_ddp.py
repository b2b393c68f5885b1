"""roam's rank step against PyTorch's own DistributedDataParallel or FSDP2, in one run.

Run under torchrun, one process per rank (gloo on the CPU)::

    .venv/bin/torchrun --nproc-per-node 2 -m roam.compare_ddp --model convnet --steps 5 \\
        --out ddp.json [--budget 20MiB] [--against fsdp2]

Each rank builds the same model (seed 0) twice: one copy trained by roam, the other by the
reference, each with its own Adam; the two run step by step, interleaved, on the same batches
(rank r draws its own batches from seed 100 + r).

* ``--against ddp`` (default): roam's data-parallel rank, ``roam.optimize(model, optimizer,
  loss_fn, batch, process_group=WORLD)``, against ``DistributedDataParallel`` (its defaults:
  25 MiB buckets, ``broadcast_buffers=True``, ``gradient_as_bucket_view=False``).
* ``--against fsdp2``: roam's sharded rank, ``roam.optimize(ShardedModel(model, WORLD),
  ...)`` (``reshard_after_forward=True``), against eager FSDP2 (``fully_shard`` on every submodule
  with parameters of its own, then on the root; its default ``reshard_after_forward=True``);
  parameters compared gathered.

It reports per rank and step both losses, and after the last step the largest parameter
difference relative to the largest parameter magnitude. With 2 ranks both sum the same two
values; with more, DDP's buckets (rebuilt after the first step in gradient-ready order) put a
gradient at another place of the flat bucket than roam's, so gloo's ring adds its ranks'
values in another order: rounding-level differences, which Adam amplifies on gradients near
zero.

Memory, measured the same way for both (bytes above the tensors that exist before the step,
every CPU allocation counted by roam's allocator: a pass-through session for the reference,
the planned session for roam): ``roam_step_peak`` (arena + fallback heap), ``ref_step_peak``;
and the bytes each holds between steps besides parameters (or shards) and optimizer state
(``ref_persistent_bytes``): roam none (its gradients, buckets and gathered parameters are in
the arena), DDP its gradient buckets (the bytes of the parameters that require grad; with
``gradient_as_bucket_view=False`` DDP keeps one flat bucket buffer per bucket for the whole
run), FSDP2 none (it frees its all-gather and reduce-scatter buffers within the step).
``ref_peak = ref_step_peak + ref_persistent_bytes``; ``roam_peak = roam_step_peak``. The
first step of each creates the Adam state (both start from a fresh optimizer); figures are of
the steady steps after it.
"""

import argparse
import copy
import json
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_model(name: str, width: int) -> Tuple[nn.Module, Tuple[int, ...], int]:
    """``(model, input shape without batch, classes)`` of the named test model."""
    if name == "mlp":  # 8 hidden layers: many activations kept for the backward
        layers = [nn.Linear(256, width), nn.GELU()]
        for _ in range(7):
            layers += [nn.Linear(width, width), nn.GELU()]
        return nn.Sequential(*layers, nn.Linear(width, 10)), (256,), 10
    if name == "convnet":  # conv + BatchNorm + ReLU blocks: buffers broadcast by DDP
        c = width
        m = nn.Sequential(
            nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * c, 10))
        return m, (3, 32, 32), 10
    raise ValueError(f"roam.compare_ddp: --model: {name!r} is not mlp or convnet")


def fully_shard_fn():
    """``torch.distributed.fsdp.fully_shard`` (FSDP2; ``torch.distributed._composable.fsdp``
    before torch 2.6)."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def _fsdp2(model: nn.Module) -> nn.Module:
    """``model`` under eager FSDP2: ``fully_shard`` on every submodule that has parameters of
    its own, then on the root (as ShardedModel gathers per module)."""
    fully_shard = fully_shard_fn()
    for m in list(model.modules())[1:]:
        if any(True for _ in m.parameters(recurse=False)):
            fully_shard(m)
    fully_shard(model)
    return model


def run(model_name: str = "convnet", width: int = 32, batch: int = 32, steps: int = 5,
        lr: float = 1e-3, budget=None, against: str = "ddp") -> Dict[str, Any]:
    """This rank's comparison (module docstring); torch.distributed must be initialized.
    ``against``: ``ddp`` (roam's data-parallel rank, ``process_group=WORLD``) or ``fsdp2``
    (roam's :class:`~roam.capture.sharded.ShardedModel` rank against ``fully_shard``)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import roam
    from .capture.sharded import ShardedModel
    from .executor.native import pass_through_peak
    if against not in ("ddp", "fsdp2"):
        raise ValueError(f"roam.compare_ddp: --against: {against!r} is not ddp or fsdp2")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model, shape, classes = build_model(model_name, width)
    model.train()
    reference = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(batch, *shape, generator=gen),
                torch.randint(0, classes, (batch,), generator=gen)) for _ in range(steps)]
    loss_fn = F.cross_entropy
    if against == "ddp":
        ref_model, persistent = DDP(reference), sum(  # DDP's flat bucket buffers
            p.numel() * p.element_size() for p in reference.parameters() if p.requires_grad)
        trained, group = model, dist.group.WORLD
    else:
        ref_model, persistent = _fsdp2(reference), 0  # FSDP2 frees its buffers each step
        # its default as FSDP2's: re-gather in the backward
        trained, group = ShardedModel(model, dist.group.WORLD), None
    opt = torch.optim.Adam(trained.parameters(), lr=lr)
    ref_opt = torch.optim.Adam(ref_model.parameters(), lr=lr)
    t0 = time.perf_counter()
    step = roam.optimize(trained, opt, loss_fn, batches[0], process_group=group, budget=budget)
    plan_seconds = time.perf_counter() - t0

    def ref_step(x, y):
        ref_opt.zero_grad(set_to_none=True)
        loss = loss_fn(ref_model(x), y)
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
        return loss.detach()

    rows: List[Dict[str, Any]] = []
    for k, (x, y) in enumerate(batches):
        t = time.perf_counter()
        loss = step(x, y)
        roam_s = time.perf_counter() - t
        rep = step.last_report
        t = time.perf_counter()
        ref_loss, ref_peak = pass_through_peak(lambda: ref_step(x, y))
        ref_s = time.perf_counter() - t
        rows.append({"step": k, "roam_loss": float(loss), "ref_loss": float(ref_loss),
                     "mode": rep.mode, "roam_step_peak": int(rep.total_peak_bytes),
                     "arena_bytes": int(rep.arena_bytes or 0),
                     "fallback_peak": int(rep.fallback_peak_bytes or 0),
                     "ref_step_peak": ref_peak, "roam_seconds": roam_s, "ref_seconds": ref_s})
    # largest parameter difference relative to the largest parameter magnitude (all tensors),
    # sharded parameters gathered (a collective: every rank computes it)
    if against == "ddp":
        mine = dict(model.named_parameters())
        ref = dict(reference.named_parameters())
    else:
        mine = trained.full_parameters()
        ref = {n: p.full_tensor() for n, p in reference.named_parameters()}
    diff = max((mine[n].detach() - ref[n].detach()).abs().max().item() for n in ref)
    rel = diff / max(max(q.detach().abs().max().item() for q in ref.values()), 1e-30)
    steady = rows[1:] or rows
    graph = step.graph
    return {
        "rank": rank, "world_size": world, "model": model_name, "width": width,
        "against": against, "batch_per_rank": batch, "steps": rows, "max_param_rel_diff": rel,
        "max_loss_rel_diff": max(abs(r["roam_loss"] - r["ref_loss"]) / max(abs(r["ref_loss"]),
                                                                          1e-30) for r in rows),
        "planned_arena_bytes": step.planned_arena_bytes, "resident_bytes": step.resident_bytes,
        "roam_peak": max(r["roam_step_peak"] for r in steady),
        "ref_persistent_bytes": persistent,
        "ref_peak": max(r["ref_step_peak"] for r in steady) + persistent,
        "roam_median_seconds": statistics.median(r["roam_seconds"] for r in steady),
        "ref_median_seconds": statistics.median(r["ref_seconds"] for r in steady),
        "collectives": sum(1 for op in graph["ops"] if "collective" in op),
        "plan_collectives": step.plan.get("collectives"),
        "plan_seconds": plan_seconds, "budget_bytes": step.budget_bytes,
        "recomputations": step.recomputations,
        "tp_program_order": step.tp_program,
    }


def summary(ranks: List[Dict[str, Any]]) -> str:
    """One line per rank of the ranks' results (:func:`run`), MiB = 2^20 bytes."""
    mib = 1 << 20
    ref = "DDP" if ranks[0]["against"] == "ddp" else "FSDP2"
    lines = [f"roam vs {ref}, {ranks[0]['model']} (width {ranks[0]['width']}, batch "
             f"{ranks[0]['batch_per_rank']} per rank), {len(ranks)} ranks, "
             f"{len(ranks[0]['steps'])} steps; peaks above parameters and optimizer state, "
             f"measured, max over the steps after the first"]
    for x in ranks:
        modes = ",".join(s["mode"] for s in x["steps"])
        lines.append(
            f"rank {x['rank']}: loss rel. diff {x['max_loss_rel_diff']:.1e}, parameter rel. "
            f"diff {x['max_param_rel_diff']:.1e}; roam peak {x['roam_peak'] / mib:.2f} MiB "
            f"(arena {x['planned_arena_bytes'] / mib:.2f}), {ref} "
            f"{x['ref_peak'] / mib:.2f} MiB ({x['roam_peak'] / x['ref_peak']:.3f} x); median "
            f"step {x['roam_median_seconds']:.3f} s vs {x['ref_median_seconds']:.3f} s; "
            f"modes {modes}")
    return "\n".join(lines)


def _positive(text: str) -> int:
    """An integer >= 1 (argparse type: else exit 2 naming the option)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not positive")
    return v


def _size(text: str) -> int:
    """A memory size (bytes, or with a unit: 20MiB) for argparse; else exit 2."""
    from .executor.planning import parse_size
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="roam.compare_ddp", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="convnet", choices=("mlp", "convnet"),
                    help="mlp or convnet (default convnet)")
    ap.add_argument("--width", type=_positive, default=32, help="channels / hidden units")
    ap.add_argument("--batch-size", type=_positive, default=32, help="batch per rank")
    ap.add_argument("--steps", type=_positive, default=5, help="steps (default 5)")
    ap.add_argument("--against", default="ddp", choices=("ddp", "fsdp2"),
                    help="ddp: roam's data-parallel rank (process_group=WORLD) against "
                         "DistributedDataParallel; fsdp2: roam's ShardedModel rank against "
                         "fully_shard (default ddp)")
    ap.add_argument("--budget", default=None, type=_size,
                    help="roam's memory budget for the whole step (resident included), bytes "
                         "or e.g. 20MiB (default: none); one the ranks cannot meet: one line "
                         "naming the smallest budget roam meets, exit 3 (torchrun then "
                         "reports the rank's failure and exits 1)")
    ap.add_argument("--out", default=None,
                    help="also write the ranks' results here (JSON, one object per rank, by "
                         "rank 0): steps (per step: roam_loss, ref_loss, mode, roam_step_peak, "
                         "arena_bytes, fallback_peak, ref_step_peak, seconds), "
                         "max_loss_rel_diff, max_param_rel_diff, roam_peak (arena + fallback, "
                         "bytes above parameters and optimizer state), ref_peak (its step peak "
                         "+ ref_persistent_bytes: DDP's buckets, 0 for FSDP2), planned_arena_"
                         "bytes, resident_bytes, collectives, plan_collectives (op ids)")
    a = ap.parse_args(argv)
    import torch.distributed as dist
    dist.init_process_group("gloo")
    from . import BudgetInfeasible
    try:
        try:
            res = run(a.model, a.width, a.batch_size, a.steps, budget=a.budget,
                      against=a.against)
        except BudgetInfeasible as e:  # every rank refuses the same budget, before any step
            if dist.get_rank() == 0:
                print(e, file=sys.stderr)  # "roam: budget ... cannot be met: ..."
            return 3
        everyone: List[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, res)
        if dist.get_rank() == 0:
            if a.out:
                with open(a.out, "w") as f:
                    f.write(json.dumps(everyone, indent=1) + "\n")
            print(summary(everyone))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
