// Shared helpers for the roam GoogleTest suites: a JSON graph builder, a seeded random DAG
// generator, and brute-force oracles written independently of the library (they read only the
// raw tensors/ops/outputs of a parsed graph and recompute roots, producers, dependencies,
// liveness, Tp, asap/alap and the best order from scratch).
#pragma once

#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/roam_layout.h"
#include "roam/validate.h"

namespace roamtest {

using nlohmann::json;

// ------------------------------------------------------------------------------------------
// Files
// ------------------------------------------------------------------------------------------

inline std::string fixture_path(const std::string& name) {
  return std::string(ROAM_FIXTURES) + "/" + name;
}

inline roam::Graph load_fixture(const std::string& name) {
  return roam::load_graph(fixture_path(name));
}

/// A fresh temporary directory, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("roam_tests_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The exit status and output of `roam ARGS` (stdout and stderr through files in `dir`, removed
/// again so that a test can list what roam itself wrote there).
struct CliResult {
  int status = -1;
  std::string out, err;
};
inline CliResult run_roam(const TempDir& dir, const std::string& args) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = std::string("'") + ROAM_BIN + "' " + args + " >'" + out + "' 2>'" + err + "'";
  const int st = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// ------------------------------------------------------------------------------------------
// Planning requests
// ------------------------------------------------------------------------------------------

inline roam::PlanRequest request(const std::string& order, const std::string& layout,
                                 uint64_t alignment) {
  roam::PlanRequest r;
  r.order = order;
  r.layout = layout;
  r.options.alignment = alignment;
  return r;
}

/// The registered methods minus `roam` (the optimizing planner, tested elsewhere): the baselines.
inline std::vector<std::string> without_roam(const std::vector<std::string>& methods) {
  std::vector<std::string> out;
  for (const auto& m : methods) {
    if (m != "roam") out.push_back(m);
  }
  return out;
}
inline std::vector<std::string> baseline_orders() { return without_roam(roam::order_methods()); }
inline std::vector<std::string> baseline_layouts() { return without_roam(roam::layout_methods()); }

// ------------------------------------------------------------------------------------------
// JSON graph builder
// ------------------------------------------------------------------------------------------

class GraphJson {
 public:
  explicit GraphJson(const std::string& name = "g") {
    doc = {{"format", "roam-graph"}, {"version", 1},          {"name", name},
           {"tensors", json::array()}, {"ops", json::array()}, {"outputs", json::array()}};
  }
  GraphJson& tensor(const std::string& id, uint64_t size, const std::string& role = "",
                    const std::string& alias_of = "") {
    json t = {{"id", id}, {"size", size}};
    if (!role.empty()) t["role"] = role;
    if (!alias_of.empty()) t["alias_of"] = alias_of;
    doc["tensors"].push_back(std::move(t));
    return *this;
  }
  GraphJson& op(const std::string& id, const std::vector<std::string>& inputs,
                const std::vector<std::string>& outputs, const std::string& phase = "forward",
                const std::vector<std::string>& after = {}) {
    json o = {{"id", id}, {"phase", phase}, {"inputs", inputs}, {"outputs", outputs}};
    if (!after.empty()) o["after"] = after;
    doc["ops"].push_back(std::move(o));
    return *this;
  }
  GraphJson& output(const std::string& id) {
    doc["outputs"].push_back(id);
    return *this;
  }
  roam::Graph parse(const std::string& file = "test.json") const {
    return roam::parse_graph(doc, file);
  }
  json doc;
};

// ------------------------------------------------------------------------------------------
// Independent model of a graph (recomputed from tensors / ops / outputs only)
// ------------------------------------------------------------------------------------------

struct BruteStorage {
  int root = -1;            // tensor index of the root
  uint64_t size = 0;        // unrounded
  int producer = -1;
  std::vector<int> users;   // ops listing the root or any alias of it (inputs or outputs)
  bool output = false;      // root or an alias is a graph output
};

struct BruteModel {
  int n = 0;
  std::vector<std::vector<int>> preds;   // per op, sorted unique
  std::vector<BruteStorage> storages;    // one per non-resident root of non-zero size
  std::vector<std::string> storage_ids;  // root tensor id per storage
};

inline BruteModel brute_model(const roam::Graph& g) {
  BruteModel m;
  m.n = static_cast<int>(g.ops.size());
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> producer(nt, -1);
  for (int v = 0; v < m.n; ++v) {
    for (int t : g.ops[v].outputs) producer[t] = v;
  }
  auto root_of = [&](int t) {
    int steps = 0;
    while (g.tensors[t].alias_of >= 0) {
      t = g.tensors[t].alias_of;
      if (++steps > nt) std::abort();  // the parser rejects alias cycles
    }
    return t;
  };
  // Nearest op along the alias chain that produces the data (a view with no producer takes
  // its data from its base).
  auto nearest_producer = [&](int t) {
    while (t >= 0 && producer[t] < 0) t = g.tensors[t].alias_of;
    return t >= 0 ? producer[t] : -1;
  };
  m.preds.assign(m.n, {});
  int previous_collective = -1;  // collective ops keep their program order (docs/COLLECTIVES.md)
  for (int v = 0; v < m.n; ++v) {
    std::set<int> p;
    if (g.ops[v].collective) {
      if (previous_collective >= 0) p.insert(previous_collective);
      previous_collective = v;
    }
    for (int t : g.ops[v].inputs) {
      int u = nearest_producer(t);
      if (u >= 0 && u != v) p.insert(u);
    }
    for (int t : g.ops[v].outputs) {
      if (g.tensors[t].alias_of >= 0) {
        int u = nearest_producer(g.tensors[t].alias_of);
        if (u >= 0 && u != v) p.insert(u);
      }
    }
    for (int u : g.ops[v].after) p.insert(u);
    m.preds[v].assign(p.begin(), p.end());
  }
  std::vector<int> storage_of_root(nt, -1);
  for (int t = 0; t < nt; ++t) {
    const auto& x = g.tensors[t];
    if (x.alias_of >= 0 || x.role != roam::Role::kNone || x.size == 0) continue;
    storage_of_root[t] = static_cast<int>(m.storages.size());
    BruteStorage s;
    s.root = t;
    s.size = x.size;
    s.producer = producer[t];
    m.storages.push_back(s);
    m.storage_ids.push_back(x.id);
  }
  for (int v = 0; v < m.n; ++v) {
    std::set<int> touched;
    for (int t : g.ops[v].inputs) touched.insert(storage_of_root[root_of(t)]);
    for (int t : g.ops[v].outputs) touched.insert(storage_of_root[root_of(t)]);
    for (int s : touched) {
      if (s >= 0) m.storages[s].users.push_back(v);
    }
  }
  for (int t : g.outputs) {
    int s = storage_of_root[root_of(t)];
    if (s >= 0) m.storages[s].output = true;
  }
  return m;
}

inline uint64_t round_up(uint64_t size, uint64_t alignment) {
  return (size + alignment - 1) / alignment * alignment;
}

/// Inclusive live interval of every brute storage under `order`.
inline std::vector<std::pair<int, int>> brute_intervals(const BruteModel& m,
                                                        const std::vector<int>& order) {
  std::vector<int> step(m.n, -1);
  for (int k = 0; k < static_cast<int>(order.size()); ++k) step[order[k]] = k;
  std::vector<std::pair<int, int>> iv;
  for (const auto& s : m.storages) {
    int first = step[s.producer];
    int last = first;
    for (int u : s.users) last = std::max(last, step[u]);
    if (s.output) last = m.n - 1;
    iv.emplace_back(first, last);
  }
  return iv;
}

/// Per step, the sum of aligned sizes of storages whose [first, last] covers it.
inline std::vector<uint64_t> brute_live_bytes(const BruteModel& m, const std::vector<int>& order,
                                              uint64_t alignment) {
  const auto iv = brute_intervals(m, order);
  std::vector<uint64_t> bytes(m.n, 0);
  for (int t = 0; t < m.n; ++t) {
    for (size_t s = 0; s < m.storages.size(); ++s) {
      if (iv[s].first <= t && t <= iv[s].second) bytes[t] += round_up(m.storages[s].size, alignment);
    }
  }
  return bytes;
}

inline uint64_t brute_tp(const BruteModel& m, const std::vector<int>& order, uint64_t alignment) {
  const auto b = brute_live_bytes(m, order, alignment);
  return b.empty() ? 0 : *std::max_element(b.begin(), b.end());
}

inline bool brute_is_topological(const BruteModel& m, const std::vector<int>& order) {
  if (static_cast<int>(order.size()) != m.n) return false;
  std::vector<int> step(m.n, -1);
  for (int k = 0; k < m.n; ++k) {
    if (order[k] < 0 || order[k] >= m.n || step[order[k]] >= 0) return false;
    step[order[k]] = k;
  }
  for (int v = 0; v < m.n; ++v) {
    for (int u : m.preds[v]) {
      if (step[u] >= step[v]) return false;
    }
  }
  return true;
}

/// Calls f(order) for every topological order (use on small graphs only).
inline void for_each_topo_order(const BruteModel& m,
                                const std::function<void(const std::vector<int>&)>& f) {
  std::vector<int> order;
  std::vector<char> done(m.n, 0);
  std::function<void()> rec = [&]() {
    if (static_cast<int>(order.size()) == m.n) {
      f(order);
      return;
    }
    for (int v = 0; v < m.n; ++v) {
      if (done[v]) continue;
      bool ready = true;
      for (int u : m.preds[v]) ready = ready && done[u];
      if (!ready) continue;
      done[v] = 1;
      order.push_back(v);
      rec();
      order.pop_back();
      done[v] = 0;
    }
  };
  rec();
}

/// A uniformly random choice among ready ops at every step (random Kahn).
inline std::vector<int> random_topo_order(const BruteModel& m, std::mt19937_64& rng) {
  std::vector<int> waiting(m.n);
  std::vector<std::vector<int>> succs(m.n);
  for (int v = 0; v < m.n; ++v) {
    waiting[v] = static_cast<int>(m.preds[v].size());
    for (int u : m.preds[v]) succs[u].push_back(v);
  }
  std::vector<int> ready, order;
  for (int v = 0; v < m.n; ++v) {
    if (waiting[v] == 0) ready.push_back(v);
  }
  while (!ready.empty()) {
    std::uniform_int_distribution<size_t> pick(0, ready.size() - 1);
    const size_t i = pick(rng);
    const int v = ready[i];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(i));
    order.push_back(v);
    for (int w : succs[v]) {
      if (--waiting[w] == 0) ready.push_back(w);
    }
  }
  return order;
}

