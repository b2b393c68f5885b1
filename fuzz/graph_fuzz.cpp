// Fuzz target: the graph reader, then planning and validation.
//
// Input: a roam-graph document (JSON text). Bad input must be refused with roam::InputError and
// nothing else. A graph that reads is planned with the default request (roam order and layout,
// small time limit), with the roam order forced past its baseline shortcut, and with every
// baseline order x every layout; every plan must pass the
// independent validator and, on graphs of at most 64 ops, the recount in oracle.h (order,
// alignment, pairwise overlaps, Tp, arena); on graphs of at most 8 ops, the plan's lower bound
// must not exceed the minimum Tp over every valid order (enumerated; with `inplace` permissions
// over every order and every set of in-place writes it allows) and no plan's Tp may be below it.
// A plan's in-place writes are recounted as merged storages and checked against the rule by the
// oracle's own reading (check_writes); its `collectives` against the ops that have `collective`
// (check_collectives). Any other exception, a sanitizer report or a disagreement is a finding (abort).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "../src/graph/json_io.h"
#include "oracle.h"
#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/validate.h"

namespace {

constexpr const char* kFile = "fuzz-graph.json";
constexpr int32_t kMaxOps = 64;        // larger graphs are read but not planned (speed)
constexpr int32_t kRecountOps = 64;

void check_plan(const roam::Graph& g, const roam::PlanResult& r, const std::string& what,
                uint64_t alignment, const roamfuzz::Model* model, uint64_t min_tp) {
  // An internal error of the roam order is a bug even though the plan falls back to a baseline.
  if (r.plan.options.contains("order_stats") && r.plan.options["order_stats"].contains("warning")) {
    roamfuzz::finding(what + ": roam order warning: " +
                      r.plan.options["order_stats"]["warning"].get<std::string>());
  }
  const nlohmann::json doc = roam::plan_to_json(g, r.plan);
  const roam::ValidationReport rep = roam::validate_plan(g, doc, "(fuzz plan)");
  if (!rep.valid) {
    roamfuzz::finding(what + ": plan fails validation: " +
                      (rep.problems.empty() ? std::string("?") : rep.problems.front()));
  }
  if (const std::string c = roamfuzz::check_collectives(g, doc); !c.empty()) {
    roamfuzz::finding(what + ": " + c);
  }
  if (model == nullptr) return;
  std::vector<int32_t> order;
  std::vector<uint64_t> offsets;
  // In-place writes (plan field inplace): the recount merges each written output into the
  // storage it overwrites and checks the rule on its own (oracle.h, check_writes).
  std::vector<roamfuzz::Write> writes;
  if (const std::string bad = roamfuzz::read_writes(g, doc, writes); !bad.empty()) {
    roamfuzz::finding(what + ": plan document: " + bad);
  }
  if (!writes.empty() && doc["version"] != 2) roamfuzz::finding(what + ": in-place writes in a version-1 plan");
  const roamfuzz::Model merged = writes.empty() ? roamfuzz::Model{} : roamfuzz::make_model(g, alignment, writes);
  const roamfuzz::Model& m = writes.empty() ? *model : merged;
  const std::string bad = roamfuzz::read_plan(g, m, doc, order, offsets);
  if (!bad.empty()) roamfuzz::finding(what + ": plan document: " + bad);
  const roamfuzz::Recount rc = roamfuzz::recount(g, m, order, offsets, alignment);
  if (!rc.problem.empty()) roamfuzz::finding(what + ": validated plan fails the recount: " + rc.problem);
  if (const std::string w = roamfuzz::check_writes(g, order, writes); !w.empty()) {
    roamfuzz::finding(what + ": validated plan breaks the in-place rule: " + w);
  }
  const uint64_t tp = roamfuzz::stat(doc, "theoretical_peak_bytes");
  const uint64_t arena = roamfuzz::stat(doc, "arena_bytes");
  const uint64_t resident = roamfuzz::stat(doc, "resident_bytes");
  const uint64_t lb = roamfuzz::stat(doc, "lower_bound_bytes");
  if (tp != rc.tp || arena != rc.arena || resident != rc.resident) {
    roamfuzz::finding(what + ": stats differ from the recount: Tp " + std::to_string(tp) + " vs " +
                      std::to_string(rc.tp) + ", arena " + std::to_string(arena) + " vs " +
                      std::to_string(rc.arena) + ", resident " + std::to_string(resident) +
                      " vs " + std::to_string(rc.resident));
  }
  if (lb > tp) roamfuzz::finding(what + ": lower bound above the plan's Tp");
  if (min_tp != UINT64_MAX) {
    if (lb > min_tp) {
      roamfuzz::finding(what + ": lower bound " + std::to_string(lb) +
                        " above the minimum Tp over all orders " + std::to_string(min_tp));
    }
    if (tp < min_tp) roamfuzz::finding(what + ": Tp below the enumerated minimum");
  }
}

void run(const std::string& text, uint64_t alignment) {
  roam::Graph g;
  try {
    g = roam::parse_graph(roam::parse_json_text(text, kFile), kFile);
  } catch (const roam::InputError& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) roamfuzz::finding("multi-line message: " + what);
    return;
  }
  if (g.num_ops() > kMaxOps || g.num_storages() > 2 * kMaxOps) return;
  // Round trip: what the writer makes of the graph reads back the same.
  {
    const roam::Graph h = roam::parse_graph(roam::graph_to_json(g), "(round trip)");
    if (h.num_ops() != g.num_ops() || h.num_storages() != g.num_storages() ||
        h.resident_bytes != g.resident_bytes) {
      roamfuzz::finding("graph_to_json round trip differs");
    }
    for (roam::OpIdx v = 0; v < g.num_ops(); ++v) {
      if (h.ops[v].inplace != g.ops[v].inplace) roamfuzz::finding("graph_to_json round trip loses inplace");
      if (h.ops[v].collective != g.ops[v].collective) {
        roamfuzz::finding("graph_to_json round trip loses collective");
      }
    }
  }
  roamfuzz::Model model;
  const roamfuzz::Model* m = nullptr;
  uint64_t min_tp = UINT64_MAX;
  if (g.num_ops() <= kRecountOps) {
    model = roamfuzz::make_model(g, alignment);
    m = &model;
    const std::string bad = roamfuzz::check_order(g, model, g.program_order());
    if (!bad.empty()) roamfuzz::finding("reader accepted a program order that is not valid: " + bad);
    // With permissions, the least Tp over every order and every set of writes it allows (not
    // computed beyond kMaxPermissions permissions: UINT64_MAX, no comparison).
    if (g.num_ops() <= roamfuzz::kExhaustiveOps) {
      bool permissions = false;
      for (const roam::Op& op : g.ops) permissions = permissions || !op.inplace.empty();
      min_tp = permissions ? roamfuzz::min_tp_with_writes(g, alignment) : roamfuzz::min_tp(g, model);
    }
  }

