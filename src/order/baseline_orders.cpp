// Baseline orders, each a plain function of the graph: program (the file's order), LESCEA (the
// ROAM paper's heuristic baseline) and the three topological sorts of PyTorch Inductor's
// peak-memory pass (torch/_inductor/memory.py: lpmf, bfs, dfs), re-implemented from their
// published descriptions.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "roam/inplace.h"
#include "roam/order.h"
#include "list_schedule.h"
#include "roam/roam_order.h"

namespace roam {

namespace {

// Live-memory bookkeeping of a list scheduler over the whole graph. Sizes are rounded up to the
// alignment. An op's grow (bytes it adds while it runs: the storages it produces) is fixed; the
// bytes it frees change as other ops run and are kept up to date: when a storage is down to one
// user that has not run, that user (the XOR of the users not yet run) will free it.
class MemorySim {
 public:
  MemorySim(const Graph& g, uint64_t alignment)
      : g_(g), alignment_(alignment), new_bytes_(g.ops.size(), 0), freed_(g.ops.size(), 0),
        remaining_users_(g.storages.size()), unrun_users_xor_(g.storages.size(), 0),
        waiting_(g.ops.size()), ready_(g.num_ops()) {
    for (StorageIdx s = 0; s < g.num_storages(); ++s) {
      const Storage& st = g.storages[s];
      new_bytes_[st.producer] += size(s);
      remaining_users_[s] = static_cast<int32_t>(st.users.size());
      for (OpIdx u : st.users) unrun_users_xor_[s] ^= u;
      if (st.users.size() == 1 && !st.graph_output) freed_[st.users[0]] += size(s);
    }
    for (OpIdx v = 0; v < g.num_ops(); ++v) {
      waiting_[v] = static_cast<int32_t>(g.preds[v].size());
      if (waiting_[v] == 0) ready_.insert(v, new_bytes_[v], net(v));
    }
  }
  const order_internal::ReadyQueue& ready() const { return ready_; }
  uint64_t live() const { return live_; }
  uint64_t running_peak() const { return running_peak_; }
  /// Runs v (ready).
  void run(OpIdx v) {
    ready_.erase(v);
    running_peak_ = std::max(running_peak_, live_ + new_bytes_[v]);
    live_ = live_ + new_bytes_[v] - freed_[v];
    for (StorageIdx s : g_.op_storages[v]) {
      unrun_users_xor_[s] ^= v;
      if (--remaining_users_[s] != 1 || g_.storages[s].graph_output) continue;
      const OpIdx last = unrun_users_xor_[s];
      freed_[last] += size(s);
      if (ready_.contains(last)) ready_.update(last, new_bytes_[last], net(last));
    }
    for (OpIdx w : g_.succs[v]) {
      if (--waiting_[w] == 0) ready_.insert(w, new_bytes_[w], net(w));
    }
  }