/// Exact search over all downsets (sets of already-run ops), n <= 20:
///   min_tp: the smallest Tp over all topological orders;
///   asap/alap: the smallest / largest step each op takes over all topological orders.
/// Live at op v after the set S ran: storages produced in S + {v} that have a user outside S
/// (v itself or a later op) or are graph outputs.
struct DownsetResult {
  uint64_t min_tp = 0;
  std::vector<int> asap, alap;
};

inline DownsetResult brute_downsets(const BruteModel& m, uint64_t alignment) {
  const int n = m.n;
  if (n > 20) std::abort();
  const uint32_t full = (1u << n) - 1;
  std::vector<uint32_t> pred_mask(n, 0);
  for (int v = 0; v < n; ++v) {
    for (int u : m.preds[v]) pred_mask[v] |= 1u << u;
  }
  struct S {
    uint32_t prod, users;
    bool output;
    uint64_t size;
  };
  std::vector<S> st;
  for (const auto& s : m.storages) {
    S x{1u << s.producer, 0, s.output, round_up(s.size, alignment)};
    for (int u : s.users) x.users |= 1u << u;
    st.push_back(x);
  }
  constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> best(size_t{1} << n, kInf);
  DownsetResult r;
  r.asap.assign(n, std::numeric_limits<int>::max());
  r.alap.assign(n, -1);
  best[0] = 0;
  for (uint32_t set = 0; set <= full; ++set) {  // supersets come later numerically
    if (best[set] == kInf) continue;              // not a downset
    const int k = std::popcount(set);
    for (int v = 0; v < n; ++v) {
      const uint32_t bit = 1u << v;
      if ((set & bit) || (pred_mask[v] & ~set)) continue;
      r.asap[v] = std::min(r.asap[v], k);
      r.alap[v] = std::max(r.alap[v], k);
      uint64_t live = 0;
      for (const S& x : st) {
        if ((x.prod & (set | bit)) && (x.output || (x.users & ~set))) live += x.size;
      }
      const uint64_t peak = std::max(best[set], live);
      best[set | bit] = std::min(best[set | bit], peak);
    }
    if (set == full) break;
  }
  r.min_tp = n == 0 ? 0 : best[full];
  return r;
}

