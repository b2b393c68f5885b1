// Independent plan validator: recounts everything from the graph, the order and the offsets.
// It uses the graph reader (dependency edges, storages), liveness and the lower bound, and none
// of the planners' code.
#include "roam/validate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <unordered_map>

#include "roam/analysis.h"
#include "roam/inplace.h"

namespace roam {

namespace {

constexpr size_t kMaxProblems = 10;
// Bounds that keep offset + aligned size far from uint64 overflow (graph sizes total < 2^62).
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr uint64_t kMaxOffset = uint64_t{1} << 62;

struct Reader {
  const std::string& file;
  [[noreturn]] void fail(const std::string& field, const std::string& id, const std::string& msg) const {
    throw InputError(file, field, id, msg);
  }
  const nlohmann::json& get(const nlohmann::json& obj, const char* key, const std::string& prefix = "") const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(prefix + key, "", "missing required field");
    return *it;
  }
  uint64_t get_u64(const nlohmann::json& v, const std::string& field, const std::string& id) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
    fail(field, id, "must be a non-negative integer, got " + v.dump());
  }
};

}  // namespace

uint64_t recompute_lower_bound(const Graph& g, uint64_t alignment) {
  // Each op's own storages (lower_bound_per_op with no op listed for the must-live search), less
  // its in-place savings at its step (analysis.h, InplaceBoundTerms): at every appearance of v
  // its inputs and outputs are distinct instances except where v itself writes an output over
  // an input (an earlier write over one of them would make v read stale contents).
  const int32_t n = g.num_ops();
  const std::vector<uint64_t> own = lower_bound_per_op(g, alignment, {});
  uint64_t bound = own.empty() ? 0 : *std::max_element(own.begin(), own.end());
  // The graph outputs are live at the last step, each in an instance of its own (none is written
  // over: a graph output's contents survive the step), of at least its bound size.
  const InplaceBoundTerms terms = inplace_bound_terms(g, alignment);
  uint64_t outputs = 0;
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    if (!g.storages[s].graph_output) continue;
    outputs += terms.storage_bytes.empty() ? align_up(g.storages[s].size, alignment) : terms.storage_bytes[s];
  }
  bound = std::max(bound, outputs);
  // Storages no schedule can free early: the outputs of an op that is not recomputable have one
  // instance, made by its only run. Such a storage, born by an ancestor of op v (or v) and used
  // by a descendant of v (or a graph output), is live at v's first appearance in every schedule:
  // the descendant's every appearance follows it and reads that instance. So at that step v's
  // own storages and those crossing storages are all live (lower_bound_per_op with only them
  // counted where they cross; distinct bytes, see InplaceBoundTerms).
  std::vector<char> kept(g.storages.size(), 0);
  uint64_t kept_total = 0;
  for (StorageIdx s = 0; s < g.num_tensor_storages; ++s) {
    const Storage& st = g.storages[s];
    if (st.producer < 0 || g.ops[st.producer].recomputable || st.size == 0) continue;
    kept[s] = 1;
    kept_total += align_up(st.size, alignment);
  }
  if (kept_total == 0) return bound;
  // An upper bound on that value per op, to visit the ops that can raise the bound first and
  // stop at the first that cannot: v's own aligned bytes plus the kept storages live at v in
  // program order (every order holds the crossing ones at v; without a topological program
  // order, all kept bytes).
  Order program(n);
  for (OpIdx v = 0; v < n; ++v) program[v] = v;
  std::vector<uint64_t> upper(n, kept_total);
  if (is_topological(g, program)) {
    std::vector<int64_t> delta(static_cast<size_t>(n) + 1, 0);
    for (StorageIdx s = 0; s < g.num_tensor_storages; ++s) {
      if (!kept[s]) continue;
      const Storage& st = g.storages[s];
      const OpIdx last = st.graph_output ? n - 1 : std::max(st.producer, st.users.empty() ? st.producer : st.users.back());
      const auto size = static_cast<int64_t>(align_up(st.size, alignment));
      delta[st.producer] += size;
      delta[last + 1] -= size;
    }
    int64_t live = 0;
    for (OpIdx v = 0; v < n; ++v) {
      live += delta[v];
      upper[v] = static_cast<uint64_t>(live);
    }
  }
  for (OpIdx v = 0; v < n; ++v) {
    for (StorageIdx s : g.op_storages[v]) upper[v] += align_up(g.storages[s].size, alignment);
  }
  std::vector<OpIdx> by_upper(n);
  for (OpIdx v = 0; v < n; ++v) by_upper[v] = v;
  std::stable_sort(by_upper.begin(), by_upper.end(),
                   [&](OpIdx a, OpIdx b) { return upper[a] > upper[b]; });
  // Work budget (bitset words, as the cut bound's must-live start): the ops visited so far
  // give a valid bound when it stops early.
  size_t edges = 0;
  for (OpIdx v = 0; v < n; ++v) edges += g.succs[v].size();
  for (const Storage& st : g.storages) edges += st.users.size();
  constexpr double kWorkWords = 2.5e8;
  size_t next = 0, chunk = 64;
  double work = 0;
  while (next < by_upper.size() && upper[by_upper[next]] > bound && work < kWorkWords) {
    std::vector<OpIdx> cols;
    for (; next < by_upper.size() && cols.size() < chunk && upper[by_upper[next]] > bound; ++next) {
      cols.push_back(by_upper[next]);
    }
    const std::vector<uint64_t> must = lower_bound_per_op(g, alignment, cols, kept);
    for (OpIdx v : cols) bound = std::max(bound, must[v]);
    work += static_cast<double>(edges + static_cast<size_t>(n)) * static_cast<double>(cols.size()) / 64.0;
    chunk *= 4;
  }
  return bound;
}

