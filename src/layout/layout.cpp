// Layout method registry and arena accounting (DESIGN.md "Layout").
#include "roam/layout.h"

#include <algorithm>
#include <stdexcept>

namespace roam {

const std::vector<std::string>& layout_methods() {
  static const std::vector<std::string> kMethods = {"pytorch", "llfb", "greedy_by_size",
                                                     "best_fit", "roam"};
  return kMethods;
}

Layout make_layout(const Graph& g, const Liveness& live, const std::string& method,
                   const PlanOptions& options) {
  const uint64_t alignment = options.alignment;
  if (method == "pytorch") return layout_pytorch(g, live, alignment);
  if (method == "llfb") return layout_llfb(g, live, alignment, options.deadline);
  if (method == "greedy_by_size") return layout_greedy_by_size(g, live, alignment, options.deadline);
  if (method == "best_fit") return layout_best_fit(g, live, alignment, options.deadline);
  if (method == "roam") return layout_roam(g, live, options);
  std::string valid;
  for (const std::string& m : layout_methods()) valid += (valid.empty() ? "" : ", ") + m;
  throw std::invalid_argument("unknown layout method '" + method + "' (valid: " + valid + ")");
}

uint64_t arena_bytes(const Graph& g, const std::vector<uint64_t>& offsets, uint64_t alignment) {
  if (alignment == 0) throw std::invalid_argument("arena_bytes: alignment must be at least 1");
  if (offsets.size() != g.storages.size()) {
    throw std::invalid_argument("arena_bytes: " + std::to_string(offsets.size()) +
                                " offsets for " + std::to_string(g.storages.size()) + " storages");
  }
  uint64_t arena = 0;
  for (size_t s = 0; s < offsets.size(); ++s) {
    arena = std::max(arena, offsets[s] + align_up(g.storages[s].size, alignment));
  }
  return arena;
}

}  // namespace roam