/// Independent layout check: every pair of storages whose intervals intersect gets disjoint
/// aligned byte ranges, every offset is aligned. Returns "" when fine.
inline std::string brute_layout_problem(const BruteModel& m, const std::vector<int>& order,
                                        const std::vector<uint64_t>& offsets, uint64_t alignment) {
  if (offsets.size() != m.storages.size()) return "wrong number of offsets";
  const auto iv = brute_intervals(m, order);
  for (size_t a = 0; a < m.storages.size(); ++a) {
    if (offsets[a] % alignment != 0) return "misaligned " + m.storage_ids[a];
    for (size_t b = a + 1; b < m.storages.size(); ++b) {
      const bool time = iv[a].first <= iv[b].second && iv[b].first <= iv[a].second;
      const uint64_t ea = offsets[a] + round_up(m.storages[a].size, alignment);
      const uint64_t eb = offsets[b] + round_up(m.storages[b].size, alignment);
      const bool space = offsets[a] < eb && offsets[b] < ea;
      if (time && space) return "overlap " + m.storage_ids[a] + " / " + m.storage_ids[b];
    }
  }
  return "";
}

inline uint64_t brute_arena(const BruteModel& m, const std::vector<uint64_t>& offsets,
                            uint64_t alignment) {
  uint64_t arena = 0;
  for (size_t s = 0; s < m.storages.size(); ++s) {
    arena = std::max(arena, offsets[s] + round_up(m.storages[s].size, alignment));
  }
  return arena;
}

