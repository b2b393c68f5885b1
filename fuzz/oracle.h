// The fuzz targets' oracle: an independent recount of a version-1 plan from the graph's raw
// fields (tensors, ops, outputs), sharing nothing with libroam's liveness, analysis or
// validator, and, on graphs of at most kExhaustiveOps ops, the minimum Tp over every valid order
// by enumeration. A finding is reported by finding(): a message on stderr, then abort() (only
// here, in the fuzz harness, so that libFuzzer and the replay test see it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "roam/graph.h"

namespace roamfuzz {

constexpr int kExhaustiveOps = 8;

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "roam fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/// The arena's storages of a graph, recounted: non-resident root tensors of non-zero size, then
/// one per op with a non-zero workspace.
struct Model {
  struct Item {
    int32_t tensor = -1;     // root tensor, -1 for a workspace
    int32_t op = -1;         // producer, or the op owning the workspace
    uint64_t size = 0;       // aligned
    std::vector<int32_t> users;
    bool output = false;
  };
  std::vector<Item> items;
  std::vector<std::vector<int32_t>> deps;  // per op: ops that must run before it
  uint64_t resident = 0;
};

inline int32_t root_of(const roam::Graph& g, int32_t t) {
  size_t steps = 0;
  while (g.tensors[t].alias_of >= 0) {
    t = g.tensors[t].alias_of;
    if (++steps > g.tensors.size()) finding("alias cycle accepted by the reader");
  }
  return t;
}

/// An in-place write of a plan (GRAPH_FORMAT.md plan field `inplace`): tensor `output` is
/// written over tensor `input` by the op producing it.
struct Write {
  int32_t output = -1, input = -1;
};

/// The tensor whose storage t's contents live in: along alias_of, and from an output written in
/// place on to the input it is written over.
inline int32_t holder_of(const roam::Graph& g, int32_t t, const std::vector<int32_t>& over) {
  size_t steps = 0;
  for (;;) {
    if (g.tensors[t].alias_of >= 0) {
      t = g.tensors[t].alias_of;
    } else if (!over.empty() && over[t] >= 0) {
      t = over[t];
    } else {
      return t;
    }
    if (++steps > 2 * g.tensors.size()) finding("alias / in-place cycle accepted");
  }
}

/// `writes`: the plan's in-place writes; an output written in place has no item of its own, its
/// users join the item of the storage it is written over.
inline Model make_model(const roam::Graph& g, uint64_t alignment, const std::vector<Write>& writes = {}) {
  Model m;
  const auto nt = static_cast<int32_t>(g.tensors.size());
  const auto n = static_cast<int32_t>(g.ops.size());
  std::vector<int32_t> producer(nt, -1), item_of(nt, -1), over;
  if (!writes.empty()) {
    over.assign(nt, -1);
    for (const Write& w : writes) over[w.output] = w.input;
  }
  for (int32_t v = 0; v < n; ++v) {
    for (int32_t t : g.ops[v].outputs) producer[t] = v;
  }
  for (int32_t t = 0; t < nt; ++t) {
    const roam::Tensor& x = g.tensors[t];
    if (x.alias_of >= 0 || (!over.empty() && over[t] >= 0)) continue;
    if (x.role != roam::Role::kNone) {
      m.resident += x.size;
      continue;
    }
    if (x.size == 0) continue;
    if (producer[t] < 0) finding("a non-resident root without producer was accepted: " + x.id);
    item_of[t] = static_cast<int32_t>(m.items.size());
    Model::Item it;
    it.tensor = t;
    it.op = producer[t];
    it.size = round_up(x.size, alignment);
    m.items.push_back(it);
  }
  for (int32_t v = 0; v < n; ++v) {
    for (const auto* list : {&g.ops[v].inputs, &g.ops[v].outputs}) {
      for (int32_t t : *list) {
        const int32_t i = item_of[over.empty() ? root_of(g, t) : holder_of(g, t, over)];
        if (i >= 0) m.items[i].users.push_back(v);
      }
    }
  }
  for (int32_t t : g.outputs) {
    const int32_t i = item_of[over.empty() ? root_of(g, t) : holder_of(g, t, over)];
    if (i >= 0) m.items[i].output = true;
  }
  for (int32_t v = 0; v < n; ++v) {
    if (g.ops[v].workspace == 0) continue;
    Model::Item it;
    it.op = v;
    it.size = round_up(g.ops[v].workspace, alignment);
    it.users = {v};
    m.items.push_back(it);
  }
  // Dependencies (GRAPH_FORMAT.md): the nearest producer along the alias chain of every input,
  // and of the base of every aliasing output; `after` edges.
  auto nearest = [&](int32_t t) {
    while (t >= 0 && producer[t] < 0) t = g.tensors[t].alias_of;
    return t < 0 ? -1 : producer[t];
  };
  m.deps.assign(n, {});
  for (int32_t v = 0; v < n; ++v) {
    for (int32_t t : g.ops[v].inputs) {
      const int32_t u = nearest(t);
      if (u >= 0 && u != v) m.deps[v].push_back(u);
      if (u == v) finding("op " + g.ops[v].id + " reads its own output: accepted by the reader");
    }
    for (int32_t t : g.ops[v].outputs) {
      const int32_t u = nearest(g.tensors[t].alias_of);
      if (u >= 0 && u != v) m.deps[v].push_back(u);
    }
    for (int32_t u : g.ops[v].after) m.deps[v].push_back(u);
  }
  // Collective ops keep their program order ("Collectives"): each after the previous one.
  int32_t previous_collective = -1;
  for (int32_t v = 0; v < n; ++v) {
    if (!g.ops[v].collective) continue;
    if (previous_collective >= 0) m.deps[v].push_back(previous_collective);
    previous_collective = v;
  }
  return m;
}

/// "" when `order` (op indices) runs every op once after its dependencies.
inline std::string check_order(const roam::Graph& g, const Model& m, const std::vector<int32_t>& order) {
  const auto n = static_cast<int32_t>(g.ops.size());
  if (static_cast<int32_t>(order.size()) != n) return "order has " + std::to_string(order.size()) + " ops";
  std::vector<int32_t> step(n, -1);
  for (int32_t k = 0; k < n; ++k) {
    if (order[k] < 0 || order[k] >= n || step[order[k]] >= 0) return "order is not a permutation";
    step[order[k]] = k;
  }
  for (int32_t v = 0; v < n; ++v) {
    for (int32_t u : m.deps[v]) {
      if (step[u] >= step[v]) return "op " + g.ops[v].id + " runs before its dependency " + g.ops[u].id;
    }
  }
  return "";
}

struct Interval {
  int32_t first = 0, last = 0;
};

inline std::vector<Interval> intervals(const Model& m, const std::vector<int32_t>& order, int32_t n) {
  std::vector<int32_t> step(n);
  for (int32_t k = 0; k < n; ++k) step[order[k]] = k;
  std::vector<Interval> r(m.items.size());
  for (size_t i = 0; i < m.items.size(); ++i) {
    const auto& it = m.items[i];
    r[i].first = step[it.op];
    r[i].last = r[i].first;
    for (int32_t u : it.users) r[i].last = std::max(r[i].last, step[u]);
    if (it.output) r[i].last = n - 1;
  }
  return r;
}

inline uint64_t tp_of(const Model& m, const std::vector<int32_t>& order, int32_t n) {
  const std::vector<Interval> iv = intervals(m, order, n);
  uint64_t best = 0;
  for (int32_t t = 0; t < n; ++t) {
    uint64_t live = 0;
    for (size_t i = 0; i < iv.size(); ++i) {
      if (iv[i].first <= t && t <= iv[i].last) live += m.items[i].size;
    }
    best = std::max(best, live);
  }
  return best;
}

/// Minimum Tp over every valid order, by enumeration (n <= kExhaustiveOps).
inline uint64_t min_tp(const roam::Graph& g, const Model& m) {
  const auto n = static_cast<int32_t>(g.ops.size());
  std::vector<int32_t> order, indeg(n, 0);
  std::vector<std::vector<int32_t>> succ(n);
  for (int32_t v = 0; v < n; ++v) {
    std::vector<int32_t> d = m.deps[v];
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    indeg[v] = static_cast<int32_t>(d.size());
    for (int32_t u : d) succ[u].push_back(v);
  }
  uint64_t best = UINT64_MAX;
  std::vector<char> done(n, 0);
  auto rec = [&](auto&& self) -> void {
    if (static_cast<int32_t>(order.size()) == n) {
      best = std::min(best, tp_of(m, order, n));
      return;
    }
    for (int32_t v = 0; v < n; ++v) {
      if (done[v] || indeg[v] != 0) continue;
      done[v] = 1;
      order.push_back(v);
      for (int32_t w : succ[v]) --indeg[w];
      self(self);
      for (int32_t w : succ[v]) ++indeg[w];
      order.pop_back();
      done[v] = 0;
    }
  };
  rec(rec);
  return best;
}

/// The recount of a version-1 plan: order, offsets (per model item), stats.
struct Recount {
  std::string problem;  // "" when the plan is valid by the recount
  uint64_t tp = 0, arena = 0, resident = 0;
};

/// `offsets[i]`: the offset of model item i. Checks the order, alignment and every pair of
/// conflicting items for overlap, and computes Tp and the arena.
inline Recount recount(const roam::Graph& g, const Model& m, const std::vector<int32_t>& order,
                       const std::vector<uint64_t>& offsets, uint64_t alignment) {
  Recount r;
  r.resident = m.resident;
  r.problem = check_order(g, m, order);
  if (!r.problem.empty()) return r;
  const auto n = static_cast<int32_t>(g.ops.size());
  const std::vector<Interval> iv = intervals(m, order, n);
  r.tp = tp_of(m, order, n);
  for (size_t i = 0; i < m.items.size(); ++i) {
    if (offsets[i] % alignment != 0) {
      r.problem = "misaligned offset";
      return r;
    }
    if (offsets[i] > (uint64_t{1} << 63) - m.items[i].size) {
      r.problem = "offset out of range";
      return r;
    }
    r.arena = std::max(r.arena, offsets[i] + m.items[i].size);
    for (size_t j = 0; j < i; ++j) {
      const bool conflict = iv[i].first <= iv[j].last && iv[j].first <= iv[i].last;
      const bool overlap = offsets[i] < offsets[j] + m.items[j].size &&
                           offsets[j] < offsets[i] + m.items[i].size;
      if (conflict && overlap) {
        r.problem = "items " + std::to_string(i) + " and " + std::to_string(j) + " overlap";
        return r;
      }
    }
  }
  return r;
}

/// The in-place rule for an order running every op once: a write of `output` over `input` by op
/// v is the last use of the old contents. The contents a tensor names are its *version*: the
/// nearest output written in place along its chain (alias_of, then on to the input a write goes
/// over), or its root. Every op listing a tensor of the version `input` has must run no later
/// than v, no graph output may have it, and v writes at most one output over one version.
/// "" or a problem.
inline std::string check_writes(const roam::Graph& g, const std::vector<int32_t>& order,
                                const std::vector<Write>& writes) {
  if (writes.empty()) return "";
  const auto nt = static_cast<int32_t>(g.tensors.size());
  const auto n = static_cast<int32_t>(g.ops.size());
  std::vector<int32_t> over(nt, -1), producer(nt, -1), step(n, -1);
  for (const Write& w : writes) over[w.output] = w.input;
  for (int32_t v = 0; v < n; ++v) {
    for (int32_t t : g.ops[v].outputs) producer[t] = v;
  }
  for (int32_t k = 0; k < n; ++k) step[order[k]] = k;
  auto version = [&](int32_t t) {
    size_t steps = 0;
    while (g.tensors[t].alias_of >= 0 && over[t] < 0) {
      t = g.tensors[t].alias_of;
      if (++steps > g.tensors.size()) finding("alias cycle accepted");
    }
    return t;  // an output written in place, or a root
  };
  std::vector<int32_t> last(nt, -1);  // per version: the last step that lists one of its tensors
  std::vector<char> kept(nt, 0);
  for (int32_t v = 0; v < n; ++v) {
    for (const auto* list : {&g.ops[v].inputs, &g.ops[v].outputs}) {
      for (int32_t t : *list) last[version(t)] = std::max(last[version(t)], step[v]);
    }
  }
  for (int32_t t : g.outputs) kept[version(t)] = 1;
  std::vector<std::pair<int32_t, int32_t>> seen;  // (op, version written over)
  for (const Write& w : writes) {
    const int32_t v = producer[w.output];
    const int32_t x = version(w.input);
    if (v < 0) return "write of " + g.tensors[w.output].id + " by no op";
    if (kept[x]) return "write over " + g.tensors[w.input].id + " whose contents are a graph output";
    if (last[x] > step[v]) {
      return "write of " + g.tensors[w.output].id + " over " + g.tensors[w.input].id +
             " by " + g.ops[v].id + " before a later use of the old contents";
    }
    for (const auto& [op, y] : seen) {
      if (op == v && y == x) return "two writes of one op over one instance";
    }
    seen.push_back({v, x});
  }
  return "";
}

/// Minimum Tp over every valid order and every set of the graph's permissions (at most one
/// write per output) that the order allows (check_writes); n <= kExhaustiveOps, at most
/// kMaxPermissions permissions (else UINT64_MAX: not computed).
constexpr int kMaxPermissions = 6;
inline uint64_t min_tp_with_writes(const roam::Graph& g, uint64_t alignment) {
  std::vector<Write> perms;
  for (const roam::Op& op : g.ops) {
    for (const auto& [i, j] : op.inplace) perms.push_back({op.outputs[j], op.inputs[i]});
  }
  if (perms.size() > static_cast<size_t>(kMaxPermissions)) return UINT64_MAX;
  const Model plain = make_model(g, alignment);
  const auto n = static_cast<int32_t>(g.ops.size());
  std::vector<Model> models;
  std::vector<std::vector<Write>> sets;
  for (uint32_t mask = 0; mask < (1u << perms.size()); ++mask) {
    std::vector<Write> w;
    bool ok = true;
    for (size_t k = 0; k < perms.size(); ++k) {
      if (!(mask >> k & 1)) continue;
      for (const Write& x : w) ok = ok && x.output != perms[k].output;
      w.push_back(perms[k]);
    }
    if (!ok) continue;
    models.push_back(make_model(g, alignment, w));
    sets.push_back(std::move(w));
  }
  std::vector<int32_t> order, indeg(n, 0);
  std::vector<std::vector<int32_t>> succ(n);
  for (int32_t v = 0; v < n; ++v) {
    std::vector<int32_t> d = plain.deps[v];
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    indeg[v] = static_cast<int32_t>(d.size());
    for (int32_t u : d) succ[u].push_back(v);
  }
  uint64_t best = UINT64_MAX;
  auto rec = [&](auto&& self) -> void {
    if (static_cast<int32_t>(order.size()) == n) {
      for (size_t k = 0; k < sets.size(); ++k) {
        if (check_writes(g, order, sets[k]).empty()) best = std::min(best, tp_of(models[k], order, n));
      }
      return;
    }
    for (int32_t v = 0; v < n; ++v) {
      if (indeg[v] != 0 || std::find(order.begin(), order.end(), v) != order.end()) continue;
      order.push_back(v);
      for (int32_t w : succ[v]) --indeg[w];
      self(self);
      for (int32_t w : succ[v]) ++indeg[w];
      order.pop_back();
    }
  };
  rec(rec);
  return best;
}

}  // namespace roamfuzz

