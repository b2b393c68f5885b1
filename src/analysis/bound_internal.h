// Internal to src/analysis: the lower bounds with in-place writes allowed (see
// inplace_bound_terms in include/roam/analysis.h) share the graph their cuts and must-live
// sweeps run on (the bound sizes) and the per-op savings.
#pragma once

#include <cstdint>
#include <vector>

#include "roam/analysis.h"

namespace roam::analysis_internal {

/// The graph the bounds count on: `g` itself, or a copy of it whose storage sizes are the bound
/// sizes (InplaceBoundTerms::storage_bytes, already aligned), with the per-op savings.
struct BoundGraph {
  const Graph* graph = nullptr;
  Graph reduced;
  InplaceBoundTerms terms;
  uint64_t saving(OpIdx v) const { return terms.savings.empty() ? 0 : terms.savings[v]; }
};
/// Not copyable safely (graph may point into reduced): built in place.
void make_bound_graph(const Graph& g, uint64_t alignment, BoundGraph& out);

/// lower_bound_per_op on `g` as it is (no in-place savings, sizes as given). `crossing`
/// (optional, one entry per storage): only those storages count where they cross a listed op;
/// every listed op's own storages count.
std::vector<uint64_t> must_live_plain(const Graph& g, uint64_t alignment, const std::vector<OpIdx>& ops,
                                      const std::vector<char>* crossing = nullptr);

}  // namespace roam::analysis_internal
