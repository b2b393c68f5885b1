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
//    alternative is decided without a choice point. Contact order (the most-constrained-cell
//    searches): candidates whose top would meet the height of the section just before or just
//    after their span come first (two contacts, then one, then none; ties in the heuristic's
//    order), as in skyline packers' best-fit rules: a tight packing is a stack of such contacts.
//    It orders the alternatives and removes none (measured on the generated MiniMalloc-like
//    instances, bench/RESULTS.md).
//  - Spatial inference. A run of blocked sections B of height h is raised, without branching, to
//    the lower of its neighbours' heights: in a canonical solution the lowest buffer meeting B
//    cannot rest inside B, so it reaches beyond B (with alignment, also to the next aligned
//    offset of a buffer inside B). A run with no neighbour that a remaining buffer reaches is a
//    dead end.
//  - Section lower bounds. Every section must hold what is still to be placed in it:
//    floor(s) + (sizes of its unplaced buffers) <= capacity, where floor(s) is h[s] (+1 unit when
//    blocked). Refinement ("unallocated floor", checked for each alternative of a choice and,
//    after forced steps, once at the next branching point over the union of the sections they
//    changed: floors only rise along a branch): each unplaced buffer sits at least at its *base*, the highest floor of the
//    sections it spans; in each section, for every threshold t among the bases, the buffers with
//    base >= t must fit between t and the capacity.
//  - Lowest-buffer rule (ours; at branching points, before that threshold check). A section s
//    leaves at most slack(s) = capacity - floor(s) - (sizes of its unplaced buffers) empty, so a
//    buffer whose base is more than slack(s) above floor(s) cannot be the lowest buffer of s:
//    another buffer of s lies below it, and its base rises to the lowest top any other buffer of
//    s can have (that one's base + size; aligned up). A section where no buffer can be the lowest
//    fails. Raised bases raise tops: two rounds. This carries one section's packing into the
//    bases every other section of the buffer sees, which the per-section check alone does not;
//    its reason (below): the section, and per buffer involved a floor or an earlier raise that
//    puts its base that high. On the generated MiniMalloc-like instances 28 of 40 fit within 10 s
//    instead of 26 (bench/RESULTS.md).
//  - Precedence rule (ours; after the lowest-buffer rule, on its bases). A section s where one
//    unplaced buffer j alone can be the lowest (every other one's base is above capacity -
//    rem(s)) puts j at capacity - rem(s) or below: j's ceiling. A buffer k sharing any section
//    with j whose top cannot be at or below j's ceiling cannot lie below j, so it lies above: its
//    base rises to j's base + size (aligned up), and the threshold check runs on that. This is
//    the step from one section to the sections j spans (a "detectable precedence", as in
//    disjunctive scheduling, with the sections as machines and offsets as time). Its reason: s,
//    the shared section, and the floors or raises behind the bases of j, k and s's other
//    buffers. With the same node budget, single searches on 10 of the generated instances solved
//    22 of 60 runs instead of 14 (bench/RESULTS.md).
//  - Dominance. Raising a blocked run wastes the rectangle B x [h, H). If an unplaced buffer lies
//    within B and fits in that rectangle, the branch is pruned: moving that buffer down would give
//    a solution with a smaller sum of offsets, and a solution minimising that sum is never pruned
//    (so the search stays complete). Identical buffers (same lifetime, size and alignment) are
//    placed in index order only.
//  - Dynamic decomposition. When the remaining buffers fall into groups that no lifetime connects
//    (a time point that no unplaced buffer crosses), the groups are independent: each is solved
//    on its own, and a group that fails makes the search backtrack past the choices made in the
//    other groups (no thrashing; backjumping, below, generalises it).
//  - Conflict-directed backjumping (Prosser's CBJ, as in CSP and SAT solvers). Every step taken
//    without a choice depends on the state of a few sections only (its *reason*): a forced
//    placement or waste at the cell (s, h) of a run on s and the run's two neighbours (whose
//    height keeps every other buffer over s out of the run), a raise on the run and its
//    neighbours, a section bound on its section, the unallocated-floor bound on the section where
//    it fails and, per buffer counted there, one section of its span whose floor alone lifts its
//    base that high (or the reason of the lowest-buffer raise that does). Walking back from a
//    failure, the conflict (a set of sections) takes in the reason of every forced step that
//    changed one of its sections; a choice whose decision changed none of them did not cause the
//    failure, so its other alternatives are skipped. A choice that runs out of alternatives passes
//    on the union of its alternatives' conflicts and its own cell's reason. The search stays
//    complete (a skipped alternative would fail the same way). Where a set of sections per choice
//    on the stack would pass 2^22 words (32 MiB; huge instances), the search keeps the dynamic
//    decomposition's rule alone, without nogoods.
//  - Local nogoods. The conflict of an exhausted choice is a set of sections whose state (each
//    one's floor and its unplaced buffers) alone admits no solution; it is kept (hashed, 16 per
//    section of the choice's cell, conflicts of up to 64 sections, 2^22 sections in all) and a
//    branching point at that section whose state agrees on those sections fails at once,
//    backjumping on the same sections. Unlike the memo it matches states that differ elsewhere
//    (the generated MiniMalloc-like instances, bench/RESULTS.md).
//  - Failed-state memo. The state of such a group (heights and blocks of its sections, its
//    unplaced buffers) determines everything below it, so a state whose alternatives were all
//    exhausted is remembered (128-bit hash) and fails at once when reached again (e.g. the same
//    stack of buffers placed in another order). Used on instances of up to 400 buffers.
//  - Restarts. Luby-sequenced restarts (1000 nodes, 100 x buffers on large instances) with the
//    candidate order perturbed by seeded noise; the memo and the nogoods survive restarts. They
//    cure the heavy tail of depth-first search on the MiniMalloc instances. The
//    most-constrained-cell searches of the portfolio cycle through three schedules (base 1000,
//    3000, 1000 nodes; noise 1, 0.5, 0.2 x buffers): different ones solved different generated
//    instances.
//  - Failure weights (dom/wdeg: Boussemart, Hemery, Lecoutre, Sais, "Boosting systematic search
//    by weighting constraints", ECAI 2004; with VSIDS-like growth, as in SAT solvers). Every
//    failure (a cell without alternatives, a section bound, the unallocated-floor bound) adds a
//    weight to each section of its reason, the weight added growing x1.05 per failure so recent
//    failures count more. At a restart the candidate order perturbed is the one by weight (the
//    sum over a buffer's sections, heaviest first), so the buffers crossing the sections where
//    the search keeps failing are tried first; at one height, ties between cells with the same
//    number of alternatives go to the heaviest section. Only the order changes: the search stays
//    complete. On the searches backward in time of the MiniMalloc portfolio; on the 19 hardest
//    generated instances 8 fit within 10 s instead of 6 (bench/RESULTS.md).
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
  int64_t probe_node_start = 20000; // minimize_allocation: search nodes per portfolio search in
                                    // the first round of probes (x4 per round, up to node_limit)
  int probes_per_round = 0;         // minimize_allocation: the most probes of one round (the
                                    // target first, then bisection) before the node budget
                                    // grows; <= 0: no limit (bisect to the unit)
  int64_t probe_nodes_total = 0;    // minimize_allocation: no probe starts whose node budget
                                    // (x heuristics) would take the probes' nodes above this;
                                    // <= 0: no limit
  bool time_sweep = false;          // portfolio branching at the leftmost lowest cell (a sweep
                                    // over time: training graphs) rather than at the most
                                    // constrained one (the MiniMalloc benchmarks)
  bool contact_order = true;        // the most-constrained-cell searches try their candidates
                                    // in the contact order (above); layout_roam's windows turn
                                    // it off (their arenas and the remat plans built on them
                                    // were measured without it)
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

