// roam-plan v1 (GRAPH_FORMAT.md "Plan"): an order, an offset per storage, and the stats any
// tool can recompute from them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "roam/graph.h"
#include "roam/inplace.h"
#include "roam/options.h"

namespace roam {

struct PlanStats {
  uint64_t resident_bytes = 0;
  uint64_t theoretical_peak_bytes = 0;  // Tp of the order, sizes rounded to the alignment
  uint64_t arena_bytes = 0;             // max offset + aligned size
  uint64_t peak_bytes = 0;              // resident + arena
  uint64_t lower_bound_bytes = 0;       // proven lower bound on Tp over all valid orders
  double fragmentation = 0.0;           // arena / Tp - 1 (0 when Tp is 0)
  double solve_seconds = 0.0;
  // Version 2 (GRAPH_FORMAT.md "Plan version 2: rematerialization") only:
  double recompute_seconds = 0.0;       // sum of `cost` over recomputations (ops without cost: 0)
  double compute_seconds = 0.0;         // sum of `cost` over every op once
  uint64_t recomputations = 0;          // appearances that are recomputations
};

struct Plan {
  std::string graph;                    // graph name
  uint64_t alignment = 64;              // bytes, a power of two
  int version = 1;                      // 2 when an op appears more than once in `order` or
                                        // `inplace` is not empty
  Order order;                          // op indices; in version 2 an op may repeat
  /// In-place writes (GRAPH_FORMAT.md plan field `inplace`; roam/inplace.h). The storages that
  /// `offsets` and `recompute_offsets` are indexed by are those of apply_inplace(g, inplace)
  /// (g's own when empty): an in-place output has no storage of its own.
  std::vector<InplacePair> inplace;
  std::vector<uint64_t> offsets;        // per StorageIdx, bytes: instance 0 (the first run's)
  /// Version 2: per StorageIdx, the offsets of instances 1, 2, ... (a tensor storage's
  /// `recompute_offsets`; a workspace's later entries of `workspace_offsets`). Empty in version 1.
  std::vector<std::vector<uint64_t>> recompute_offsets;
  PlanStats stats;
  std::string order_method;
  std::string layout_method;
  nlohmann::json options = nlohmann::json::object();
};

/// Stats of (order, offsets) per GRAPH_FORMAT.md; `lower_bound` and `solve_seconds` are passed in.
PlanStats compute_stats(const Graph& g, const Order& order, const std::vector<uint64_t>& offsets,
                        uint64_t alignment, uint64_t lower_bound, double solve_seconds);

/// The plan as a roam-plan document: version 1, or version 2 when plan.version is 2 or the plan
/// writes in place (then `recompute_offsets`, `inplace` and the version-2 stats are written too).
/// Workspace storages go to `workspace_offsets` (op id -> one offset per appearance). A graph
/// with collective ops gets `collectives`: their ids in the order `plan.order` first runs them.
/// `g` is the graph the plan is for; offsets are keyed by the root ids of
/// apply_inplace(g, plan.inplace).
nlohmann::json plan_to_json(const Graph& g, const Plan& plan);

}  // namespace roam

namespace roam {

/// What `roam plan` and `roam compare` run: an order method, a layout method, an alignment.
/// Method "auto" is "roam" where the build has it (never worse than any baseline); otherwise
/// the baseline order with the smallest Tp (ties: program) or the layout with the smallest
/// arena (ties: the first in layout_methods() order, pytorch excluded).
struct PlanRequest {
  std::string order = "auto";
  std::string layout = "auto";
  PlanOptions options;
};

struct PlanResult {
  Plan plan;
  uint64_t reserved_bytes = 0;          // see Layout::reserved_bytes
};

/// Orders, lays out and fills the stats (solve_seconds = order + layout wall time, seconds;
/// the lower bound's time is not in it). `lower_bound_bytes`: lower_bound(g, alignment) when the
/// caller shares one across requests; when absent it is computed with the plan's order as the
/// hint (the same value, usually faster). Throws std::invalid_argument for an unknown method.
/// A graph with `inplace` permissions is ordered on force_inplace(g) (roam/inplace.h: every
/// permission valid in program order becomes an alias, with the `after` edges that keep it
/// valid), by every order method; the plan then uses every write its order allows
/// (inplace_valid_in on g), is laid out on apply_inplace(g, those pairs) and, when it writes in
/// place, has version 2: its lower_bound_bytes is then recompute_lower_bound(g) (a version-2
/// plan's bound is over all version-2 schedules) and method.options.order_lower_bound_bytes
/// records the stronger bound over the orders of g (max of the two). Graphs without permissions
/// plan exactly as before.
PlanResult make_plan(const Graph& g, const PlanRequest& request,
                     std::optional<uint64_t> lower_bound_bytes);
PlanResult make_plan(const Graph& g, const PlanRequest& request);

/// The same with the order already computed (by `request.order`, in `order_seconds`; a valid
/// order of g): lays it out with `request.layout` and fills the stats, using every in-place write
/// the order allows (as make_plan). `roam compare` uses it to order once per order method.
PlanResult make_plan_for_order(const Graph& g, Order order, double order_seconds,
                               const PlanRequest& request, uint64_t lower_bound_bytes);

}  // namespace roam
