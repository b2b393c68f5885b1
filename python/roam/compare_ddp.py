"""roam's data-parallel rank step against PyTorch's own DistributedDataParallel, in one run.

Run under torchrun, one process per rank (gloo on the CPU)::

    .venv/bin/torchrun --nproc-per-node 2 -m roam.compare_ddp --model convnet --steps 5 \\
        --out ddp.json [--budget 20MiB]

Each rank builds the same model (seed 0) twice: one copy trained by
``roam.optimize(model, optimizer, loss_fn, batch, process_group=WORLD)``, the other wrapped in
``DistributedDataParallel`` (its defaults: 25 MiB buckets, ``broadcast_buffers=True``,
``gradient_as_bucket_view=False``) with its own optimizer; the two run step by step,
interleaved, on the same batches (rank r draws its own batches from seed 100 + r). It reports
per rank and step both losses, and after the last step the largest parameter difference
relative to the largest parameter magnitude. With 2 ranks both sum the same two values; with
more, DDP's buckets (rebuilt after the first step in gradient-ready order) put a gradient at
another place of the flat bucket than roam's, so gloo's ring adds its ranks' values in another
order: rounding-level differences, which Adam amplifies on gradients near zero.

Memory, measured the same way for both (bytes above the tensors that exist before the step,
every CPU allocation counted by roam's allocator: a pass-through session for DDP, the planned
session for roam): ``roam_step_peak`` (arena + fallback heap), ``ddp_step_peak``; and the
bytes each holds between steps besides parameters and optimizer state: roam none (its
gradients and buckets are in the arena), DDP its gradient buckets (``ddp_bucket_bytes``: the
bytes of the parameters that require grad; with ``gradient_as_bucket_view=False`` DDP keeps
one flat bucket buffer per bucket for the whole run). ``ddp_peak = ddp_step_peak +
ddp_bucket_bytes``; ``roam_peak = roam_step_peak``. The first step of each creates the Adam
state (both start from a fresh optimizer); figures are of the steady steps after it.
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


def run(model_name: str = "convnet", width: int = 32, batch: int = 32, steps: int = 5,
        lr: float = 1e-3, budget=None) -> Dict[str, Any]:
    """This rank's comparison (module docstring); torch.distributed must be initialized."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import roam
    from .executor.native import pass_through_peak
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model, shape, classes = build_model(model_name, width)
    model.train()
    reference = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=lr)
    ddp = DDP(reference)
    gen = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(batch, *shape, generator=gen),
                torch.randint(0, classes, (batch,), generator=gen)) for _ in range(steps)]
    loss_fn = F.cross_entropy
    t0 = time.perf_counter()
    step = roam.optimize(model, opt, loss_fn, batches[0], process_group=dist.group.WORLD,
                         budget=budget)
    plan_seconds = time.perf_counter() - t0

    def ddp_step(x, y):
        ref_opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
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
        ref_loss, ddp_peak = pass_through_peak(lambda: ddp_step(x, y))
        ddp_s = time.perf_counter() - t
        rows.append({"step": k, "roam_loss": float(loss), "ddp_loss": float(ref_loss),
                     "mode": rep.mode, "roam_step_peak": int(rep.total_peak_bytes),
                     "arena_bytes": int(rep.arena_bytes or 0),
                     "fallback_peak": int(rep.fallback_peak_bytes or 0),
                     "ddp_step_peak": ddp_peak, "roam_seconds": roam_s, "ddp_seconds": ddp_s})
    # largest parameter difference relative to the largest parameter magnitude (all tensors)
    diff = max((p.detach() - q.detach()).abs().max().item()
               for p, q in zip(model.parameters(), reference.parameters()))
    rel = diff / max(max(q.detach().abs().max().item() for q in reference.parameters()), 1e-30)
    bucket_bytes = sum(p.numel() * p.element_size() for p in reference.parameters()
                       if p.requires_grad)
    steady = rows[1:] or rows
    graph = step.graph
    return {
        "rank": rank, "world_size": world, "model": model_name, "width": width,
        "batch_per_rank": batch, "steps": rows, "max_param_rel_diff": rel,
        "max_loss_rel_diff": max(abs(r["roam_loss"] - r["ddp_loss"]) / max(abs(r["ddp_loss"]),
                                                                          1e-30) for r in rows),
        "planned_arena_bytes": step.planned_arena_bytes, "resident_bytes": step.resident_bytes,
        "roam_peak": max(r["roam_step_peak"] for r in steady),
        "ddp_bucket_bytes": bucket_bytes,
        "ddp_peak": max(r["ddp_step_peak"] for r in steady) + bucket_bytes,
        "roam_median_seconds": statistics.median(r["roam_seconds"] for r in steady),
        "ddp_median_seconds": statistics.median(r["ddp_seconds"] for r in steady),
        "collectives": sum(1 for op in graph["ops"] if "collective" in op),
        "plan_collectives": step.plan.get("collectives"),
        "plan_seconds": plan_seconds, "budget_bytes": step.budget_bytes,
        "recomputations": step.recomputations,
        "tp_program_order": step.tp_program,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="roam.compare_ddp", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="convnet", help="mlp or convnet (default convnet)")
    ap.add_argument("--width", type=int, default=32, help="channels / hidden units")
    ap.add_argument("--batch-size", type=int, default=32, help="batch per rank")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--budget", default=None,
                    help="roam's memory budget for the whole step (resident included), bytes "
                         "or e.g. 20MiB (default: none)")
    ap.add_argument("--out", default=None, help="JSON file: one list of the ranks' results "
                                                "(written by rank 0)")
    a = ap.parse_args(argv)
    import torch.distributed as dist
    dist.init_process_group("gloo")
    try:
        res = run(a.model, a.width, a.batch_size, a.steps, budget=a.budget)
        everyone: List[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, res)
        if dist.get_rank() == 0:
            text = json.dumps(everyone, indent=1)
            if a.out:
                with open(a.out, "w") as f:
                    f.write(text + "\n")
            else:
                print(text)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
