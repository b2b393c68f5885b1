// Independent plan validator: recounts everything from the graph, the order and the offsets.
// It uses the graph reader (dependency edges, storages), liveness and the lower bound, and none
// of the planners' code.
#include "roam/validate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "roam/analysis.h"

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

ValidationReport validate_plan(const Graph& g, const nlohmann::json& doc, const std::string& file) {
  const Reader r{file};
  if (!doc.is_object()) r.fail("(document)", "", "must be a JSON object");
  const auto& format = r.get(doc, "format");
  if (!format.is_string() || format.get<std::string>() != "roam-plan") {
    r.fail("format", "", "expected \"roam-plan\", got " + format.dump());
  }
  const auto& version = r.get(doc, "version");
  if (!version.is_number_integer() || version.get<int64_t>() != 1) {
    r.fail("version", "", "unsupported version " + version.dump() + " (this reader takes 1)");
  }
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

  ValidationReport rep;
  auto problem = [&](const std::string& msg) {
    rep.valid = false;
    ++rep.problem_count;
    if (rep.problems.size() < kMaxProblems) rep.problems.push_back(msg);
  };
  if (auto it = doc.find("graph"); it != doc.end() && it->is_string() && it->get<std::string>() != g.name) {
    problem("plan is for graph '" + it->get<std::string>() + "', not '" + g.name + "'");
  }

  // Order: a permutation of the ops.
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
    if (step[it->second] >= 0) {
      problem("order[" + std::to_string(k) + "]: op '" + id + "' appears twice");
      continue;
    }
    step[it->second] = static_cast<int32_t>(order.size());
    order.push_back(it->second);
  }
  for (OpIdx v = 0; v < n; ++v) {
    if (step[v] < 0) problem("order: op '" + g.ops[v].id + "' is missing");
  }
  if (!rep.valid) return rep;  // liveness needs a permutation

  // Dependencies.
  for (OpIdx v : order) {
    for (OpIdx u : g.preds[v]) {
      if (step[u] > step[v]) {
        problem("order: op '" + g.ops[v].id + "' at step " + std::to_string(step[v]) +
                " runs before op '" + g.ops[u].id + "' (step " + std::to_string(step[u]) +
                ") that it depends on");
      }
    }
  }

  const bool order_respects_dependencies = rep.valid;

  // Offsets: exactly one per storage, aligned.
  std::vector<uint64_t> offsets(g.storages.size(), 0);
  std::vector<char> has(g.storages.size(), 0);
  for (const auto& [id, value] : joffsets.items()) {
    const uint64_t off = r.get_u64(value, "offsets." + id, id);
    auto it = g.tensor_index.find(id);
    if (it == g.tensor_index.end()) {
      problem("offsets: unknown tensor '" + id + "'");
      continue;
    }
    const StorageIdx s = g.storage_of[it->second];
    if (s < 0 || g.storages[s].root != it->second) {
      problem("offsets: tensor '" + id + "' is not a non-resident root storage of non-zero size");
      continue;
    }
    if (off >= kMaxOffset) {
      problem("offsets: storage '" + id + "' at " + std::to_string(off) + " is beyond 2^62 bytes");
      continue;
    }
    if (off % alignment != 0) {
      problem("offsets: storage '" + id + "' at " + std::to_string(off) + " is not a multiple of the alignment " +
              std::to_string(alignment));
    }
    offsets[s] = off;
    has[s] = 1;
  }
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    if (!has[s]) problem("offsets: storage '" + g.tensors[g.storages[s].root].id + "' has no offset");
  }

  // Overlap sweep: at each step retire storages that died before it, then insert those born at
  // it; with no overlap among the active set, checking the two neighbours by offset suffices.
  const Liveness live = compute_liveness(g, order);
  std::vector<uint64_t> size(g.storages.size());
  for (StorageIdx s = 0; s < g.num_storages(); ++s) size[s] = align_up(g.storages[s].size, alignment);
  std::vector<std::vector<StorageIdx>> born(n), dies(n);
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    born[live.first[s]].push_back(s);
    dies[live.last[s]].push_back(s);
  }
  std::set<std::pair<uint64_t, StorageIdx>> active;
  auto name = [&](StorageIdx s) { return "'" + g.tensors[g.storages[s].root].id + "'"; };
  auto overlap_msg = [&](StorageIdx a, StorageIdx b, int32_t t) {
    return "storages " + name(a) + " [" + std::to_string(offsets[a]) + ", " + std::to_string(offsets[a] + size[a]) +
           ") and " + name(b) + " [" + std::to_string(offsets[b]) + ", " + std::to_string(offsets[b] + size[b]) +
           ") overlap while both are live at step " + std::to_string(t) + " (op '" + g.ops[order[t]].id + "')";
  };
  uint64_t live_bytes = 0, tp = 0, arena = 0;
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

  PlanStats& st = rep.recomputed;
  st.resident_bytes = g.resident_bytes;
  st.theoretical_peak_bytes = tp;
  st.arena_bytes = arena;
  st.peak_bytes = g.resident_bytes + arena;
  // The plan's order speeds the cut bound up only when it is a valid order (any hint gives the
  // same value).
  st.lower_bound_bytes = lower_bound(g, alignment, order_respects_dependencies ? &order : nullptr);
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
  check("resident_bytes", st.resident_bytes);
  check("theoretical_peak_bytes", st.theoretical_peak_bytes);
  check("arena_bytes", st.arena_bytes);
  check("peak_bytes", st.peak_bytes);
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
  if (st.lower_bound_bytes > tp) {
    problem("lower bound " + std::to_string(st.lower_bound_bytes) + " exceeds Tp " + std::to_string(tp) +
            " (a bug in the bound)");
  }
  return rep;
}

}  // namespace roam