// ------------------------------------------------------------------------------------------
// Random graphs (seeded, deterministic)
// ------------------------------------------------------------------------------------------

struct RandomGraphOptions {
  int num_ops = 10;
  int max_residents = 3;
  double p_multi_output = 0.2;  // op has 2-3 outputs
  double p_no_output = 0.05;    // op has no outputs
  double p_alias_output = 0.2;  // an output aliases an earlier tensor (in-place op / view)
  double p_free_view = 0.1;     // a view that no op produces (tuple element) is added
  double p_after = 0.15;        // op gets 1-2 `after` edges to earlier ops
  double p_graph_output = 0.12; // a produced tensor becomes a graph output
  double p_zero_size = 0.05;
};

inline uint64_t random_size(std::mt19937_64& rng, double p_zero) {
  static const uint64_t kSizes[] = {1, 3, 64, 100, 250, 512, 1000, 1536, 4096, 10000};
  std::uniform_real_distribution<double> u(0, 1);
  if (u(rng) < p_zero) return 0;
  if (u(rng) < 0.5) return kSizes[rng() % (sizeof kSizes / sizeof kSizes[0])];
  return 1 + rng() % 3000;
}

/// A random training-like DAG in program order, as a roam-graph v1 document. Every reference
/// points backwards in the file, so the document is always valid.
inline json random_graph_json(uint64_t seed, const RandomGraphOptions& o) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  GraphJson b("random-" + std::to_string(seed));
  std::vector<std::string> available;  // tensor ids an op may read
  int tid = 0;
  auto new_tensor_id = [&]() { return "t" + std::to_string(tid++); };
  static const char* kRoles[] = {"param", "buffer", "optimizer_state", "constant", "input"};
  const int residents = static_cast<int>(rng() % (o.max_residents + 1));
  for (int i = 0; i < residents; ++i) {
    const std::string id = new_tensor_id();
    b.tensor(id, random_size(rng, o.p_zero_size), kRoles[rng() % 5]);
    available.push_back(id);
  }
  auto pick_available = [&]() -> std::string {
    // Bias towards recent tensors so that graphs look like chains with skips.
    const size_t n = available.size();
    if (u(rng) < 0.6) return available[n - 1 - rng() % std::min<size_t>(n, 4)];
    return available[rng() % n];
  };
  std::vector<std::string> produced;
  for (int v = 0; v < o.num_ops; ++v) {
    const std::string oid = "n" + std::to_string(v);
    std::vector<std::string> inputs, outputs, after;
    if (!available.empty()) {
      const int k = static_cast<int>(rng() % 4);  // 0..3 inputs
      for (int i = 0; i < k; ++i) {
        std::string t = pick_available();
        if (std::find(inputs.begin(), inputs.end(), t) == inputs.end()) inputs.push_back(t);
      }
    }
    int m = 1;
    const double r = u(rng);
    if (r < o.p_no_output) m = 0;
    else if (r < o.p_no_output + o.p_multi_output) m = 2 + static_cast<int>(rng() % 2);
    std::vector<std::string> new_ids;
    for (int i = 0; i < m; ++i) {
      const std::string id = new_tensor_id();
      if (!available.empty() && u(rng) < o.p_alias_output) {
        // In-place op or view: the output shares the storage of an earlier tensor; an in-place
        // op also reads it.
        const std::string base = pick_available();
        b.tensor(id, random_size(rng, 0), "", base);
        if (u(rng) < 0.5 && std::find(inputs.begin(), inputs.end(), base) == inputs.end()) {
          inputs.push_back(base);
        }
      } else {
        b.tensor(id, random_size(rng, o.p_zero_size));
      }
      outputs.push_back(id);
      new_ids.push_back(id);
    }
    if (v > 0 && u(rng) < o.p_after) {
      const int k = 1 + static_cast<int>(rng() % 2);
      for (int i = 0; i < k; ++i) {
        std::string a = "n" + std::to_string(rng() % v);
        if (std::find(after.begin(), after.end(), a) == after.end()) after.push_back(a);
      }
    }
    static const char* kPhases[] = {"forward", "backward", "update", "other"};
    const double pos = static_cast<double>(v) / std::max(1, o.num_ops);
    std::string phase = pos < 0.45 ? kPhases[0] : pos < 0.85 ? kPhases[1] : kPhases[2];
    if (u(rng) < 0.05) phase = kPhases[3];
    b.op(oid, inputs, outputs, phase, after);
    for (const auto& id : new_ids) {
      available.push_back(id);
      produced.push_back(id);
      if (u(rng) < o.p_free_view) {
        const std::string view = new_tensor_id();
        b.tensor(view, random_size(rng, 0), "", id);
        available.push_back(view);
        produced.push_back(view);
      }
    }
  }
  for (const auto& id : produced) {
    if (u(rng) < o.p_graph_output) b.output(id);
  }
  if (!available.empty() && u(rng) < 0.1) b.output(available[rng() % available.size()]);
  return b.doc;
}

