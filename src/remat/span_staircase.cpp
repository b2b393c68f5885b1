// Per-span options of the graph remat chain (see remat_internal.h): the exact bytes a span
// holds for the backward pass under a set of recomputations, and its time-versus-memory
// staircase found greedily.
#include <algorithm>
#include <limits>

#include "roam/layout.h"
#include "remat_internal.h"

namespace roam::remat_internal {

namespace {

// Whether a read of tensor t in the backward pass (or by a recomputation) reads the instance
// the forward pass made rather than a recomputed one (expand() rewires readers to clones): a
// root is the old instance unless its producer is recomputed; a view made in the forward pass
// and not recomputed is on the old instance; any other view is on the instance of what it
// views.
bool reads_old_instance(const Graph& g, TensorIdx t, const std::vector<char>& cloned) {
  for (;;) {
    const OpIdx w = g.tensors[t].producer;
    if (g.tensors[t].alias_of < 0) return w < 0 || !cloned[w];  // a root: its producer decides
    if (w >= 0 && g.ops[w].phase == Phase::kForward && !cloned[w]) return true;  // made on it
    // a recomputed view (bound to what its base is bound to when it runs again), a view made in
    // the backward pass or by no op (a tuple element): the instance of what it views
    t = g.tensors[t].alias_of;
  }
}

}  // namespace

uint64_t span_kept_bytes(const Graph& g, const Structure& st, int32_t begin, int32_t end,
                         const std::vector<char>& cloned, uint64_t alignment) {
  // A storage made in the span is held for the backward pass when some op reads its old
  // instance there: a backward op, or a recomputation (which reads the old instance of what it
  // does not recompute). A reader reads the old instance unless the op that produced the tensor
  // it names (the storage's producer, or the forward view that made that alias) is recomputed:
  // then it reads the new one (expand() rewires it). Reads through views count: a layer norm's
  // output read in the backward pass only through a view made by another op is held.
  std::vector<StorageIdx> held;
  for (int32_t i = begin; i < end; ++i) {
    const OpIdx v = st.forward[i];
    for (TensorIdx p : g.ops[v].outputs) {
      if (g.tensors[p].alias_of >= 0) continue;
      const StorageIdx x = g.storage_of[p];
      if (x < 0 || g.storages[x].producer != v) continue;
      bool keep = false;
      for (OpIdx w : g.storages[x].users) {
        if (w == v || (g.ops[w].phase == Phase::kForward && !cloned[w])) continue;
        for (TensorIdx t : g.ops[w].inputs) {
          if (g.storage_of[t] != x) continue;
          if (reads_old_instance(g, t, cloned)) {
            keep = true;
            break;
          }
        }
        if (keep) break;
      }
      if (keep) held.push_back(x);
    }
  }
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  uint64_t bytes = 0;
  for (StorageIdx x : held) bytes += align_up(g.storages[x].size, alignment);
  return bytes;
}

namespace {

// The ops of the span actually recomputed when those with allowed[v] may be: the ones a
// backward op reads and, transitively, the allowed producers of what those read (program order).
std::vector<OpIdx> closure(const Graph& g, const Structure& st, int32_t begin, int32_t end,
                           const std::vector<char>& allowed, std::vector<char>& needed) {
  std::vector<OpIdx> out;
  for (int32_t i = end - 1; i >= begin; --i) {
    const OpIdx v = st.forward[i];
    if (!st.closed(v, allowed) || (!needed[v] && !st.backward_read[v])) continue;
    needed[v] = 1;
    out.push_back(v);
    auto need = [&](TensorIdx t) {
      const OpIdx p = g.tensors[st.nearest[t]].producer;
      if (p >= 0 && allowed[p]) needed[p] = 1;
    };
    for (TensorIdx t : g.ops[v].inputs) need(t);
    for (TensorIdx t : g.ops[v].outputs) {
      if (g.tensors[t].alias_of >= 0) need(g.tensors[t].alias_of);
    }
  }
  for (OpIdx v : out) needed[v] = 0;
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<StairPoint> span_staircase(const Graph& g, const Structure& st, int32_t begin,
                                       int32_t end, OpIdx keep, uint64_t alignment,
                                       size_t max_ops, size_t max_points) {
  const size_t n = g.ops.size();
  std::vector<char> allowed(n, 0), needed(n, 0), cloned(n, 0);
  std::vector<OpIdx> set;
  for (int32_t i = begin; i < end; ++i) {
    const OpIdx v = st.forward[i];
    if (st.cloneable[v] && v != keep) {
      allowed[v] = 1;
      set.push_back(v);
    }
  }
  auto evaluate = [&](const std::vector<OpIdx>& clones) {
    StairPoint pt;
    pt.clones = clones;
    for (OpIdx v : clones) {
      cloned[v] = 1;
      pt.cost += g.ops[v].cost.value_or(0.0);
    }
    pt.kept = span_kept_bytes(g, st, begin, end, cloned, alignment);
    for (OpIdx v : clones) cloned[v] = 0;
    return pt;
  };
  std::vector<StairPoint> points;
  points.push_back(evaluate(closure(g, st, begin, end, allowed, needed)));
  for (OpIdx v : set) allowed[v] = 0;
  if (set.size() <= max_ops) {
    std::vector<OpIdx> cur = points.back().clones;
    while (!cur.empty()) {
      for (OpIdx v : cur) allowed[v] = 1;
      const StairPoint& here = points.back();
      StairPoint best;
      bool have = false;
      double best_score = 0;
      for (OpIdx a : cur) {
        allowed[a] = 0;
        StairPoint pt = evaluate(closure(g, st, begin, end, allowed, needed));
        allowed[a] = 1;
        // Seconds saved per byte newly held; a removal that holds nothing more comes first.
        const double saved = here.cost - pt.cost;
        const double more = static_cast<double>(pt.kept) - static_cast<double>(here.kept);
        const double score = more <= 0 ? std::numeric_limits<double>::max() / 4 + saved
                                        : saved / more;
        if (!have || score > best_score) {
          best = std::move(pt);
          best_score = score;
          have = true;
        }
      }
      for (OpIdx v : cur) allowed[v] = 0;
      cur = best.clones;
      points.push_back(std::move(best));
    }
  }
  // Pareto points: kept increasing, seconds strictly decreasing.
  std::stable_sort(points.begin(), points.end(), [](const StairPoint& a, const StairPoint& b) {
    if (a.kept != b.kept) return a.kept < b.kept;
    return a.cost < b.cost;
  });
  std::vector<StairPoint> front;
  for (StairPoint& p : points) {
    if (front.empty() || p.cost < front.back().cost) front.push_back(std::move(p));
  }
  if (front.size() > max_points && max_points >= 2) {
    std::vector<StairPoint> thin;
    for (size_t k = 0; k < max_points; ++k) {
      thin.push_back(std::move(front[k * (front.size() - 1) / (max_points - 1)]));
    }
    front = std::move(thin);
  }
  return front;
}

}  // namespace roam::remat_internal
