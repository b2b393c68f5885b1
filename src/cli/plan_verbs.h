// Internal to src/cli: what the planning verbs share (`roam plan` and `roam validate` in
// main.cpp, `roam compare` in cmd_compare.cpp): screen formats, the validation every printed
// or written plan goes through, and the lines they print about a plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "roam/graph.h"
#include "roam/options.h"
#include "roam/plan.h"
#include "roam/validate.h"

namespace roam::cli {

/// Bytes as MiB (2^20 bytes) with two decimals, no unit: "12.34".
std::string mib(uint64_t bytes);
/// `v` with `digits` decimals.
std::string fixed(double v, int digits);

/// The plan as a document after the independent validator accepted it; throws InternalError
/// (exit 3, nothing written) when it does not. `report`: the validator's report, when wanted.
nlohmann::json checked_plan_json(const roam::Graph& g, const roam::Plan& plan,
                                 roam::ValidationReport* report = nullptr);

/// The bound on Tp over the orders of the graph (no recomputation, in-place writes allowed), bytes:
/// a version-1 plan's lower_bound_bytes, or method.options.order_lower_bound_bytes of a plan of
/// version 2 only because it writes in place (roam/plan.h).
uint64_t order_lower_bound(const roam::Plan& plan);

/// One line: what is live at the plan's peak step, from the validator's instance graph ("" when
/// it has none).
std::string peak_line(const roam::ValidationReport& rep, uint64_t alignment);

/// Reads a graph file (progress on stderr); throws InputError.
roam::Graph load(const std::string& path);

/// "; the resident tensors ... alone take N B (X MiB)" after an infeasible budget below the
/// resident bytes; "" otherwise.
std::string below_resident(const roam::Graph& g, uint64_t budget);

struct CompareRequest {
  std::vector<std::string> orders;   // empty: every order method
  std::vector<std::string> layouts;  // empty: every layout method
  std::string json_path;             // write the rows as JSON too
  bool all = false;                  // every row, ties not collapsed
};

/// `roam compare` (its help in main.cpp): exit status.
int cmd_compare(const std::string& graph_path, const roam::PlanOptions& options,
                const CompareRequest& creq, const std::optional<uint64_t>& budget);

}  // namespace roam::cli
