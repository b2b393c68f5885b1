"""Exact reference solvers for checking roam's planners on small graphs (offline tools, not
part of planning).

:mod:`roam.reference.remat_ilp`: rematerialization under a memory budget as an integer
program (Checkmate, Jain et al., MLSys 2020) solved with HiGHS (``highspy``), with an
independent recount of the schedule's theoretical peak from GRAPH_FORMAT.md's plan-v2 rules.
"""

from .remat_ilp import (LeastBudgetResult, Recount, RematModel, RematResult, least_budget,
                        load_graph, recount, solve_remat)

__all__ = ["LeastBudgetResult", "Recount", "RematModel", "RematResult", "least_budget",
           "load_graph", "recount", "solve_remat"]
