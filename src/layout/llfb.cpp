// Long-lived-first best fit: the layout baseline of the ROAM paper (arXiv 2310.19295).
#include <algorithm>
#include <numeric>

#include "best_fit_gap.h"
#include "roam/layout.h"

namespace roam {

Layout layout_llfb(const Graph& g, const Liveness& live, uint64_t alignment,
                   std::chrono::steady_clock::time_point deadline) {
  layout_internal::check_layout_inputs(g, live, alignment, "llfb");
  std::vector<StorageIdx> sequence(g.storages.size());
  std::iota(sequence.begin(), sequence.end(), StorageIdx{0});
  // Longest lifetime (last - first) first, then larger aligned size, then lower StorageIdx.
  std::sort(sequence.begin(), sequence.end(), [&](StorageIdx a, StorageIdx b) {
    const int32_t la = live.last[a] - live.first[a];
    const int32_t lb = live.last[b] - live.first[b];
    if (la != lb) return la > lb;
    const uint64_t sa = align_up(g.storages[a].size, alignment);
    const uint64_t sb = align_up(g.storages[b].size, alignment);
    if (sa != sb) return sa > sb;
    return a < b;
  });
  return layout_internal::place_best_fit_gap(g, live, alignment, sequence, deadline);
}

}  // namespace roam
