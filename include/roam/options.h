// Options shared by every planner call.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace roam {

struct Graph;

/// The alignments a planner request takes (the CLI's --alignment, the Python bridge's
/// `alignment`): a power of two from 1 to 1 MiB (1048576 bytes).
inline bool is_plan_alignment(uint64_t a) {
  return a != 0 && (a & (a - 1)) == 0 && a <= (uint64_t{1} << 20);
}

struct PlanOptions {
  uint64_t alignment = 64;          // bytes every size and offset is rounded to (power of two)
  int threads = 1;                  // worker threads of the roam planners; the plan is the same
                                    // for any count (determinism)
  double time_limit_seconds = 60;   // total wall-clock budget of the roam planners, seconds
  /// The instant by which the whole request must be done (steady clock), when the caller's own
  /// work counts too: the CLI sets it from --time-limit at start-up, less what validating and
  /// writing the plan will take, so that reading the graph counts. make_plan ends by the earlier
  /// of this and its start + time_limit_seconds. Default: none.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  nlohmann::json extra = nlohmann::json::object();  // method-specific knobs, recorded in the plan
  /// The graph whose lower bound (roam::lower_bound) the roam order computes and stops its
  /// searches at, instead of the graph it orders: one whose valid orders include every order of
  /// it (make_plan sets it to the graph with in-place permissions when it orders the forced
  /// graph, so that one bound serves both). Null: the graph ordered.
  const Graph* lower_bound_graph = nullptr;
};

/// The knobs of the roam planners that `extra` may hold, with their types and ranges
/// (include/roam/roam_order.h and include/roam/roam_layout.h say what each does).
/// kind: "order" or "layout".
struct ExtraOptionSpec {
  const char* key;
  const char* kind;
  const char* type;  // "bool", "int", "number" or "string"
  double min;        // inclusive range for int and number
  double max;
  const char* help;
};
const std::vector<ExtraOptionSpec>& extra_option_specs();
/// The spec of `key`; throws std::invalid_argument for an unknown key.
const ExtraOptionSpec& extra_option_spec(const std::string& key);

/// Parses "KEY=VALUE" for `kind` ("order" or "layout"): VALUE becomes the spec's type (true /
/// false, an integer, a number or a string) and is range-checked. Throws std::invalid_argument
/// naming the key (unknown key, wrong kind, bad value, out of range).
std::pair<std::string, nlohmann::json> parse_extra_option(const std::string& assignment,
                                                          const std::string& kind);

/// Parses a byte count: an integer ("6442450944"), or a number with a unit, case-insensitive:
/// B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000) ("6GiB",
/// "1.5 GiB", "512mib", "6GB" = 6e9 bytes; the result is rounded down to whole bytes) -- the
/// grammar of roam.parse_size in Python. Throws std::invalid_argument naming the text when it is
/// not such a size or above 2^62 bytes.
uint64_t parse_byte_size(const std::string& text);

}  // namespace roam
