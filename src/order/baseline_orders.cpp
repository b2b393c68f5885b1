// Baseline orders: program (the file's order) and LESCEA (ROAM's heuristic baseline).
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "roam/order.h"

namespace roam {

Order order_program(const Graph& g) { return g.program_order(); }

Order order_lescea(const Graph& g, uint64_t alignment) {
  const int32_t n = g.num_ops();
  std::vector<uint64_t> new_bytes(n, 0);  // aligned bytes of the storages each op produces
  for (const Storage& s : g.storages) new_bytes[s.producer] += align_up(s.size, alignment);
  std::vector<int32_t> remaining_users(g.storages.size());
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    remaining_users[s] = static_cast<int32_t>(g.storages[s].users.size());
  }
  std::vector<int32_t> waiting(n);
  std::vector<OpIdx> ready;
  for (OpIdx v = 0; v < n; ++v) {
    waiting[v] = static_cast<int32_t>(g.preds[v].size());
    if (waiting[v] == 0) ready.push_back(v);
  }
  // Bytes freed right after v runs: storages whose last remaining user is v.
  auto freed_by = [&](OpIdx v) {
    uint64_t freed = 0;
    for (StorageIdx s : g.op_storages[v]) {
      if (remaining_users[s] == 1 && !g.storages[s].graph_output) {
        freed += align_up(g.storages[s].size, alignment);
      }
    }
    return freed;
  };

  Order order;
  order.reserve(n);
  uint64_t live = 0, running_peak = 0;
  while (!ready.empty()) {
    // `ready` is kept sorted by program position, so the first best candidate wins ties.
    size_t keep_pick = ready.size(), grow_pick = ready.size();
    uint64_t keep_after = std::numeric_limits<uint64_t>::max();
    uint64_t grow_peak = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < ready.size(); ++i) {
      const OpIdx v = ready[i];
      const uint64_t step_peak = live + new_bytes[v];
      if (step_peak <= running_peak) {
        const uint64_t after = step_peak - freed_by(v);
        if (after < keep_after) { keep_after = after; keep_pick = i; }
      } else if (keep_pick == ready.size() && step_peak < grow_peak) {
        grow_peak = step_peak;
        grow_pick = i;
      }
    }
    const size_t pick = keep_pick != ready.size() ? keep_pick : grow_pick;
    const OpIdx v = ready[pick];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(pick));
    const uint64_t step_peak = live + new_bytes[v];
    running_peak = std::max(running_peak, step_peak);
    live = step_peak - freed_by(v);
    for (StorageIdx s : g.op_storages[v]) --remaining_users[s];
    order.push_back(v);
    for (OpIdx w : g.succs[v]) {
      if (--waiting[w] == 0) ready.insert(std::lower_bound(ready.begin(), ready.end(), w), w);
    }
  }
  return order;
}

const std::vector<std::string>& order_methods() {
  static const std::vector<std::string> kMethods = {"program", "lescea"};
  return kMethods;
}

Order make_order(const Graph& g, const std::string& method, uint64_t alignment) {
  if (method == "program") return order_program(g);
  if (method == "lescea") return order_lescea(g, alignment);
  std::string names;
  for (const auto& m : order_methods()) names += (names.empty() ? "" : ", ") + m;
  throw std::invalid_argument("unknown order method '" + method + "' (valid: " + names + ")");
}

}  // namespace roam