/// One capacity minimize_allocation tried: solve_allocation(buffers, capacity) with `node_limit`
/// search nodes per portfolio search (and the time left).
struct AllocProbe {
  uint64_t capacity = 0;
  int64_t node_limit = 0;
  AllocStatus status = AllocStatus::kUnknown;
  uint64_t height = 0;              // when feasible
  int64_t nodes = 0;
  double seconds = 0;
};

struct AllocMinimizeResult {
  std::vector<uint64_t> offsets;
  uint64_t height = 0;              // the smallest height found feasible
  uint64_t lower_bound = 0;         // live_size_lower_bound
  uint64_t proven_lower_bound = 0;  // every height below it is proven infeasible: the live-size
                                    // bound, or one unit above the highest capacity a probe proved
                                    // infeasible (the unit: the gcd of sizes and alignments)
  bool proven_optimal = false;      // height == lower_bound or height - 1 proven infeasible
  std::vector<AllocProbe> probes;   // in the order tried
  int64_t nodes = 0;
  double seconds = 0;
};

/// Smallest height it can find. Upper bound: the best of two greedy best-fit layouts, `start`
/// (optional, an extra feasible solution) and one *dive* per portfolio search (the search run at
/// an unreachable capacity to its first solution, which needs no backtracking: a bottom-up,
/// lowest-point-first greedy). Then rounds of probes with the exact solver (fit attempts,
/// solve_allocation at one capacity): each round first at the lowest height not yet excluded
/// (max(lower bound, good_enough), or one unit above the highest capacity proven infeasible),
/// then bisection between the highest capacity it did not fit and the best height found; every
/// probe of a round gets the same node budget per portfolio search, options.probe_node_start in
/// the first round, x4 per round, up to options.node_limit (the budget of `roam layout
/// --capacity`), while a probe was cut by the limit. So the result is never above a capacity at
/// which a probe found a layout, and once a round runs at options.node_limit every capacity it
/// tried got the fit attempt `--capacity` would make (the time limit permitting); a probe that
/// proves a capacity infeasible raises proven_lower_bound. options.dive_node_limit bounds the
/// dives, options.max_probes the probes, options.time_limit_seconds the whole call.
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