InstanceGraph instance_graph(const Graph& g, const std::vector<OpIdx>& schedule,
                             const std::vector<InplacePair>& inplace) {
  InstanceGraph ig;
  auto problem = [&](const std::string& msg) {
    ++ig.problem_count;
    if (ig.problems.size() < kMaxProblems) ig.problems.push_back(msg);
  };
  const int32_t n = g.num_ops();
  const auto nt = static_cast<TensorIdx>(g.tensors.size());
  // A tensor that no op produces follows its alias chain up to the nearest tensor that an op
  // produces (or to a resident root): nearest[t]. Computed once, iteratively.
  std::vector<TensorIdx> nearest(nt, -1);
  for (TensorIdx t = 0; t < nt; ++t) {
    std::vector<TensorIdx> walked;
    TensorIdx u = t;
    while (nearest[u] < 0 && g.tensors[u].producer < 0 && g.tensors[u].alias_of >= 0) {
      walked.push_back(u);
      u = g.tensors[u].alias_of;
    }
    const TensorIdx found = nearest[u] >= 0 ? nearest[u] : u;
    nearest[u] = found;
    for (TensorIdx w : walked) nearest[w] = found;
  }
  // written_over[t]: the input an in-place output t is written over (plan field `inplace`).
  std::vector<TensorIdx> written_over(nt, -1);
  for (const InplacePair& p : inplace) written_over[p.output] = p.input;
  // binding[t] for a tensor an op produces (or a root): the instance-graph root tensor it is
  // bound to; kUnbound before its producer ran; kResident for tensors of resident storage.
  // Versions: an in-place write bumps its instance's version; each binding records the version
  // it was made at, and a binding of an older version is stale (its contents were overwritten).
  constexpr TensorIdx kUnbound = -1, kResident = -2;
  std::vector<TensorIdx> binding(nt, kUnbound);
  std::vector<int32_t> bound_version(nt, 0), bound_at(nt, -1);
  for (TensorIdx t = 0; t < nt; ++t) {
    if (g.tensors[t].producer < 0 && g.is_resident(t)) binding[t] = kResident;
  }
  auto bound = [&](TensorIdx t) { return binding[nearest[t]]; };
  Graph& x = ig.graph;
  x.name = g.name;
  // Per instance: its version and the last in-place write on it (step, output tensor of g).
  std::vector<int32_t> version;
  std::vector<std::pair<int32_t, TensorIdx>> writer;
  auto stale = [&](TensorIdx t) {
    const TensorIdx b = bound(t);
    return b >= 0 && bound_version[nearest[t]] != version[b];
  };
  auto overwritten = [&](TensorIdx t) {
    const auto [step, out] = writer[bound(t)];
    const OpIdx w = schedule[static_cast<size_t>(step)];
    return "op '" + g.ops[w].id + "' (order[" + std::to_string(step) + "]) wrote '" +
           g.tensors[out].id + "' over it in place (plan field inplace)";
  };
  std::vector<int32_t> runs(n, 0), first(n, -1), last(n, -1);
  std::vector<TensorIdx> written_here;  // instances written in place by this appearance
  for (size_t k = 0; k < schedule.size(); ++k) {
    const OpIdx v = schedule[k];
    const Op& op = g.ops[v];
    const int32_t app = runs[v]++;
    const std::string at = "order[" + std::to_string(k) + "]: op '" + op.id + "'";
    if (app == 1 && op.collective) {
      problem(at + " runs again but is a collective op (collective kind '" + op.collective->kind +
              "'), which runs exactly once: a second run would issue one more collective on this "
              "rank only");
    } else if (app == 1 && !op.recomputable) {
      problem(at + " runs again but is not recomputable");
    }
    if (first[v] < 0) first[v] = static_cast<int32_t>(k);
    last[v] = static_cast<int32_t>(k);
    Op a;
    a.id = app == 0 ? op.id : op.id + "#" + std::to_string(app);
    a.target = op.target;
    a.phase = op.phase;
    a.cost = op.cost;
    a.workspace = op.workspace;
    a.recomputable = op.recomputable;
    a.module = op.module;
    a.collective = op.collective;  // (one appearance each once the schedule is valid)
    const auto here = static_cast<OpIdx>(x.ops.size());
    auto use = [&](TensorIdx b) {  // reads or binds instance b
      if (b >= 0 && x.tensors[b].producer != here) a.inputs.push_back(b);
    };
    for (TensorIdx t : op.inputs) {
      const TensorIdx b = bound(t);
      if (b == kUnbound) {
        problem(at + " reads tensor '" + g.tensors[t].id + "' before any appearance produced it");
      } else if (stale(t)) {
        problem(at + " reads tensor '" + g.tensors[t].id + "' after " + overwritten(t) +
                ": an in-place write must be the last read of the old contents");
      }
      use(b);
    }
    // Outputs written in place (bound to the instance their input is bound to, at the version
    // this appearance's write makes), then new instances, then aliases (of either, or of
    // anything bound before: an alias keeps the version of what it views, so a view of the
    // old contents made here is stale for every later reader). The versions are bumped last.
    written_here.clear();
    for (TensorIdx t : op.outputs) {
      if (written_over[t] < 0) continue;
      const TensorIdx u = written_over[t];
      const TensorIdx b = bound(u);
      binding[t] = b;
      bound_at[t] = static_cast<int32_t>(k);
      if (b < 0) continue;  // unbound (a problem above) or resident (refused by the reader)
      if (std::find(written_here.begin(), written_here.end(), b) != written_here.end()) {
        problem(at + " writes two outputs over one instance (the one of '" + g.tensors[u].id +
                "'), '" + g.tensors[t].id + "' and another (plan field inplace)");
        continue;
      }
      written_here.push_back(b);
      writer[b] = {static_cast<int32_t>(k), t};
      bound_version[t] = version[b] + 1;
      use(b);
    }
    for (TensorIdx t : op.outputs) {
      if (g.tensors[t].alias_of >= 0 || written_over[t] >= 0) continue;
      Tensor c;
      c.id = app == 0 ? g.tensors[t].id : g.tensors[t].id + "#" + std::to_string(app);
      c.name = g.tensors[t].name;
      c.dtype = g.tensors[t].dtype;
      c.shape = g.tensors[t].shape;
      c.size = g.tensors[t].size;
      c.producer = here;
      binding[t] = static_cast<TensorIdx>(x.tensors.size());
      bound_version[t] = 0;
      bound_at[t] = static_cast<int32_t>(k);
      a.outputs.push_back(binding[t]);
      x.tensors.push_back(std::move(c));
      version.push_back(0);
      writer.push_back({-1, -1});
      ig.tensor_of.push_back(t);
      ig.instance.push_back(app);
    }
    for (TensorIdx t : op.outputs) {
      const TensorIdx base = g.tensors[t].alias_of;
      if (base < 0) continue;
      // An alias binds to the instance its base is bound to now.
      const TensorIdx b = bound(base);
      if (b == kUnbound) {
        problem(at + " outputs an alias of '" + g.tensors[base].id +
                "' before any appearance produced it");
      } else if (bound_at[nearest[base]] != static_cast<int32_t>(k) && stale(base)) {
        problem(at + " outputs an alias of '" + g.tensors[base].id + "' after " +
                overwritten(base) + ": an in-place write must be the last read of the old contents");
      }
      binding[t] = b;
      bound_at[t] = static_cast<int32_t>(k);
      if (b >= 0) bound_version[t] = bound_version[nearest[base]];
      use(b);
    }
    for (TensorIdx b : written_here) ++version[b];
    std::sort(a.inputs.begin(), a.inputs.end());
    a.inputs.erase(std::unique(a.inputs.begin(), a.inputs.end()), a.inputs.end());
    x.ops.push_back(std::move(a));
    ig.op_of.push_back(v);
    ig.appearance.push_back(app);
  }
  for (OpIdx v = 0; v < n; ++v) {
    if (runs[v] == 0) problem("order: op '" + g.ops[v].id + "' is missing");
  }
  for (OpIdx w = 0; w < n; ++w) {
    for (OpIdx v : g.ops[w].after) {
      if (runs[v] > 0 && runs[w] > 0 && last[v] > first[w]) {
        problem("order: op '" + g.ops[w].id + "' (order[" + std::to_string(first[w]) +
                "]) runs before an appearance of op '" + g.ops[v].id + "' (order[" +
                std::to_string(last[v]) + "]) that it must follow (after)");
      }
    }
  }
  if (ig.problem_count == 0) {
    for (TensorIdx t : g.outputs) {
      if (stale(t)) {
        problem("outputs: graph output '" + g.tensors[t].id + "' is overwritten: " + overwritten(t) +
                "; a graph output's contents must survive the step");
      }
    }
  }
  if (ig.problem_count > 0) {
    ig.graph = Graph{};
    ig.op_of.clear();
    ig.appearance.clear();
    ig.tensor_of.clear();
    ig.instance.clear();
    return ig;
  }
  for (TensorIdx t : g.outputs) {
    if (bound(t) >= 0) x.outputs.push_back(bound(t));
  }
  for (Tensor& t : x.tensors) t.producer = -1;  // finalize_graph derives it again
  for (TensorIdx t = 0; t < static_cast<TensorIdx>(x.tensors.size()); ++t) {
    x.tensor_index.emplace(x.tensors[t].id, t);
  }
  for (OpIdx v = 0; v < x.num_ops(); ++v) x.op_index.emplace(x.ops[v].id, v);
  finalize_graph(x, "(instance graph of " + g.name + ")");
  return ig;
}

