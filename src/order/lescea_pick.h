// The LESCEA choice rule (ROAM's heuristic baseline), shared by the whole-graph scheduler
// (baseline_orders.cpp, MemorySim) and the segment scheduler (roam_segment.cpp, SegSim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace roam::order_internal {

/// Index in sim.ready() of the op LESCEA runs next: among ready ops whose step peak stays within
/// `running_peak`, the one leaving the least live memory; otherwise the one with the smallest
/// new step peak. ready() is in priority order, so the first best wins ties.
template <typename Sim>
size_t lescea_pick(const Sim& sim, uint64_t running_peak) {
  const auto& ready = sim.ready();
  size_t keep = ready.size(), grow = 0;
  uint64_t keep_after = std::numeric_limits<uint64_t>::max();
  uint64_t grow_peak = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < ready.size(); ++i) {
    const uint64_t peak = sim.step_peak(ready[i]);
    if (peak <= running_peak) {
      const uint64_t after = sim.after(ready[i]);
      if (after < keep_after) {
        keep_after = after;
        keep = i;
      }
    } else if (peak < grow_peak) {
      grow_peak = peak;
      grow = i;
    }
  }
  return keep != ready.size() ? keep : grow;
}

}  // namespace roam::order_internal
