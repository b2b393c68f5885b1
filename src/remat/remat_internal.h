// Internal to src/remat: the expanded graph of a recomputing schedule and its conversion to a
// version-2 plan, shared by the candidate search (graph_remat.cpp) and the exhaustive search on
// tiny graphs (exhaustive_remat.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "roam/graph.h"
#include "roam/plan.h"

namespace roam::remat_internal {

/// A graph with one op per appearance of an op of g (an original or a recomputation) and one
/// tensor per instance, planned by the ordinary order and layout planners.
struct Expanded {
  Graph graph;
  std::vector<OpIdx> op_of;         // per expanded op: the op of g
  std::vector<int32_t> appearance;  // 0 original, k the k-th recomputation
  std::vector<TensorIdx> tensor_of; // per expanded tensor: the tensor of g
  std::vector<int32_t> instance;    // per expanded tensor: 0 original, k the k-th recomputation
};

/// The version-2 plan of g from a plan `xp` of the expanded graph: the order mapped to g's ops,
/// each expanded storage's offset to its (storage, instance) of g, the recomputation stats
/// (from g's `cost`), `lower_bound` as lower_bound_bytes.
Plan to_v2(const Graph& g, const Expanded& e, const Plan& xp, uint64_t lower_bound);

/// Exact search on tiny graphs (at most kExhaustiveOps ops and kExhaustiveRecomputable
/// recomputable ops): every valid schedule in which each op runs once and each recomputable op
/// at most once more (GRAPH_FORMAT.md plan version 2 rules), the least recompute seconds (then
/// fewest recomputations, then least Tp) whose plan, laid out by `request.layout`, has peak =
/// resident + arena <= budget. nullopt when the graph is too large for it or no schedule
/// fits. `applicable` (optional): whether the search ran to completion (then nullopt means no
/// schedule fits); `smallest_budget` (optional): the least peak among the least-Tp schedules.
constexpr int32_t kExhaustiveOps = 8;
constexpr int32_t kExhaustiveRecomputable = 4;
std::optional<PlanResult> exhaustive_remat(const Graph& g, const PlanRequest& request,
                                           uint64_t budget_bytes, uint64_t lower_bound,
                                           bool* applicable = nullptr,
                                           uint64_t* smallest_budget = nullptr);

}  // namespace roam::remat_internal
