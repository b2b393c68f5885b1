// Analysis shared by every planner: storage liveness, theoretical peak (Tp), asap/alap,
// key points (ROAM's memory-insensitive operators, arXiv 2310.19295 Sec. 4.1), activations vs
// temporaries, and the lower bound on Tp over all valid orders (DESIGN.md "Analysis").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "roam/graph.h"

namespace roam {

/// Live interval of every storage under one order, in steps (inclusive on both ends),
/// per GRAPH_FORMAT.md "Liveness". Indexed by StorageIdx.
struct Liveness {
  std::vector<int32_t> first;
  std::vector<int32_t> last;
};

/// step[v] = position of op v in `order`. Throws std::invalid_argument if `order` is not a
/// permutation of the graph's ops (dependencies are not checked here: see is_topological).
std::vector<int32_t> steps_of(const Graph& g, const Order& order);

/// True when `order` is a permutation of all ops that respects every data and `after` edge.
bool is_topological(const Graph& g, const Order& order);

Liveness compute_liveness(const Graph& g, const Order& order);

/// Live bytes at every step (sizes rounded up to `alignment`), length = number of ops. A storage
/// whose `live.last` is negative is not counted (a range merged into another storage's).
std::vector<uint64_t> live_bytes_per_step(const Graph& g, const Liveness& live, uint64_t alignment);

/// Theoretical peak Tp: max over steps of live bytes (arena part, resident excluded), bytes.
uint64_t theoretical_peak(const Graph& g, const Liveness& live, uint64_t alignment);
uint64_t theoretical_peak(const Graph& g, const Order& order, uint64_t alignment);

/// Earliest / latest step of each op over all valid orders:
/// asap = number of ancestors, alap = n - 1 - number of descendants. O(V * E / 64) with bitsets.
struct AsapAlap {
  std::vector<int32_t> asap;
  std::vector<int32_t> alap;
};
AsapAlap asap_alap(const Graph& g);

/// Key points: ops with asap == alap (they sit at the same step in every valid order), in step
/// order. One topological sweep, O(V + E): with ops in a topological order, the op at position
/// i is a key point iff every op before it has a successor at a position <= i and every op
/// after it has a predecessor at a position >= i.
std::vector<OpIdx> key_points(const Graph& g);

/// The quadratic definition (asap == alap via ancestor counts), kept as a test oracle.
std::vector<OpIdx> key_points_quadratic(const Graph& g);

/// Storage kinds from the graph's phases (never from names): an activation is produced in the
/// forward phase and last used (in program order) by a backward op; every other non-resident
/// storage is a temporary.
enum class StorageKind : uint8_t { kActivation, kTemporary };
std::vector<StorageKind> storage_kinds(const Graph& g);

/// The lower bounds below hold with in-place writes allowed (GRAPH_FORMAT.md op and plan field
/// `inplace`, roam/inplace.h): on a graph with permissions each counts
///  - every storage at its bound size (`storage_bytes`): an output written over an input lives
///    in the input's instance, so its contents occupy no more than the input's bound (the same
///    as its own aligned size wherever sizes agree, i.e. on every captured graph);
///  - at op v's own step, `savings[v]` bytes less: v's outputs written over its dying inputs
///    share their bytes, at most min(sum of the bounds of v's outputs that have a permission,
///    sum over the distinct input storages of the largest bound of an output paired with it).
/// Storages counted because they cross v (born by an ancestor, used by a descendant) need no
/// change: such a storage is read after v, so an op that writes over it before v is not its
/// last user, and it stays distinct bytes from everything else live at v.
/// On a graph without permissions both are empty and every bound is what it was without them.
struct InplaceBoundTerms {
  std::vector<uint64_t> savings;        // per op, aligned bytes; empty: no permission
  std::vector<uint64_t> storage_bytes;  // per storage, aligned bytes; empty: the aligned sizes
};
InplaceBoundTerms inplace_bound_terms(const Graph& g, uint64_t alignment);

/// Must-live bytes per op (sizes rounded to `alignment`): the storages that are live at op v in
/// every order -- v's own inputs and outputs, and every storage produced by an ancestor of v and
/// used by a descendant of v or kept as a graph output -- less v's in-place savings (above).
/// O((E + sum of users) * V / 64) time;
/// memory O(V * b / 4) bytes for blocks of b <= 8192 ops, b narrowed to keep it under 64 MiB.
/// Every value is <= min_live_at_op of the same op.
std::vector<uint64_t> lower_bound_per_op(const Graph& g, uint64_t alignment);
/// The same for the listed `ops` only (time O((E + sum of users) * |ops| / 64)); every other op
/// gets the bytes of its own storages, also live at its step in every order.
std::vector<uint64_t> lower_bound_per_op(const Graph& g, uint64_t alignment,
                                         const std::vector<OpIdx>& ops);
/// The same, with only the storages s with `crossing[s]` counted where they cross a listed op
/// (born by an ancestor, used by a descendant); each op's own storages are all counted.
/// `crossing` has one entry per storage (std::invalid_argument otherwise).
std::vector<uint64_t> lower_bound_per_op(const Graph& g, uint64_t alignment,
                                         const std::vector<OpIdx>& ops,
                                         const std::vector<char>& crossing);

/// The fewest bytes (sizes rounded to `alignment`) that any valid order holds live at op v's
/// step. Exact: with D the ops run by v's step (a set closed under predecessors that holds v and
/// its ancestors and none of its descendants), the live storages are v's own plus those born in
/// D with a use outside D; minimising their total over D is a minimum s-t cut (a closure
/// problem, Picard 1976), solved with Boost.Graph's Boykov-Kolmogorov max flow on the ops
/// incomparable to v. Beyond the must-live bytes it counts, e.g., a forward activation whose
/// backward users (sigmoid(x) of a SiLU backward) do not depend on v: either the activation or
/// what is computed from it is live at v. O(V + E + sum of users) to build, plus the max flow.
/// With `run_before` (`run_after`), an op incomparable to v, the minimum is over the orders
/// that run that op before (after) v's step: the same cut with the op and its ancestors
/// (descendants) fixed on that side.
/// With permissions: the least over orders with any in-place writes (the cut on the bound
/// sizes, less savings[v]; see InplaceBoundTerms).
/// Throws std::invalid_argument when an op is out of range or run_before / run_after is not
/// incomparable to v.
uint64_t min_live_at_op(const Graph& g, OpIdx v, uint64_t alignment, OpIdx run_before = -1,
                        OpIdx run_after = -1);

/// Lower bound on Tp over all valid orders (bytes, sizes rounded to `alignment`), roam's cut
/// bound, tighter than the must-live bound of lower_bound_per_op:
///  1. B1 = max over ops v of min_live_at_op(v): Tp(order) >= live bytes at any op's step.
///     Cuts are computed for the ops whose bytes live in the program or the lescea order exceed
///     the bound so far, largest first, at most max(2, 500000 / (ops + edges)) ops (a work
///     budget: a 20,000-op random DAG takes about 2 s); on large graphs B1 may stop below the
///     maximum, still a valid bound. The must-live bytes (lower_bound_per_op) start it: for
///     every op while that costs at most 2.5e8 bitset words, else for the ops with the most
///     bytes live in those two orders (the rest count their own storages).
///  2. Pair refinement, when no known order (program, `hint`, lescea) reaches B1: for the first
///     8 ops (by index) with min_live_at_op = B1 among those considered and, for each, its 24
///     incomparable neighbours w that decide the most bytes of its cut (at most 96 pairs and at
///     most the budget above), every order runs v before w or after it, so
///       Tp >= min(max(min_live(v | w after), min_live(w | v before)),
///                 max(min_live(v | w before), min_live(w | v after))).
///     The bound is the maximum of B1 and these. (ViT-B/16 b1: B1 = 135.05 MiB, with pairs
///     137.36 MiB, the Tp roam finds: proven optimal.)
/// With permissions every term is the in-place one (InplaceBoundTerms): a bound on Tp over all
/// valid orders, each with any in-place writes valid in it (the live bytes of known orders are
/// counted with the writes they allow, inplace_valid_in).
/// `hint` (any valid order; optional) only lets cuts be skipped where they cannot raise the
/// bound: the value does not depend on it, only the time does. Nothing is computed when a known
/// order's Tp equals the must-live maximum (that order is optimal).
uint64_t lower_bound(const Graph& g, uint64_t alignment, const Order* hint = nullptr);
/// The same, stopping early (a smaller bound, still valid; *stopped set) once `deadline` has
/// passed: a safety stop for the time limit of a whole plan, checked between cuts.
uint64_t lower_bound(const Graph& g, uint64_t alignment, const Order* hint,
                     std::chrono::steady_clock::time_point deadline, bool* stopped = nullptr);

/// Live bytes at every op's step under `order` (indexed by op, not by step).
std::vector<uint64_t> live_bytes_at_ops(const Graph& g, const Order& order, uint64_t alignment);

/// Tp of `order` (every op once) with every in-place write it allows (inplace_valid_in of
/// roam/inplace.h, applied): what a plan of that order holds, and for program order what eager
/// PyTorch holds where the permissions are its in-place operators. theoretical_peak(g, order)
/// on a graph without permissions. Bytes, sizes rounded to `alignment`.
uint64_t inplace_peak(const Graph& g, const Order& order, uint64_t alignment);

}  // namespace roam
