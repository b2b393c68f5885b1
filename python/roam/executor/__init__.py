"""The executor: a real PyTorch training step under a roam plan (DESIGN.md "Executor").

* :func:`optimize` -> :class:`RoamStep`: capture, plan (libroam through ``roam._native``;
  under a budget :func:`plan_within_budget`, which also counts the generator states the
  executor saves for recomputed random ops), run every step in the plan's order with planned
  storages at their arena offsets;
* :class:`Program`: a captured fx step compiled for one order;
* ``roam._native.Session``: the planned CPU allocator (src/executor/arena_allocator.h).

``python -m roam.run --model NAME --batch-size B --steps N`` compares eager and roam steps.
"""

from .api import RoamStep
from .optimize import optimize, plan_within_budget
from .planning import (ALIGNMENT, BudgetInfeasible, add_rng_order_edges, load_plan, parse_size,
                       plan_graph, validate_plan, with_graph_costs)
from .report import StepReport
from .native import BUILD_HINT, NativeMissing, available, native
from .program import PlanMismatch, Program

__all__ = ["ALIGNMENT", "BUILD_HINT", "BudgetInfeasible", "NativeMissing", "PlanMismatch", "Program", "RoamStep",
           "StepReport", "add_rng_order_edges", "available", "load_plan", "native", "optimize",
           "parse_size", "plan_graph", "plan_within_budget", "validate_plan", "with_graph_costs"]