  roam::PlanRequest req;
  req.options.alignment = alignment;
  req.options.time_limit_seconds = 0.5;
  check_plan(g, roam::make_plan(g, req), "default plan", alignment, m, min_tp);
  // The roam order without its baseline shortcut (small graphs often reach the bound with a
  // baseline): every variant runs, and each must be a valid order (else a warning, above).
  roam::PlanRequest forced = req;
  forced.order = "roam";
  forced.layout = "llfb";
  forced.options.extra["return_variant"] = "roam-scheduled";
  check_plan(g, roam::make_plan(g, forced), "roam-scheduled variant", alignment, m, min_tp);

  const uint64_t lb = roam::lower_bound(g, alignment);
  for (const std::string& order : roam::order_methods()) {
    if (order == "roam") continue;
    for (const std::string& layout : roam::layout_methods()) {
      roam::PlanRequest b;
      b.order = order;
      b.layout = layout;
      b.options.alignment = alignment;
      b.options.time_limit_seconds = 0.2;
      check_plan(g, roam::make_plan(g, b, lb), order + "/" + layout, alignment, m, min_tp);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  static constexpr uint64_t kAlignments[] = {64, 1, 256};
  try {
    run(text, kAlignments[size % 3]);
  } catch (const std::exception& e) {
    roamfuzz::finding(std::string("unexpected exception: ") + e.what());
  }
  return 0;
}
