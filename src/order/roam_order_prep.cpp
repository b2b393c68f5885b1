// The R model of the ROAM order (arXiv 2310.19295, Sec. 4; include/roam/roam_order.h steps 1
// and 2's input): pinning, the R ops and their storages, update groups with their windows, held
// bytes and transient peaks, the core and its key points. Vocabulary: roam_order_internal.h.
#include <algorithm>
#include <cctype>
#include <numeric>
#include <string>

#include "roam/analysis.h"
#include "roam_order_internal.h"

namespace roam::detail {

namespace {

/// Transient factor of the optimizer (bytes of the update's peak per parameter byte).
double optimizer_alpha(const Graph& g) {
  if (!g.meta.is_object() || !g.meta.contains("optimizer") || !g.meta["optimizer"].is_string()) {
    return 0;
  }
  std::string name = g.meta["optimizer"].get<std::string>();
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.rfind("adam", 0) == 0 || name.rfind("lamb", 0) == 0) return 3;  // grad + 2 temporaries
  if (name == "rmsprop" || name == "adagrad" || name == "adadelta") return 2;
  if (name.rfind("sgd", 0) == 0) return 1;
  return 0;
}

struct UnionFind {
  std::vector<int32_t> parent;
  explicit UnionFind(int32_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int32_t find(int32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void unite(int32_t a, int32_t b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

bool make_groups(const Graph& g, uint64_t alignment, std::vector<char>& banned, Prep& p);

}  // namespace

/// Key points of a DAG whose nodes 0..n-1 are numbered in a topological order.
std::vector<int32_t> dag_key_points(const std::vector<std::vector<int32_t>>& preds,
                                    const std::vector<std::vector<int32_t>>& succs) {
  Graph stub;
  stub.ops.resize(preds.size());
  stub.preds = preds;
  stub.succs = succs;
  return key_points(stub);
}

Prep prepare(const Graph& g, const Settings& settings, uint64_t alignment) {
  Prep p;
  const int32_t n = g.num_ops();
  p.n = n;
  p.kind.assign(n, Kind::kReduced);
  p.anchors.assign(n, {});
  // 1. Pinning. Sources: ops with no predecessor whose storages all outlive them (a user that
  // is not a source, or a graph output), ops that touch no storage and depend only on sources
  // (t of t of a parameter), and linear memory-free chains hanging from a source (empty ->
  // bernoulli_ -> div_). Each runs just before its first successor: every storage live at its
  // step is live at that successor's step too, and no storage is born earlier than it must.
  std::vector<char> cand(n, 0);
  for (OpIdx v = 0; v < n; ++v) {
    if (g.preds[v].empty() && g.succs[v].empty()) {  // isolated
      const auto& st = g.op_storages[v];
      bool any_out = false, all_out = true;
      for (StorageIdx s : st) {
        any_out = any_out || g.storages[s].graph_output;
        all_out = all_out && g.storages[s].graph_output;
      }
      if (st.empty() || !any_out) {
        p.kind[v] = Kind::kIsoFirst;
      } else if (all_out) {
        p.kind[v] = Kind::kIsoLast;
      }
      continue;
    }
    bool c = !g.succs[v].empty();
    for (OpIdx u : g.preds[v]) c = c && cand[u];
    if (c && !g.preds[v].empty() && !g.op_storages[v].empty()) {
      // Beyond the first op, an op that touches storages must make none and be the single
      // successor of its single predecessor (a linear chain such as empty -> bernoulli_ ->
      // div_): then whatever it touches is used again after the chain.
      for (StorageIdx s : g.op_storages[v]) c = c && g.storages[s].producer != v;
      c = c && g.preds[v].size() == 1 && g.succs[g.preds[v][0]].size() == 1;
    }
    cand[v] = c;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const Storage& x : g.storages) {
      if (!cand[x.producer] || x.graph_output) continue;
      bool used_outside = false;
      for (OpIdx u : x.users) used_outside = used_outside || !cand[u];
      if (!used_outside) {
        cand[x.producer] = 0;
        changed = true;
      }
    }
    for (OpIdx v = 0; v < n; ++v) {
      if (!cand[v]) continue;
      for (OpIdx u : g.preds[v]) {
        if (!cand[u]) {
          cand[v] = 0;
          changed = true;
          break;
        }
      }
    }
  }
  // Memory-free ops (they make no storage) whose predecessors are R or memory-free ops run
  // right after their last predecessor.
  for (OpIdx v = 0; v < n; ++v) {
    if (p.kind[v] != Kind::kReduced) continue;
    if (cand[v]) {
      p.kind[v] = Kind::kSource;
      continue;
    }
    if (g.preds[v].empty()) continue;
    bool memfree = true;
    for (StorageIdx s : g.op_storages[v]) memfree = memfree && g.storages[s].producer != v;
    for (OpIdx u : g.preds[v]) {
      memfree = memfree && (p.kind[u] == Kind::kReduced || p.kind[u] == Kind::kMemfree);
    }
    if (!memfree) continue;
    p.kind[v] = Kind::kMemfree;
    auto& a = p.anchors[v];
    for (OpIdx u : g.preds[v]) {
      if (p.kind[u] == Kind::kReduced)
        a.push_back(u);
      else
        a.insert(a.end(), p.anchors[u].begin(), p.anchors[u].end());
    }
    sort_unique(a);
  }
  for (OpIdx v = 0; v < n; ++v) {
    switch (p.kind[v]) {
      case Kind::kReduced:
        p.rops.push_back(v);
        break;
      case Kind::kSource:
        p.sources.push_back(v);
        break;
      case Kind::kMemfree:
        p.memfree.push_back(v);
        break;
      case Kind::kIsoFirst:
        p.iso_first.push_back(v);
        break;
      case Kind::kIsoLast:
        p.iso_last.push_back(v);
        break;
    }
  }
  // 2. R dependencies.
  p.rpreds.assign(n, {});
  p.rsuccs.assign(n, {});
  for (OpIdx v : p.rops) {
    auto& rp = p.rpreds[v];
    for (OpIdx u : g.preds[v]) {
      if (p.kind[u] == Kind::kReduced)
        rp.push_back(u);
      else if (p.kind[u] == Kind::kMemfree)
        rp.insert(rp.end(), p.anchors[u].begin(), p.anchors[u].end());
    }
    sort_unique(rp);
    for (OpIdx u : rp) p.rsuccs[u].push_back(v);
  }
  // Frontier of a pinned source: the R ops at the end of its paths through pinned sources; it
  // runs (in a chain of pinned sources) just before the first of them.
  std::vector<std::vector<OpIdx>> frontier(n);
  for (OpIdx v = n - 1; v >= 0; --v) {
    if (p.kind[v] != Kind::kSource) continue;
    for (OpIdx w : g.succs[v]) {
      if (p.kind[w] == Kind::kSource)
        frontier[v].insert(frontier[v].end(), frontier[w].begin(), frontier[w].end());
      else
        frontier[v].push_back(w);
    }
    sort_unique(frontier[v]);
  }
  // 3. Storages in the R model.
  const int32_t ns = g.num_storages();
  p.size.resize(ns);
  p.births.assign(ns, {});
  p.users.assign(ns, {});
  p.direct.assign(ns, {});
  p.escape.assign(ns, 0);
  for (StorageIdx s = 0; s < ns; ++s) {
    const Storage& x = g.storages[s];
    p.size[s] = align_up(x.size, alignment);
    p.escape[s] = x.graph_output;
    const Kind pk = p.kind[x.producer];
    if (pk == Kind::kReduced) {
      p.births[s] = {x.producer};
    } else if (pk == Kind::kSource) {
      p.births[s] = frontier[x.producer];  // all R (see the pinning rule)
    } else {
      continue;  // produced by an isolated op placed first or last
    }
    auto& us = p.users[s];
    for (OpIdx u : x.users) {
      if (p.kind[u] == Kind::kReduced) p.direct[s].push_back(u);
      if (p.kind[u] == Kind::kReduced)
        us.push_back(u);
      else if (p.kind[u] == Kind::kMemfree)
        us.insert(us.end(), p.anchors[u].begin(), p.anchors[u].end());
    }
    sort_unique(us);
    sort_unique(p.births[s]);
  }
  p.op_touch.assign(n, {});
  for (StorageIdx s = 0; s < ns; ++s) {
    for (OpIdx v : p.births[s]) p.op_touch[v].push_back(s);
    for (OpIdx v : p.users[s]) {
      if (p.op_touch[v].empty() || p.op_touch[v].back() != s) p.op_touch[v].push_back(s);
    }
  }
  // Steps 4 to 6. A unit whose window is empty (its earliest gap after its latest one) could
  // not be placed without contradicting a dependency: some op outside it, a key point of the
  // core, lies on a path from one of its ops to another (an update group that is not convex,
  // e.g. update -> forward -> update in a fuzzed graph). Its update group is dissolved (its ops
  // join the core, ordered by the segment search like any other op) and the groups, core and
  // windows are recomputed; every round dissolves at least one group.
  p.alpha = settings.alpha >= 0 ? settings.alpha : optimizer_alpha(g);
  std::vector<char> banned(n, 0);
  while (!make_groups(g, alignment, banned, p)) {
  }
  return p;
}

namespace {

// Steps 4 to 6 of prepare: update groups (no op of `banned` in any), the core and its key
// points, the groups' windows, held bytes and transient peaks. Returns false after adding to
// `banned` the ops of every update group that has a unit with an empty window (p is then to be
// recomputed); true when every window is non-empty.
bool make_groups(const Graph& g, uint64_t alignment, std::vector<char>& banned, Prep& p) {
  const int32_t n = p.n;
  const int32_t ns = g.num_storages();
  p.group_of.assign(n, -1);
  p.groups.clear();
  p.core_ops.clear();
  p.core_keys.clear();
  // 4. Update groups: connected components of update-phase ops (R and memory-free pinned),
  // plus R ops of other phases (not forward) whose every R successor is in one group.
  {
    UnionFind uf(n);
    std::vector<char> member(n, 0);
    for (OpIdx v = 0; v < n; ++v) {
      if (g.ops[v].phase == Phase::kUpdate && !banned[v] &&
          (p.kind[v] == Kind::kReduced || p.kind[v] == Kind::kMemfree)) {
        member[v] = 1;
      }
    }
    for (OpIdx v = 0; v < n; ++v) {
      if (!member[v]) continue;
      for (OpIdx u : g.preds[v]) {
        if (member[u]) uf.unite(u, v);
      }
    }
    // Absorb feeders (reverse program order, so chains of feeders are absorbed together).
    for (auto it = p.rops.rbegin(); it != p.rops.rend(); ++it) {
      const OpIdx v = *it;
      if (member[v] || banned[v] || g.ops[v].phase == Phase::kForward || p.rsuccs[v].empty()) continue;
      const OpIdx first = p.rsuccs[v].front();
      if (!member[first]) continue;
      const int32_t root = uf.find(first);
      bool all = true;
      for (OpIdx w : p.rsuccs[v]) all = all && member[w] && uf.find(w) == root;
      if (!all) continue;
      member[v] = 1;
      uf.unite(v, first);
    }
    // Merge groups joined by a direct dependency (R or through a memory-free member's anchors).
    for (OpIdx v = 0; v < n; ++v) {
      if (!member[v]) continue;
      const auto& deps = p.kind[v] == Kind::kReduced ? p.rpreds[v] : p.anchors[v];
      for (OpIdx u : deps) {
        if (member[u]) uf.unite(u, v);
      }
    }
    // Components, numbered by their first R op; each splits into a head (the ops that read
    // storages made outside the group, e.g. the gradient, and their ancestors in the group) and
    // a tail (the rest, e.g. Adam's sqrt/div temporaries), scheduled separately: the head frees
    // the gradient as soon as it runs, the tail's temporaries can wait for a quiet gap.
    std::vector<int32_t> comp_of_root(n, -1);
    std::vector<std::vector<OpIdx>> comp_ops;
    for (OpIdx v : p.rops) {
      if (!member[v]) continue;
      const int32_t r = uf.find(v);
      if (comp_of_root[r] < 0) {
        comp_of_root[r] = static_cast<int32_t>(comp_ops.size());
        comp_ops.emplace_back();
      }
    }
    std::vector<int32_t> comp(n, -1);
    for (OpIdx v = 0; v < n; ++v) {
      if (member[v] && comp_of_root[uf.find(v)] >= 0) {
        comp[v] = comp_of_root[uf.find(v)];
        comp_ops[comp[v]].push_back(v);
      }
    }
    // Head: the smallest set closed under "in-group predecessors" and "in-group direct users of
    // what it makes" that contains every op reading a storage made outside the group. The tail
    // (the rest) reads nothing made outside it: it can run whenever memory is low.
    std::vector<char> head(n, 0);
    for (size_t c = 0; c < comp_ops.size(); ++c) {
      const auto& ops = comp_ops[c];
      auto inside = [&](OpIdx u) { return comp[u] == static_cast<int32_t>(c); };
      std::vector<OpIdx> queue;
      auto mark = [&](OpIdx v) {
        if (p.kind[v] == Kind::kReduced && inside(v) && !head[v]) {
          head[v] = 1;
          queue.push_back(v);
        }
      };
      for (OpIdx v : ops) {
        if (p.kind[v] != Kind::kReduced) continue;
        for (StorageIdx st : g.op_storages[v]) {
          if (g.storages[st].producer == v || p.births[st].empty()) continue;
          bool born_inside = true;
          for (OpIdx b : p.births[st]) born_inside = born_inside && inside(b);
          if (!born_inside) mark(v);
        }
      }
      while (!queue.empty()) {
        const OpIdx v = queue.back();
        queue.pop_back();
        for (OpIdx u : p.rpreds[v]) mark(u);
        for (StorageIdx st : p.op_touch[v]) {
          if (!std::binary_search(p.births[st].begin(), p.births[st].end(), v)) continue;
          for (OpIdx u : p.direct[st]) mark(u);
        }
      }
      // Split only when the tail makes memory of its own (else there is nothing to defer).
      int32_t heads = 0, tails = 0;
      bool tail_makes_memory = false;
      for (OpIdx v : ops) {
        if (p.kind[v] != Kind::kReduced) continue;
        if (head[v]) {
          ++heads;
          continue;
        }
        ++tails;
        for (StorageIdx st : g.op_storages[v]) {
          tail_makes_memory = tail_makes_memory || g.storages[st].producer == v;
        }
      }
      const bool split = heads > 0 && tails > 0 && tail_makes_memory;
      const auto first = static_cast<int32_t>(p.groups.size());
      p.groups.emplace_back();
      p.groups.back().component = static_cast<int32_t>(c);
      if (split) {
        p.groups.back().part = 1;
        p.groups.back().sibling = first + 1;
        p.groups.emplace_back();
        p.groups.back().component = static_cast<int32_t>(c);
        p.groups.back().part = 2;
        p.groups.back().sibling = first;
      }
      for (OpIdx v : ops) {
        int32_t id = first;
        if (split) {
          if (p.kind[v] == Kind::kReduced) {
            id = head[v] ? first : first + 1;
          } else {  // a pinned member goes with the tail when one of its anchors is there
            for (OpIdx a : p.anchors[v]) {
              if (inside(a) && !head[a]) id = first + 1;
            }
          }
        }
        p.group_of[v] = id;
        p.groups[id].all.push_back(v);
        if (p.kind[v] == Kind::kReduced) p.groups[id].rops.push_back(v);
      }
    }
  }
  for (size_t gi = 0; gi < p.groups.size(); ++gi) {
    Group& gr = p.groups[gi];
    for (OpIdx v : gr.rops) {
      bool has_pred = false, has_succ = false;
      for (OpIdx u : p.rpreds[v]) has_pred = has_pred || p.group_of[u] == static_cast<int32_t>(gi);
      for (OpIdx w : p.rsuccs[v]) has_succ = has_succ || p.group_of[w] == static_cast<int32_t>(gi);
      if (!has_pred) gr.entries.push_back(v);
      if (!has_succ) gr.exits.push_back(v);
    }
  }
  // 5. Core and its key points.
  p.core_pos.assign(n, -1);
  for (OpIdx v : p.rops) {
    if (p.group_of[v] < 0) {
      p.core_pos[v] = static_cast<int32_t>(p.core_ops.size());
      p.core_ops.push_back(v);
    }
  }
  const auto nc = static_cast<int32_t>(p.core_ops.size());
  {
    std::vector<std::vector<int32_t>> cp(nc), cs(nc);
    for (int32_t i = 0; i < nc; ++i) {
      for (OpIdx u : p.rpreds[p.core_ops[i]]) {
        if (p.core_pos[u] >= 0) {
          cp[i].push_back(p.core_pos[u]);
          cs[p.core_pos[u]].push_back(i);
        }
      }
    }
    for (int32_t i : dag_key_points(cp, cs)) p.core_keys.push_back(p.core_ops[i]);
  }
  p.m = static_cast<int32_t>(p.core_keys.size());
  p.key_index.assign(n, -1);
  p.gap_of.assign(n, -1);
  for (int32_t i = 0; i < p.m; ++i) p.key_index[p.core_keys[i]] = i;
  {
    int32_t keys_seen = 0;
    for (OpIdx v : p.core_ops) {
      if (p.key_index[v] >= 0) {
        ++keys_seen;
      } else {
        p.gap_of[v] = keys_seen;
      }
    }
  }
  // 6. Windows, held bytes and transient peaks of the groups.
  auto pred_gap = [&](OpIdx u) { return p.key_index[u] >= 0 ? p.key_index[u] + 1 : p.gap_of[u]; };
  auto succ_gap = [&](OpIdx w) { return p.key_index[w] >= 0 ? p.key_index[w] : p.gap_of[w]; };
  // Core lifetime end of every storage (core position of its last core user).
  std::vector<int32_t> core_end(ns, -1);
  for (StorageIdx s = 0; s < ns; ++s) {
    for (OpIdx u : p.users[s]) {
      if (p.core_pos[u] >= 0) core_end[s] = std::max(core_end[s], p.core_pos[u]);
    }
    for (OpIdx b : p.births[s]) {
      if (p.core_pos[b] >= 0) core_end[s] = std::max(core_end[s], p.core_pos[b]);
    }
  }
  std::vector<uint8_t> sim_state(ns, 0);
  std::vector<int32_t> sim_left(ns, 0);
  for (size_t gi = 0; gi < p.groups.size(); ++gi) {
    Group& gr = p.groups[gi];
    const auto id = static_cast<int32_t>(gi);
    gr.e = 0;
    gr.l = p.m;
    // Dependencies on the sibling part are handled by the scheduler (the tail follows the head).
    auto outside = [&](OpIdx u) {
      return p.group_of[u] != id && (gr.sibling < 0 || p.group_of[u] != gr.sibling);
    };
    for (OpIdx v : gr.all) {
      const auto& deps = p.kind[v] == Kind::kReduced ? p.rpreds[v] : p.anchors[v];
      for (OpIdx u : deps) {
        if (outside(u)) gr.e = std::max(gr.e, pred_gap(u));
      }
      if (p.kind[v] != Kind::kReduced) continue;
      for (OpIdx w : p.rsuccs[v]) {
        if (outside(w)) gr.l = std::min(gr.l, succ_gap(w));
      }
    }
    // Storages the group touches in the R model; external ones (born outside) are held until
    // it runs. Then simulate the group alone, in program order.
    std::vector<StorageIdx> touched;  // storages its ops list (as input or output)
    for (OpIdx v : gr.rops) {
      for (StorageIdx s : p.op_touch[v]) {
        if (std::binary_search(p.direct[s].begin(), p.direct[s].end(), v)) touched.push_back(s);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    auto in_group = [&](OpIdx u) { return p.group_of[u] == id; };
    uint64_t live = 0;
    for (StorageIdx s : touched) {
      bool inside = true;
      for (OpIdx b : p.births[s]) inside = inside && in_group(b);
      sim_state[s] = inside ? 1 : 4;  // 1 internal, 2 internal born, 4 external, 8 kept
      sim_left[s] = 0;
      for (OpIdx u : p.users[s]) {
        if (in_group(u))
          ++sim_left[s];
        else if (inside)
          sim_state[s] |= 8;  // used outside the group: never freed here
      }
      if (p.escape[s]) sim_state[s] |= 8;
      if (!inside) {
        gr.G += p.size[s];
        live += p.size[s];
        bool from_sibling = gr.sibling >= 0;
        for (OpIdx b : p.births[s]) from_sibling = from_sibling && p.group_of[b] == gr.sibling;
        if (from_sibling)
          gr.from_head += p.size[s];
        else if (core_end[s] >= 0)
          gr.external.push_back({s, core_end[s]});
      }
    }
    uint64_t peak = live;
    for (OpIdx v : gr.rops) {
      for (StorageIdx s : p.op_touch[v]) {
        if (sim_state[s] == 1 || sim_state[s] == 9) {
          if (std::binary_search(p.births[s].begin(), p.births[s].end(), v)) {
            sim_state[s] |= 2;
            live += p.size[s];
          }
        }
      }
      peak = std::max(peak, live);
      for (StorageIdx s : p.op_touch[v]) {
        if (!std::binary_search(p.users[s].begin(), p.users[s].end(), v)) continue;
        if (--sim_left[s] == 0 && !(sim_state[s] & 8) && (sim_state[s] & 6)) live -= p.size[s];
      }
    }
    for (StorageIdx s : touched) sim_state[s] = 0;
    uint64_t param = 0;
    for (OpIdx v : gr.all) {
      for (TensorIdx t : g.ops[v].outputs) {
        if (g.is_resident(t))
          param = std::max(param, align_up(g.tensors[g.tensors[t].root].size, alignment));
      }
    }
    // The simulated peak is exact for the group alone; alpha x parameter bytes (the paper's
    // estimate) is the fallback for groups whose temporaries are not in the graph.
    const bool makes_memory = std::any_of(touched.begin(), touched.end(), [&](StorageIdx s) {
      return std::all_of(p.births[s].begin(), p.births[s].end(), in_group);
    });
    gr.births = std::any_of(touched.begin(), touched.end(), [&](StorageIdx s) {
      return std::any_of(p.births[s].begin(), p.births[s].end(), in_group);
    });
    // alpha may be up to 1e6: the estimate is capped at 2^62 bytes (the reader's cap on all
    // sizes together), so that the conversion is defined.
    const double estimate = std::min(p.alpha * static_cast<double>(param), 4611686018427387904.0);
    gr.X = makes_memory || gr.part != 0 ? peak : std::max(peak, static_cast<uint64_t>(estimate));
    gr.X = std::max(gr.X, gr.G);
  }
  for (Group& gr : p.groups) {
    if (gr.part != 1) continue;
    Group& tail = p.groups[gr.sibling];
    gr.l = std::min(gr.l, tail.l);
    tail.e = std::max(tail.e, gr.e);
  }
  bool ok = true;
  for (const Group& gr : p.groups) {
    if (gr.e <= gr.l) continue;
    ok = false;
    for (const Group& other : p.groups) {  // the whole update group: both parts
      if (other.component != gr.component) continue;
      for (OpIdx v : other.all) banned[v] = 1;
    }
  }
  return ok;
}

}  // namespace

}  // namespace roam::detail
