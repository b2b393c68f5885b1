// Fuzz target: the plan reader and validator, against a fixed small graph (aliases, an in-place
// update, a workspace, an `after` edge, a graph output), or, for a plan naming the graph
// "fuzz-plan-inplace", a second one with `inplace` permissions (plan field inplace: the
// recount merges written outputs and checks the in-place rule on its own).
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

// The second fixed graph, for plans naming it ("graph": "fuzz-plan-inplace"): in-place
// permissions (b over a, c over b's view bv), a reader of a that may run before or after the
// write over it, and a graph output.
constexpr const char* kInplaceGraph = R"({"format": "roam-graph", "version": 1,
 "name": "fuzz-plan-inplace",
 "tensors": [
  {"id": "x", "size": 8, "role": "input"},
  {"id": "w", "size": 64, "role": "param"},
  {"id": "a", "size": 96},
  {"id": "b", "size": 96},
  {"id": "bv", "size": 96, "alias_of": "b"},
  {"id": "e", "size": 10},
  {"id": "c", "size": 96},
  {"id": "d", "size": 10}],
 "ops": [
  {"id": "n0", "phase": "forward", "inputs": ["x", "w"], "outputs": ["a"]},
  {"id": "n1", "phase": "forward", "inputs": ["a"], "outputs": ["b"], "inplace": [[0, 0]]},
  {"id": "n2", "phase": "forward", "inputs": ["a"], "outputs": ["e"]},
  {"id": "n3", "phase": "forward", "inputs": ["b"], "outputs": ["bv"]},
  {"id": "n4", "phase": "backward", "inputs": ["bv", "e"], "outputs": ["c"], "inplace": [[0, 0]]},
  {"id": "n5", "phase": "backward", "inputs": ["c"], "outputs": ["d"]}],
 "outputs": ["d"]})";

struct Fixed {
  roam::Graph graph;
  uint64_t min_tp[3] = {0, 0, 0};  // per alignment below (with the in-place writes allowed)
};
constexpr uint64_t kAlignments[] = {1, 64, 256};

Fixed make_fixed(const char* text, bool writes) {
  Fixed x;
  x.graph = roam::parse_graph(nlohmann::json::parse(text), "fuzz-plan-graph.json");
  for (int i = 0; i < 3; ++i) {
    x.min_tp[i] = writes ? roamfuzz::min_tp_with_writes(x.graph, kAlignments[i])
                         : roamfuzz::min_tp(x.graph, roamfuzz::make_model(x.graph, kAlignments[i]));
  }
  return x;
}

const Fixed& fixed(bool inplace) {
  static const Fixed f = make_fixed(kGraph, false);
  static const Fixed fi = make_fixed(kInplaceGraph, true);
  return inplace ? fi : f;
}

void run(const std::string& text) {
  // The graph the plan names picks the fixed graph (any other name: the first one).
  const bool inplace_graph = text.find("\"fuzz-plan-inplace\"") != std::string::npos;
  const Fixed& f = fixed(inplace_graph);
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
  // Version 2 is recounted where every op runs once (in-place writes, no recomputation).
  std::vector<roamfuzz::Write> writes;
  if (const std::string bad = roamfuzz::read_writes(g, doc, writes); !bad.empty()) {
    roamfuzz::finding("validator accepted a plan whose inplace the recount cannot read: " + bad);
  }
  if (!doc.contains("version")) return;
  if (doc["version"] != 1) {
    if (doc["version"] != 2 || doc["order"].size() != g.ops.size()) return;
  } else if (!writes.empty()) {
    roamfuzz::finding("validator accepted in-place writes in a version-1 plan");
  }
  const uint64_t alignment = doc["alignment"].get<uint64_t>();
  int ai = -1;
  for (int i = 0; i < 3; ++i) ai = kAlignments[i] == alignment ? i : ai;
  const roamfuzz::Model m = roamfuzz::make_model(g, alignment, writes);
  std::vector<int32_t> order;
  std::vector<uint64_t> offsets;
  const std::string bad = roamfuzz::read_plan(g, m, doc, order, offsets);
  if (!bad.empty()) roamfuzz::finding("validator accepted a plan the recount cannot read: " + bad);
  const roamfuzz::Recount rc = roamfuzz::recount(g, m, order, offsets, alignment);
  if (!rc.problem.empty()) roamfuzz::finding("validator accepted a forged plan: " + rc.problem);
  if (const std::string w = roamfuzz::check_writes(g, order, writes); !w.empty()) {
    roamfuzz::finding("validator accepted a plan that breaks the in-place rule: " + w);
  }
  const uint64_t tp = roamfuzz::stat(doc, "theoretical_peak_bytes");
  const uint64_t arena = roamfuzz::stat(doc, "arena_bytes");
  const uint64_t peak = roamfuzz::stat(doc, "peak_bytes");
  const uint64_t resident = roamfuzz::stat(doc, "resident_bytes");
  const uint64_t lb = roamfuzz::stat(doc, "lower_bound_bytes");
  if (tp != rc.tp || arena != rc.arena || resident != rc.resident || peak != rc.resident + rc.arena) {
    roamfuzz::finding("validator accepted stats that differ from the recount");
  }
  const uint64_t min_tp = ai >= 0 ? f.min_tp[ai]
                         : inplace_graph ? roamfuzz::min_tp_with_writes(g, alignment)
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
