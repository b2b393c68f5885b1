// Baseline orders, each a plain function of the graph: program (the file's order), LESCEA (the
// ROAM paper's heuristic baseline) and the three topological sorts of PyTorch Inductor's
// peak-memory pass (torch/_inductor/memory.py: lpmf, bfs, dfs), re-implemented from their
// published descriptions.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "roam/order.h"
#include "lescea_pick.h"
#include "roam/roam_order.h"

namespace roam {

namespace {

// Live-memory bookkeeping of a list scheduler: which storages are live, which die when an op
// runs. Sizes are rounded up to the alignment.
class MemorySim {
 public:
  MemorySim(const Graph& g, uint64_t alignment)
      : g_(g), alignment_(alignment), new_bytes_(g.ops.size(), 0),
        remaining_users_(g.storages.size()), waiting_(g.ops.size()) {
    for (const Storage& s : g.storages) new_bytes_[s.producer] += align_up(s.size, alignment);
    for (StorageIdx s = 0; s < g.num_storages(); ++s) {
      remaining_users_[s] = static_cast<int32_t>(g.storages[s].users.size());
    }
    for (OpIdx v = 0; v < g.num_ops(); ++v) {
      waiting_[v] = static_cast<int32_t>(g.preds[v].size());
      if (waiting_[v] == 0) ready_.push_back(v);
    }
  }
  /// Ready ops, sorted by program position.
  const std::vector<OpIdx>& ready() const { return ready_; }
  uint64_t live() const { return live_; }
  uint64_t running_peak() const { return running_peak_; }
  /// Live bytes while v runs (inputs and outputs together).
  uint64_t step_peak(OpIdx v) const { return live_ + new_bytes_[v]; }
  /// Live bytes right after v runs: its step peak less the storages whose last user is v.
  uint64_t after(OpIdx v) const {
    uint64_t freed = 0;
    for (StorageIdx s : g_.op_storages[v]) {
      if (remaining_users_[s] == 1 && !g_.storages[s].graph_output) {
        freed += align_up(g_.storages[s].size, alignment_);
      }
    }
    return step_peak(v) - freed;
  }
  /// Runs ready()[i]; returns the op.
  OpIdx run(size_t i) {
    const OpIdx v = ready_[i];
    ready_.erase(ready_.begin() + static_cast<std::ptrdiff_t>(i));
    running_peak_ = std::max(running_peak_, step_peak(v));
    live_ = after(v);
    for (StorageIdx s : g_.op_storages[v]) --remaining_users_[s];
    for (OpIdx w : g_.succs[v]) {
      if (--waiting_[w] == 0) ready_.insert(std::lower_bound(ready_.begin(), ready_.end(), w), w);
    }
    return v;
  }

 private:
  const Graph& g_;
  uint64_t alignment_;
  std::vector<uint64_t> new_bytes_;
  std::vector<int32_t> remaining_users_;
  std::vector<int32_t> waiting_;
  std::vector<OpIdx> ready_;
  uint64_t live_ = 0, running_peak_ = 0;
};

// Runs a list scheduler: `pick` returns the index in sim.ready() of the op to run next.
template <typename Pick>
Order list_schedule(const Graph& g, uint64_t alignment, Pick pick) {
  MemorySim sim(g, alignment);
  Order order;
  order.reserve(g.ops.size());
  while (!sim.ready().empty()) order.push_back(sim.run(pick(sim)));
  return order;
}

}  // namespace

Order order_program(const Graph& g) { return g.program_order(); }

Order order_lescea(const Graph& g, uint64_t alignment) {
  return list_schedule(g, alignment, [](const MemorySim& sim) {
    return order_internal::lescea_pick(sim, sim.running_peak());
  });
}

Order order_lpmf(const Graph& g, uint64_t alignment) {
  return list_schedule(g, alignment, [](const MemorySim& sim) {
    // Least peak memory first: lexicographic minimum of (peak so far if the op runs next,
    // live bytes after it, program position).
    const auto& ready = sim.ready();
    size_t best = 0;
    std::pair<uint64_t, uint64_t> best_key{std::numeric_limits<uint64_t>::max(), 0};
    for (size_t i = 0; i < ready.size(); ++i) {
      const std::pair<uint64_t, uint64_t> key{std::max(sim.running_peak(), sim.step_peak(ready[i])),
                                              sim.after(ready[i])};
      if (key < best_key) { best_key = key; best = i; }
    }
    return best;
  });
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