namespace {

// The overlap sweep, Tp and arena of `x` in its program order with one offset per storage.
// Problems name storages by `name(s)`.
template <typename Name, typename Problem>
void sweep_overlaps(const Graph& x, const std::vector<uint64_t>& offsets, uint64_t alignment,
                    const Name& name, const Problem& problem, uint64_t& tp, uint64_t& arena) {
  const int32_t n = x.num_ops();
  const Liveness live = compute_liveness(x, x.program_order());
  std::vector<uint64_t> size(x.storages.size());
  for (StorageIdx s = 0; s < x.num_storages(); ++s) size[s] = align_up(x.storages[s].size, alignment);
  std::vector<std::vector<StorageIdx>> born(n), dies(n);
  for (StorageIdx s = 0; s < x.num_storages(); ++s) {
    born[live.first[s]].push_back(s);
    dies[live.last[s]].push_back(s);
  }
  // At each step retire storages that died before it, then insert those born at it; with no
  // overlap among the active set, checking the two neighbours by offset suffices.
  std::set<std::pair<uint64_t, StorageIdx>> active;
  auto overlap_msg = [&](StorageIdx a, StorageIdx b, int32_t t) {
    return "storages " + name(a) + " [" + std::to_string(offsets[a]) + ", " + std::to_string(offsets[a] + size[a]) +
           ") and " + name(b) + " [" + std::to_string(offsets[b]) + ", " + std::to_string(offsets[b] + size[b]) +
           ") overlap while both are live at step " + std::to_string(t) + " (op '" + x.ops[t].id + "')";
  };
  uint64_t live_bytes = 0;
  tp = 0;
  arena = 0;
  for (int32_t t = 0; t < n; ++t) {
    for (StorageIdx s : born[t]) {
      auto it = active.insert({offsets[s], s}).first;
      if (it != active.begin()) {
        auto prev = std::prev(it);
        if (offsets[prev->second] + size[prev->second] > offsets[s]) problem(overlap_msg(prev->second, s, t));
      }
      if (auto next = std::next(it); next != active.end() && offsets[s] + size[s] > next->first) {
        problem(overlap_msg(s, next->second, t));
      }
      live_bytes += size[s];
      arena = std::max(arena, offsets[s] + size[s]);
    }
    tp = std::max(tp, live_bytes);
    for (StorageIdx s : dies[t]) {
      active.erase({offsets[s], s});
      live_bytes -= size[s];
    }
  }
}

// "[a, b, c]", at most kMaxProblems ids.
std::string id_list(const std::vector<std::string>& ids) {
  std::string s = "[";
  for (size_t k = 0; k < ids.size() && k < kMaxProblems; ++k) s += (k ? ", '" : "'") + ids[k] + "'";
  if (ids.size() > kMaxProblems) s += ", ... (" + std::to_string(ids.size()) + " in all)";
  return s + "]";
}

// Collective ops (docs/COLLECTIVES.md): `order` (op indices, every op present, repeats
// of version 2 allowed: a collective's first appearance counts, a repeat is the instance graph's
// problem) runs them in program order, and the plan field `collectives` (`listed`, null when
// absent) is present exactly when the graph has collective ops and lists them in that order.
template <typename Problem>
void check_collectives(const Graph& g, const Order& order, const nlohmann::json* listed,
                       const Problem& problem) {
  if (g.collectives.empty()) {
    if (listed != nullptr) {
      problem("collectives: the graph has no collective ops; a plan lists collectives only for a "
              "graph that has some");
    }
    return;
  }
  std::vector<int32_t> rank(g.ops.size(), -1);  // position among the collectives in program order
  for (size_t k = 0; k < g.collectives.size(); ++k) {
    rank[g.collectives[k]] = static_cast<int32_t>(k);
  }
  std::vector<std::string> program, runs;
  for (OpIdx v : g.collectives) program.push_back(g.ops[v].id);
  std::vector<char> seen(g.ops.size(), 0);
  OpIdx prev = -1;
  size_t prev_step = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const OpIdx v = order[k];
    if (rank[v] < 0 || seen[v]) continue;
    seen[v] = 1;
    runs.push_back(g.ops[v].id);
    if (prev >= 0 && rank[v] < rank[prev]) {
      problem("order: collective op '" + g.ops[prev].id + "' (order[" + std::to_string(prev_step) +
              "]) runs before collective op '" + g.ops[v].id + "' (order[" + std::to_string(k) +
              "]), which comes before it in program order: collective ops keep their program "
              "order (every rank issues them in the same order)");
    }
    prev = v;
    prev_step = k;
  }
  if (listed == nullptr) {
    problem("collectives: missing; the graph has " + std::to_string(program.size()) +
            " collective op(s), which a plan lists in the order it runs them, " + id_list(program));
    return;
  }
  std::vector<std::string> ids;
  for (size_t k = 0; k < listed->size(); ++k) {
    ids.push_back((*listed)[k].get<std::string>());
    const auto it = g.op_index.find(ids.back());
    if (it == g.op_index.end()) {
      problem("collectives[" + std::to_string(k) + "]: unknown op '" + ids.back() + "'");
    } else if (!g.ops[it->second].collective) {
      problem("collectives[" + std::to_string(k) + "]: op '" + ids.back() +
              "' is not a collective op");
    }
  }
  if (ids != runs) {
    problem("collectives: the plan lists " + id_list(ids) +
            " but its order runs the collective ops as " + id_list(runs));
  } else if (ids != program) {
    problem("collectives: " + id_list(ids) +
            " is not the graph's collective ops in program order, " + id_list(program));
  }
}

}  // namespace

