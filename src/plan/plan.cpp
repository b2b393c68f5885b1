// Plan stats and the roam-plan writer (versions 1 and 2).
#include "roam/plan.h"

#include <algorithm>

#include "roam/analysis.h"
#include "roam/layout.h"

namespace roam {

PlanStats compute_stats(const Graph& g, const Order& order, const std::vector<uint64_t>& offsets,
                        uint64_t alignment, uint64_t lower_bound, double solve_seconds) {
  PlanStats st;
  st.resident_bytes = g.resident_bytes;
  st.theoretical_peak_bytes = theoretical_peak(g, order, alignment);
  st.arena_bytes = arena_bytes(g, offsets, alignment);
  st.peak_bytes = st.resident_bytes + st.arena_bytes;
  st.lower_bound_bytes = lower_bound;
  st.fragmentation = st.theoretical_peak_bytes == 0
                         ? 0.0
                         : static_cast<double>(st.arena_bytes) /
                                   static_cast<double>(st.theoretical_peak_bytes) - 1.0;
  st.solve_seconds = solve_seconds;
  return st;
}

nlohmann::json plan_to_json(const Graph& g_in, const Plan& plan) {
  // With in-place writes the storages are those of the applied graph (plan.h).
  Graph applied;
  if (!plan.inplace.empty()) applied = apply_inplace(g_in, plan.inplace);
  const Graph& g = plan.inplace.empty() ? g_in : applied;
  const int version = plan.inplace.empty() ? plan.version : std::max(plan.version, 2);
  nlohmann::json doc;
  doc["format"] = "roam-plan";
  doc["version"] = version;
  doc["graph"] = plan.graph;
  doc["alignment"] = plan.alignment;
  nlohmann::json order = nlohmann::json::array();
  for (OpIdx v : plan.order) order.push_back(g.ops[v].id);
  doc["order"] = std::move(order);
  if (!g.collectives.empty()) {
    // docs/COLLECTIVES.md: plan field `collectives`: the collective ops in the order the plan runs
    // them (their first appearances; a collective runs once), for other ranks and tools to compare.
    nlohmann::json collectives = nlohmann::json::array();
    std::vector<char> seen(g.ops.size(), 0);
    for (OpIdx v : plan.order) {
      if (!g.ops[v].collective || seen[v]) continue;
      seen[v] = 1;
      collectives.push_back(g.ops[v].id);
    }
    doc["collectives"] = std::move(collectives);
  }
  nlohmann::json offsets = nlohmann::json::object();
  nlohmann::json recompute = nlohmann::json::object();
  nlohmann::json workspaces = nlohmann::json::object();
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    const Storage& st = g.storages[s];
    const std::vector<uint64_t> none;
    const auto& later = s < static_cast<StorageIdx>(plan.recompute_offsets.size())
                            ? plan.recompute_offsets[s] : none;
    if (st.workspace_of >= 0) {
      nlohmann::json list = nlohmann::json::array({plan.offsets[s]});
      for (uint64_t off : later) list.push_back(off);
      workspaces[g.ops[st.workspace_of].id] = std::move(list);
      continue;
    }
    offsets[g.tensors[st.root].id] = plan.offsets[s];
    if (!later.empty()) recompute[g.tensors[st.root].id] = later;
  }
  doc["offsets"] = std::move(offsets);
  if (version >= 2) doc["recompute_offsets"] = std::move(recompute);
  if (!plan.inplace.empty()) {
    nlohmann::json inplace = nlohmann::json::object();
    for (const InplacePair& p : plan.inplace) inplace[g.tensors[p.output].id] = g.tensors[p.input].id;
    doc["inplace"] = std::move(inplace);
  }
  if (!workspaces.empty()) doc["workspace_offsets"] = std::move(workspaces);
  const PlanStats& st = plan.stats;
  doc["stats"] = {{"resident_bytes", st.resident_bytes},
                  {"theoretical_peak_bytes", st.theoretical_peak_bytes},
                  {"arena_bytes", st.arena_bytes},
                  {"peak_bytes", st.peak_bytes},
                  {"lower_bound_bytes", st.lower_bound_bytes},
                  {"fragmentation", st.fragmentation},
                  {"solve_seconds", st.solve_seconds}};
  if (version >= 2) {
    doc["stats"]["recompute_seconds"] = st.recompute_seconds;
    doc["stats"]["compute_seconds"] = st.compute_seconds;
    doc["stats"]["recomputations"] = st.recomputations;
  }
  doc["method"] = {{"order", plan.order_method},
                   {"layout", plan.layout_method},
                   {"options", plan.options}};
  return doc;
}

}  // namespace roam
