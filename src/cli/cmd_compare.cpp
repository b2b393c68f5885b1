// `roam compare GRAPH`: every order x layout, the headline of the best, one row per distinct
// result (see the verb's help in main.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "plan_verbs.h"
#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/headline.h"
#include "roam/inplace.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/remat.h"
#include "roam/validate.h"
#include "verbs.h"

namespace roam::cli {

int cmd_compare(const std::string& graph_path, const roam::PlanOptions& options,
                const CompareRequest& creq, const std::optional<uint64_t>& budget) {
  const uint64_t alignment = options.alignment;
  if (!creq.json_path.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(graph_path, creq.json_path, ec)) {
      throw roam::InputError(creq.json_path, "--json", "", "is the graph file itself; choose another name");
    }
  }
  const roam::Graph g = load(graph_path);
  progress("lower bound");
  const auto& orders = creq.orders.empty() ? roam::order_methods() : creq.orders;
  std::vector<std::string> layouts = creq.layouts.empty() ? roam::layout_methods() : creq.layouts;
  struct Ordered {
    std::string method;
    roam::Order order;
    double seconds;
  };
  std::vector<Ordered> ordered;
  // With in-place permissions every order method runs on the forced graph (roam/inplace.h, as
  // make_order does), made once here.
  std::optional<roam::ForcedGraph> forced;
  if (roam::has_inplace(g)) forced = roam::force_inplace(g);
  const roam::Graph& og = forced ? forced->graph : g;
  for (const std::string& order_method : orders) {
    progress("ordering " + order_method);
    const auto order_start = std::chrono::steady_clock::now();
    roam::Order order = roam::make_order(og, order_method, options);
    ordered.push_back({order_method, std::move(order),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - order_start).count()});
  }
  // One lower bound for every row; the order with the smallest Tp is the hint that lets the cut
  // bound skip most ops (the value does not depend on it).
  progress("lower bound");
  const auto lb_start = std::chrono::steady_clock::now();
  const roam::Order* hint = nullptr;
  uint64_t hint_tp = 0;
  for (const Ordered& o : ordered) {
    const uint64_t tp = roam::inplace_peak(g, o.order, alignment);
    if (hint == nullptr || tp < hint_tp) {
      hint = &o.order;
      hint_tp = tp;
    }
  }
  const uint64_t lb = roam::lower_bound(g, alignment, hint);
  const double lb_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - lb_start).count();
  // The pytorch row (program + pytorch) is the reference: always computed.
  const bool have_ref = std::find(orders.begin(), orders.end(), "program") != orders.end() &&
                        std::find(layouts.begin(), layouts.end(), "pytorch") != layouts.end();
  struct Row {
    roam::PlanResult r;
    uint64_t peak;  // "held": resident + reserved, what the process holds
    double order_seconds = 0;
  };
  std::vector<Row> rows;
  if (!have_ref) {
    roam::PlanResult r = roam::make_plan(g, {"program", "pytorch", options}, lb);
    checked_plan_json(g, r.plan);
    rows.push_back({std::move(r), 0});
    rows.back().peak = g.resident_bytes + rows.back().r.reserved_bytes;
  }
  for (const Ordered& o : ordered) {
    for (const std::string& layout : layouts) {
      progress("laying out " + o.method + " + " + layout);
      roam::PlanResult r =
          roam::make_plan_for_order(g, o.order, o.seconds, {o.method, layout, options}, lb);
      checked_plan_json(g, r.plan);
      const uint64_t peak = g.resident_bytes + r.reserved_bytes;
      rows.push_back({std::move(r), peak, o.seconds});
    }
  }
  // The reference: PyTorch's eager order under its caching allocator.
  uint64_t ref_peak = 0;
  for (const Row& row : rows) {
    if (row.r.plan.order_method == "program" && row.r.plan.layout_method == "pytorch") ref_peak = row.peak;
  }
  // Under --budget: planned before anything is printed, so that the headline can name it.
  nlohmann::json budget_row;
  std::optional<roam::PlanResult> budget_plan;
  std::string budget_infeasible;
  if (budget) {
    progress("planning under the budget");
    try {
      budget_plan = roam::plan_with_budget(g, {"auto", "auto", options}, *budget);
      checked_plan_json(g, budget_plan->plan);
      const roam::PlanStats& st = budget_plan->plan.stats;
      budget_row = {{"budget_bytes", *budget}, {"version", budget_plan->plan.version},
                    {"theoretical_peak_bytes", st.theoretical_peak_bytes},
                    {"arena_bytes", st.arena_bytes}, {"peak_bytes", st.peak_bytes},
                    {"recomputations", st.recomputations}, {"recompute_seconds", st.recompute_seconds},
                    {"compute_seconds", st.compute_seconds}, {"solve_seconds", st.solve_seconds}};
    } catch (const roam::BudgetInfeasible& e) {
      budget_infeasible = e.what() + below_resident(g, *budget);
      budget_row = {{"budget_bytes", *budget}, {"infeasible", true},
                    {"smallest_budget_bytes", e.smallest_budget}, {"lower_bound_bytes", e.lower_bound}};
    }
  }
  // The headline: the best row (least held bytes; ties: the first) against the program order.
  // Rows in the order that picks representatives: among equal results, roam's own methods first.
  std::vector<const Row*> by_pref;
  for (const Row& row : rows) by_pref.push_back(&row);
  std::stable_sort(by_pref.begin(), by_pref.end(), [](const Row* a, const Row* b) {
    auto rank = [](const Row* r) {
      return (r->r.plan.order_method == "roam" ? 0 : 2) + (r->r.plan.layout_method == "roam" ? 0 : 1);
    };
    return rank(a) < rank(b);
  });
  const Row* best = nullptr;
  for (const Row* row : by_pref) {
    if (best == nullptr || row->peak < best->peak) best = row;
  }
  roam::Headline h = roam::headline_reference(g, alignment);
  h.peak_bytes = best ? best->peak : g.resident_bytes;
  h.lower_bound_bytes = g.resident_bytes + lb;
  std::cout << roam::headline_text(h) << "\n";
  if (budget_plan) {
    const roam::PlanStats& st = budget_plan->plan.stats;
    roam::Headline hb = h;
    hb.peak_bytes = st.peak_bytes;
    hb.lower_bound_bytes = g.resident_bytes + st.lower_bound_bytes;
    hb.budget_bytes = *budget;
    hb.recomputations = st.recomputations;
    if (st.compute_seconds > 0) hb.recompute_overhead = st.recompute_seconds / st.compute_seconds;
    std::cout << roam::headline_text(hb) << "\n";
  } else if (budget) {
    std::cout << "under --budget: " << budget_infeasible << "\n";
  }
  std::cout << roam::headline_key() << "\n";
  if (best) {  // what is live at the best plan's peak (validated again for its instance graph)
    roam::ValidationReport rep;
    checked_plan_json(g, best->r.plan, &rep);
    if (const std::string at_peak = peak_line(rep, alignment); !at_peak.empty()) {
      std::cout << "at the peak of " << best->r.plan.order_method << "+" << best->r.plan.layout_method
                << ": " << at_peak << "\n";
    }
  }
  if (budget_plan) {  // and at the peak of the plan under the budget (with recomputation)
    roam::ValidationReport rep;
    checked_plan_json(g, budget_plan->plan, &rep);
    if (const std::string at_peak = peak_line(rep, alignment); !at_peak.empty()) {
      std::cout << "at the peak under --budget: " << at_peak << "\n";
    }
  }
  if (best) {
    std::cout << "best: order " << best->r.plan.order_method << ", layout "
              << best->r.plan.layout_method << "\n";
  }
  std::cout << "graph " << g.name << ": " << g.ops.size() << " ops, " << g.storages.size()
            << " storages, resident " << mib(g.resident_bytes) << " MiB, Tp bound " << mib(lb)
            << " MiB" << (roam::has_inplace(g) ? " (over every order, in-place writes included)" : "")
            << ", alignment " << alignment << " B\n";
  if (roam::has_inplace(g)) {
    std::cout << "in place: each row uses every in-place write its order allows (a row with any is "
                 "a version-2 plan, its file's lower_bound_bytes the bound over every schedule, "
                 "recomputation allowed: "
              << mib(roam::recompute_lower_bound(g, alignment)) << " MiB)\n";
  }
  // Distinct results (rows with the same Tp, arena and held bytes collapse into the first, by
  // held bytes), unless --all.
  struct Group {
    const Row* row;
    std::vector<const Row*> ties;
  };
  std::vector<Group> groups;
  for (const Row* row_ptr : creq.all ? std::vector<const Row*>() : by_pref) {
    const Row& row = *row_ptr;
    Group* same = nullptr;
    for (Group& gr : groups) {
      const roam::PlanStats& a = gr.row->r.plan.stats;
      const roam::PlanStats& b = row.r.plan.stats;
      if (!creq.all && a.theoretical_peak_bytes == b.theoretical_peak_bytes &&
          a.arena_bytes == b.arena_bytes && gr.row->peak == row.peak) {
        same = &gr;
        break;
      }
    }
    if (same) same->ties.push_back(&row);
    else groups.push_back({&row, {}});
  }
  if (creq.all) {
    for (const Row& row : rows) groups.push_back({&row, {}});
  }
  if (!creq.all) {
    std::stable_sort(groups.begin(), groups.end(),
                     [](const Group& a, const Group& b) { return a.row->peak < b.row->peak; });
  }
  // "lescea+{llfb,best_fit}, lpmf+roam": the tied methods, grouped by order.
  auto tie_text = [](const std::vector<const Row*>& ties) {
    std::vector<std::pair<std::string, std::vector<std::string>>> by_order;
    for (const Row* t : ties) {
      const std::string& o = t->r.plan.order_method;
      auto it = std::find_if(by_order.begin(), by_order.end(), [&](const auto& p) { return p.first == o; });
      if (it == by_order.end()) by_order.push_back({o, {t->r.plan.layout_method}});
      else it->second.push_back(t->r.plan.layout_method);
    }
    std::string s;
    for (const auto& [o, ls] : by_order) {
      s += (s.empty() ? "" : ", ") + o + "+";
      if (ls.size() == 1) {
        s += ls[0];
      } else {
        s += "{";
        for (size_t i = 0; i < ls.size(); ++i) s += (i ? "," : "") + ls[i];
        s += "}";
      }
    }
    return s;
  };
  std::printf("%-8s %-15s %10s %7s %10s %7s %10s %10s %8s %11s%s\n", "order", "layout", "Tp_MiB",
              "Tp/LB", "arena_MiB", "frag_%", "peak_MiB", "held_MiB", "seconds", "vs_pytorch",
              creq.all ? "" : "  same result");
  for (const Group& gr : groups) {
    const Row& row = *gr.row;
    const roam::PlanStats& st = row.r.plan.stats;
    const double ratio = lb ? static_cast<double>(st.theoretical_peak_bytes) / static_cast<double>(lb) : 1.0;
    // Signed as in the headline: negative = less than the reference.
    const double change = ref_peak ? 100.0 * (static_cast<double>(row.peak) / static_cast<double>(ref_peak) - 1.0) : 0.0;
    std::printf("%-8s %-15s %10s %7.4f %10s %7.2f %10s %10s %8.3f %+10.2f%%%s\n",
                row.r.plan.order_method.c_str(), row.r.plan.layout_method.c_str(),
                mib(st.theoretical_peak_bytes).c_str(), ratio, mib(st.arena_bytes).c_str(),
                100.0 * st.fragmentation, mib(st.peak_bytes).c_str(), mib(row.peak).c_str(),
                st.solve_seconds, change, gr.ties.empty() ? "" : ("  " + tie_text(gr.ties)).c_str());
  }
  if (!creq.all && groups.size() < rows.size()) {
    std::cout << groups.size() << " distinct results of " << rows.size()
              << " order x layout pairs (same result: equal Tp, arena and held bytes; --all "
                 "prints every pair)\n";
  }
  if (budget) {
    if (budget_plan) {
      const roam::PlanResult& r = *budget_plan;
      const roam::PlanStats& st = r.plan.stats;
      const double overhead = st.compute_seconds > 0 ? st.recompute_seconds / st.compute_seconds : 0.0;
      std::printf("%-24s %10s %7s %10s %7.2f %10s %10s %8.3f  budget %s MiB: %s\n",
                  r.plan.version >= 2 ? "roam+recompute" : "roam (no recompute)",
                  mib(st.theoretical_peak_bytes).c_str(), "", mib(st.arena_bytes).c_str(),
                  100.0 * st.fragmentation, mib(st.peak_bytes).c_str(), mib(st.peak_bytes).c_str(),
                  st.solve_seconds, mib(*budget).c_str(),
                  r.plan.version >= 2 ? (std::to_string(st.recomputations) + " recomputations, overhead " +
                                         fixed(100.0 * overhead, 2) + " % of compute seconds").c_str()
                                      : "met without recomputation");
    } else {
      std::cout << "budget " << mib(*budget) << " MiB: " << budget_infeasible << "\n";
    }
  }
  std::cout << "peak = resident + arena (as in the plan file); held = resident + bytes the method "
               "reserves (= peak, except that the pytorch caching simulation holds whole "
               "segments); vs_pytorch = change of held against program + pytorch (negative: "
               "less, as in the headline); Tp bound = no order's Tp is lower (computed in "
            << fixed(lb_seconds, 3) << " s)\n";
  if (!creq.json_path.empty()) {
    nlohmann::json doc = {{"graph", g.name}, {"ops", g.ops.size()}, {"storages", g.storages.size()},
                          {"resident_bytes", g.resident_bytes}, {"lower_bound_bytes", lb},
                          {"lower_bound_seconds", lb_seconds}, {"alignment", alignment},
                          {"reference_held_bytes", ref_peak}, {"rows", nlohmann::json::array()},
                          {"options", {{"threads", options.threads},
                                       {"time_limit_seconds", options.time_limit_seconds},
                                       {"extra", options.extra}}}};
    for (const Row& row : rows) {
      const roam::PlanStats& st = row.r.plan.stats;
      doc["rows"].push_back({{"order", row.r.plan.order_method},
                             {"layout", row.r.plan.layout_method},
                             {"theoretical_peak_bytes", st.theoretical_peak_bytes},
                             {"arena_bytes", st.arena_bytes},
                             {"reserved_bytes", row.r.reserved_bytes},
                             {"peak_bytes", st.peak_bytes},
                             {"held_bytes", row.peak},
                             {"fragmentation", st.fragmentation},
                             {"solve_seconds", st.solve_seconds},
                             {"order_seconds", row.order_seconds}});
      if (roam::has_inplace(g)) doc["rows"].back()["inplace_writes"] = row.r.plan.inplace.size();
    }
    if (budget) doc["budget"] = budget_row;
    roam::write_json_file(creq.json_path, doc, 1);
  }
  return 0;
}

}  // namespace roam::cli