// ---------------------------------------------------------------------------------------------
// The subgraph tree: dependent subgraphs under a node limit (ROAM, arXiv 2310.19295, memory
// layout). A set of buffers too large to solve at once is cut in time into *leaves*; a buffer
// whose lifetime crosses a cut is a *shared* buffer (a shared storage) of every leaf it meets.
// Each leaf is solved on its own, with its shared buffers clipped to its time range; the leaf
// layouts are concatenated and the address conflicts this leaves are repaired.

/// How a shared buffer meets a leaf with time range [begin, end).
enum class SharedKind : uint8_t {
  kCIFO,  // created inside, freed outside: begin <= lower < end < upper
  kCOFI,  // created outside, freed inside: lower < begin < upper <= end
  kCOFO   // created and freed outside: lower < begin and end < upper (it spans the leaf)
};
const char* to_string(SharedKind kind);

/// One leaf of the subgraph tree. Buffer numbers index the vector given to split_subgraph.
struct SubgraphLeaf {
  int64_t begin = 0;              // time range [begin, end), the units of AllocBuffer
  int64_t end = 0;
  std::vector<size_t> own;        // buffers whose lifetime lies inside [begin, end); increasing
  std::vector<size_t> shared;     // buffers live in [begin, end) that cross begin or end,
                                  // increasing
  std::vector<SharedKind> kinds;  // per entry of `shared`
  /// own + shared: what the node limit counts.
  size_t size() const { return own.size() + shared.size(); }
};

struct SubgraphTree {
  std::vector<SubgraphLeaf> leaves;  // in time order; their ranges partition
                                     // [min lower, max upper) (no leaf when there is no buffer)
  std::vector<size_t> assigned_leaf; // per buffer: the leaf whose range holds its `lower` (the
                                     // leaf where it is created: its own leaf, or the one where
                                     // it is CIFO)
  std::vector<bool> shared;          // per buffer: shared by two or more leaves
};

/// Splits `buffers` recursively in time until every leaf holds at most `node_limit` buffers
/// (own + shared).
///  - Feasibility. A leaf holds at least the buffers live at any of its time points, so the limit
///    can be met iff no time point has more than `node_limit` live buffers. When one has, the
///    set is not split at all: one leaf holds every buffer (solved whole, as if unlimited).
///  - The cut of a subgraph [a, b) holding N > node_limit buffers is a time point t, a < t < b,
///    among the lifetime end points (lower and upper, clipped to [a, b)): left [a, t), right
///    [t, b). L(t) buffers meet the left side (clipped lower < t), R(t) the right one (clipped
///    upper > t); a cut *progresses* when L(t) < N and R(t) < N. Candidates: the progressing cuts
///    near the middle: the buffers that do not span [a, b) (spanning ones cross every cut) are
///    counted left of t -- the crossing ones as halves -- and that count must lie within [M/4,
///    3M/4] of their number M (all progressing cuts if none does). Chosen: the fewest bytes
///    crossing t (lower < t < upper), then the smallest |L(t) - R(t)|, then the smallest t.
///    A subgraph with more than node_limit buffers but no time point above the limit always
///    has a progressing cut (if no cut progressed, all its buffers would be live together), so
///    the split ends with every leaf under the limit.
/// Throws std::invalid_argument when node_limit < 2 or a buffer has lower >= upper.
/// O(N log N) per subgraph of N buffers; the depth is O(log N) on balanced cuts, at most N.
SubgraphTree split_subgraph(const std::vector<AllocBuffer>& buffers, int64_t node_limit);

