// See planner_bridge.h.
#include "planner_bridge.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/inplace.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/remat.h"
#include "roam/validate.h"

namespace roam_exec {

namespace {

roam::Graph parse(const std::string& text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw roam::InputError("(python graph)", "(json)", "", e.what());
  }
  return roam::parse_graph(doc, "(python graph)");
}

roam::PlanRequest request(const PlanCall& call) {
  // The CLI's limits (src/cli/main.cpp): a bad option is the caller's error, never a crash.
  if (!roam::is_plan_alignment(call.alignment)) {
    throw std::invalid_argument("alignment " + std::to_string(call.alignment) +
                                ": must be a power of two between 1 and 1048576 bytes");
  }
  if (call.threads < 1) {
    throw std::invalid_argument("threads " + std::to_string(call.threads) + ": must be at least 1");
  }
  if (!(call.time_limit_seconds > 0) || !std::isfinite(call.time_limit_seconds)) {
    throw std::invalid_argument("time_limit_seconds " + std::to_string(call.time_limit_seconds) +
                                ": must be a positive number of seconds");
  }
  roam::PlanRequest req;
  req.order = call.order;
  req.layout = call.layout;
  req.options.alignment = call.alignment;
  req.options.threads = call.threads;
  req.options.time_limit_seconds = call.time_limit_seconds;
  return req;
}

nlohmann::json checked(const roam::Graph& g, const roam::PlanResult& r) {
  nlohmann::json doc = roam::plan_to_json(g, r.plan);
  const roam::ValidationReport rep = roam::validate_plan(g, doc, "(generated plan)");
  if (!rep.valid) {
    throw std::logic_error("the " + r.plan.order_method + "/" + r.plan.layout_method +
                           " plan fails validation: " +
                           (rep.problems.empty() ? std::string("?") : rep.problems.front()));
  }
  return doc;
}

}  // namespace

std::string plan_json(const std::string& graph_json, const PlanCall& call) {
  const roam::Graph g = parse(graph_json);
  return checked(g, roam::make_plan(g, request(call))).dump();
}

std::string plan_budget_json(const std::string& graph_json, const PlanCall& call) {
  const roam::Graph g = parse(graph_json);
  nlohmann::json out;
  try {
    out["plan"] = checked(g, roam::plan_with_budget(g, request(call), call.budget_bytes));
  } catch (const roam::BudgetInfeasible& e) {
    out["infeasible"] = {{"budget_bytes", e.budget},
                         {"smallest_budget_bytes", e.smallest_budget},
                         {"lower_bound_bytes", e.lower_bound},
                         {"message", e.what()}};
  }
  return out.dump();
}

std::string validate_json(const std::string& graph_json, const std::string& plan_text) {
  const roam::Graph g = parse(graph_json);
  nlohmann::json plan;
  try {
    plan = nlohmann::json::parse(plan_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw roam::InputError("(python plan)", "(json)", "", e.what());
  }
  const roam::ValidationReport rep = roam::validate_plan(g, plan, "(python plan)");
  const roam::PlanStats& s = rep.recomputed;
  nlohmann::json out = {
      {"valid", rep.valid},
      {"problems", rep.problems},
      {"recomputed",
       {{"resident_bytes", s.resident_bytes},
        {"theoretical_peak_bytes", s.theoretical_peak_bytes},
        {"arena_bytes", s.arena_bytes},
        {"peak_bytes", s.peak_bytes},
        {"lower_bound_bytes", s.lower_bound_bytes},
        {"fragmentation", s.fragmentation},
        {"recompute_seconds", s.recompute_seconds},
        {"compute_seconds", s.compute_seconds},
        {"recomputations", s.recomputations}}}};
  return out.dump();
}

uint64_t program_cuda_reserved_json(const std::string& graph_json, uint64_t alignment) {
  const roam::Graph g = parse(graph_json);
  const roam::Order program = g.program_order();
  // The in-place writes program order allows are the ones eager PyTorch makes.
  const roam::Graph x = roam::apply_inplace(g, roam::inplace_valid_in(g, program));
  const roam::Liveness live = roam::compute_liveness(x, program);
  return roam::layout_pytorch(x, live, alignment).reserved_bytes;
}

uint64_t theoretical_peak_json(const std::string& graph_json, const std::vector<std::string>& order,
                               uint64_t alignment) {
  const roam::Graph g = parse(graph_json);
  roam::Order o;
  o.reserve(order.size());
  for (const std::string& id : order) {
    auto it = g.op_index.find(id);
    if (it == g.op_index.end()) throw std::invalid_argument("unknown op id " + id);
    o.push_back(it->second);
  }
  if (!roam::is_topological(g, o)) throw std::invalid_argument("order is not a valid order");
  return roam::inplace_peak(g, o, alignment);
}

std::vector<std::string> order_method_names() { return roam::order_methods(); }
std::vector<std::string> layout_method_names() { return roam::layout_methods(); }

}  // namespace roam_exec
