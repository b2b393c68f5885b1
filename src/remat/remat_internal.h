// Internal to src/remat: the expanded graph of a recomputing schedule and its conversion to a
// version-2 plan, shared by the candidate search (graph_remat.cpp) and the exhaustive search on
// tiny graphs (exhaustive_remat.cpp).
#pragma once

#include <cstdint>
#include <cstddef>
#include <optional>
#include <vector>

#include "roam/graph.h"
#include "roam/inplace.h"
#include "roam/layout.h"
#include "roam/plan.h"
#include "roam/remat.h"

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
  /// Per op v: the ops that must be recomputed with v (empty for most). On a forced graph
  /// (roam/inplace.h) an op that writes an output over an input (`forced` of analyse) may run
  /// again only on a new instance of that input: the producers along the input's alias chain
  /// (its views' producers and its root's) are recomputed too, or v's recomputation would write
  /// over contents its first run already overwrote. cloneable[v] requires theirs.
  std::vector<std::vector<OpIdx>> clone_with;
  /// Whether v may be recomputed when the ops with allowed[x] may: allowed[v] and every op of
  /// clone_with[v] allowed.
  bool closed(OpIdx v, const std::vector<char>& allowed) const {
    if (!allowed[v]) return false;
    for (OpIdx r : clone_with[v]) {
      if (!allowed[r]) return false;
    }
    return true;
  }
};

/// `forced`: the in-place writes of a forced graph `g` (ForcedGraph::pairs; their outputs are
/// aliases of their inputs in `g`), for clone_with.
Structure analyse(const Graph& g, const std::vector<InplacePair>& forced = {});

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
/// step 3). Throws InputError when those edges contradict the graph's order. `names` false:
/// the same graph (same indices, sizes, roles, aliases, edges, phases, costs, workspaces) without
/// ids, names, dtypes, shapes, targets, modules, meta and id maps, about half the time on
/// GPT-2 XL; enough for quick_peak, liveness and the cut bounds, not for make_plan's roam order
/// (which reads meta) or for messages that name ids.
Expanded expand(const Graph& g, const Structure& st, const std::vector<OpIdx>& clones,
                bool names = true);

/// The fast plan of an expanded graph: lescea order (quick_order), then the better of llfb and
/// best_fit layouts of it, llfb on ties (quick_layout, returns the arena bytes); quick_peak
/// does both and returns resident + arena. Past `deadline` the layouts place the storages left
/// on a skyline (roam/layout.h: valid, no longer best fit).
Order quick_order(const Expanded& e, uint64_t alignment);
uint64_t quick_layout(const Expanded& e, uint64_t alignment, const Order& order,
                      std::vector<uint64_t>& offsets,
                      LayoutDeadline deadline = LayoutDeadline::max());
uint64_t quick_peak(const Expanded& e, uint64_t alignment, Order& order,
                    std::vector<uint64_t>& offsets);

/// The version-2 plan of g from a plan `xp` of the expanded graph: the order mapped to g's ops,
/// each expanded storage's offset to its (storage, instance) of g, the recomputation stats
/// (from g's `cost`), `lower_bound` as lower_bound_bytes.
Plan to_v2(const Graph& g, const Expanded& e, const Plan& xp, uint64_t lower_bound);

/// One way to treat a span of consecutive units: the ops it recomputes, their exact seconds, the
/// bytes of stored activations that no longer wait for the backward pass, and all of the span's
/// activation bytes (live again during its backward when it recomputes).
struct SpanOption {
  int32_t length = 1;  // units
  std::vector<OpIdx> clones;
  double cost = 0;
  uint64_t dropped = 0;
  uint64_t full = 0;
};

/// Rotor's chain with Rockmate's options, one level of recomputation over spans of units: a span
/// is recomputed (if at all) just before its backward, when every span before it holds what it
/// kept and the span holds all of its activations again. Minimises the recompute seconds subject
/// to kept(before the span) + full(span) <= model_budget for every span, by a dynamic program over
/// unit boundaries whose state is the Pareto front of (bytes kept so far, seconds). options[i]:
/// the options of the spans that start at unit i. Returns the chosen options in order, or an
/// empty vector when the model budget is unreachable.
std::vector<const SpanOption*> choose_spans(const std::vector<std::vector<SpanOption>>& options,
                                            uint64_t model_budget);

/// The cost every op gets in the search that decides feasibility (remat.h, "Costs"): none, so
/// that its candidates are made from bytes alone (the chain DP and the staircases then keep
/// what saves the most bytes) and ranked by how many ops they recompute. On a plain conv + ReLU
/// net (8 layers, batch 8 at 32 px) every op costing one unit named 6.66 MB where no costs
/// named 4.04 MB.
constexpr double kFeasibilityCost = 0.0;

/// roam::plan_with_budget (remat.h) with `defer_layouts` true. false: every candidate gets its
/// quick layouts in the main loop even when its cut bound already rules it out at the budget
/// (the method before the layouts were deferred; the same plans and refusals, slower).
PlanResult plan_with_budget(const Graph& g, const PlanRequest& request, uint64_t budget_bytes,
                            RematStats* stats, bool defer_layouts);

/// Exact search on tiny graphs (at most kExhaustiveOps ops and kExhaustiveRecomputable
/// recomputable ops): every valid schedule in which each op runs once and each recomputable op
/// at most once more (GRAPH_FORMAT.md plan version 2 rules), the least recompute seconds (then
/// fewest recomputations, then least Tp) whose plan, laid out by `request.layout`, has peak =
/// resident + arena <= budget. nullopt when the graph is too large for it or no schedule
/// fits. `applicable` (optional): whether the search ran to completion (then nullopt means no
/// schedule fits); `smallest_budget` (optional): the least peak among the least-Tp schedules.
constexpr int32_t kExhaustiveOps = 8;
constexpr int32_t kExhaustiveRecomputable = 4;
/// `inplace`: in-place writes made at every appearance of their ops (the forced pairs of a graph
/// with permissions; instance_graph checks them on every schedule, which is skipped where they
/// break the rule); a version-2 plan found then carries them.
std::optional<PlanResult> exhaustive_remat(const Graph& g, const PlanRequest& request,
                                           uint64_t budget_bytes, uint64_t lower_bound,
                                           bool* applicable = nullptr,
                                           uint64_t* smallest_budget = nullptr,
                                           const std::vector<InplacePair>& inplace = {});

}  // namespace roam::remat_internal
