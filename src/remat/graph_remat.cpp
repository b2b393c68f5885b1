// Rematerialization of a training graph under a memory budget: see include/roam/remat.h.
#include "roam/remat.h"

#include <algorithm>
#include <optional>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "roam/analysis.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/validate.h"
#include "remat_internal.h"

namespace roam {

using remat_internal::Expanded;
using remat_internal::to_v2;

namespace {

std::string mib_text(uint64_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << static_cast<double>(bytes) / 1048576.0 << " MiB";
  return os.str();
}

// What every candidate shares: the forward ops, the alias structure and who reads what.
struct Structure {
  std::vector<OpIdx> forward;          // forward ops in program order
  std::vector<int32_t> pos;            // per op: position in `forward`, -1 if not forward
  std::vector<TensorIdx> nearest;      // per tensor: nearest tensor along its alias chain that an
                                       // op produces (itself when produced, or a root)
  std::vector<std::vector<OpIdx>> users;  // per produced tensor p: ops reading a tensor t with
                                          // nearest[t] = p, or outputting an alias of one
  std::vector<char> cloneable;         // per op
  std::vector<char> backward_read;     // per op: a non-forward op reads one of its outputs
  std::vector<std::vector<OpIdx>> after_rev;  // per op v: ops w that list v in `after`
};

Structure analyse(const Graph& g) {
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
  return st;
}

// A chain unit or segment: forward positions [begin, end); `boundary` the storage that alone
// carries the forward pass across its end (-1 when none or at the last one).
struct Span {
  int32_t begin = 0, end = 0;
  StorageIdx boundary = -1;
  uint64_t bytes = 0;   // droppable bytes (estimate, for the drop order)
  double cost = 0;      // recompute seconds (estimate, for the drop order)
};

// Units: the forward is cut after position i when at most one storage produced at or before i
// is read by a forward op after i.
std::vector<Span> find_units(const Graph& g, const Structure& st) {
  const auto m = static_cast<int32_t>(st.forward.size());
  std::vector<int64_t> count(m + 1, 0), idsum(m + 1, 0);
  for (StorageIdx s = 0; s < g.num_tensor_storages; ++s) {
    const int32_t p = st.pos[g.storages[s].producer];
    if (p < 0) continue;
    int32_t last = p;
    for (OpIdx u : g.storages[s].users) last = std::max(last, st.pos[u]);
    if (last > p) {
      count[p] += 1;
      count[last] -= 1;
      idsum[p] += s;
      idsum[last] -= s;
    }
  }
  std::vector<Span> units;
  int64_t c = 0, ids = 0;
  int32_t begin = 0;
  for (int32_t i = 0; i < m; ++i) {
    c += count[i];
    ids += idsum[i];
    if (i == m - 1 || c <= 1) {
      Span u;
      u.begin = begin;
      u.end = i + 1;
      u.boundary = (i < m - 1 && c == 1) ? static_cast<StorageIdx>(ids) : -1;
      units.push_back(u);
      begin = i + 1;
    }
  }
  return units;
}

// Estimated droppable bytes and recompute seconds of a span, its boundary kept.
void estimate(const Graph& g, const Structure& st, uint64_t alignment, Span& s) {
  s.bytes = 0;
  s.cost = 0;
  const OpIdx keep = s.boundary >= 0 ? g.storages[s.boundary].producer : -1;
  for (int32_t i = s.begin; i < s.end; ++i) {
    const OpIdx v = st.forward[i];
    if (!st.cloneable[v] || v == keep || !st.backward_read[v]) continue;
    s.cost += g.ops[v].cost.value_or(0.0);
    for (StorageIdx x : g.op_storages[v]) {
      if (g.storages[x].producer == v && g.storages[x].workspace_of < 0) {
        s.bytes += align_up(g.storages[x].size, alignment);
      }
    }
  }
}

struct Candidate {
  std::vector<OpIdx> clones;  // ops recomputed once, program order
  double cost = 0;            // exact recompute seconds
};

// The ops recomputed when `dropped` segments are dropped: the cloneable ops of those segments
// (their boundary producers excepted) whose outputs the backward reads, and the ones those
// read inside the dropped set.
Candidate make_candidate(const Graph& g, const Structure& st, const std::vector<Span>& segments,
                         const std::vector<int32_t>& dropped, const std::vector<double>& ratio,
                         double max_ratio) {
  std::vector<char> in_set(g.ops.size(), 0), needed(g.ops.size(), 0);
  std::vector<OpIdx> set;
  for (int32_t j : dropped) {
    const Span& s = segments[j];
    const OpIdx keep = s.boundary >= 0 ? g.storages[s.boundary].producer : -1;
    for (int32_t i = s.begin; i < s.end; ++i) {
      const OpIdx v = st.forward[i];
      if (st.cloneable[v] && v != keep && ratio[v] <= max_ratio) {
        in_set[v] = 1;
        set.push_back(v);
      }
    }
  }
  std::sort(set.begin(), set.end());
  for (auto it = set.rbegin(); it != set.rend(); ++it) {
    const OpIdx v = *it;
    if (!needed[v] && !st.backward_read[v]) continue;
    needed[v] = 1;
    for (TensorIdx t : g.ops[v].inputs) {
      const OpIdx p = g.tensors[st.nearest[t]].producer;
      if (p >= 0 && in_set[p]) needed[p] = 1;
    }
    for (TensorIdx t : g.ops[v].outputs) {
      if (g.tensors[t].alias_of < 0) continue;
      const OpIdx p = g.tensors[st.nearest[g.tensors[t].alias_of]].producer;
      if (p >= 0 && in_set[p]) needed[p] = 1;
    }
  }
  Candidate c;
  for (OpIdx v : set) {
    if (!needed[v]) continue;
    c.clones.push_back(v);
    c.cost += g.ops[v].cost.value_or(0.0);
  }
  return c;
}

// One way to treat a span of consecutive units: the ops it recomputes, their exact seconds, the
// bytes of stored activations that no longer wait for the backward pass, and all of the span's
// activation bytes (live again during its backward when it recomputes).
struct SpanOption {
  int32_t length = 1;  // units
  std::vector<OpIdx> clones;
  double cost = 0;
  uint64_t dropped = 0;
  uint64_t full = 0;
};

// Rotor's chain with Rockmate's options, one level of recomputation over spans of units: a span
// is recomputed (if at all) just before its backward, when every span before it holds what it
// kept and the span holds all of its activations again. Minimises the recompute seconds subject
// to kept(before the span) + full(span) <= model_budget for every span, by a dynamic program over
// unit boundaries whose state is the Pareto front of (bytes kept so far, seconds). options[i]:
// the options of the spans that start at unit i. Returns the chosen options in order, or an
// empty vector when the model budget is unreachable.
std::vector<const SpanOption*> choose_spans(const std::vector<std::vector<SpanOption>>& options,
                                            uint64_t model_budget) {
  struct State {
    uint64_t kept;
    double cost;
    int32_t from;     // unit boundary of the previous state
    int32_t parent;   // its index in fronts[from]
    const SpanOption* option;
  };
  const size_t m = options.size();
  std::vector<std::vector<State>> fronts(m + 1);
  fronts[0].push_back({0, 0.0, -1, -1, nullptr});
  constexpr size_t kMaxFront = 512;  // thin very long fronts evenly (keeps both ends)
  for (size_t i = 0; i <= m; ++i) {
    auto& f = fronts[i];
    std::sort(f.begin(), f.end(), [](const State& a, const State& b) {
      if (a.kept != b.kept) return a.kept < b.kept;
      return a.cost < b.cost;
    });
    std::vector<State> pareto;  // kept increasing, cost strictly decreasing
    for (const State& st : f) {
      if (pareto.empty() || st.cost < pareto.back().cost) pareto.push_back(st);
    }
    if (pareto.size() > kMaxFront) {
      std::vector<State> thin;
      for (size_t k = 0; k < kMaxFront; ++k) thin.push_back(pareto[k * (pareto.size() - 1) / (kMaxFront - 1)]);
      pareto = std::move(thin);
    }
    f = std::move(pareto);
    if (i == m) break;
    for (size_t k = 0; k < f.size(); ++k) {
      for (const SpanOption& o : options[i]) {
        if (f[k].kept + o.full > model_budget) continue;
        fronts[i + o.length].push_back({f[k].kept + o.full - std::min(o.full, o.dropped), f[k].cost + o.cost,
                                        static_cast<int32_t>(i), static_cast<int32_t>(k), &o});
      }
    }
  }
  if (fronts[m].empty()) return {};
  size_t best = 0;
  for (size_t k = 1; k < fronts[m].size(); ++k) {
    if (fronts[m][k].cost < fronts[m][best].cost) best = k;
  }
  std::vector<const SpanOption*> chosen;
  int32_t i = static_cast<int32_t>(m), k = static_cast<int32_t>(best);
  while (i > 0) {
    const State& st = fronts[i][k];
    chosen.push_back(st.option);
    i = st.from;
    k = st.parent;
  }
  std::reverse(chosen.begin(), chosen.end());
  return chosen;
}

// The graph with one extra op per recomputation (see remat.h, step 3).
Expanded expand(const Graph& g, const Structure& st, const Candidate& cand) {
  const int32_t n = g.num_ops();
  const auto nt = static_cast<TensorIdx>(g.tensors.size());
  std::vector<char> cloned(n, 0);
  for (OpIdx v : cand.clones) cloned[v] = 1;
  // First use: the earliest program position of a backward reader, directly or through other
  // recomputations.
  constexpr int32_t kNever = std::numeric_limits<int32_t>::max();
  std::vector<int32_t> first_use(n, kNever);
  auto reads_of = [&](OpIdx v, auto&& visit) {
    for (TensorIdx t : g.ops[v].outputs) {
      for (OpIdx w : st.users[t]) visit(w);
    }
  };
  for (OpIdx v : cand.clones) {
    reads_of(v, [&](OpIdx w) {
      if (g.ops[w].phase != Phase::kForward) first_use[v] = std::min(first_use[v], w);
    });
  }
  for (auto it = cand.clones.rbegin(); it != cand.clones.rend(); ++it) {
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
  x.meta = g.meta;
  x.tensors = g.tensors;
  x.outputs = g.outputs;
  e.tensor_of.resize(nt);
  e.instance.assign(nt, 0);
  for (TensorIdx t = 0; t < nt; ++t) e.tensor_of[t] = t;
  std::vector<TensorIdx> clone_of(nt, -1);
  std::vector<OpIdx> xop_of_clone(n, -1), xop_of_orig(n, -1);
  // Clones wait for their emission point: bucket by first use.
  std::vector<std::vector<OpIdx>> due(static_cast<size_t>(n) + 1);
  for (OpIdx v : cand.clones) due[std::min(first_use[v], n)].push_back(v);
  auto current = [&](TensorIdx t) {
    const TensorIdx p = st.nearest[t];
    return clone_of[p] >= 0 ? clone_of[p] : t;
  };
  // Per expanded op: ops of g to follow, their original appearance only (`first`), or every
  // appearance (`every`).
  std::vector<std::vector<OpIdx>> after_first, after_every;
  auto emit_clone = [&](OpIdx v) {
    const Op& op = g.ops[v];
    Op c;
    c.id = op.id + "#1";
    c.target = op.target;
    c.phase = Phase::kBackward;
    c.cost = op.cost;
    c.workspace = op.workspace;
    c.recomputable = op.recomputable;
    c.module = op.module;
    for (TensorIdx t : op.inputs) c.inputs.push_back(current(t));
    for (TensorIdx t : op.outputs) {
      Tensor ct = g.tensors[t];
      ct.id = g.tensors[t].id + "#1";
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
    Op op = g.ops[w];
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
  for (TensorIdx t = 0; t < static_cast<TensorIdx>(x.tensors.size()); ++t) x.tensor_index.emplace(x.tensors[t].id, t);
  for (OpIdx k = 0; k < x.num_ops(); ++k) x.op_index.emplace(x.ops[k].id, k);
  finalize_graph(x, "(recomputation graph of " + g.name + ")");
  return e;
}

// The fast plan of an expanded graph: lescea order, the better of llfb and best_fit.
uint64_t quick_peak(const Expanded& e, uint64_t alignment, Order& order, std::vector<uint64_t>& offsets) {
  order = order_lescea(e.graph, alignment);
  const Liveness live = compute_liveness(e.graph, order);
  Layout a = layout_llfb(e.graph, live, alignment);
  Layout b = layout_best_fit(e.graph, live, alignment);
  Layout& best = b.reserved_bytes < a.reserved_bytes ? b : a;
  offsets = std::move(best.offsets);
  return e.graph.resident_bytes + best.reserved_bytes;
}

}  // namespace

namespace remat_internal {

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

}  // namespace remat_internal

BudgetInfeasible::BudgetInfeasible(uint64_t budget_bytes, uint64_t smallest, uint64_t bound)
    : std::runtime_error([&] {
        std::ostringstream os;
        os << "budget " << budget_bytes << " B (" << mib_text(budget_bytes) << ") cannot be met: ";
        if (smallest > 0) {
          os << "the smallest budget roam meets is " << smallest << " B (" << mib_text(smallest) << ")";
        } else {
          os << "no schedule could be planned";
        }
        os << "; no schedule, recomputation included, fits below " << bound << " B ("
           << mib_text(bound) << ", proven)";
        return os.str();
      }()),
      budget(budget_bytes), smallest_budget(smallest), lower_bound(bound) {}

PlanResult plan_with_budget(const Graph& g, const PlanRequest& request, uint64_t budget_bytes,
                            RematStats* stats_out) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  RematStats stats;
  const uint64_t alignment = request.options.alignment;
  PlanResult base = make_plan(g, request);
  base.plan.options["budget_bytes"] = budget_bytes;
  const uint64_t bound = g.resident_bytes + recompute_lower_bound(g, alignment);
  if (base.plan.stats.peak_bytes <= budget_bytes) {
    stats.seconds = elapsed();
    if (stats_out) *stats_out = stats;
    return base;
  }

  // Tiny graphs: every schedule (exact).
  bool exhaustive = false;
  uint64_t exhaustive_smallest = 0;
  const uint64_t rlb = recompute_lower_bound(g, alignment);
  if (auto r = remat_internal::exhaustive_remat(g, request, budget_bytes, rlb, &exhaustive,
                                                &exhaustive_smallest)) {
    r->plan.options["budget_bytes"] = budget_bytes;
    r->plan.options["remat"] = {{"method", "exhaustive"}};
    r->plan.stats.solve_seconds = elapsed();
    stats.seconds = elapsed();
    if (stats_out) *stats_out = stats;
    return *r;
  }
  if (exhaustive) {
    stats.seconds = elapsed();
    if (stats_out) *stats_out = stats;
    throw BudgetInfeasible(budget_bytes,
                           std::min(base.plan.stats.peak_bytes,
                                    exhaustive_smallest ? exhaustive_smallest : UINT64_MAX),
                           bound);
  }

  const Structure st = analyse(g);
  const std::vector<Span> units = find_units(g, st);
  stats.units = units.size();
  // Segmentations into about 1, 2, 4, ... segments of equal droppable bytes, and the prefixes of
  // each one's drop order.
  std::vector<Span> unit_est = units;
  uint64_t total = 0;
  for (Span& u : unit_est) {
    estimate(g, st, alignment, u);
    total += u.bytes;
  }
  // Recompute seconds per byte of each cloneable op's outputs; the cheap-ops options (Rockmate:
  // keep the costly ops' outputs, recompute the cheap ones) drop only ops at or below a
  // quantile of it.
  std::vector<double> ratio(g.ops.size(), 0.0), ratios;
  for (OpIdx v : st.forward) {
    if (!st.cloneable[v]) continue;
    uint64_t bytes = 0;
    for (StorageIdx x : g.op_storages[v]) {
      if (g.storages[x].producer == v && g.storages[x].workspace_of < 0) bytes += g.storages[x].size;
    }
    ratio[v] = g.ops[v].cost.value_or(0.0) / static_cast<double>(bytes + 1);
    if (st.backward_read[v]) ratios.push_back(ratio[v]);
  }
  std::sort(ratios.begin(), ratios.end());
  std::vector<double> thresholds = {std::numeric_limits<double>::infinity()};
  for (double q : {0.75, 0.5, 0.25}) {
    if (ratios.empty()) break;
    const double t = ratios[static_cast<size_t>(q * static_cast<double>(ratios.size() - 1))];
    if (t < thresholds.back()) thresholds.push_back(t);
  }
  std::vector<Candidate> candidates;
  std::set<std::vector<OpIdx>> seen;
  for (double max_ratio : thresholds)
  for (size_t k = 1; k <= 128 && total > 0; k *= 2) {
    std::vector<Span> segs;
    uint64_t acc = 0;
    Span cur;
    cur.begin = unit_est.front().begin;
    for (size_t i = 0; i < unit_est.size(); ++i) {
      acc += unit_est[i].bytes;
      const bool close = i + 1 == unit_est.size() ||
                         (unit_est[i].boundary >= 0 &&
                          static_cast<double>(acc) >= static_cast<double>(total) *
                                                          static_cast<double>(segs.size() + 1) /
                                                          static_cast<double>(k));
      if (!close) continue;
      cur.end = unit_est[i].end;
      cur.boundary = unit_est[i].boundary;
      estimate(g, st, alignment, cur);
      segs.push_back(cur);
      cur = Span{};
      cur.begin = unit_est[i].end;
    }
    std::vector<int32_t> drop_order(segs.size());
    for (size_t j = 0; j < segs.size(); ++j) drop_order[j] = static_cast<int32_t>(j);
    const auto last = static_cast<int32_t>(segs.size()) - 1;
    std::stable_sort(drop_order.begin(), drop_order.end(), [&](int32_t a, int32_t b) {
      if ((a == last) != (b == last)) return b == last;
      // bytes / cost, descending, without dividing (cost may be 0)
      return static_cast<double>(segs[a].bytes) * segs[b].cost >
             static_cast<double>(segs[b].bytes) * segs[a].cost;
    });
    std::vector<int32_t> dropped;
    for (int32_t j : drop_order) {
      if (segs[j].bytes == 0) continue;
      dropped.push_back(j);
      Candidate c = make_candidate(g, st, segs, dropped, ratio, max_ratio);
      if (c.clones.empty() || !seen.insert(c.clones).second) continue;
      candidates.push_back(std::move(c));
    }
    if (k >= units.size()) break;
  }
  // Options per span of up to kMaxSpan units (keep a unit; drop a span's ops at or below each
  // cost-per-byte threshold, its inner boundaries included) and the chain DP at a ladder of model
  // budgets: each answer is a candidate too.
  {
    constexpr size_t kMaxSpan = 12;
    std::vector<uint64_t> full(units.size(), 0);
    for (size_t j = 0; j < units.size(); ++j) {
      for (int32_t i = units[j].begin; i < units[j].end; ++i) {
        const OpIdx v = st.forward[i];
        for (StorageIdx x : g.op_storages[v]) {
          const Storage& sx = g.storages[x];
          if (sx.producer != v || sx.workspace_of >= 0) continue;
          bool backward = false;
          for (OpIdx u : sx.users) backward |= g.ops[u].phase != Phase::kForward;
          if (backward) full[j] += align_up(sx.size, alignment);
        }
      }
    }
    std::vector<std::vector<SpanOption>> options(units.size());
    for (size_t i = 0; i < units.size(); ++i) {
      SpanOption keep;
      keep.full = full[i];
      options[i].push_back(keep);
      uint64_t span_full = 0;
      for (size_t len = 1; len <= kMaxSpan && i + len <= units.size(); ++len) {
        span_full += full[i + len - 1];
        Span seg;
        seg.begin = units[i].begin;
        seg.end = units[i + len - 1].end;
        seg.boundary = units[i + len - 1].boundary;
        std::set<std::vector<OpIdx>> distinct;
        for (double max_ratio : thresholds) {
          Candidate c = make_candidate(g, st, {seg}, {0}, ratio, max_ratio);
          if (c.clones.empty() || !distinct.insert(c.clones).second) continue;
          SpanOption o;
          o.length = static_cast<int32_t>(len);
          o.full = span_full;
          o.cost = c.cost;
          for (OpIdx v : c.clones) {
            for (StorageIdx x : g.op_storages[v]) {
              if (g.storages[x].producer == v && g.storages[x].workspace_of < 0) {
                o.dropped += align_up(g.storages[x].size, alignment);
              }
            }
          }
          o.clones = std::move(c.clones);
          options[i].push_back(std::move(o));
        }
      }
    }
    // The model's range: the lowest model budget any choice meets (by bisection) to no
    // recomputation at all.
    uint64_t hi = 0;
    for (uint64_t f : full) hi += f;
    uint64_t lo = 0, top = hi;
    while (lo < top && top - lo > hi / 1024) {  // to 0.1% of the range
      const uint64_t mid = lo + (top - lo) / 2;
      if (choose_spans(options, mid).empty()) lo = mid + 1; else top = mid;
    }
    constexpr int kLadder = 48;
    for (int i = 0; i <= kLadder && hi > lo; ++i) {
      const uint64_t m = lo + static_cast<uint64_t>(static_cast<double>(hi - lo) * i / kLadder);
      const std::vector<const SpanOption*> chosen = choose_spans(options, m);
      if (chosen.empty()) continue;
      Candidate c;
      for (const SpanOption* o : chosen) {
        c.clones.insert(c.clones.end(), o->clones.begin(), o->clones.end());
        c.cost += o->cost;
      }
      std::sort(c.clones.begin(), c.clones.end());
      if (c.clones.empty() || !seen.insert(c.clones).second) continue;
      candidates.push_back(std::move(c));
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    return a.clones.size() < b.clones.size();
  });
  stats.candidates = candidates.size();

  uint64_t smallest = base.plan.stats.peak_bytes;
  const uint64_t lb = recompute_lower_bound(g, alignment);
  // Plans an expanded candidate properly (roam's order and layout), keeping the quick plan when
  // that is lower.
  auto plan_fully = [&](const Expanded& e, const Order& order, const std::vector<uint64_t>& offsets) {
    Plan quick;
    quick.graph = g.name;
    quick.alignment = alignment;
    quick.order = order;
    quick.offsets = offsets;
    quick.order_method = "lescea";
    quick.layout_method = "best of llfb, best_fit";
    quick.stats = compute_stats(e.graph, order, offsets, alignment, lb, 0.0);
    PlanRequest req = request;
    req.options.time_limit_seconds = std::max(1.0, request.options.time_limit_seconds - elapsed());
    PlanResult full = make_plan(e.graph, req, lb);
    const Plan& best = full.plan.stats.peak_bytes <= quick.stats.peak_bytes ? full.plan : quick;
    return to_v2(g, e, best, lb);
  };
  auto result = [&](Plan plan) {
    PlanResult r;
    r.plan = std::move(plan);
    r.plan.options["budget_bytes"] = budget_bytes;
    r.plan.options["remat"] = {{"units", stats.units},
                               {"candidates", stats.candidates},
                               {"evaluated", stats.evaluated}};
    r.plan.stats.solve_seconds = elapsed();
    r.reserved_bytes = r.plan.stats.arena_bytes;
    stats.seconds = elapsed();
    if (stats_out) *stats_out = stats;
    return r;
  };
  // Candidates whose quick plan misses the budget by a little: roam's own order and layout
  // often land lower (up to ~15% on small chains), so they get a full plan after the loop.
  struct Near {
    size_t index;
    uint64_t quick_peak;
  };
  std::vector<Near> near;
  size_t near_tried = 0;
  // The near misses not yet planned fully, in order, while time is left: the first whose full
  // plan fits; each one's real peak counts for `smallest`.
  auto first_near_that_fits = [&]() -> std::optional<Plan> {
    for (; near_tried < near.size(); ++near_tried) {
      if (elapsed() > request.options.time_limit_seconds) break;
      const Expanded e = expand(g, st, candidates[near[near_tried].index]);
      Order order;
      std::vector<uint64_t> offsets;
      quick_peak(e, alignment, order, offsets);
      Plan plan = plan_fully(e, order, offsets);
      smallest = std::min(smallest, plan.stats.peak_bytes);
      if (plan.stats.peak_bytes <= budget_bytes) return plan;
    }
    return std::nullopt;
  };
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (elapsed() > request.options.time_limit_seconds) break;
    Expanded e;
    try {
      e = expand(g, st, c);
    } catch (const InputError&) {
      continue;  // the recomputation's edges contradict the graph's order: not a schedule
    }
    ++stats.evaluated;
    Order order;
    std::vector<uint64_t> offsets;
    const uint64_t peak = quick_peak(e, alignment, order, offsets);
    smallest = std::min(smallest, peak);
    if (peak > budget_bytes) {
      if (static_cast<double>(peak) <= 1.25 * static_cast<double>(budget_bytes)) near.push_back({i, peak});
      continue;
    }
    // The first candidate (least recompute seconds) whose quick plan fits; the cheaper near
    // misses get their full plan first, so that the recompute seconds never rise with the budget.
    if (std::optional<Plan> cheaper = first_near_that_fits()) return result(std::move(*cheaper));
    return result(plan_fully(e, order, offsets));
  }
  // No quick plan fits: the near misses, least recompute seconds first, planned fully.
  if (std::optional<Plan> plan = first_near_that_fits()) return result(std::move(*plan));
  stats.seconds = elapsed();
  if (stats_out) *stats_out = stats;
  throw BudgetInfeasible(budget_bytes, smallest, bound);
}

}  // namespace roam
