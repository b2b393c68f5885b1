// ROAM operator ordering (arXiv 2310.19295, Sec. 4): source pinning, the memory-aware
// weight-update scheduler, key points and independent segments, exact search inside small
// segments and a heuristic portfolio plus local search inside large ones. Never worse than any
// baseline order: the result is the best of roam's candidates and every baseline (program,
// lescea, lpmf, bfs, dfs), by Tp.
//
// Pipeline (src/order/: roam_order_prep.cpp step 1 and the groups of step 2,
// roam_order_update.cpp the rest of step 2, roam_order.cpp and roam_segment.cpp steps 3 on):
//  1. Pinning (exact: never raises Tp). Sources -- ops with no predecessor whose storages all
//     outlive them (a later user or a graph output), ops that touch no storage and depend only on
//     sources (t of t of a parameter), linear memory-free chains hanging from a source (empty ->
//     bernoulli_ -> div_) -- run just before their first successor: every storage live at their
//     step is live at that successor's step, and nothing is born earlier than it must.
//     Memory-free ops (they make no storage: views, detach, in-place ops) whose predecessors are
//     not sources run right after their last predecessor: their step holds a subset of the
//     previous step's storages and running them early only shortens lifetimes. Isolated ops go
//     first when none of their storages outlives them, last when all are graph outputs. Pinned
//     ops leave the graph that is searched ("R"); in R a memory-free op's uses count as uses by
//     the ops it runs after, and a source's storages are born by the first R op it feeds.
//  2. Weight-update scheduler. Update-phase ops (phase from the graph, never names) are grouped
//     per parameter (connected components); backward ops that feed only one group (e.g. the mm
//     or sum that makes a weight or bias gradient) join it. A group splits into a head (the ops
//     that read storages made outside the group -- the gradients -- closed under predecessors
//     and under users of what they make) and a tail (the rest, e.g. Adam's sqrt/div
//     temporaries), when the tail makes memory; the tail runs no earlier than the head: the
//     head frees the gradient early, the tail waits for a quiet gap. Each unit may go into any
//     gap between two consecutive key points of the "core" graph (R without the groups), from
//     the first gap its predecessors allow (e) to the last its successors allow (l): its
//     is_alive window, which is asap/alap on the chain of core segments. Candidates e..e+r
//     (delay radius r) and l are scored with an estimated memory profile of the core (live bytes
//     at every key point and inside every gap, program order) plus the unit's own cost: the
//     bytes G it reads from outside, held in every gap it is delayed through, and its transient
//     peak X (its simulated peak run alone, G included; for a whole group that makes no memory
//     in the graph, max(G, alpha x parameter bytes) with alpha from meta.optimizer: 3 for Adam)
//     at the gap where it runs. A unit that makes no storage and has X = G (an Adam head's
//     in-place moment updates, an SGD update) takes its earliest gap e: running later only
//     holds what it reads longer (in a gap with core ops the segment search still places it
//     exactly); it adds nothing to the profile beyond the holds up to e. (The estimate
//     below counts every unit of a gap as held at once at the gap's lowest level, which sent a
//     4 MiB resnet50 weight gradient's head past the next convolution backward: 15.9% above the
//     bound at batch 2, 64 px, without workspaces.) The other units are decided largest X
//     first, then tails; each takes the gap
//     that minimises (estimated global peak, estimated peak over the gaps it touches, gap).
//     The decision becomes artificial edges: key point before the gap -> unit, unit -> key point
//     after it; units sharing a gap without core ops are chained, smallest X - G first (the
//     optimal order of a run of updates once the activations are gone), a tail after its head.
//  3. Segments. Key points (roam::key_points) of R plus the artificial edges cut it into blocks;
//     every op outside a key point belongs to one segment, optimised on its own with an exact
//     memory model: bytes live across the segment untouched by it (a constant), inputs produced
//     before it and freed inside, outputs kept after it. Per segment: the five baseline orders
//     restricted to it, lescea and lpmf rules run on the segment model forwards and backwards
//     (backwards places ops as late as they can go), then, for at most `exact_node_limit` ops,
//     an exact bottleneck-Dijkstra over sets of scheduled ops (the memory state is a function of
//     the set) with the portfolio's peak as the upper bound, stopping at a global lower bound;
//     if that does not finish within `exact_state_limit` states, local search (sliding single
//     ops through adjacent swaps, objective (peak, steps at peak, sum of live bytes)) for at
//     most `local_search_swaps` swaps, and a second one from the same start that also slides
//     blocks (an op with the run of ops just before it that feed it, moved later as one; an op
//     with the run just after it that it feeds, moved earlier), kept only where strictly
//     better: a chain whose single steps each hold more, e.g. a SiLU derivative computed from
//     the forward input alone ahead of its gradient, moves to where its transient is cheap
//     (efficientnet_b0 b2 96 px: 35.94 -> 34.12 MiB, the lower bound). Segments run on options.threads std::threads.
//     Every segment search stops as soon as it reaches the global lower bound (no segment
//     needs to go below it).
//  4. Candidates: the scheduled placement, and (unless disabled) the scheduled placement with
//     delay radius 0 and 2 (when below r), all units at their earliest and at their latest gap
//     (a placement equal to one already solved is skipped), and no artificial edges at all when every segment is then small
//     enough for the exact search (this one is exact: pinning loses nothing). The best by Tp is
//     compared with every baseline order and the best of all is returned.
//
// Determinism: every budget is counted in states or swaps, never in time, so the order is the
// same for any thread count. Per variant at most 2,000,000 states (shared evenly by its
// segments) and 4,000,000 swaps per local search (in proportion to segment size) are spent, within the
// per-segment limits below. The total wall-clock limit (options.time_limit_seconds) is only a
// safety stop: when it fires, remaining searches keep their best order so far (the result then
// depends on timing, and stats.time_limit_hit says so).
//
// options.extra keys (all optional): weight_update_scheduler (bool, default true; false places
// every unit at its latest gap, i.e. where the program runs it, chained in program order),
// exact_segments (bool, true), try_variants (bool, true), baseline_shortcut (bool, true: when
// a baseline's Tp already equals roam::lower_bound -- the cut bound, computed first with the
// best baseline as its hint -- that baseline is optimal and is returned without searching;
// false runs roam's own candidates anyway, for tests and ablations), delay_radius (int, 8), alpha (number,
// default from meta.optimizer), exact_node_limit (int, 192, at most 256), exact_state_limit
// (int, 200000), local_search_swaps (int, 1000000), return_variant (string, diagnostics: return
// that candidate as is, e.g. "roam-scheduled", skipping the comparison with the baselines).