 private:
  uint64_t size(StorageIdx s) const { return align_up(g_.storages[s].size, alignment_); }
  int64_t net(OpIdx v) const {
    return static_cast<int64_t>(new_bytes_[v]) - static_cast<int64_t>(freed_[v]);
  }
  const Graph& g_;
  uint64_t alignment_;
  std::vector<uint64_t> new_bytes_;
  std::vector<uint64_t> freed_;           // bytes v frees when it runs now
  std::vector<int32_t> remaining_users_;  // users not yet run
  std::vector<OpIdx> unrun_users_xor_;    // XOR of the users not yet run
  std::vector<int32_t> waiting_;
  order_internal::ReadyQueue ready_;
  uint64_t live_ = 0, running_peak_ = 0;
};

// Runs a list scheduler: `pick(ready, live, running peak)` returns the op to run next.
template <typename Pick>
Order list_schedule(const Graph& g, uint64_t alignment, Pick pick) {
  MemorySim sim(g, alignment);
  Order order;
  order.reserve(g.ops.size());
  while (!sim.ready().empty()) {
    const OpIdx v = pick(sim.ready(), sim.live(), sim.running_peak());
    sim.run(v);
    order.push_back(v);
  }
  return order;
}

}  // namespace

Order order_program(const Graph& g) { return g.program_order(); }

Order order_lescea(const Graph& g, uint64_t alignment) {
  return list_schedule(g, alignment, order_internal::pick_lescea);
}

Order order_lpmf(const Graph& g, uint64_t alignment) {
  return list_schedule(g, alignment, order_internal::pick_lpmf);
}

Order order_bfs(const Graph& g) {
  // FIFO by predecessors: a ready op's priority is the sorted list of the steps at which its
  // predecessors ran; the lexicographically smallest runs next (ties: program position).
  const int32_t n = g.num_ops();
  std::vector<int32_t> step(n, -1), waiting(n);
  std::set<std::pair<std::vector<int32_t>, OpIdx>> ready;
  for (OpIdx v = 0; v < n; ++v) {
    waiting[v] = static_cast<int32_t>(g.preds[v].size());
    if (waiting[v] == 0) ready.insert({{}, v});
  }
  Order order;
  order.reserve(n);
  while (!ready.empty()) {
    const OpIdx v = ready.begin()->second;
    ready.erase(ready.begin());
    step[v] = static_cast<int32_t>(order.size());
    order.push_back(v);
    for (OpIdx w : g.succs[v]) {
      if (--waiting[w] > 0) continue;
      std::vector<int32_t> key;
      for (OpIdx p : g.preds[w]) key.push_back(step[p]);
      std::sort(key.begin(), key.end());
      ready.insert({std::move(key), w});
    }
  }
  return order;
}

Order order_dfs(const Graph& g, uint64_t alignment) {
  // Depth-first: visit ops in increasing order of the bytes they read and write (ties: program
  // position); before an op, visit its predecessors in that same order.
  const int32_t n = g.num_ops();
  std::vector<uint64_t> bytes(n, 0);
  for (OpIdx v = 0; v < n; ++v) {
    for (StorageIdx s : g.op_storages[v]) bytes[v] += align_up(g.storages[s].size, alignment);
  }
  auto by_bytes = [&](OpIdx a, OpIdx b) { return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b; };
  std::vector<std::vector<OpIdx>> preds = g.preds;
  for (auto& p : preds) std::sort(p.begin(), p.end(), by_bytes);
  std::vector<OpIdx> roots(n);
  for (OpIdx v = 0; v < n; ++v) roots[v] = v;
  std::sort(roots.begin(), roots.end(), by_bytes);

  Order order;
  order.reserve(n);
  std::vector<char> visited(n, 0);
  std::vector<std::pair<OpIdx, size_t>> stack;  // (op, next predecessor to visit)
  for (OpIdx r : roots) {
    if (visited[r]) continue;
    visited[r] = 1;
    stack.push_back({r, 0});
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      if (next < preds[v].size()) {
        const OpIdx p = preds[v][next++];
        if (!visited[p]) {
          visited[p] = 1;
          stack.push_back({p, 0});
        }
        continue;
      }
      order.push_back(v);
      stack.pop_back();
    }
  }
  return order;
}

const std::vector<std::string>& order_methods() {
  static const std::vector<std::string> kMethods = {"program", "lescea", "lpmf", "bfs", "dfs", "roam"};
  return kMethods;
}

Order make_order(const Graph& g, const std::string& method, const PlanOptions& options) {
  // A graph with in-place permissions is ordered on its forced graph (roam/inplace.h), whose
  // orders keep program order's writes valid; it has no permissions itself.
  if (has_inplace(g)) return make_order(force_inplace(g).graph, method, options);
  const uint64_t alignment = options.alignment;
  if (method == "program") return order_program(g);
  if (method == "lescea") return order_lescea(g, alignment);
  if (method == "lpmf") return order_lpmf(g, alignment);
  if (method == "bfs") return order_bfs(g);
  if (method == "dfs") return order_dfs(g, alignment);
  if (method == "roam") return order_roam(g, options);
  std::string names;
  for (const auto& m : order_methods()) names += (names.empty() ? "" : ", ") + m;
  throw std::invalid_argument("unknown order method '" + method + "' (valid: " + names + ")");
}

}  // namespace roam
