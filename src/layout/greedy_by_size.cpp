// Greedy by size: the idea of TensorFlow Lite's GreedyBySizePlanner (largest buffers first, each
// in the best-fitting gap among the buffers it conflicts with).
#include <algorithm>
#include <numeric>

#include "best_fit_gap.h"
#include "roam/layout.h"

namespace roam {

Layout layout_greedy_by_size(const Graph& g, const Liveness& live, uint64_t alignment,
                             std::chrono::steady_clock::time_point deadline) {
  layout_internal::check_layout_inputs(g, live, alignment, "greedy_by_size");
  std::vector<StorageIdx> sequence(g.storages.size());
  std::iota(sequence.begin(), sequence.end(), StorageIdx{0});
  // Larger aligned size first, then earlier first step, then lower StorageIdx.
  std::sort(sequence.begin(), sequence.end(), [&](StorageIdx a, StorageIdx b) {
    const uint64_t sa = align_up(g.storages[a].size, alignment);
    const uint64_t sb = align_up(g.storages[b].size, alignment);
    if (sa != sb) return sa > sb;
    if (live.first[a] != live.first[b]) return live.first[a] < live.first[b];
    return a < b;
  });
  return layout_internal::place_best_fit_gap(g, live, alignment, sequence, deadline);
}

}  // namespace roam