#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "roam/graph.h"
#include "roam/options.h"

namespace roam {

/// One update group's scheduling decision (a group, or the head or tail of a split group).
/// Gaps are numbered 0..m for m core key points: gap i lies between core key point i-1 and
/// core key point i.
struct UpdateGroupDecision {
  std::vector<OpIdx> ops;        // the unit, in program order (update ops + absorbed feeders)
  int32_t earliest = 0;          // e: first gap the group's predecessors allow
  int32_t latest = 0;            // l: last gap its successors allow
  int32_t chosen = 0;            // gap it was put in
  uint64_t held_bytes = 0;       // G: bytes it reads that are produced outside it (gradients)
  uint64_t transient_bytes = 0;  // X: its estimated peak when it runs (G included)
  int32_t part = 0;              // 0 whole group, 1 head (reads the gradients), 2 tail (the rest)
};

/// The structure roam builds before searching (exposed for tests and reports).
struct RoamStructure {
  std::vector<OpIdx> pinned_sources;   // removed and re-inserted before their first successor
  std::vector<OpIdx> isolated_first;   // isolated ops placed at the very beginning
  std::vector<OpIdx> isolated_last;    // isolated ops placed at the very end
  std::vector<OpIdx> core_key_points;  // key points of the graph without sources and groups
  std::vector<UpdateGroupDecision> groups;
  std::vector<OpIdx> key_points;             // key points after pinning and the artificial edges
  std::vector<std::vector<OpIdx>> segments;  // ops between consecutive key points, in order
  double alpha = 0;                          // optimizer factor used for X
};

enum class GroupPlacement { kScheduled, kEarliest, kLatest };

/// Steps 1-2 and the segmentation of step 3, without searching.
RoamStructure roam_structure(const Graph& g, const PlanOptions& options,
                             GroupPlacement placement = GroupPlacement::kScheduled);

struct RoamOrderStats {
  std::string winner;  // "roam-scheduled", "roam-scheduled-r0", "roam-scheduled-r2",
                       // "roam-earliest", "roam-latest",
                       // "roam-free" or a baseline name
  uint64_t tp = 0;     // Tp of the returned order
  uint64_t lower_bound = 0;  // roam::lower_bound (the cut bound): Tp of any order is >= it
                             // (of options.lower_bound_graph where given)
  nlohmann::json baselines = nlohmann::json::object();  // name -> Tp
  nlohmann::json variants = nlohmann::json::object();   // variant -> {tp, predicted_tp, ...}
  int32_t pinned_sources = 0;
  int32_t groups = 0;
  int32_t key_points = 0;  // of the scheduled (or latest) variant
  int32_t segments = 0;
  int32_t max_segment_ops = 0;
  int32_t exact_solved = 0;  // segments whose exact search finished (proven optimal)
  int64_t states = 0;        // exact-search states, all variants
  int64_t swaps = 0;         // local-search swaps, all variants
  bool time_limit_hit = false;
  double seconds = 0;
  std::string warning;  // an internal error (a bug) that cost the roam candidates; "" normally
  nlohmann::json to_json() const;
};

/// ROAM order (see the top of this file). Deterministic for any options.threads.
Order order_roam(const Graph& g, const PlanOptions& options, RoamOrderStats* stats = nullptr);

}  // namespace roam
