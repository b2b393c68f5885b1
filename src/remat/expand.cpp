// The expanded graph of a recomputing schedule (one op per appearance, one tensor per
// instance) and its conversion to a version-2 plan: see remat_internal.h and remat.h step 3.
#include <algorithm>
#include <limits>

#include "roam/analysis.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "remat_internal.h"

namespace roam::remat_internal {

Structure analyse(const Graph& g, const std::vector<InplacePair>& forced) {
  Structure st;
  const int32_t n = g.num_ops();
  const auto nt = static_cast<TensorIdx>(g.tensors.size());
  st.pos.assign(n, -1);
  for (OpIdx v = 0; v < n; ++v) {
    if (g.ops[v].phase == Phase::kForward) {
      st.pos[v] = static_cast<int32_t>(st.forward.size());
      st.forward.push_back(v);
    }
  }
  st.nearest.assign(nt, -1);
  for (TensorIdx t = 0; t < nt; ++t) {
    std::vector<TensorIdx> walked;
    TensorIdx u = t;
    while (st.nearest[u] < 0 && g.tensors[u].producer < 0 && g.tensors[u].alias_of >= 0) {
      walked.push_back(u);
      u = g.tensors[u].alias_of;
    }
    const TensorIdx found = st.nearest[u] >= 0 ? st.nearest[u] : u;
    st.nearest[u] = found;
    for (TensorIdx w : walked) st.nearest[w] = found;
  }
  st.users.assign(nt, {});
  st.backward_read.assign(n, 0);
  st.after_rev.assign(n, {});
  for (OpIdx w = 0; w < n; ++w) {
    auto touch = [&](TensorIdx t) {
      const TensorIdx p = st.nearest[t];
      if (g.tensors[p].producer < 0 || g.tensors[p].producer == w) return;
      st.users[p].push_back(w);
      if (g.ops[w].phase != Phase::kForward) st.backward_read[g.tensors[p].producer] = 1;
    };
    for (TensorIdx t : g.ops[w].inputs) touch(t);
    for (TensorIdx t : g.ops[w].outputs) {
      if (g.tensors[t].alias_of >= 0) touch(g.tensors[t].alias_of);
    }
    for (OpIdx v : g.ops[w].after) st.after_rev[v].push_back(w);
  }
  for (auto& u : st.users) {
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
  }
  // Cloneable: a recomputable forward op that outputs no graph output, none of whose root
  // outputs is written in place by an op that cannot run again (the old instance would stay
  // live through that alias, so dropping it saves nothing), and that no forward op must follow.
  std::vector<char> written(nt, 0), graph_output(nt, 0);
  for (OpIdx w = 0; w < n; ++w) {
    if (g.ops[w].recomputable) continue;
    for (TensorIdx t : g.ops[w].outputs) {
      if (g.tensors[t].alias_of >= 0) written[g.tensors[t].root] = 1;
    }
  }
  for (TensorIdx t : g.outputs) graph_output[g.tensors[t].root] = 1;
  st.cloneable.assign(n, 0);
  for (OpIdx v : st.forward) {
    bool ok = g.ops[v].recomputable;
    for (TensorIdx t : g.ops[v].outputs) {
      if (graph_output[g.tensors[t].root] || (g.tensors[t].alias_of < 0 && written[t])) ok = false;
    }
    // An op that a forward op must follow (`after`: it overwrites what v reads) cannot run
    // again in the backward pass: every appearance of v precedes that op.
    for (OpIdx w : st.after_rev[v]) {
      if (g.ops[w].phase == Phase::kForward) ok = false;
    }
    st.cloneable[v] = ok;
  }
  // An in-place write runs again only over a new instance of its input: the producers along the
  // input's alias chain run again with it (remat_internal.h, Structure::clone_with).
  st.clone_with.assign(n, {});
  for (const InplacePair& p : forced) {
    auto& with = st.clone_with[p.op];
    for (TensorIdx x = st.nearest[p.input]; x >= 0;) {
      const OpIdx w = g.tensors[x].producer;
      if (w >= 0 && w != p.op) with.push_back(w);
      const TensorIdx base = g.tensors[x].alias_of;
      x = base >= 0 ? st.nearest[base] : -1;
    }
    std::sort(with.begin(), with.end());
    with.erase(std::unique(with.begin(), with.end()), with.end());
  }
  for (OpIdx v : st.forward) {  // requirements precede v in program order
    for (OpIdx r : st.clone_with[v]) st.cloneable[v] = st.cloneable[v] && st.cloneable[r];
  }
  return st;
}

// The version-2 plan of g from a plan of the expanded graph.
Plan to_v2(const Graph& g, const Expanded& e, const Plan& xp, uint64_t lower_bound) {
  const Graph& x = e.graph;
  Plan p;
  p.graph = g.name;
  p.alignment = xp.alignment;
  p.version = 2;
  for (OpIdx k : xp.order) p.order.push_back(e.op_of[k]);
  p.offsets.assign(g.storages.size(), 0);
  p.recompute_offsets.assign(g.storages.size(), {});
  std::vector<StorageIdx> workspace_storage(g.ops.size(), -1);
  for (StorageIdx s = g.num_tensor_storages; s < g.num_storages(); ++s) {
    workspace_storage[g.storages[s].workspace_of] = s;
  }
  for (StorageIdx s = 0; s < x.num_storages(); ++s) {
    const Storage& st = x.storages[s];
    StorageIdx target;
    int32_t instance;
    if (st.workspace_of >= 0) {
      target = workspace_storage[e.op_of[st.workspace_of]];
      instance = e.appearance[st.workspace_of];
    } else {
      target = g.storage_of[e.tensor_of[st.root]];
      instance = e.instance[st.root];
    }
    if (instance == 0) {
      p.offsets[target] = xp.offsets[s];
    } else {
      auto& later = p.recompute_offsets[target];
      if (later.size() < static_cast<size_t>(instance)) later.resize(instance, 0);
      later[instance - 1] = xp.offsets[s];
    }
  }
  p.stats = xp.stats;
  p.stats.resident_bytes = g.resident_bytes;
  p.stats.peak_bytes = g.resident_bytes + p.stats.arena_bytes;
  p.stats.lower_bound_bytes = lower_bound;
  for (const Op& op : g.ops) p.stats.compute_seconds += op.cost.value_or(0.0);
  for (size_t k = 0; k < e.op_of.size(); ++k) {
    if (e.appearance[k] == 0) continue;
    ++p.stats.recomputations;
    p.stats.recompute_seconds += g.ops[e.op_of[k]].cost.value_or(0.0);
  }
  p.order_method = xp.order_method;
  p.layout_method = xp.layout_method;
  p.options = xp.options;
  return p;
}

// The graph with one extra op per recomputation (see remat.h, step 3).
Expanded expand(const Graph& g, const Structure& st, const std::vector<OpIdx>& clones,
                bool names) {
  const int32_t n = g.num_ops();
  const auto nt = static_cast<TensorIdx>(g.tensors.size());
  std::vector<char> cloned(n, 0);
  for (OpIdx v : clones) cloned[v] = 1;
  // First use: the earliest program position of a backward reader, directly or through other
  // recomputations.
  constexpr int32_t kNever = std::numeric_limits<int32_t>::max();
  std::vector<int32_t> first_use(n, kNever);
  auto reads_of = [&](OpIdx v, auto&& visit) {
    for (TensorIdx t : g.ops[v].outputs) {
      for (OpIdx w : st.users[t]) visit(w);
    }
  };
  for (OpIdx v : clones) {
    reads_of(v, [&](OpIdx w) {
      if (g.ops[w].phase != Phase::kForward) first_use[v] = std::min(first_use[v], w);
    });
  }
  for (auto it = clones.rbegin(); it != clones.rend(); ++it) {
    const OpIdx v = *it;
    for (TensorIdx t : g.ops[v].inputs) {
      const OpIdx p = g.tensors[st.nearest[t]].producer;
      if (p >= 0 && cloned[p]) first_use[p] = std::min(first_use[p], first_use[v]);
    }
    for (TensorIdx t : g.ops[v].outputs) {
      if (g.tensors[t].alias_of < 0) continue;
      const OpIdx p = g.tensors[st.nearest[g.tensors[t].alias_of]].producer;
      if (p >= 0 && cloned[p]) first_use[p] = std::min(first_use[p], first_use[v]);
    }
  }

  Expanded e;
  Graph& x = e.graph;
  x.name = g.name;
  // Without names: the tensors' and ops' numbers only (what the quick plan, liveness and cuts
  // read); ids, names, dtypes, shapes, targets, modules, meta and the id maps stay empty.
  auto bare_tensor = [](const Tensor& t) {
    Tensor b;
    b.size = t.size;
    b.role = t.role;
    b.alias_of = t.alias_of;
    return b;
  };
  auto bare_op = [](const Op& op) {
    Op b;
    b.phase = op.phase;
    b.inputs = op.inputs;
    b.outputs = op.outputs;
    b.after = op.after;
    b.cost = op.cost;
    b.workspace = op.workspace;
    b.recomputable = op.recomputable;
    b.collective = op.collective;  // collectives keep their order in the expanded graph too
    return b;
  };
  if (names) {
    x.meta = g.meta;
    x.tensors = g.tensors;
  } else {
    for (const Tensor& t : g.tensors) x.tensors.push_back(bare_tensor(t));
  }
  x.outputs = g.outputs;
  size_t clone_outputs = 0;
  for (OpIdx v : clones) clone_outputs += g.ops[v].outputs.size();
  x.tensors.reserve(g.tensors.size() + clone_outputs);
  x.ops.reserve(g.ops.size() + clones.size());
  e.op_of.reserve(g.ops.size() + clones.size());
  e.appearance.reserve(g.ops.size() + clones.size());
  e.tensor_of.reserve(g.tensors.size() + clone_outputs);
  e.instance.reserve(g.tensors.size() + clone_outputs);
  e.tensor_of.resize(nt);
  e.instance.assign(nt, 0);
  for (TensorIdx t = 0; t < nt; ++t) e.tensor_of[t] = t;
  std::vector<TensorIdx> clone_of(nt, -1);
  std::vector<OpIdx> xop_of_clone(n, -1), xop_of_orig(n, -1);
  // Clones wait for their emission point: bucket by first use.
  std::vector<std::vector<OpIdx>> due(static_cast<size_t>(n) + 1);
  for (OpIdx v : clones) due[std::min(first_use[v], n)].push_back(v);
  auto current = [&](TensorIdx t) {
    const TensorIdx p = st.nearest[t];
    return clone_of[p] >= 0 ? clone_of[p] : t;
  };
  // Per expanded op: ops of g to follow, their original appearance only (`first`), or every
  // appearance (`every`).
  std::vector<std::vector<OpIdx>> after_first, after_every;
  after_first.reserve(g.ops.size() + clones.size());
  after_every.reserve(g.ops.size() + clones.size());
  auto emit_clone = [&](OpIdx v) {
    const Op& op = g.ops[v];
    Op c;
    if (names) {
      c.id = op.id + "#1";
      c.target = op.target;
      c.module = op.module;
    }
    c.phase = Phase::kBackward;
    c.cost = op.cost;
    c.workspace = op.workspace;
    c.recomputable = op.recomputable;
    for (TensorIdx t : op.inputs) c.inputs.push_back(current(t));
    for (TensorIdx t : op.outputs) {
      Tensor ct = names ? g.tensors[t] : bare_tensor(g.tensors[t]);
      if (names) ct.id = g.tensors[t].id + "#1";
      ct.producer = -1;
      ct.role = Role::kNone;
      ct.alias_of = g.tensors[t].alias_of >= 0 ? current(g.tensors[t].alias_of) : -1;
      clone_of[t] = static_cast<TensorIdx>(x.tensors.size());
      c.outputs.push_back(clone_of[t]);
      x.tensors.push_back(std::move(ct));
      e.tensor_of.push_back(t);
      e.instance.push_back(1);
    }
    xop_of_clone[v] = x.num_ops();
    x.ops.push_back(std::move(c));
    e.op_of.push_back(v);
    e.appearance.push_back(1);
    std::vector<OpIdx> first;
    // The old instance's readers (the forward ones; the others are rewired) run first.
    for (TensorIdx t : op.outputs) {
      for (OpIdx w : st.users[t]) {
        if (g.ops[w].phase == Phase::kForward && w != v) first.push_back(w);
      }
    }
    if (first_use[v] != kNever && first_use[v] > 0) first.push_back(first_use[v] - 1);
    after_first.push_back(std::move(first));
    after_every.push_back(op.after);
  };
  for (OpIdx w = 0; w <= n; ++w) {
    for (OpIdx v : due[w]) emit_clone(v);
    if (w == n) break;
    Op op = names ? g.ops[w] : bare_op(g.ops[w]);
    if (op.phase != Phase::kForward) {
      for (TensorIdx& t : op.inputs) t = current(t);
      for (TensorIdx t : op.outputs) {
        if (g.tensors[t].alias_of >= 0) x.tensors[t].alias_of = current(g.tensors[t].alias_of);
      }
    }
    xop_of_orig[w] = x.num_ops();
    after_every.push_back(std::move(op.after));
    after_first.emplace_back();
    op.after.clear();
    x.ops.push_back(std::move(op));
    e.op_of.push_back(w);
    e.appearance.push_back(0);
  }
  // `after` in expanded indices: every appearance of v before every appearance of w.
  for (OpIdx k = 0; k < x.num_ops(); ++k) {
    auto& dst = x.ops[k].after;
    for (OpIdx a : after_first[k]) dst.push_back(xop_of_orig[a]);
    for (OpIdx a : after_every[k]) {
      dst.push_back(xop_of_orig[a]);
      if (cloned[a]) dst.push_back(xop_of_clone[a]);
    }
    const OpIdx v = e.op_of[k];
    if (e.appearance[k] == 1) {  // w listing v in `after` follows v's recomputation too
      for (OpIdx w : st.after_rev[v]) {
        x.ops[xop_of_orig[w]].after.push_back(k);
        if (cloned[w]) x.ops[xop_of_clone[w]].after.push_back(k);
      }
    }
  }
  for (Op& op : x.ops) {
    std::sort(op.after.begin(), op.after.end());
    op.after.erase(std::unique(op.after.begin(), op.after.end()), op.after.end());
  }
  if (names) {
    for (TensorIdx t = 0; t < static_cast<TensorIdx>(x.tensors.size()); ++t) x.tensor_index.emplace(x.tensors[t].id, t);
    for (OpIdx k = 0; k < x.num_ops(); ++k) x.op_index.emplace(x.ops[k].id, k);
  }
  finalize_graph(x, "(recomputation graph of " + g.name + ")");
  return e;
}

// The fast plan of an expanded graph: lescea order, the better of llfb and best_fit.
Order quick_order(const Expanded& e, uint64_t alignment) { return order_lescea(e.graph, alignment); }

uint64_t quick_layout(const Expanded& e, uint64_t alignment, const Order& order,
                      std::vector<uint64_t>& offsets, LayoutDeadline deadline) {
  const Liveness live = compute_liveness(e.graph, order);
  Layout a = layout_llfb(e.graph, live, alignment, deadline);
  Layout b = layout_best_fit(e.graph, live, alignment, deadline);
  Layout& best = b.reserved_bytes < a.reserved_bytes ? b : a;
  offsets = std::move(best.offsets);
  return best.reserved_bytes;
}

uint64_t quick_peak(const Expanded& e, uint64_t alignment, Order& order, std::vector<uint64_t>& offsets) {
  order = quick_order(e, alignment);
  return e.graph.resident_bytes + quick_layout(e, alignment, order, offsets);
}

}  // namespace roam::remat_internal