namespace roamfuzz {

/// The plan's in-place writes (field `inplace`, output id -> input id); "" or a problem.
inline std::string read_writes(const roam::Graph& g, const nlohmann::json& doc, std::vector<Write>& writes) {
  writes.clear();
  if (!doc.is_object() || !doc.contains("inplace")) return "";
  const nlohmann::json& w = doc["inplace"];
  if (!w.is_object()) return "inplace not an object";
  for (const auto& [out, in] : w.items()) {
    if (!in.is_string()) return "inplace value not a string";
    auto o = g.tensor_index.find(out);
    auto i = g.tensor_index.find(in.get<std::string>());
    if (o == g.tensor_index.end() || i == g.tensor_index.end()) return "inplace names an unknown tensor";
    writes.push_back({o->second, i->second});
  }
  return "";
}

/// Reads a plan document's order and offsets in the model's terms. "" or a problem.
inline std::string read_plan(const roam::Graph& g, const Model& m, const nlohmann::json& doc,
                             std::vector<int32_t>& order, std::vector<uint64_t>& offsets) {
  order.clear();
  offsets.assign(m.items.size(), 0);
  if (!doc.is_object() || !doc.contains("order") || !doc["order"].is_array()) return "no order";
  for (const auto& id : doc["order"]) {
    if (!id.is_string()) return "order entry not a string";
    auto it = g.op_index.find(id.get<std::string>());
    if (it == g.op_index.end()) return "unknown op in order";
    order.push_back(it->second);
  }
  const nlohmann::json* offs = doc.contains("offsets") ? &doc["offsets"] : nullptr;
  const nlohmann::json* ws = doc.contains("workspace_offsets") ? &doc["workspace_offsets"] : nullptr;
  for (size_t i = 0; i < m.items.size(); ++i) {
    const auto& it = m.items[i];
    const nlohmann::json* v = nullptr;
    if (it.tensor >= 0) {
      const std::string& id = g.tensors[it.tensor].id;
      if (offs != nullptr && offs->is_object() && offs->contains(id)) v = &(*offs)[id];
    } else {
      const std::string& id = g.ops[it.op].id;
      if (ws != nullptr && ws->is_object() && ws->contains(id) && (*ws)[id].is_array() &&
          (*ws)[id].size() == 1) {
        v = &(*ws)[id][0];
      }
    }
    if (v == nullptr || !v->is_number_unsigned()) {
      if (v != nullptr && v->is_number_integer() && v->get<int64_t>() >= 0) {
        offsets[i] = static_cast<uint64_t>(v->get<int64_t>());
        continue;
      }
      return "no offset for item " + std::to_string(i);
    }
    offsets[i] = v->get<uint64_t>();
  }
  return "";
}

/// The plan field `collectives` against the graph's raw ops: absent when no op has `collective`,
/// else the ids of those ops in file order, and the order runs them so. "" or a problem.
inline std::string check_collectives(const roam::Graph& g, const nlohmann::json& doc) {
  nlohmann::json expect = nlohmann::json::array();
  for (const roam::Op& op : g.ops) {
    if (op.collective) expect.push_back(op.id);
  }
  if (expect.empty()) return doc.contains("collectives") ? "collectives on a graph without any" : "";
  if (!doc.contains("collectives")) return "no collectives on a graph with collective ops";
  if (doc["collectives"] != expect) return "collectives not in program order: " + doc["collectives"].dump();
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& id : doc["order"]) {
    auto it = g.op_index.find(id.get<std::string>());
    if (it != g.op_index.end() && g.ops[it->second].collective &&
        std::find(runs.begin(), runs.end(), id) == runs.end()) {
      runs.push_back(id);
    }
  }
  if (runs != expect) return "order runs the collectives as " + runs.dump();
  return "";
}

inline uint64_t stat(const nlohmann::json& doc, const char* key) {
  if (!doc.contains("stats") || !doc["stats"].is_object() || !doc["stats"].contains(key)) return UINT64_MAX;
  const auto& v = doc["stats"][key];
  return v.is_number_unsigned() ? v.get<uint64_t>()
         : v.is_number_integer() && v.get<int64_t>() >= 0 ? static_cast<uint64_t>(v.get<int64_t>())
                                                           : UINT64_MAX;
}

}  // namespace roamfuzz
