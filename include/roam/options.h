// Options shared by every planner call.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace roam {

struct PlanOptions {
  uint64_t alignment = 64;          // bytes every size and offset is rounded to (power of two)
  int threads = 1;                  // worker threads of the roam planners; the plan is the same
                                    // for any count (determinism)
  double time_limit_seconds = 60;   // total wall-clock budget of the roam planners, seconds
  nlohmann::json extra = nlohmann::json::object();  // method-specific knobs, recorded in the plan
};

}  // namespace roam