/// "Caterpillar": a chain of ops c0 -> c1 -> ... (each reads an output of the previous one,
/// plus optional skips to earlier chain tensors and residents; multi-output, in-place aliases,
/// graph outputs) with "sink" ops hanging off it: a sink reads only outputs of one chain op
/// (and residents) and produces nothing that takes memory.
///
/// On this family the lower bound equals the best Tp. Proof: run every sink right after the
/// chain op it reads from (sinks reading only residents first). At a chain op c the storages
/// live are exactly the ones produced by c or earlier and used by c or a later chain op or kept
/// as graph outputs (a sink of an earlier chain op already ran), i.e. the bound's set for c;
/// at a sink after c the live storages are a subset of those live at c (nothing new is
/// produced). So Tp(that order) = max over chain ops of the bound <= lower_bound <= best Tp.
inline json caterpillar_graph_json(uint64_t seed, int num_chain, int num_sinks) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  GraphJson b("caterpillar-" + std::to_string(seed));
  std::vector<std::string> residents;
  const int nres = static_cast<int>(rng() % 3);
  int tid = 0;
  auto new_tensor_id = [&]() { return "t" + std::to_string(tid++); };
  for (int i = 0; i < nres; ++i) {
    residents.push_back(new_tensor_id());
    b.tensor(residents.back(), random_size(rng, 0), "param");
  }
  std::vector<std::vector<std::string>> chain_outputs;  // per chain op, its output tensor ids
  std::vector<std::string> chain_tensors;               // all chain outputs so far
  // Sinks are attached to a chain op index (or -1: residents only) and emitted, in program
  // order, at a random later position.
  std::vector<std::vector<int>> sinks_after(num_chain + 1);
  for (int i = 0; i < num_sinks; ++i) {
    const int anchor = static_cast<int>(rng() % (num_chain + 1)) - 1;  // -1 .. num_chain-1
    const int emit_after = anchor + static_cast<int>(rng() % (num_chain - anchor));  // >= anchor
    sinks_after[emit_after + 1].push_back(anchor);
  }
  int op_id = 0, sink_id = 0;
  auto emit_sinks = [&](int slot) {
    for (int anchor : sinks_after[slot]) {
      std::vector<std::string> ins;
      if (anchor >= 0) {
        const auto& outs = chain_outputs[anchor];
        const int k = 1 + static_cast<int>(rng() % outs.size());
        for (int i = 0; i < k; ++i) {
          const auto& t = outs[rng() % outs.size()];
          if (std::find(ins.begin(), ins.end(), t) == ins.end()) ins.push_back(t);
        }
      }
      if (!residents.empty() && u(rng) < 0.3) ins.push_back(residents[rng() % residents.size()]);
      std::vector<std::string> outs;
      if (u(rng) < 0.3) {  // a zero-size result
        outs.push_back(new_tensor_id());
        b.tensor(outs.back(), 0);
      }
      b.op("s" + std::to_string(sink_id++), ins, outs, "backward");
    }
  };
  emit_sinks(0);
  for (int c = 0; c < num_chain; ++c) {
    std::vector<std::string> ins;
    if (c > 0) {
      const auto& prev = chain_outputs[c - 1];
      ins.push_back(prev[rng() % prev.size()]);
      if (u(rng) < 0.4) {
        const auto& t = chain_tensors[rng() % chain_tensors.size()];
        if (std::find(ins.begin(), ins.end(), t) == ins.end()) ins.push_back(t);
      }
    }
    if (!residents.empty() && u(rng) < 0.4) ins.push_back(residents[rng() % residents.size()]);
    const int m = u(rng) < 0.25 ? 2 : 1;
    std::vector<std::string> outs;
    for (int i = 0; i < m; ++i) {
      const std::string id = new_tensor_id();
      if (!chain_tensors.empty() && u(rng) < 0.2) {
        const auto& base = chain_tensors[rng() % chain_tensors.size()];
        b.tensor(id, 8, "", base);  // in-place op on an earlier chain storage
        if (std::find(ins.begin(), ins.end(), base) == ins.end()) ins.push_back(base);
      } else {
        b.tensor(id, random_size(rng, 0.05));
      }
      outs.push_back(id);
      if (u(rng) < 0.1) b.output(id);
    }
    b.op("c" + std::to_string(op_id++), ins, outs, c < num_chain / 2 ? "forward" : "backward");
    chain_outputs.push_back(outs);
    chain_tensors.insert(chain_tensors.end(), outs.begin(), outs.end());
    emit_sinks(c + 1);
  }
  return b.doc;
}

