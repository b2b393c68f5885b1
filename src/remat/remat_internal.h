// Internal to src/remat: the expanded graph of a recomputing schedule and its conversion to a
// version-2 plan, shared by the candidate search (graph_remat.cpp) and the exhaustive search on
// tiny graphs (exhaustive_remat.cpp).
#pragma once

#include <cstdint>
#include <cstddef>
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

// What every candidate shares: the forward ops, the alias structure and who reads what.
struct Structure {
  std::vector<OpIdx> forward;          // forward ops in program order
  std::vector<int32_t> pos;            // per op: position in `forward`, -1 if not forward
  std::vector<TensorIdx> nearest;      // per tensor: nearest tensor along its alias chain that an
                                       // op produces (itself when produced, or a root)
  std::vector<std::vector<OpIdx>> users;  // per produced tensor p: ops reading a tensor t with
                                          // nearest[t] = p, or outputting an alias of one
  std::vector<char> cloneable;         // per op
  std::vector<char> backward_read;     // per op: a non-forward op reads one of its outputs
  std::vector<std::vector<OpIdx>> after_rev;  // per op v: ops w that list v in `after`
};

Structure analyse(const Graph& g);

/// One point of a span's time-versus-memory staircase: the ops recomputed (program order, a
/// closed set: every recomputed op's inputs are recomputed too or held), their seconds, and the
/// bytes of the span's storages still held for the backward pass (span_kept_bytes).
struct StairPoint {
  std::vector<OpIdx> clones;
  double cost = 0;
  uint64_t kept = 0;
};

/// Bytes (aligned) of the storages produced in forward positions [begin, end) that are held
/// until the backward pass when the ops with cloned[v] != 0 are recomputed: those whose old
/// instance (the forward pass's) an op outside the forward pass or a recomputed op reads,
/// directly or through views made anywhere (expand()'s wiring: a root is read new when its
/// producer is recomputed, a view made in the forward pass and not recomputed is on the old
/// instance, any other view on what it views). Additive: the sum over a split of [begin, end)
/// is the whole range's. With nothing recomputed: the span's activation bytes.
uint64_t span_kept_bytes(const Graph& g, const Structure& st, int32_t begin, int32_t end,
                         const std::vector<char>& cloned, uint64_t alignment);

/// The staircase of a span (Rockmate's per-block options, Zhao et al. ICML 2023 sec. 4, with an
/// exact byte count): from recomputing every cloneable op of the span (but `keep`, the producer
/// of its boundary), greedily stop recomputing the op whose removal saves the most seconds per
/// byte it keeps (ties: the lowest op index), down to recomputing nothing; the Pareto points
/// (kept bytes increasing, seconds decreasing), at most `max_points` (evenly thinned, both
/// ends kept). Spans with more than `max_ops` cloneable ops get the first point only.
/// Deterministic. O(max_ops^2 x span size).
std::vector<StairPoint> span_staircase(const Graph& g, const Structure& st, int32_t begin,
                                       int32_t end, OpIdx keep, uint64_t alignment,
                                       size_t max_ops = 256, size_t max_points = 24);

/// The graph with one extra op per recomputation of each op in `clones` (program order): a
/// clone reads the clones of its inputs where they exist, backward readers are rewired to the
/// clones, and control edges keep the old instance's forward readers before the clone and run
/// the clone no earlier than the op before its first backward reader in program order (remat.h
/// step 3). Throws InputError when those edges contradict the graph's order.
Expanded expand(const Graph& g, const Structure& st, const std::vector<OpIdx>& clones);

/// The fast plan of an expanded graph: lescea order, the better of llfb and best_fit layouts;
/// returns resident + arena.
uint64_t quick_peak(const Expanded& e, uint64_t alignment, Order& order,
                    std::vector<uint64_t>& offsets);

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
