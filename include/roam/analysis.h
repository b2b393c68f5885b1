// Analysis shared by every planner: storage liveness, theoretical peak (Tp), asap/alap,
// key points (ROAM's memory-insensitive operators, arXiv 2310.19295 Sec. 4.1), activations vs
// temporaries, and the lower bound on Tp over all valid orders (DESIGN.md "Analysis").
#pragma once

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

/// Live bytes at every step (sizes rounded up to `alignment`), length = number of ops.
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

/// Lower bound on Tp over all valid orders (bytes, sizes rounded to `alignment`): for each op v,
/// the storages that are live at v in every order (v's own inputs and outputs, every storage
/// produced by an ancestor of v and used by a descendant of v or kept as a graph output); the
/// maximum over v. O((E + sum of users) * V / 64) time; memory O(V * 8192 / 8) bytes (ops are
/// processed in blocks of 8192).
uint64_t lower_bound(const Graph& g, uint64_t alignment);

/// The same bound per op (bytes that are live at op v in every valid order).
std::vector<uint64_t> lower_bound_per_op(const Graph& g, uint64_t alignment);

}  // namespace roam
