// Internal to src/layout: the best-fit gap placement shared by the `llfb` and `greedy_by_size`
// baselines (they differ only in the order in which storages are placed), and the argument
// checks every layout method makes.
#pragma once

#include <cstdint>
#include <vector>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"

namespace roam::layout_internal {

/// Throws std::invalid_argument when `alignment` is 0 or `live` does not describe `g`'s storages
/// (wrong lengths, a negative first step, first > last). `method` names the caller in messages.
void check_layout_inputs(const Graph& g, const Liveness& live, uint64_t alignment,
                         const char* method);

/// Places the storages one at a time in the order of `sequence` (a permutation of all
/// StorageIdx). Each storage, of size rounded up to `alignment`, looks at the already placed
/// storages whose live intervals intersect its own, scans the gaps between their byte ranges in
/// increasing offset (the first gap starts at 0) and takes the smallest gap that fits it (ties:
/// the lowest offset); when no gap fits it goes on top of them, at the largest end among them
/// (0 when there are none). `reserved_bytes` of the result is the arena.
///
/// O(n^2) time in the worst case (one pass over the placed storages, kept sorted by offset, per
/// storage), O(n) memory.
Layout place_best_fit_gap(const Graph& g, const Liveness& live, uint64_t alignment,
                          const std::vector<StorageIdx>& sequence);

}  // namespace roam::layout_internal