struct ConflictRepair {
  std::vector<uint64_t> offsets;  // per buffer: valid (no two buffers live together overlap)
  std::vector<size_t> displaced;  // the buffers that were moved, in the order re-placed
  uint64_t height = 0;            // max(offset + size)
};

/// Repairs a layout that has address conflicts (two buffers with intersecting lifetimes and
/// intersecting byte ranges), as the concatenated leaves of a subgraph tree have.
///  1. Keep: buffers are visited in the order shared buffers by (lower, index), then the others
///     by index; a buffer is kept at its offset when it conflicts with no kept buffer, else it is
///     displaced. So a shared buffer keeps its offset unless an earlier-created shared buffer
///     holds it, and the non-shared buffers (the small, short-lived temporaries) make way.
///  2. Re-place: the displaced buffers by decreasing size, then decreasing lifetime, then index;
///     each at the best fit among every buffer already placed that it overlaps in time: the
///     smallest gap between their byte ranges (from offset 0, offsets rounded up to the buffer's
///     alignment) that holds it (ties: the lowest offset), else on top of them.
/// `offsets` and `shared` have one entry per buffer (else std::invalid_argument). Offsets must be
/// multiples of the buffers' alignments. O(N * live + D * N) time with N buffers, D displaced
/// ones and `live` the most buffers live together.
ConflictRepair repair_conflicts(const std::vector<AllocBuffer>& buffers,
                                const std::vector<uint64_t>& offsets,
                                const std::vector<bool>& shared);

struct SubgraphTreeResult {
  std::vector<uint64_t> offsets;  // per buffer, valid
  uint64_t height = 0;            // max(offset + size)
  size_t leaves = 0;
  size_t shared = 0;              // buffers shared by two or more leaves
  size_t displaced = 0;           // buffers the repair moved
};

/// The subgraph-tree layout of a set of buffers:
///  1. split_subgraph(buffers, node_limit);
///  2. every leaf is solved on its own with minimize_allocation(leaf buffers, options, start,
///     good_enough): its own buffers and its shared ones clipped to [begin, end). The shared
///     buffers come first in the leaf's buffer list, by (lower, index), then the own ones by
///     index: the solver's candidate orders break ties by that position, so among equals the
///     shared buffers are tried first and go low (the solver offers no other handle);
///     `start` (optional, a valid layout of `buffers`) restricted to the leaf is its starting
///     solution, and a leaf whose restriction is already <= good_enough keeps it unsolved.
///     Leaves are solved in parallel over options.threads (each with threads = 1 when there
///     are several leaves); the result is the same for any thread count;
///  3. concatenation: a shared buffer takes the offset it has in its assigned leaf (the one
///     where it is created), every other buffer the offset of its only leaf;
///  4. repair_conflicts with the shared buffers marked.
/// Every leaf gets `options` as given (node limits are per leaf search); the time limit applies
/// to each leaf. Throws std::invalid_argument as split_subgraph and minimize_allocation do.
SubgraphTreeResult subgraph_tree_allocation(const std::vector<AllocBuffer>& buffers,
                                            int64_t node_limit,
                                            const AllocSolveOptions& options = {},
                                            const std::vector<uint64_t>* start = nullptr,
                                            uint64_t good_enough = 0);

/// Default leaf size of layout_roam (extra["node_limit"]): see layout_roam.
constexpr int64_t kDefaultRoamNodeLimit = 4096;

