// Static allocation (the layout problem on its own) and the `roam` arena layout.
//
// ## The static allocation problem
// Buffers with fixed half-open lifetimes [lower, upper) and sizes; find offsets such that two
// buffers whose lifetimes intersect get disjoint byte ranges [offset, offset + size), every
// offset is a multiple of the buffer's alignment, and max(offset + size) <= capacity. It is the
// problem MiniMalloc (Moffitt, ASPLOS 2023) solves; the arena layout of a training graph for a
// fixed order is the same problem with lower = first step and upper = last step + 1.
//
// ## The exact solver (solve_allocation): a skyline branch and bound over canonical placements
// Time is cut into *sections* (the intervals between consecutive lifetime end points). The
// search keeps, per section, the height h[s] below which everything is decided, and places
// buffers bottom-up, lowest point first:
//  - Canonical solutions. Every feasible instance has a solution in which each buffer rests at 0
//    or directly on top of a buffer it overlaps in time (let every buffer fall; alignment rounds
//    the resting point up). The search only generates such solutions, in non-decreasing offset
//    order, so no solution is generated twice.
//  - Branching. Pick a cell (s, h) at the lowest height h: the one with the fewest alternatives
//    among the lowest sections (or the leftmost one, in time-sweep mode). Either some buffer
//    starts at offset h over s -- it must lie within the run of sections at height exactly h (a
//    *candidate*) -- or nothing does and the cell is *wasted*: s is marked blocked. Candidates
//    are tried first (in the heuristic's order), the waste last; a cell with a single
//    alternative is decided without a choice point.
//  - Spatial inference. A run of blocked sections B of height h is raised, without branching, to
//    the lower of its neighbours' heights: in a canonical solution the lowest buffer meeting B
//    cannot rest inside B, so it reaches beyond B (with alignment, also to the next aligned
//    offset of a buffer inside B). A run with no neighbour that a remaining buffer reaches is a
//    dead end.
//  - Section lower bounds. Every section must hold what is still to be placed in it:
//    floor(s) + (sizes of its unplaced buffers) <= capacity, where floor(s) is h[s] (+1 unit when
//    blocked). Refinement ("unallocated floor", checked after every change around the changed
//    sections): each unplaced buffer sits at least at its *base*, the highest floor of the
//    sections it spans; in each section, for every threshold t among the bases, the buffers with
//    base >= t must fit between t and the capacity.
//  - Dominance. Raising a blocked run wastes the rectangle B x [h, H). If an unplaced buffer lies
//    within B and fits in that rectangle, the branch is pruned: moving that buffer down would give
//    a solution with a smaller sum of offsets, and a solution minimising that sum is never pruned
//    (so the search stays complete). Identical buffers (same lifetime, size and alignment) are
//    placed in index order only.
//  - Dynamic decomposition. When the remaining buffers fall into groups that no lifetime connects
//    (a time point that no unplaced buffer crosses), the groups are independent: each is solved
//    on its own, and a group that fails makes the search backtrack past the choices made in the
//    other groups (no thrashing).
//  - Failed-state memo. The state of such a group (heights and blocks of its sections, its
//    unplaced buffers) determines everything below it, so a state whose alternatives were all
//    exhausted is remembered (128-bit hash) and fails at once when reached again (e.g. the same
//    stack of buffers placed in another order). Used on instances of up to 400 buffers.
//  - Restarts. Luby-sequenced restarts (1000 nodes, 100 x buffers on large instances) with the
//    candidate order perturbed by seeded noise; the memo survives restarts. They cure the heavy
//    tail of depth-first search on the MiniMalloc instances.
//  - Portfolio. Several deterministic searches that differ in the candidate order (congestion of
//    the most loaded section spanned, area, size, lifetime), the direction of time and the
//    branching cell (most constrained cell, or the leftmost one: a sweep over time, which packs
//    the nested lifetimes of training graphs well) run side by side; the answer is the one that
//    needed the fewest nodes (ties: the first), so it is the same for any number of threads. The
//    node limit applies to each search; the time limit is a safety net (when it cuts the search,
//    the outcome may depend on the machine).
// The search is complete: kInfeasible is a proof.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "roam/options.h"