// A chain of ops n0, n1, ...; storage i is tensor "s<i>", produced by op `first` and read by op
// `last`, so under program order its live interval is exactly [first, last] (inclusive steps,
// as in the graph format). Intervals must be listed by non-decreasing `first` (storages are
// numbered by producer); `steps` ops are created (at least max last + 1).
struct Interval {
  int32_t first;
  int32_t last;
  uint64_t size;
};

inline roam::Graph interval_graph(const std::vector<Interval>& ivs, int32_t steps = 0) {
  for (const Interval& iv : ivs) steps = std::max(steps, iv.last + 1);
  nlohmann::json tensors = nlohmann::json::array();
  std::vector<nlohmann::json> ops(steps);
  for (int32_t k = 0; k < steps; ++k) {
    ops[k] = {{"id", "n" + std::to_string(k)}, {"target", "test.op"},
              {"inputs", nlohmann::json::array()}, {"outputs", nlohmann::json::array()}};
  }
  for (size_t i = 0; i < ivs.size(); ++i) {
    const std::string id = "s" + std::to_string(i);
    tensors.push_back({{"id", id}, {"size", ivs[i].size}});
    ops[ivs[i].first]["outputs"].push_back(id);
    if (ivs[i].last > ivs[i].first) ops[ivs[i].last]["inputs"].push_back(id);
  }
  nlohmann::json doc = {{"format", "roam-graph"}, {"version", 1}, {"name", "interval-test"},
              {"tensors", tensors}, {"ops", ops}, {"outputs", nlohmann::json::array()}};
  return roam::parse_graph(doc, "<test>");
}

