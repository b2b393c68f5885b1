// In-place writes: validity for an order, applied graphs and the forced graph (roam/inplace.h).
#include "roam/inplace.h"

#include <algorithm>
#include <stdexcept>

namespace roam {

namespace {

// step[v] for a permutation `order`; throws std::invalid_argument otherwise.
std::vector<int32_t> order_steps(const Graph& g, const Order& order) {
  const int32_t n = g.num_ops();
  if (static_cast<int32_t>(order.size()) != n) {
    throw std::invalid_argument("inplace_valid_in: order has " + std::to_string(order.size()) +
                                " ops, graph has " + std::to_string(n));
  }
  std::vector<int32_t> step(n, -1);
  for (int32_t k = 0; k < n; ++k) {
    const OpIdx v = order[k];
    if (v < 0 || v >= n || step[v] >= 0) {
      throw std::invalid_argument("inplace_valid_in: order is not a permutation of the ops");
    }
    step[v] = k;
  }
  return step;
}

// The graph with each pair's output an alias of its input, permissions removed, re-derived.
Graph merged(const Graph& g, const std::vector<InplacePair>& pairs,
             const std::vector<std::vector<OpIdx>>* extra_after) {
  Graph x = g;
  for (Op& op : x.ops) op.inplace.clear();
  if (pairs.empty() && extra_after == nullptr) return x;
  for (const InplacePair& p : pairs) x.tensors[p.output].alias_of = p.input;
  if (extra_after != nullptr) {
    for (OpIdx v = 0; v < x.num_ops(); ++v) {
      auto& after = x.ops[v].after;
      after.insert(after.end(), (*extra_after)[v].begin(), (*extra_after)[v].end());
    }
  }
  finalize_graph(x, "(in-place graph of " + g.name + ")");
  return x;
}

}  // namespace

bool has_inplace(const Graph& g) {
  return std::any_of(g.ops.begin(), g.ops.end(), [](const Op& op) { return !op.inplace.empty(); });
}

std::vector<InplacePair> inplace_valid_in(const Graph& g, const Order& order) {
  std::vector<InplacePair> pairs;
  if (!has_inplace(g)) {
    order_steps(g, order);  // the same check of the order either way
    return pairs;
  }
  const std::vector<int32_t> step = order_steps(g, order);
  std::vector<int32_t> last(g.storages.size(), -1);
  for (StorageIdx s = 0; s < g.num_tensor_storages; ++s) {
    for (OpIdx u : g.storages[s].users) last[s] = std::max(last[s], step[u]);
  }
  std::vector<char> chosen(g.tensors.size(), 0);
  std::vector<StorageIdx> taken;
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    const Op& op = g.ops[v];
    if (op.inplace.empty()) continue;
    taken.clear();
    for (const auto& [i, j] : op.inplace) {
      const TensorIdx u = op.inputs[static_cast<size_t>(i)];
      const TensorIdx t = op.outputs[static_cast<size_t>(j)];
      const StorageIdx s = g.storage_of[u];
      const StorageIdx out = g.storage_of[t];
      if (chosen[t] || s < 0 || out < 0) continue;
      const Storage& st = g.storages[s];
      if (st.size != g.storages[out].size || st.graph_output || last[s] != step[v]) continue;
      if (std::find(taken.begin(), taken.end(), s) != taken.end()) continue;
      chosen[t] = 1;
      taken.push_back(s);
      pairs.push_back({t, u, v});
    }
  }
  return pairs;
}

Graph apply_inplace(const Graph& g, const std::vector<InplacePair>& pairs) {
  return merged(g, pairs, nullptr);
}

ForcedGraph force_inplace(const Graph& g) {
  ForcedGraph f;
  f.pairs = inplace_valid_in(g, g.program_order());
  if (f.pairs.empty()) {
    f.graph = merged(g, {}, nullptr);
    return f;
  }
  // Other users of the storage each forced op writes over must run before it in every order:
  // an `after` edge unless the user is a known ancestor (a direct predecessor, or found by a
  // backward search over at most kSearch ops at or after the earliest such user).
  constexpr int32_t kSearch = 512;
  const int32_t n = g.num_ops();
  std::vector<std::vector<OpIdx>> extra(n);
  std::vector<int32_t> seen(n, -1);
  std::vector<OpIdx> want, stack;
  int32_t stamp = 0;
  for (const InplacePair& p : f.pairs) {
    const OpIdx v = p.op;
    want.clear();
    for (OpIdx w : g.storages[g.storage_of[p.input]].users) {
      if (w == v || std::binary_search(g.preds[v].begin(), g.preds[v].end(), w)) continue;
      want.push_back(w);  // users sorted, all before v (v is the last one in program order)
    }
    if (want.empty()) continue;
    const OpIdx lo = want.front();
    ++stamp;
    size_t found = 0;
    int32_t visited = 0;
    stack.assign(1, v);
    seen[v] = stamp;
    while (!stack.empty() && found < want.size() && visited < kSearch) {
      const OpIdx x = stack.back();
      stack.pop_back();
      ++visited;
      for (OpIdx y : g.preds[x]) {
        if (y < lo || seen[y] == stamp) continue;
        seen[y] = stamp;
        if (std::binary_search(want.begin(), want.end(), y)) ++found;
        stack.push_back(y);
      }
    }
    for (OpIdx w : want) {
      if (seen[w] != stamp) extra[v].push_back(w);
    }
  }
  f.graph = merged(g, f.pairs, &extra);
  return f;
}

Graph without_inplace(const Graph& g) {
  Graph x = g;
  for (Op& op : x.ops) op.inplace.clear();
  return x;
}

std::vector<InplacePair> inplace_permissions(const Graph& g) {
  std::vector<InplacePair> pairs;
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    const Op& op = g.ops[v];
    for (const auto& [i, j] : op.inplace) {
      const TensorIdx t = op.outputs[static_cast<size_t>(j)];
      if (g.storage_of[t] < 0) continue;
      pairs.push_back({t, op.inputs[static_cast<size_t>(i)], v});
    }
  }
  return pairs;
}

}  // namespace roam
