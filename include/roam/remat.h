// Rematerialization of a training graph under a memory budget (plan version 2 of
// GRAPH_FORMAT.md): which stored activations to drop after the forward pass and recompute before
// their backward use, the order of every appearance and the offset of every instance.
//
// Method (Rotor, Beaumont et al. ACM TOMS 2024, and Rockmate's hierarchy, Zhao et al. ICML
// 2023, applied to roam's order and layout planners):
//  1. The forward ops, in program order, are cut wherever at most one forward-produced storage
//     is read across the cut (a chain of *units*: layers, residual blocks, transformer blocks).
//  2. Candidates (sets of ops to recompute once). Dropping a span of units keeps its input (the
//     previous boundary tensor) and its own boundary tensor, and recomputes, once, recomputable
//     forward ops of the span whose outputs the backward reads (and what they read inside the
//     span); a non-recomputable op's outputs are kept. Options per span of up to 12 units:
//      - its staircase (span_staircase in src/remat/remat_internal.h; spans with at most 96
//        cloneable ops): from recomputing every such op, greedily stop recomputing the op that
//        saves the most seconds per byte it makes the span hold, one op at a time down to
//        recomputing nothing; the Pareto points, at most 24 (Rockmate's "keep the costly ops,
//        recompute the cheap ones" at every step of the time-versus-memory staircase);
//      - all such ops, or only those at or below the 75%, 50% or 25% quantile of recompute
//        seconds per output byte.
//     An option's bytes dropped are exact: the span's activation bytes minus the bytes it
//     still holds (what its recomputations read counts as held).
//     a. The chain DP: per unit, its full activation bytes and its options (bytes dropped,
//        exact seconds); the least seconds such that for every unit j, the bytes the units
//        before j kept plus all of unit j's bytes stay within a model budget, by a dynamic
//        program over the Pareto front of (bytes kept, seconds) per unit boundary (2048 buckets
//        of bytes kept, at most 256 states); at 49 model budgets from the lowest the model
//        reaches (bisection on a min-bytes-kept pass) to no recomputation. Once with the exact
//        options, once with the quantile options alone counted as the first version did (every
//        recomputed op's outputs dropped): the candidates of both.
//     b. Segmentations of the units into 1, 2, 4, ..., 128 segments of about equal droppable
//        bytes, segments dropped in order of droppable bytes per second (the one nearest the
//        loss last), each prefix, per quantile option.
//  3. Each candidate is expanded into a graph with one extra op per recomputation (a clone
//     reading the clones of its inputs where they exist), backward readers rewired to the
//     clones, and control edges that keep the old instance's forward readers before the clone
//     and run the clone no earlier than the op before its first backward reader in program
//     order. Its recompute seconds are exact (sum of the clones' `cost`).
//  4. Candidates are tried by increasing recompute seconds; the first whose plan (lescea order,
//     best of llfb / best_fit layouts, on the expanded graph) has peak = resident + arena within
//     the budget is taken, then planned again with the requested order and layout (roam by
//     default; the layout's second leaf pass at most 4 probes, so that it ends by work) and the
//     lower of the two kept. Cheaper candidates whose quick arena is within 25% above the
//     budget's arena part get such a full plan first, unless resident + the proven lower bound
//     of their expanded graph is above the budget. So the recompute seconds never rise when the
//     budget grows: the candidates, their plans and bounds do not depend on the budget.
//     A near miss is not planned fully when one exact cut (min_live_at_op at the ops with the
//     most bytes live in its quick order) already proves its Tp above the budget's arena part,
//     before its full lower bound is computed. The cut at the busiest op of its lescea order is
//     taken before the layouts: a candidate it rules out (resident + cut > budget; no plan of
//     it fits, near or not) gets no llfb / best_fit layouts unless a refusal needs its quick
//     peak (step 5). The expanded graphs of the quick plans carry no names (ids, meta). Neither
//     changes a plan or a refusal (tests/test_remat_defer.cpp); on GPT-2 XL b1 at f = 0.3 and
//     below, at most 2 of its 554 candidates get layouts (they took half of the time).
//  5. A refusal names the smallest budget that steps 1-4 meet: the least of the quick peaks, of
//     the full-plan peaks of the near misses, and, for every other candidate whose quick arena
//     would be near below that, max(its full-plan peak, the least budget at which it is near)
//     (lowest quick peak first; skipped where an exact cut or its proven lower bound shows it
//     cannot go lower); and the plan without recomputation where g's bound is below it. So
//     planning at the named budget succeeds and no budget below it is met (without a time cut).
//     Candidates whose layouts step 4 deferred are laid out first, least cut bound first, while
//     resident + their cut is below the smallest so far (the cut bounds every plan of theirs,
//     so the others can lower neither the smallest nor, by a full plan, the answer).
//  Costs: whether a budget is met, and the smallest budget a refusal names, depend on bytes
//  alone. Steps 1-5 run first with no op costing anything (the candidates made from bytes,
//  ranked by how many ops they recompute); a budget met there is planned again with the
//  graph's own `cost` ranking the candidates, and the plan with the fewer recompute seconds
//  by those costs is returned (the cost-free one on ties, or when the second search meets
//  nothing). So measured, estimated, equal or absent costs give the same refusals and the same
//  smallest budget; they choose which schedule meets a budget. The second search gets what is
//  left of the time limit.
//  The plan without recomputation is made only when the budget is at least resident + g's
//  proven lower bound (below it no order of g fits) or to name the smallest budget met.
//  Time: the whole call ends by the earlier of options.deadline and start +
//  time_limit_seconds (the plan without recomputation gets at most a quarter); a search cut
//  short by it is reported (RematStats::time_limited, BudgetInfeasible::time_limited).
//  In-place permissions (GRAPH_FORMAT.md op field `inplace`): the plan without recomputation
//  is make_plan's (every write its order allows); the candidates are made, expanded and planned
//  on the forced graph (roam/inplace.h), where program order's writes are aliases, so that a
//  recomputed write binds to the recomputed instance of its input; such an op is recomputed
//  only with the producers of its input (remat_internal.h, Structure::clone_with). The plans
//  carry the forced writes (plan field `inplace`) and are checked against the graph before they
//  are returned (planned again without the permissions should one fail: a bug). The lower
//  bounds are those of the graph with in-place writes allowed.
// Not (yet) done: nested recomputation (an activation recomputed twice, Rotor's multi-level
// schedules on graphs); the chain solver of remat_chain.h is exact for pure chains.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "roam/graph.h"
#include "roam/plan.h"