// Sizes written in units of kUnit = 64 bytes for alignment 64: the raw sizes are u*64 - 5 bytes,
// so every storage must be rounded up to u units.
constexpr uint64_t kUnit = 64;
inline std::vector<Interval> units(std::vector<Interval> ivs) {
  for (Interval& iv : ivs) iv.size = iv.size * kUnit - 5;
  return ivs;
}

// Conflicting storages (intersecting inclusive live intervals) get disjoint aligned byte ranges;
// "" when they do, else the first problem.
inline std::string graph_layout_problem(const roam::Graph& g, const roam::Liveness& live,
                                        const std::vector<uint64_t>& off, uint64_t alignment) {
  if (off.size() != g.storages.size()) return "wrong number of offsets";
  for (size_t a = 0; a < off.size(); ++a) {
    if (off[a] % alignment != 0) return "storage " + std::to_string(a) + " misaligned";
    const uint64_t ea = off[a] + roam::align_up(g.storages[a].size, alignment);
    for (size_t b = a + 1; b < off.size(); ++b) {
      if (live.last[a] < live.first[b] || live.last[b] < live.first[a]) continue;
      const uint64_t eb = off[b] + roam::align_up(g.storages[b].size, alignment);
      if (off[a] < eb && off[b] < ea) {
        return "storages " + std::to_string(a) + " and " + std::to_string(b) + " overlap";
      }
    }
  }
  return "";
}

// Brute force: the smallest height over every assignment of aligned offsets (depth first over
// the buffers, offsets 0 .. sum of sizes + alignment; partial assignments checked pairwise).
inline uint64_t brute_min_height(const std::vector<roam::AllocBuffer>& b) {
  uint64_t limit = 0;
  for (const roam::AllocBuffer& x : b) limit += x.size + x.alignment;
  uint64_t best = limit + 1;
  std::vector<uint64_t> off(b.size(), 0);
  std::function<void(size_t, uint64_t)> rec = [&](size_t i, uint64_t height) {
    if (height >= best) return;
    if (i == b.size()) {
      best = height;
      return;
    }
    for (uint64_t o = 0; o + b[i].size <= limit; o += b[i].alignment) {
      bool ok = true;
      for (size_t j = 0; j < i && ok; ++j) {
        const bool time = b[i].lower < b[j].upper && b[j].lower < b[i].upper;
        const bool space = o < off[j] + b[j].size && off[j] < o + b[i].size;
        ok = !(time && space);
      }
      if (!ok) continue;
      off[i] = o;
      rec(i + 1, std::max(height, o + b[i].size));
    }
  };
  rec(0, 0);
  return best;
}

