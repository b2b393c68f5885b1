// Internal to src/layout: the best-fit gap placement shared by the `llfb` and `greedy_by_size`
// baselines (they differ only in the order in which storages are placed), and the argument
// checks every layout method makes.
#pragma once

#include <chrono>
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
/// Time: O(n log n) to index the placed storages by live interval, plus per storage the cheaper
/// of collecting its k conflicting placed storages (O(k log n), sorted by offset) and one pass
/// over all placed storages in offset order (kept in chunks of at most 1024: O(1024 + log n)
/// per insertion). On
/// graphs where few storages are live at once that is O(n log n) in all; where many are (a
/// transformer's forward activations all live until the backward pass), best fit must look at
/// every conflicting pair's byte ranges, so the sum of k (up to n times the most storages live at
/// once) bounds it, never more than the O(n^2) of one pass per storage. O(n) memory.
///
/// `deadline`: once it has passed (checked every 256 storages), each storage not yet placed
/// goes, in sequence order, at the highest end over its live interval (a skyline: O(log T)
/// each; valid, no longer best fit), so that a time limit holds where best fit's pairwise
/// comparisons add up.
Layout place_best_fit_gap(const Graph& g, const Liveness& live, uint64_t alignment,
                          const std::vector<StorageIdx>& sequence,
                          std::chrono::steady_clock::time_point deadline =
                              std::chrono::steady_clock::time_point::max());

}  // namespace roam::layout_internal
