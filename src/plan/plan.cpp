// Plan stats and the roam-plan v1 writer.
#include "roam/plan.h"

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

nlohmann::json plan_to_json(const Graph& g, const Plan& plan) {
  nlohmann::json doc;
  doc["format"] = "roam-plan";
  doc["version"] = 1;
  doc["graph"] = plan.graph;
  doc["alignment"] = plan.alignment;
  nlohmann::json order = nlohmann::json::array();
  for (OpIdx v : plan.order) order.push_back(g.ops[v].id);
  doc["order"] = std::move(order);
  nlohmann::json offsets = nlohmann::json::object();
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    offsets[g.tensors[g.storages[s].root].id] = plan.offsets[s];
  }
  doc["offsets"] = std::move(offsets);
  const PlanStats& st = plan.stats;
  doc["stats"] = {{"resident_bytes", st.resident_bytes},
                  {"theoretical_peak_bytes", st.theoretical_peak_bytes},
                  {"arena_bytes", st.arena_bytes},
                  {"peak_bytes", st.peak_bytes},
                  {"lower_bound_bytes", st.lower_bound_bytes},
                  {"fragmentation", st.fragmentation},
                  {"solve_seconds", st.solve_seconds}};
  doc["method"] = {{"order", plan.order_method},
                   {"layout", plan.layout_method},
                   {"options", plan.options}};
  return doc;
}

}  // namespace roam
