// best_fit: XLA's global decreasing-size best fit (GlobalDecreasingSizeBestFitHeap, kSpatial).
//
// The variant, exactly: storages sorted by aligned size (descending), then lifetime
// last - first (descending), then StorageIdx (ascending) -- XLA's spatial comparator (size,
// duration, buffer id). Each storage in turn looks at the placed storages whose live intervals
// intersect its own and takes the smallest free gap between their byte ranges that fits it
// (ties: the lowest offset); when none fits it goes on top of them (XLA's last free chunk, which
// extends to infinity). No colocations, no preferred offsets. Against TFLite's greedy_by_size
// only the tie-break between equal sizes differs (longer lifetime first instead of earlier
// first step).
#include <algorithm>
#include <numeric>

#include "best_fit_gap.h"
#include "roam/layout.h"

namespace roam {

Layout layout_best_fit(const Graph& g, const Liveness& live, uint64_t alignment,
                       std::chrono::steady_clock::time_point deadline) {
  layout_internal::check_layout_inputs(g, live, alignment, "best_fit");
  std::vector<StorageIdx> sequence(g.storages.size());
  std::iota(sequence.begin(), sequence.end(), StorageIdx{0});
  std::sort(sequence.begin(), sequence.end(), [&](StorageIdx a, StorageIdx b) {
    const uint64_t sa = align_up(g.storages[a].size, alignment);
    const uint64_t sb = align_up(g.storages[b].size, alignment);
    if (sa != sb) return sa > sb;
    const int32_t la = live.last[a] - live.first[a];
    const int32_t lb = live.last[b] - live.first[b];
    if (la != lb) return la > lb;
    return a < b;
  });
  return layout_internal::place_best_fit_gap(g, live, alignment, sequence, deadline);
}

}  // namespace roam
