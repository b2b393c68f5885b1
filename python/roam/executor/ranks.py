"""The ranks of a distributed step decide together (docs/COLLECTIVES.md): which group they
are (:func:`rank_group_of`), whether any of them needs another calibration step
(:func:`any_rank`), and that their plans issue the same collectives in the same order
(:func:`check_ranks_agree`). A rank that issued other collectives than the others, or one
more step's, would wait forever."""

from typing import Any, Dict, List, Sequence, Tuple

import torch

__all__ = ["any_rank", "check_ranks_agree", "collective_sequence", "rank_group_of",
           "refuse_together"]


def rank_group_of(state) -> Any:
    """The ranks a captured step's decisions are taken over: its data-parallel rank
    (``state.data_parallel``, :class:`roam.capture.collectives.DataParallel`), else its
    model when that is a :class:`roam.capture.sharded.ShardedModel`, else None (one process).
    Either has ``group``, ``rank`` and ``world_size``."""
    dp = getattr(state, "data_parallel", None)
    if dp is not None:
        return dp
    model = getattr(state, "model", None)
    if callable(getattr(model, "roam_distributed_meta", None)):
        return model
    return None


def any_rank(flag: bool, ranks) -> bool:
    """``flag`` or'ed over ``ranks`` (:func:`rank_group_of`; one all-reduce, MAX, on their
    group); ``flag`` itself when ``ranks`` is None. Where the ranks decide something that
    changes which collectives they issue (another calibration step), they decide it
    together."""
    if ranks is None:
        return bool(flag)
    import torch.distributed as dist
    t = torch.tensor([1 if flag else 0], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ranks.group)
    return bool(t.item())


def collective_sequence(graph: Dict[str, Any], order: Sequence[str]) -> List[Tuple[str, int]]:
    """``(kind, bytes of its first output)`` of each collective op of ``graph`` in ``order``
    (docs/COLLECTIVES.md): what a rank issues, to be compared across ranks."""
    ops = {op["id"]: op for op in graph["ops"]}
    size = {t["id"]: int(t["size"]) for t in graph["tensors"]}
    out = []
    for oid in order:
        op = ops.get(oid)
        if op is not None and "collective" in op:
            out.append((op["collective"]["kind"],
                        size.get(op["outputs"][0], 0) if op["outputs"] else 0))
    return out


def check_ranks_agree(graph: Dict[str, Any], order: Sequence[str], ranks) -> None:
    """Every rank of ``ranks`` (:func:`rank_group_of`) issues the same collectives in the same order
    under its plan (or the program order): else a RuntimeError on every rank, before any
    step (a rank that issues another collective than the others waits forever)."""
    if ranks is None:
        return
    import torch.distributed as dist
    mine = collective_sequence(graph, order)
    seqs: List[Any] = [None] * ranks.world_size
    dist.all_gather_object(seqs, mine, group=ranks.group)
    for r, other in enumerate(seqs):
        if other != mine:
            k = next((i for i, (a, b) in enumerate(zip(mine, other)) if a != b),
                     min(len(mine), len(other)))
            raise RuntimeError(
                f"roam: rank {ranks.rank} and rank {r} would issue different "
                f"collectives ({len(mine)} and {len(other)} of them, first difference at "
                f"collective {k}): the ranks must capture the same step (same model, "
                f"optimizer and batch shape)")


def refuse_together(error, ranks) -> None:
    """Where one rank cannot meet a budget, none goes on: a rank that planned would run its
    calibration steps' collectives and wait forever for the one that refused (the ranks'
    graphs may differ by a few bytes: kernel scratch measured on each). ``error``: this
    rank's :class:`~roam.executor.planning.BudgetInfeasible`, or None. Returns when no rank
    refused; else every rank raises the refusal of the first rank that refused (its own
    error on that rank; elsewhere a BudgetInfeasible naming it, with its message and figures,
    in bytes), so that every rank goes on with the same figures (optimize then tries the
    smallest budget named, on every rank alike). One all_gather_object on the group; nothing
    when ``ranks`` is None (then ``error`` is raised if given)."""
    if ranks is None:
        if error is not None:
            raise error
        return
    import torch.distributed as dist
    from .planning import BudgetInfeasible
    mine = None if error is None else (str(error), error.budget_bytes,
                                       error.smallest_budget_bytes, error.lower_bound_bytes)
    everyone: List[Any] = [None] * ranks.world_size
    dist.all_gather_object(everyone, mine, group=ranks.group)
    for r, other in enumerate(everyone):
        if other is None:
            continue
        if r == ranks.rank:
            raise error
        msg, budget, smallest, bound = other
        raise BudgetInfeasible(f"roam: rank {r} of the group cannot meet the budget, so no "
                               f"rank runs: {msg}", budget, smallest, bound)
