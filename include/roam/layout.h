// Arena layouts: for a fixed order (its liveness), an offset in bytes for every storage such
// that storages whose live intervals intersect get disjoint byte ranges.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/options.h"

namespace roam {

struct Layout {
  std::vector<uint64_t> offsets;  // per StorageIdx, bytes, multiples of the alignment
  /// Bytes the method reserves. Equals the arena (max offset + aligned size) for every method
  /// except `pytorch`, whose figure is the caching allocator's peak reserved segment bytes.
  uint64_t reserved_bytes = 0;
};

/// Simulation of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) over the
/// order: see the named constants in src/layout/pytorch_caching.cpp. Segments are laid end to
/// end in the arena in the order they are created; `reserved_bytes` = total segment bytes.
Layout layout_pytorch(const Graph& g, const Liveness& live, uint64_t alignment);

/// The three best-fit baselines below take a `deadline`: once it has passed (checked every 256
/// storages), each storage not yet placed goes, in the method's order, at the highest end over
/// its live interval (a skyline: above every storage live with it), so the layout stays valid
/// (no longer best fit) and --time-limit holds where best fit's pairwise comparisons add up
/// (10,000 storages live through a 100,000-op step). make_layout passes PlanOptions::deadline;
/// none by default.
using LayoutDeadline = std::chrono::steady_clock::time_point;

/// Long-lived-first best fit (ROAM paper's layout baseline): storages by decreasing lifetime
/// (then size, then id); each placed in the smallest gap between conflicting placed storages
/// that fits it, else on top of them.
Layout layout_llfb(const Graph& g, const Liveness& live, uint64_t alignment,
                   LayoutDeadline deadline = LayoutDeadline::max());

/// TFLite's greedy-by-size: storages by decreasing size (then first step, then id); each placed
/// in the smallest gap between conflicting placed storages that fits, else on top of them.
Layout layout_greedy_by_size(const Graph& g, const Liveness& live, uint64_t alignment,
                             LayoutDeadline deadline = LayoutDeadline::max());

/// XLA's global decreasing-size best fit (GlobalDecreasingSizeBestFitHeap, spatial order):
/// storages by decreasing aligned size, then decreasing lifetime, then StorageIdx; each in the
/// smallest gap that fits among the conflicting placed storages, else on top of them.
Layout layout_best_fit(const Graph& g, const Liveness& live, uint64_t alignment,
                       LayoutDeadline deadline = LayoutDeadline::max());

/// `roam`: see roam/roam_layout.h (the paper's subgraph tree: independent windows, split into
/// dependent leaves of at most extra["node_limit"] storages, each leaf solved by an exact
/// branch and bound, shared storages placed where they are created, conflicts repaired; never
/// worse than any other method's arena).
Layout layout_roam(const Graph& g, const Liveness& live, const PlanOptions& options);

/// pytorch, llfb, greedy_by_size, best_fit, roam.
const std::vector<std::string>& layout_methods();

/// Throws std::invalid_argument for an unknown name. `options` gives the alignment and, for
/// `roam`, threads, time limit, extra["node_limit"] (storages per leaf) and
/// extra["search_node_limit"] (search nodes per probe).
Layout make_layout(const Graph& g, const Liveness& live, const std::string& method,
                   const PlanOptions& options);
inline Layout make_layout(const Graph& g, const Liveness& live, const std::string& method,
                          uint64_t alignment) {
  PlanOptions options;
  options.alignment = alignment;
  return make_layout(g, live, method, options);
}

/// Moves each op's workspace block, where it touches none of the op's output slots, to the
/// bytes just above or just below one of them (largest output first) when those bytes are free
/// at the op's step and within the arena; a layout stays valid and its arena unchanged. A
/// kernel whose scratch peaks before its outputs exist (a convolution backward: its workspace
/// is the op's peak minus its outputs) then finds the slot and the block as one range, where
/// an executor serves it without other memory. O(S log S) for S storages; stops at `deadline`
/// (checked every 256 steps). Returns the number of blocks moved.
uint64_t place_workspaces_beside_outputs(const Graph& g, const Liveness& live,
                                         std::vector<uint64_t>& offsets, uint64_t alignment,
                                         std::chrono::steady_clock::time_point deadline =
                                             std::chrono::steady_clock::time_point::max());

/// Arena bytes of a layout: max over storages of offset + size rounded to `alignment`.
uint64_t arena_bytes(const Graph& g, const std::vector<uint64_t>& offsets, uint64_t alignment);

}  // namespace roam
