// libroam for the Python executor: graphs and plans cross the boundary as roam-graph v1 /
// roam-plan v1 or v2 JSON text (GRAPH_FORMAT.md), so this file is the only one that sees the library's
// types. No pybind11 here (module.cpp binds these functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace roam_exec {

struct PlanCall {
  std::string order = "auto";
  std::string layout = "auto";
  uint64_t alignment = 64;
  int threads = 1;
  double time_limit_seconds = 60;
  uint64_t budget_bytes = 0;  // 0: no budget (make_plan); else plan_with_budget (peak bound, bytes)
};

/// Plans `graph_json` (roam-graph v1 text) with make_plan and returns the roam-plan v1 text, after
/// checking it with the independent validator (throws std::logic_error if it fails: a planner bug).
/// Throws roam::InputError (std::runtime_error) for a bad graph and std::invalid_argument for an
/// unknown method.
std::string plan_json(const std::string& graph_json, const PlanCall& call);

/// Plans `graph_json` so that resident + arena <= call.budget_bytes (plan_with_budget: a version-1
/// plan when no recomputation is needed, else version 2), validated like plan_json. Returns JSON
/// text: {"plan": {...}} or, when roam meets no schedule within the budget,
/// {"infeasible": {"budget_bytes", "smallest_budget_bytes", "lower_bound_bytes", "message"}}
/// (bytes; smallest 0 when nothing could be planned). Throws like plan_json otherwise.
std::string plan_budget_json(const std::string& graph_json, const PlanCall& call);

/// Validates `plan_json` against `graph_json`; returns {"valid": bool, "problems": [...],
/// "recomputed": {stats}} as JSON text. Throws roam::InputError for unreadable input.
std::string validate_json(const std::string& graph_json, const std::string& plan_json);

/// Bytes PyTorch's CUDA caching allocator would reserve (simulated, layout "pytorch") for the
/// graph's own op order, resident tensors excluded, with every in-place write that order allows
/// (roam::inplace_valid_in, as eager PyTorch makes them): the headline's GPU reference.
/// RuntimeError for a bad graph.
uint64_t program_cuda_reserved_json(const std::string& graph_json, uint64_t alignment);

/// Theoretical peak of an order given as op ids (bytes, sizes rounded to `alignment`), with every
/// in-place write the order allows (roam::inplace_peak; the plain Tp on a graph without
/// `inplace` permissions).
uint64_t theoretical_peak_json(const std::string& graph_json, const std::vector<std::string>& order,
                               uint64_t alignment);

std::vector<std::string> order_method_names();
std::vector<std::string> layout_method_names();

}  // namespace roam_exec
