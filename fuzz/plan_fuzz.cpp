// Fuzz target: the plan reader and validator, against a fixed small graph (aliases, an in-place
// update, a workspace, an `after` edge, a graph output).
//
// Input: a roam-plan document (JSON text). An unreadable plan must be refused with
// roam::InputError; any plan the validator accepts (version 1) must pass the independent recount
// of oracle.h (order and dependencies, alignment, pairwise overlaps, Tp, arena, resident bytes)
// with a lower bound at most the minimum Tp over every valid order. Any other exception, a
// sanitizer report or a forged plan accepted is a finding (abort).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "../src/graph/json_io.h"
#include "oracle.h"
#include "roam/graph.h"
#include "roam/validate.h"

namespace {

constexpr const char* kGraph = R"({"format": "roam-graph", "version": 1, "name": "fuzz-plan",
 "tensors": [
  {"id": "x", "size": 8, "role": "input"},
  {"id": "w", "size": 64, "role": "param"},
  {"id": "a", "size": 96},
  {"id": "av", "size": 96, "alias_of": "a"},
  {"id": "b", "size": 200},
  {"id": "c", "size": 50},
  {"id": "d", "size": 10},
  {"id": "g", "size": 64},
  {"id": "w2", "size": 64, "alias_of": "w"}],
 "ops": [
  {"id": "n0", "phase": "forward", "inputs": ["x", "w"], "outputs": ["a"], "workspace": 32},
  {"id": "n1", "phase": "forward", "inputs": ["a"], "outputs": ["av"]},
  {"id": "n2", "phase": "forward", "inputs": ["av"], "outputs": ["b"]},
  {"id": "n3", "phase": "backward", "inputs": ["a"], "outputs": ["c"], "after": ["n1"]},
  {"id": "n4", "phase": "backward", "inputs": ["b", "c"], "outputs": ["d", "g"]},
  {"id": "n5", "phase": "update", "inputs": ["g", "w"], "outputs": ["w2"]}],
 "outputs": ["d"]})";

struct Fixed {
  roam::Graph graph;
  uint64_t min_tp[3] = {0, 0, 0};  // per alignment below
};
constexpr uint64_t kAlignments[] = {1, 64, 256};

const Fixed& fixed() {
  static const Fixed f = [] {
    Fixed x;
    x.graph = roam::parse_graph(nlohmann::json::parse(kGraph), "fuzz-plan-graph.json");
    for (int i = 0; i < 3; ++i) {
      x.min_tp[i] = roamfuzz::min_tp(x.graph, roamfuzz::make_model(x.graph, kAlignments[i]));
    }
    return x;
  }();
  return f;
}

void run(const std::string& text) {
  const Fixed& f = fixed();
  const roam::Graph& g = f.graph;
  nlohmann::json doc;
  roam::ValidationReport rep;
  try {
    doc = roam::parse_json_text(text, "fuzz-plan.json");
    rep = roam::validate_plan(g, doc, "fuzz-plan.json");
  } catch (const roam::InputError& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) roamfuzz::finding("multi-line message: " + what);
    return;
  }
  if (!rep.valid) {
    if (rep.problems.empty()) roamfuzz::finding("invalid plan without a problem listed");
    return;
  }
  if (!doc.contains("version") || doc["version"] != 1) return;  // version 2: no recount here
  const uint64_t alignment = doc["alignment"].get<uint64_t>();
  int ai = -1;
  for (int i = 0; i < 3; ++i) ai = kAlignments[i] == alignment ? i : ai;
  const roamfuzz::Model m = roamfuzz::make_model(g, alignment);
  std::vector<int32_t> order;
  std::vector<uint64_t> offsets;
  const std::string bad = roamfuzz::read_plan(g, m, doc, order, offsets);
  if (!bad.empty()) roamfuzz::finding("validator accepted a plan the recount cannot read: " + bad);
  const roamfuzz::Recount rc = roamfuzz::recount(g, m, order, offsets, alignment);
  if (!rc.problem.empty()) roamfuzz::finding("validator accepted a forged plan: " + rc.problem);
  const uint64_t tp = roamfuzz::stat(doc, "theoretical_peak_bytes");
  const uint64_t arena = roamfuzz::stat(doc, "arena_bytes");
  const uint64_t peak = roamfuzz::stat(doc, "peak_bytes");
  const uint64_t resident = roamfuzz::stat(doc, "resident_bytes");
  const uint64_t lb = roamfuzz::stat(doc, "lower_bound_bytes");
  if (tp != rc.tp || arena != rc.arena || resident != rc.resident || peak != rc.resident + rc.arena) {
    roamfuzz::finding("validator accepted stats that differ from the recount");
  }
  const uint64_t min_tp = ai >= 0 ? f.min_tp[ai]
                                  : roamfuzz::min_tp(g, roamfuzz::make_model(g, alignment));
  if (lb > min_tp) {
    roamfuzz::finding("validator accepted a lower bound " + std::to_string(lb) +
                      " above the minimum Tp " + std::to_string(min_tp));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  try {
    run(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const std::exception& e) {
    roamfuzz::finding(std::string("unexpected exception: ") + e.what());
  }
  return 0;
}