/// The `roam` arena layout of a graph for a fixed order (DESIGN.md "Layout", issue 5).
///
/// Method. Storages become buffers [first, last + 1) with sizes rounded to the alignment.
///  1. Baselines: pytorch, llfb, greedy_by_size and best_fit are computed; the best arena among
///     them is the upper bound and the fallback (so roam is never worse than any of them).
///  2. Independent subgraphs: the order is cut at every step that no storage's lifetime crosses
///     (the paper's memory-insensitive points, seen from the layout side: nothing is shared
///     across such a cut). The windows are independent layout problems. A window whose share
///     of the best baseline is at most Tp keeps the baseline's offsets.
///  3. Dependent subgraphs: every other window is split by split_subgraph under the node limit
///     into leaves (one leaf when it has at most node_limit storages, or when some step has
///     more than node_limit live storages: then no split meets the limit and the window is
///     solved whole). Storages crossing a cut are the shared storages of the leaves they meet
///     (CIFO / COFI / COFO, see SharedKind).
///  4. Exact leaves: each leaf (own storages + shared ones clipped to it) goes to
///     minimize_allocation in time-sweep mode with good_enough = Tp of the whole order and the
///     best baseline restricted to the leaf as a start: dives of the portfolio (a bottom-up time
///     sweep, which reaches Tp on the paper graphs), then probes of the exact search at Tp and
///     bisection up to the leaf's share of the baseline (at most 4 probes). Where that stops
///     above Tp, the portfolio's most-constrained-cell mode (the MiniMalloc benchmarks' mode)
///     continues from its result with unlimited probes and at least 2,000,000 search nodes per
///     probe, within the time limit (ViT-B/16 b1 with the roam order: 0.79% -> 0.00%). All
///     leaves of all windows are solved in parallel over `threads`.
///  5. Concatenation and repair (subgraph_tree_allocation steps 3-4). Assignment rule: a shared
///     storage takes its offset from the leaf where it is created (where it is CIFO). Why: an
///     address is fixed when the storage is allocated, so the leaf that runs its producer is the
///     one that decides it, together with the temporaries live at that moment; the later leaves
///     (where it is COFI/COFO, clipped to start at their first step) must live with it, and
///     their temporaries that collide with it are the ones re-placed. Every storage is created
///     in exactly one leaf, so the rule is total and unique. (Activations go low in every leaf
///     only as far as the solver's candidate orders put long-lived storages first: shared
///     storages lead the leaf's buffer list, which breaks the remaining ties.) A window whose
///     repaired layout is not lower than the best baseline on it keeps the baseline's offsets
///     (windows are independent in time); if the whole result is not below the best
///     baseline's arena, the best baseline is returned.
/// Knobs (PlanOptions): threads, time_limit_seconds (a safety net, per leaf the time left),
///  - extra["node_limit"]: the most storages per leaf (the paper's node limit), an integer >= 2,
///    else std::invalid_argument naming "node_limit". Default kDefaultRoamNodeLimit = 4096, by
///    measurement on the 17 graphs of bench/graphs with the roam order (alignment 64, 10 s,
///    one thread): their windows hold 93..4210 storages, at most 924 live at one step, and the
///    largest window that needs solving (best baseline above Tp) holds 4018 (gpt2-xl-b1). At
///    4096 no such window is split: every graph keeps 0.000% fragmentation and its time, as
///    before the split existed. At 1500..3000 they keep 0.000% too (gpt2-xl-b1 in 3..8
///    leaves); at 1000 gpt2-xl-b1's repaired layout (8.3% above Tp) loses to the best baseline
///    (0.29%, returned); at 256 mnasnet0_5-b1 gets 0.45%, mobilenet_v2 and vit_b_16-b1 keep
///    their best baseline (up to 0.99%); at 64 every window that needs solving has a step with
///    more than 64 live storages and is solved whole. Smaller limits bound the size of each
///    exact search; the conflict repair is what they cost.
///  - extra["search_node_limit"]: search nodes per probe and portfolio search (default
///    max(20000, 50 x leaf storages); dives get max(that, 400 x storages)); ignored unless a
///    positive integer.
///  - extra["second_pass_probes"]: the most probes of step 4's second pass (the most-
///    constrained-cell mode), 0 to skip it; default 20. Each round probes Tp, then bisects,
///    at most 4 probes per node budget (x4 per round), at most 2,000,000 search nodes per leaf
///    in all, so that the default plan ends by work rather than by the clock; plan_with_budget
///    (remat.h) uses 4 probes, its plans of recomputing graphs seldom reaching Tp.
/// Deterministic for any thread count unless the time limit cuts a search.
Layout layout_roam(const Graph& g, const Liveness& live, const PlanOptions& options);

}  // namespace roam
