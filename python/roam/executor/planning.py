"""Graph and plan helpers of the executor (:mod:`roam.executor.api`): planning a captured
graph with libroam (``roam._native``, no subprocess), validating and loading plans, the
workspaces the executor can serve, ``after`` edges that keep random operators in program order,
and budget sizes. Bytes are bytes; seconds are wall-clock seconds.
"""

import gzip
import json
import warnings
from typing import Any, Dict, Optional, Union

import torch

from .native import native

ALIGNMENT = 64

from ..capture.trace import eager_kernels_while_tracing  # noqa: E402,F401  (re-exported)


def servable_workspaces(graph: Dict[str, Any]) -> int:
    """Raise, in place, each op's ``workspace`` to the servable figure the capture measured
    (``meta.capture.workspace.servable``, :func:`roam.capture.workspace.servable_workspaces`):
    the block the op needs when the layout does not put it next to the op's output slots.
    The captured workspace is the op's peak minus its outputs, which the executor serves only
    with scratch in those slots; what fits in no slot needs bytes of the block. Returns the
    number of ops raised."""
    servable = (graph.get("meta", {}).get("capture", {}).get("workspace", {})
                .get("servable") or {})
    raised = 0
    for op in graph["ops"]:
        v = int(servable.get(op["id"], 0))
        if v > int(op.get("workspace", 0)):
            op["workspace"] = v
            raised += 1
    return raised


def add_rng_order_edges(graph: Dict[str, Any]) -> int:
    """Order the random operators of ``graph`` (tag ``nondeterministic_seeded``: dropout's
    mask, ``rand``, ...) in program order, in place, so that any valid order draws from the
    generator in eager PyTorch's sequence. Returns the number of ``after`` edges added.

    An edge from each random op to the next one is added only where the data flow (inputs and
    existing ``after`` edges, transitively) does not already put the first after the second:
    GRAPH_FORMAT.md makes an ``after`` edge hold for every appearance, so an edge would also
    forbid recomputing the earlier op after the later one's first run, which the generator
    replay of :mod:`roam.executor.program` makes exact. A chain of layers with a dropout in
    each needs no edge. The reachability test walks back from the later op through ops
    between the two in program order only (program order is topological): linear in the
    ops between consecutive random ops."""
    ops = graph["ops"]
    index = {op["id"]: i for i, op in enumerate(ops)}
    producer: Dict[str, int] = {}
    for i, op in enumerate(ops):
        for t in op["outputs"]:
            producer[t] = i

    def preds(i: int):
        for t in ops[i]["inputs"]:
            if t in producer:
                yield producer[t]
        for v in ops[i].get("after", ()):
            if v in index:
                yield index[v]

    def reaches(src: int, dst: int) -> bool:
        seen = {dst}
        stack = [dst]
        while stack:
            for p in preds(stack.pop()):
                if p == src:
                    return True
                if p > src and p not in seen:
                    seen.add(p)
                    stack.append(p)
        return False

    prev = None
    added = 0
    for i, op in enumerate(ops):
        if not _is_random(op["target"]):
            continue
        if prev is not None and not reaches(prev, i):
            after = op.setdefault("after", [])
            if ops[prev]["id"] not in after:
                after.append(ops[prev]["id"])
                added += 1
        prev = i
    return added


def _is_random(target: str) -> bool:
    # "aten.bernoulli_.float" -> torch.ops.aten.bernoulli_.float
    try:
        ns, name, overload = target.split(".")
        op = getattr(getattr(getattr(torch.ops, ns), name), overload)
        return torch.Tag.nondeterministic_seeded in op.tags
    except Exception:
        return False


class BudgetInfeasible(ValueError):
    """No schedule roam finds keeps the step within the memory budget (raised before any step
    runs). Attributes, in bytes (resident + arena, as the budget): ``budget_bytes``,
    ``smallest_budget_bytes`` (the smallest budget roam meets on this graph; 0 when nothing
    could be planned; from :func:`roam.executor.optimize.plan_within_budget`, the generator states
    the executor holds for recomputed random ops included) and ``lower_bound_bytes`` (no
    schedule, recomputation included, fits below it)."""

    def __init__(self, message: str, budget_bytes: int, smallest_budget_bytes: int,
                 lower_bound_bytes: int):
        super().__init__(message)
        self.budget_bytes = int(budget_bytes)
        self.smallest_budget_bytes = int(smallest_budget_bytes)
        self.lower_bound_bytes = int(lower_bound_bytes)


_SIZE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
               "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4}