ValidationReport validate_plan(const Graph& g, const nlohmann::json& doc, const std::string& file,
                               std::optional<uint64_t> proven_lower_bound) {
  const Reader r{file};
  if (!doc.is_object()) r.fail("(document)", "", "must be a JSON object");
  const auto& format = r.get(doc, "format");
  if (!format.is_string() || format.get<std::string>() != "roam-plan") {
    r.fail("format", "", "expected \"roam-plan\", got " + format.dump());
  }
  const auto& version = r.get(doc, "version");
  if (!version.is_number_integer() || (version.get<int64_t>() != 1 && version.get<int64_t>() != 2)) {
    r.fail("version", "", "unsupported version " + version.dump() + " (this reader takes 1 and 2)");
  }
  const bool v2 = version.get<int64_t>() == 2;
  const uint64_t alignment = r.get_u64(r.get(doc, "alignment"), "alignment", "");
  if (alignment == 0 || alignment > kMaxAlignment) {
    r.fail("alignment", "", "must be between 1 and 2^30 bytes, got " + std::to_string(alignment));
  }
  if (auto it = doc.find("graph"); it != doc.end() && !it->is_string()) {
    r.fail("graph", "", "must be the graph's name (a string), got " + it->dump());
  }
  const auto& jorder = r.get(doc, "order");
  if (!jorder.is_array()) r.fail("order", "", "must be an array of op ids");
  const auto& joffsets = r.get(doc, "offsets");
  if (!joffsets.is_object()) r.fail("offsets", "", "must be an object mapping tensor ids to bytes");
  const auto& jstats = r.get(doc, "stats");
  if (!jstats.is_object()) r.fail("stats", "", "must be an object");
  for (const char* key : {"resident_bytes", "theoretical_peak_bytes", "arena_bytes", "peak_bytes",
                          "lower_bound_bytes"}) {
    r.get_u64(r.get(jstats, key, "stats."), std::string("stats.") + key, "");
  }
  for (const char* key : {"fragmentation", "solve_seconds"}) {
    if (!r.get(jstats, key, "stats.").is_number()) r.fail(std::string("stats.") + key, "", "must be a number");
  }
  if (v2) {
    r.get_u64(r.get(jstats, "recomputations", "stats."), "stats.recomputations", "");
    for (const char* key : {"recompute_seconds", "compute_seconds"}) {
      if (!r.get(jstats, key, "stats.").is_number()) r.fail(std::string("stats.") + key, "", "must be a number");
    }
  }
  static const nlohmann::json kEmptyObject = nlohmann::json::object();
  const nlohmann::json* jrecompute = &kEmptyObject;
  if (auto it = doc.find("recompute_offsets"); it != doc.end()) {
    if (!v2) r.fail("recompute_offsets", "", "only version 2 plans recompute (this plan says version 1)");
    if (!it->is_object()) r.fail("recompute_offsets", "", "must be an object mapping tensor ids to arrays of bytes");
    jrecompute = &*it;
  }
  const nlohmann::json* jinplace = &kEmptyObject;
  if (auto it = doc.find("inplace"); it != doc.end()) {
    if (!it->is_object()) {
      r.fail("inplace", "", "must be an object mapping output tensor ids to the input tensor ids "
                            "they are written over, got " + it->dump());
    }
    for (const auto& [out, in] : it->items()) {
      if (!in.is_string()) {
        r.fail("inplace", out, "must map output '" + out + "' to the id of the input tensor it is "
                               "written over, got " + in.dump());
      }
    }
    jinplace = &*it;
  }
  const nlohmann::json* jworkspace = &kEmptyObject;
  if (auto it = doc.find("workspace_offsets"); it != doc.end()) {
    if (!it->is_object()) r.fail("workspace_offsets", "", "must be an object mapping op ids to arrays of bytes");
    jworkspace = &*it;
  }
  // `collectives` (docs/COLLECTIVES.md): a list of op ids, checked against the graph below.
  const nlohmann::json* jcollectives = nullptr;
  if (auto it = doc.find("collectives"); it != doc.end()) {
    if (!it->is_array()) {
      r.fail("collectives", "", "must be an array of op ids (the collective ops in the order the "
                                "plan runs them), got " + it->dump());
    }
    for (size_t k = 0; k < it->size(); ++k) {
      if (!(*it)[k].is_string()) {
        r.fail("collectives[" + std::to_string(k) + "]", "",
               "must be an op id, got " + (*it)[k].dump());
      }
    }
    jcollectives = &*it;
  }
  uint64_t budget = 0;
  bool has_budget = false;
  if (auto m = doc.find("method"); m != doc.end() && m->is_object()) {
    if (auto o = m->find("options"); o != m->end() && o->is_object()) {
      if (auto b = o->find("budget_bytes"); b != o->end()) {
        budget = r.get_u64(*b, "method.options.budget_bytes", "");
        has_budget = true;
      }
    }
  }

  ValidationReport rep;
  auto problem = [&](const std::string& msg) {
    rep.valid = false;
    ++rep.problem_count;
    if (rep.problems.size() < kMaxProblems) rep.problems.push_back(msg);
  };
  if (auto it = doc.find("graph"); it != doc.end() && it->is_string() && it->get<std::string>() != g.name) {
    problem("plan is for graph '" + it->get<std::string>() + "', not '" + g.name + "'");
  }

  // In-place writes: each pair one of its op's permissions (GRAPH_FORMAT.md plan field inplace).
  std::vector<InplacePair> pairs;
  std::vector<TensorIdx> written_over(g.tensors.size(), -1);
  if (!v2 && !jinplace->empty()) {
    problem("inplace: a plan that writes outputs over inputs has version 2 (this plan says "
            "version 1)");
  }
  for (const auto& [out, in] : jinplace->items()) {
    const auto ot = g.tensor_index.find(out);
    if (ot == g.tensor_index.end()) {
      problem("inplace: unknown tensor '" + out + "'");
      continue;
    }
    const std::string& in_id = in.get_ref<const std::string&>();
    const auto it = g.tensor_index.find(in_id);
    if (it == g.tensor_index.end()) {
      problem("inplace." + out + ": unknown tensor '" + in_id + "'");
      continue;
    }
    const TensorIdx t = ot->second, u = it->second;
    const OpIdx v = g.tensors[t].producer;
    if (v < 0) {
      problem("inplace." + out + ": tensor '" + out + "' is not an output of any op");
      continue;
    }
    const Op& op = g.ops[v];
    bool listed = false;
    std::string perms;
    for (const auto& [i, j] : op.inplace) {
      const TensorIdx pi = op.inputs[static_cast<size_t>(i)], pj = op.outputs[static_cast<size_t>(j)];
      listed = listed || (pi == u && pj == t);
      perms += (perms.empty() ? "" : ", ") + g.tensors[pj].id + " over " + g.tensors[pi].id;
    }
    if (!listed) {
      problem("inplace." + out + ": op '" + op.id + "' may not write '" + out + "' over '" + in_id +
              "': not one of its permissions (its inplace: " + (perms.empty() ? "none" : perms) + ")");
      continue;
    }
    pairs.push_back({t, u, v});
    written_over[t] = u;
  }
  std::sort(pairs.begin(), pairs.end(), [](const InplacePair& a, const InplacePair& b) {
    return a.op != b.op ? a.op < b.op : a.output < b.output;
  });

  // Order: a permutation of the ops (version 1), every op at least once (version 2).
  const int32_t n = g.num_ops();
  Order order;
  std::vector<int32_t> step(n, -1);
  for (size_t k = 0; k < jorder.size(); ++k) {
    if (!jorder[k].is_string()) r.fail("order[" + std::to_string(k) + "]", "", "must be an op id");
    const std::string id = jorder[k].get<std::string>();
    auto it = g.op_index.find(id);
    if (it == g.op_index.end()) {
      problem("order[" + std::to_string(k) + "]: unknown op '" + id + "'");
      continue;
    }
    if (step[it->second] >= 0 && !v2) {
      problem("order[" + std::to_string(k) + "]: op '" + id + "' appears twice");
      continue;
    }
    if (step[it->second] < 0) step[it->second] = static_cast<int32_t>(order.size());
    order.push_back(it->second);
  }
  for (OpIdx v = 0; v < n; ++v) {
    if (step[v] < 0) problem("order: op '" + g.ops[v].id + "' is missing");
  }
  if (!rep.valid) return rep;  // liveness needs every op

  if (!v2) {  // Dependencies, with the messages of version 1.
    for (OpIdx v : order) {
      for (OpIdx u : g.preds[v]) {
        // (two collective ops out of program order: named by check_collectives below)
        if (step[u] > step[v] && !(g.ops[u].collective && g.ops[v].collective)) {
          problem("order: op '" + g.ops[v].id + "' at step " + std::to_string(step[v]) +
                  " runs before op '" + g.ops[u].id + "' (step " + std::to_string(step[u]) +
                  ") that it depends on");
        }
      }
    }
  }
  check_collectives(g, order, jcollectives, problem);
  const bool order_respects_dependencies = rep.valid;
  // Version 1 with a broken dependency: liveness is still taken over the plan's order (the
  // instance graph would refuse it), so the layout's problems are listed too.
  InstanceGraph ig;
  if (v2 || order_respects_dependencies) {
    ig = instance_graph(g, order, pairs);
    for (const std::string& p : ig.problems) problem(p);
    rep.problem_count += ig.problem_count - ig.problems.size();
    if (ig.problem_count > 0) return rep;
  } else {
    // the graph's own storages (with the plan's in-place writes) over the plan's (invalid) order
    ig.graph = pairs.empty() ? g : apply_inplace(g, pairs);
    Order permuted = order;
    ig.graph.ops.clear();
    for (OpIdx v : permuted) ig.graph.ops.push_back(g.ops[v]);
    for (OpIdx v = 0; v < n; ++v) {
      ig.op_of.push_back(order[v]);
      ig.appearance.push_back(0);
    }
    ig.tensor_of.resize(g.tensors.size());
    for (TensorIdx t = 0; t < static_cast<TensorIdx>(g.tensors.size()); ++t) ig.tensor_of[t] = t;
    ig.instance.assign(g.tensors.size(), 0);
    // Storages keep g's users and producers, renumbered to positions in the order.
    for (Storage& st : ig.graph.storages) {
      st.producer = step[st.producer];
      for (OpIdx& u : st.users) u = step[u];
      if (st.workspace_of >= 0) st.workspace_of = step[st.workspace_of];
    }
  }
  const Graph& x = ig.graph;

  // Offsets: exactly one per instance (and workspace appearance), aligned.
  std::vector<uint64_t> offsets(x.storages.size(), 0);
  std::vector<char> has(x.storages.size(), 0);
  // The instance-graph storage of (root tensor of g, instance k), and of (op of g, appearance k).
  std::unordered_map<uint64_t, StorageIdx> instance_storage, workspace_storage;
  auto key = [](int64_t a, int64_t k) { return (static_cast<uint64_t>(a) << 24) ^ static_cast<uint64_t>(k); };
  for (StorageIdx s = 0; s < x.num_storages(); ++s) {
    const Storage& st = x.storages[s];
    if (st.workspace_of >= 0) {
      workspace_storage[key(ig.op_of[st.workspace_of], ig.appearance[st.workspace_of])] = s;
    } else {
      instance_storage[key(ig.tensor_of[st.root], ig.instance[st.root])] = s;
    }
  }
  auto place = [&](StorageIdx s, const nlohmann::json& value, const std::string& field,
                   const std::string& id, const std::string& what) {
    const uint64_t off = r.get_u64(value, field, id);
    if (off >= kMaxOffset) {
      problem(field + ": " + what + " at " + std::to_string(off) + " is beyond 2^62 bytes");
      return;
    }
    if (off % alignment != 0) {
      problem(field + ": " + what + " at " + std::to_string(off) +
              " is not a multiple of the alignment " + std::to_string(alignment));
    }
    offsets[s] = off;
    has[s] = 1;
  };
  auto root_storage = [&](const std::string& field, const std::string& id) -> TensorIdx {
    auto it = g.tensor_index.find(id);
    if (it == g.tensor_index.end()) {
      problem(field + ": unknown tensor '" + id + "'");
      return -1;
    }
    const StorageIdx s = g.storage_of[it->second];
    if (s < 0 || g.storages[s].root != it->second) {
      problem(field + ": tensor '" + id + "' is not a non-resident root storage of non-zero size");
      return -1;
    }
    return it->second;
  };
  auto written_in_place = [&](const std::string& field, TensorIdx t) {
    if (written_over[t] < 0) return false;
    problem(field + ": tensor '" + g.tensors[t].id + "' is written in place over '" +
            g.tensors[written_over[t]].id + "' (plan field inplace) and has no storage of its own");
    return true;
  };
  for (const auto& [id, value] : joffsets.items()) {
    const TensorIdx t = root_storage("offsets", id);
    if (t < 0 || written_in_place("offsets." + id, t)) continue;
    auto it = instance_storage.find(key(t, 0));
    if (it != instance_storage.end()) place(it->second, value, "offsets." + id, id, "storage '" + id + "'");
  }
  for (const auto& [id, list] : jrecompute->items()) {
    if (!list.is_array()) r.fail("recompute_offsets." + id, id, "must be an array of offsets in bytes");
    const TensorIdx t = root_storage("recompute_offsets", id);
    if (t < 0 || written_in_place("recompute_offsets." + id, t)) continue;
    for (size_t k = 0; k < list.size(); ++k) {
      auto it = instance_storage.find(key(t, static_cast<int64_t>(k) + 1));
      const std::string what = "instance " + std::to_string(k + 1) + " of '" + id + "'";
      if (it == instance_storage.end()) {
        problem("recompute_offsets." + id + ": " + what + " is never created by the order");
        continue;
      }
      place(it->second, list[k], "recompute_offsets." + id, id, what);
    }
  }
  for (const auto& [id, list] : jworkspace->items()) {
    if (!list.is_array()) r.fail("workspace_offsets." + id, id, "must be an array of offsets in bytes");
    auto op = g.op_index.find(id);
    if (op == g.op_index.end() || g.ops[op->second].workspace == 0) {
      problem("workspace_offsets: '" + id + "' is not an op with a non-zero workspace");
      continue;
    }
    for (size_t k = 0; k < list.size(); ++k) {
      auto it = workspace_storage.find(key(op->second, static_cast<int64_t>(k)));
      const std::string what = "workspace of appearance " + std::to_string(k) + " of op '" + id + "'";
      if (it == workspace_storage.end()) {
        problem("workspace_offsets." + id + ": " + what + " is not in the order");
        continue;
      }
      place(it->second, list[k], "workspace_offsets." + id, id, what);
    }
  }
  auto name = [&](StorageIdx s) {
    const Storage& st = x.storages[s];
    if (st.workspace_of >= 0) {
      return "workspace of op '" + g.ops[ig.op_of[st.workspace_of]].id + "' (appearance " +
             std::to_string(ig.appearance[st.workspace_of]) + ")";
    }
    const int32_t k = ig.instance[st.root];
    const std::string id = g.tensors[ig.tensor_of[st.root]].id;
    return k == 0 ? "'" + id + "'" : "instance " + std::to_string(k) + " of '" + id + "'";
  };
  for (StorageIdx s = 0; s < x.num_storages(); ++s) {
    if (!has[s]) problem("offsets: " + name(s) + " has no offset");
  }

  uint64_t tp = 0, arena = 0;
  sweep_overlaps(x, offsets, alignment, name, problem, tp, arena);

  PlanStats& st = rep.recomputed;
  st.resident_bytes = g.resident_bytes;
  st.theoretical_peak_bytes = tp;
  st.arena_bytes = arena;
  st.peak_bytes = g.resident_bytes + arena;
  // The plan's order speeds the cut bound up only when it is a valid order (any hint gives the
  // same value).
  st.lower_bound_bytes = v2 ? recompute_lower_bound(g, alignment)
                        : proven_lower_bound ? *proven_lower_bound
                                             : lower_bound(g, alignment, order_respects_dependencies ? &order : nullptr);
  st.fragmentation = tp == 0 ? 0.0 : static_cast<double>(arena) / static_cast<double>(tp) - 1.0;
  st.solve_seconds = jstats["solve_seconds"].get<double>();
  if (st.solve_seconds < 0) problem("stats.solve_seconds: negative");

  auto check = [&](const char* key, uint64_t expect) {
    const uint64_t got = r.get_u64(jstats[key], std::string("stats.") + key, "");
    if (got != expect) {
      problem(std::string("stats.") + key + ": plan says " + std::to_string(got) + ", recomputed " +
              std::to_string(expect));
    }
  };
  auto check_seconds = [&](const char* key, double expect) {
    const double got = jstats[key].get<double>();
    if (std::fabs(got - expect) > 1e-9 * std::max(1.0, std::fabs(expect))) {
      std::ostringstream os;
      os << "stats." << key << ": plan says " << got << ", recomputed " << expect;
      problem(os.str());
    }
  };
  check("resident_bytes", st.resident_bytes);
  check("theoretical_peak_bytes", st.theoretical_peak_bytes);
  check("arena_bytes", st.arena_bytes);
  check("peak_bytes", st.peak_bytes);
  if (v2) {
    for (OpIdx v = 0; v < n; ++v) st.compute_seconds += g.ops[v].cost.value_or(0.0);
    for (size_t k = 0; k < ig.op_of.size(); ++k) {
      if (ig.appearance[k] == 0) continue;
      ++st.recomputations;
      st.recompute_seconds += g.ops[ig.op_of[k]].cost.value_or(0.0);
    }
    check("recomputations", st.recomputations);
    check_seconds("recompute_seconds", st.recompute_seconds);
    check_seconds("compute_seconds", st.compute_seconds);
  }
  if (has_budget && st.peak_bytes > budget) {
    problem("stats.peak_bytes " + std::to_string(st.peak_bytes) + " is above the budget " +
            std::to_string(budget) + " (method.options.budget_bytes)");
  }
  // Any proven bound will do: a recorded bound at or below the one recomputed here (e.g. from
  // an older, weaker bound) is still a lower bound on every order's Tp; one above it is not
  // proven.
  const uint64_t claimed = r.get_u64(jstats["lower_bound_bytes"], "stats.lower_bound_bytes", "");
  if (claimed > st.lower_bound_bytes) {
    problem("stats.lower_bound_bytes: plan says " + std::to_string(claimed) +
            ", above the bound proven here (" + std::to_string(st.lower_bound_bytes) + ")");
  }
  const double frag = jstats["fragmentation"].get<double>();
  if (std::fabs(frag - st.fragmentation) > 1e-9 * std::max(1.0, std::fabs(st.fragmentation))) {
    std::ostringstream os;
    os << "stats.fragmentation: plan says " << frag << ", recomputed " << st.fragmentation;
    problem(os.str());
  }
  // (Only a valid order must have Tp at or above the bound: one that breaks a dependency, e.g.
  // runs two collectives swapped, may hold less.)
  if (order_respects_dependencies && st.lower_bound_bytes > tp) {
    problem("lower bound " + std::to_string(st.lower_bound_bytes) + " exceeds Tp " + std::to_string(tp) +
            " (a bug in the bound)");
  }
  if (rep.valid) {
    rep.inplace = std::move(pairs);
    rep.instance_offsets = std::move(offsets);
    rep.instances = std::make_shared<const InstanceGraph>(std::move(ig));
  }
  return rep;
}

}  // namespace roam