namespace roam {

/// One buffer: live on the half-open interval [lower, upper) (lower < upper), `size` bytes,
/// offset a multiple of `alignment` (>= 1).
struct AllocBuffer {
  int64_t lower = 0;
  int64_t upper = 0;
  uint64_t size = 0;
  uint64_t alignment = 1;
};

struct AllocSolveOptions {
  int64_t node_limit = 2'000'000;   // per portfolio search; <= 0: none
  double time_limit_seconds = 60;   // wall clock for the whole call; <= 0: none
  int threads = 1;                  // the result does not depend on it
  int heuristics = 6;               // portfolio size, 1..10
  bool unallocated_floor = true;    // the stronger section bound (skipped on long instances)
  int64_t dive_node_limit = 0;      // minimize_allocation's dives; <= 0: node_limit
  int max_probes = 0;               // minimize_allocation: capacities tried after the dives;
                                    // <= 0: no limit
  bool time_sweep = false;          // portfolio branching at the leftmost lowest cell (a sweep
                                    // over time: training graphs) rather than at the most
                                    // constrained one (the MiniMalloc benchmarks)
};

enum class AllocStatus : uint8_t {
  kFeasible,    // offsets found
  kInfeasible,  // proven: no solution at this capacity
  kUnknown      // the node or time limit stopped the search first
};
const char* to_string(AllocStatus status);

struct AllocResult {
  AllocStatus status = AllocStatus::kUnknown;
  std::vector<uint64_t> offsets;    // per buffer when feasible
  uint64_t height = 0;              // max(offset + size) when feasible
  int64_t nodes = 0;                // search nodes, all portfolio searches together
  double seconds = 0;
};

/// Finds offsets with max(offset + size) <= capacity. Throws std::invalid_argument for a buffer
/// with lower >= upper, alignment 0, or sizes (plus alignments) summing above 2^60.
AllocResult solve_allocation(const std::vector<AllocBuffer>& buffers, uint64_t capacity,
                             const AllocSolveOptions& options = {});

/// max over time of the total size of the live buffers: no solution is lower.
uint64_t live_size_lower_bound(const std::vector<AllocBuffer>& buffers);

/// Best fit over buffers (XLA's global decreasing-size best fit: by size desc, lifetime desc,
/// index; each in the smallest gap that fits among the buffers it overlaps, else on top;
/// alignment respected). Returns offsets.
std::vector<uint64_t> best_fit_allocation(const std::vector<AllocBuffer>& buffers);

struct AllocMinimizeResult {
  std::vector<uint64_t> offsets;
  uint64_t height = 0;              // the smallest height found feasible
  uint64_t lower_bound = 0;         // live_size_lower_bound
  bool proven_optimal = false;      // height == lower_bound or height - 1 proven infeasible
  int64_t nodes = 0;
  double seconds = 0;
};

/// Smallest height it can find. Upper bound: the best of two greedy best-fit layouts, `start`
/// (optional, an extra feasible solution) and one *dive* per portfolio search (the search run at
/// an unreachable capacity to its first solution, which needs no backtracking: a bottom-up,
/// lowest-point-first greedy). Then probes with the exact solver: first at max(lower bound,
/// good_enough), then bisection between the highest height proven infeasible and the best found,
/// each probe with a node budget that starts at 20000 per search and is multiplied by 4 per round
/// (up to options.node_limit) while a probe was cut by the limit; options.dive_node_limit bounds
/// the dives, options.max_probes the probes, options.time_limit_seconds the whole call.
/// `good_enough`: stop as soon as the height is <= max(lower bound, good_enough) (layout_roam's
/// windows only need to reach Tp of the whole order).
AllocMinimizeResult minimize_allocation(const std::vector<AllocBuffer>& buffers,
                                        const AllocSolveOptions& options = {},
                                        const std::vector<uint64_t>* start = nullptr,
                                        uint64_t good_enough = 0);

/// Independent check of a solution: "" when valid, else a description of the first problem
/// (offset count, misaligned offset, offset + size above capacity, two overlapping buffers).
std::string check_allocation(const std::vector<AllocBuffer>& buffers,
                             const std::vector<uint64_t>& offsets, uint64_t capacity);

/// The `roam` arena layout of a graph for a fixed order (DESIGN.md "Layout", issue 5).
///
/// Method. Storages become buffers [first, last + 1) with sizes rounded to the alignment.
///  1. Baselines: pytorch, llfb, greedy_by_size and best_fit are computed; the best arena among
///     them is the upper bound and the fallback (so roam is never worse than any of them).
///  2. Independent subgraphs: the order is cut at every step that no storage's lifetime crosses
///     (the paper's memory-insensitive points, seen from the layout side: nothing is shared
///     across such a cut). The windows are independent layout problems, solved in parallel.
///  3. Exact leaves: each window whose share of the best baseline is above Tp goes to
///     minimize_allocation in time-sweep mode with good_enough = Tp of the whole order: dives
///     of the portfolio (a bottom-up time sweep, which reaches Tp on the paper graphs), then
///     probes of the exact search at Tp and bisection up to the window's share of the baseline
///     (at most 4 probes). Windows are solved in parallel when there are several.
///  4. Concatenation: the window layouts are put side by side in time (all start at offset 0);
///     the arena is the highest window. Long-lived storages (activations) go low: among the
///     candidates at the lowest point, the searches prefer large and long-lived buffers, so
///     activations, which live from the forward to the backward pass, end up at low offsets.
/// Relation to the paper's subgraph tree (arXiv 2310.19295, memory layout): the paper splits
/// the graph into independent subgraphs, splits large ones into dependent subgraphs under a
/// node limit, assigns each shared (cross-subgraph) storage to one side (CIFO/COFI/COFO), solves
/// the leaves and concatenates them, repairing address conflicts afterwards. Here the leaves are
/// the independent windows and are solved as a whole (the exact solver scales to the windows of
/// the paper graphs), so there are no shared storages to assign and no conflicts to repair; the
/// node limit bounds the search effort per leaf instead of the leaf size. Knobs (PlanOptions):
/// threads, time_limit_seconds, extra["node_limit"] (search nodes per probe and portfolio
/// search; default max(20000, 50 x window storages); dives get max(that, 400 x storages)).
/// Deterministic for any thread count unless the time limit cuts a search.
Layout layout_roam(const Graph& g, const Liveness& live, const PlanOptions& options);

}  // namespace roam