// x (input) -> A -> a (1024 B); V: view av of a; B: a -> b; L: b -> l (graph output);
// G1: l -> g1; G2: g1, av -> g2. A, V and B are recomputable.
inline GraphJson alias_remat_graph() {
  GraphJson b("alias-remat");
  b.tensor("x", 64, "input").tensor("a", 1024).tensor("av", 1024, "", "a").tensor("b", 64)
      .tensor("l", 64).tensor("g1", 64).tensor("g2", 64);
  b.op("A", {"x"}, {"a"}).op("V", {"a"}, {"av"}).op("B", {"a"}, {"b"}).op("L", {"b"}, {"l"})
      .op("G1", {"l"}, {"g1"}, "backward").op("G2", {"g1", "av"}, {"g2"}, "backward").output("l");
  for (nlohmann::json& op : b.doc["ops"]) {
    const std::string id = op["id"];
    op["recomputable"] = id == "A" || id == "V" || id == "B";
    op["cost"] = id == "A" ? 0.5 : 0.25;
  }
  return b;
}

// n tiny random buffers for brute-force checks: lower in [0, max_lower), lifetime 1..max_len
// steps, size 1..max_size, alignment 1..max_align when `aligned` (else 1). Drawn in that order.
inline std::vector<roam::AllocBuffer> random_tiny_buffers(std::mt19937_64& rng, int n,
                                                          uint64_t max_lower, uint64_t max_len,
                                                          uint64_t max_size, bool aligned,
                                                          uint64_t max_align) {
  std::vector<roam::AllocBuffer> b;
  for (int i = 0; i < n; ++i) {
    roam::AllocBuffer x;
    x.lower = static_cast<int64_t>(rng() % max_lower);
    x.upper = x.lower + 1 + static_cast<int64_t>(rng() % max_len);
    x.size = 1 + rng() % max_size;
    x.alignment = aligned ? 1 + rng() % max_align : 1;
    b.push_back(x);
  }
  return b;
}

// Buffers with half-open lifetimes (the pairwise rule of the MiniMalloc README): aligned
// offsets, below `capacity`, and two buffers live together (both of non-zero size) get disjoint
// byte ranges; "" when valid, else the first problem.
inline std::string buffers_problem(const std::vector<roam::AllocBuffer>& b,
                                   const std::vector<uint64_t>& off,
                                   uint64_t capacity = std::numeric_limits<uint64_t>::max()) {
  if (off.size() != b.size()) return "wrong number of offsets";
  for (size_t i = 0; i < b.size(); ++i) {
    if (off[i] % b[i].alignment != 0) return "buffer " + std::to_string(i) + " misaligned";
    if (off[i] + b[i].size > capacity) return "buffer " + std::to_string(i) + " above capacity";
    for (size_t j = i + 1; j < b.size(); ++j) {
      const bool time = b[i].lower < b[j].upper && b[j].lower < b[i].upper;
      const bool space = off[i] < off[j] + b[j].size && off[j] < off[i] + b[i].size;
      if (time && space && b[i].size > 0 && b[j].size > 0) {
        return "buffers " + std::to_string(i) + " and " + std::to_string(j) + " overlap";
      }
    }
  }
  return "";
}

/// A random graph (random_graph_json) with 70% of its ops recomputable and each op's `cost`
/// 0.001-0.1 s: the instances of the plan_with_budget property tests.
inline json random_remat_graph(uint64_t seed, int ops) {
  RandomGraphOptions o;
  o.num_ops = ops;
  json doc = random_graph_json(seed, o);
  std::mt19937_64 rng(seed * 7 + 1);
  for (json& op : doc["ops"]) {
    op["recomputable"] = rng() % 10 < 7;
    op["cost"] = static_cast<double>(1 + rng() % 100) / 1000.0;
  }
  return doc;
}

}  // namespace roamtest