def parse_size(size: Union[int, str]) -> int:
    """Bytes of a memory size: an int (bytes) or a string such as ``"2GiB"``, ``"512MiB"``,
    ``"1.5 GiB"``, ``"3000000"`` (units B, KiB, MiB, GiB, TiB = powers of 1024; KB, MB, GB, TB =
    powers of 1000; case-insensitive). Raises ValueError for anything else, a size <= 0 or above 2^62 bytes."""
    import re
    if isinstance(size, bool):
        raise ValueError(f"not a memory size: {size!r}")
    if isinstance(size, int):
        value = size
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(size))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _SIZE_UNITS:
            raise ValueError(f"not a memory size: {size!r} (bytes, or a number with B, KiB, "
                             f"MiB, GiB, TiB, KB, MB, GB or TB, e.g. 2GiB)")
        number = float(m.group(1)) * _SIZE_UNITS[unit]
        if not number < 2.0 ** 63:  # inf included
            raise ValueError(f"memory size {size!r} is above 2^62 bytes")
        value = int(number)
    if value <= 0:
        raise ValueError(f"a memory size must be positive, not {size!r}")
    if value > 2 ** 62:
        raise ValueError(f"memory size {size!r} is above 2^62 bytes (the planner's limit)")
    return value


def plan_graph(graph: Dict[str, Any], order: str = "roam", layout: str = "roam",
               alignment: int = ALIGNMENT, time_limit_seconds: float = 60.0,
               threads: int = 1, budget_bytes: Optional[int] = None) -> Dict[str, Any]:
    """Plan ``graph`` (roam-graph v1 dict) with libroam's ``make_plan``; returns the
    roam-plan v1 dict. A method the library does not know (e.g. ``roam`` before the ROAM
    planners exist) falls back to ``auto`` with a warning; the plan's ``method`` says which ran.

    ``budget_bytes``: plan so that resident + arena <= budget_bytes (libroam
    ``plan_with_budget``): the plan without recomputation when it fits, else a roam-plan v2
    that recomputes forward activations in the backward pass at the least recompute seconds
    roam finds (from the ops' ``cost``). Raises :class:`BudgetInfeasible` when no schedule roam
    finds fits, naming the smallest budget it meets.
    """
    N = native()
    orders, layouts = N.order_methods(), N.layout_methods()
    if order not in orders and order != "auto":
        warnings.warn(f"roam: order method {order!r} is not in the library ({orders}); "
                      f"using 'auto'")
        order = "auto"
    if layout not in layouts and layout != "auto":
        warnings.warn(f"roam: layout method {layout!r} is not in the library ({layouts}); "
                      f"using 'auto'")
        layout = "auto"
    if budget_bytes is None:
        text = N.plan(json.dumps(graph), order, layout, alignment, threads, time_limit_seconds)
        return json.loads(text)
    out = json.loads(N.plan_budget(json.dumps(graph), int(budget_bytes), order, layout,
                                   alignment, threads, time_limit_seconds))
    if "infeasible" in out:
        inf = out["infeasible"]
        raise BudgetInfeasible(f"roam: {inf['message']}", inf["budget_bytes"],
                               inf["smallest_budget_bytes"], inf["lower_bound_bytes"])
    return out["plan"]


def validate_plan(graph: Dict[str, Any], plan: Dict[str, Any]) -> Dict[str, Any]:
    """libroam's independent validator: ``{"valid", "problems", "recomputed"}``."""
    return json.loads(native().validate(json.dumps(graph), json.dumps(plan)))


def with_graph_costs(graph: Dict[str, Any], plan: Dict[str, Any]) -> Dict[str, Any]:
    """``plan`` with its cost-derived figures recounted from ``graph``'s op costs, for
    validating a plan made on another capture of the same step.

    A plan of version 2 records ``stats.compute_seconds`` (the sum of ``cost`` over every op)
    and ``stats.recompute_seconds`` (over every run of an op after its first in ``order``),
    from the op seconds of the graph it was planned on. Another capture of the same step
    measures those seconds again (or records none: ``roam.optimize(plan=...)`` captures with
    ``cost="none"``), so these two figures differ although the plan does exactly the same
    thing. They are the only figures set here; everything else (order, offsets, recompute
    and workspace offsets, recomputations, bytes, the budget) is left for the validator to
    check against ``graph``. A shallow copy; ``plan`` itself is not modified. A plan without
    these figures (version 1) or an unreadable one is returned as it is."""
    stats = plan.get("stats") if isinstance(plan, dict) else None
    if not isinstance(stats, dict) or not any(k in stats for k in ("compute_seconds",
                                                                     "recompute_seconds")):
        return plan
    try:
        cost = {op["id"]: float(op.get("cost", 0.0) or 0.0) for op in graph["ops"]}
        compute = 0.0
        for op in graph["ops"]:
            compute += cost[op["id"]]
        seen, recompute = set(), 0.0
        for oid in plan["order"]:
            if oid in seen:
                recompute += cost[oid]
            seen.add(oid)
    except (KeyError, TypeError, ValueError):
        return plan  # the validator names what is wrong
    out = dict(plan)
    out["stats"] = dict(stats, compute_seconds=compute, recompute_seconds=recompute)
    return out


def load_plan(path: str) -> Dict[str, Any]:
    """A roam-plan file (``.json`` or ``.json.gz``)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))