namespace roam {

/// No schedule roam found meets the budget. `smallest_budget` (bytes): the smallest budget
/// plan_with_budget meets (step 5 above; planning at it succeeds, below it fails), 0 when none
/// could be planned; with `time_limited`, the smallest met among the schedules tried;
/// `lower_bound` (bytes): resident + recompute_lower_bound, below which no schedule exists;
/// `time_limited`: the time limit stopped the search before every candidate was tried (the
/// message then says "... within the time limit ...").
class BudgetInfeasible : public std::runtime_error {
 public:
  BudgetInfeasible(uint64_t budget, uint64_t smallest_budget, uint64_t lower_bound,
                   bool time_limited = false);
  uint64_t budget = 0, smallest_budget = 0, lower_bound = 0;
  bool time_limited = false;
};

struct RematStats {
  size_t units = 0;          // forward units (step 1)
  size_t candidates = 0;     // distinct candidates (step 2)
  size_t evaluated = 0;      // candidates planned (step 4)
  size_t full_plans = 0;     // of those, planned again with the requested order and layout
  double candidate_seconds = 0;  // wall time of the plan without recomputation and steps 1-2
  double quick_seconds = 0;  // wall time of the quick plans (step 4)
  double full_seconds = 0;   // wall time of the full plans (step 4)
  size_t bound_skips = 0;    // near misses not planned fully: their proven bound is above
  size_t deferred = 0;       // candidates whose cut bound ruled them out: no quick layouts
  size_t resolved = 0;       // of those, laid out for a refusal's smallest budget
  double bound_seconds = 0;  // wall time of those bounds
  double base_seconds = 0;   // wall time of the no-recomputation checks before step 1
  double expand_seconds = 0; // wall time of building expanded graphs (step 3)
  bool time_limited = false; // the time limit cut the search short
  double seconds = 0;        // wall time of the whole call
};

/// Plans `g` so that resident + arena <= budget_bytes at the least recompute seconds found.
/// A budget the no-recomputation plan (make_plan with `request`) meets gives that plan (version
/// 1); otherwise a version-2 plan. Either records method.options.budget_bytes. The plan's
/// lower_bound_bytes is the version-2 bound (recompute_lower_bound) when it recomputes.
/// Throws BudgetInfeasible (no plan) when no candidate meets the budget, std::invalid_argument
/// for unknown methods. Deterministic for any thread count (the time limit is a safety net).
PlanResult plan_with_budget(const Graph& g, const PlanRequest& request, uint64_t budget_bytes,
                            RematStats* stats = nullptr);

}  // namespace roam
