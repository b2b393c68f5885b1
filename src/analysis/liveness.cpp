// Storage liveness and theoretical peak under one order (GRAPH_FORMAT.md "Liveness").
#include <algorithm>
#include <stdexcept>

#include "roam/analysis.h"

namespace roam {

std::vector<int32_t> steps_of(const Graph& g, const Order& order) {
  const int32_t n = g.num_ops();
  if (static_cast<int32_t>(order.size()) != n) {
    throw std::invalid_argument("order has " + std::to_string(order.size()) + " ops, graph has " +
                                std::to_string(n));
  }
  std::vector<int32_t> step(n, -1);
  for (int32_t k = 0; k < n; ++k) {
    const OpIdx v = order[k];
    if (v < 0 || v >= n || step[v] >= 0) {
      throw std::invalid_argument("order is not a permutation of the graph's ops (position " +
                                  std::to_string(k) + ")");
    }
    step[v] = k;
  }
  return step;
}

bool is_topological(const Graph& g, const Order& order) {
  std::vector<int32_t> step;
  try {
    step = steps_of(g, order);
  } catch (const std::invalid_argument&) {
    return false;
  }
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    for (OpIdx u : g.preds[v]) {
      if (step[u] >= step[v]) return false;
    }
  }
  return true;
}

Liveness compute_liveness(const Graph& g, const Order& order) {
  const std::vector<int32_t> step = steps_of(g, order);
  const int32_t last_step = g.num_ops() - 1;
  Liveness live;
  live.first.resize(g.storages.size());
  live.last.resize(g.storages.size());
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    const Storage& st = g.storages[s];
    live.first[s] = step[st.producer];
    int32_t last = live.first[s];
    for (OpIdx u : st.users) last = std::max(last, step[u]);
    live.last[s] = st.graph_output ? last_step : last;
  }
  return live;
}

std::vector<uint64_t> live_bytes_per_step(const Graph& g, const Liveness& live, uint64_t alignment) {
  const int32_t n = g.num_ops();
  std::vector<int64_t> delta(static_cast<size_t>(n) + 1, 0);
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    if (live.last[s] < 0) continue;  // not counted (a storage merged into another's range)
    const auto size = static_cast<int64_t>(align_up(g.storages[s].size, alignment));
    delta[live.first[s]] += size;
    delta[live.last[s] + 1] -= size;
  }
  std::vector<uint64_t> bytes(n);
  int64_t running = 0;
  for (int32_t t = 0; t < n; ++t) {
    running += delta[t];
    bytes[t] = static_cast<uint64_t>(running);
  }
  return bytes;
}

uint64_t theoretical_peak(const Graph& g, const Liveness& live, uint64_t alignment) {
  const auto bytes = live_bytes_per_step(g, live, alignment);
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

uint64_t theoretical_peak(const Graph& g, const Order& order, uint64_t alignment) {
  return theoretical_peak(g, compute_liveness(g, order), alignment);
}

}  // namespace roam
