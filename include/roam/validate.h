// The independent plan validator. It shares the graph reader and liveness with the planners and
// nothing else: dependency check, overlap sweep, Tp and arena are recounted here.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "roam/graph.h"
#include "roam/plan.h"

namespace roam {

struct ValidationReport {
  bool valid = true;
  std::vector<std::string> problems;  // the first offending ops/storages (at most 10)
  size_t problem_count = 0;           // all problems found, including those not listed
  PlanStats recomputed;               // stats recomputed from the graph, order and offsets
};

/// Checks a roam-plan v1 document against `g`. Throws InputError (naming `file`, the field and
/// the id) when the document is unreadable: not an object, wrong format/version, fields of the
/// wrong type. Everything else (order not a valid permutation, dependency violated, missing or
/// misaligned offset, overlapping live storages, stats that differ from the recount, a
/// lower_bound_bytes above the bound roam::lower_bound proves -- a lower one is accepted, as any
/// proven bound is) makes the plan invalid, with the problems listed.
ValidationReport validate_plan(const Graph& g, const nlohmann::json& plan, const std::string& file);

}  // namespace roam
