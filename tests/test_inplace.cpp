// In-place writes (GRAPH_FORMAT.md op field `inplace`, plan field `inplace`): the graph rule,
// validity for an order and the validator's rule on hand-worked graphs and plans. The planners
// with permissions: tests/test_inplace_plans.cpp.
#include <gtest/gtest.h>

#include "roam/inplace.h"
#include "testing.h"

namespace {

using json = nlohmann::json;
using roam::Graph;
using roam::InplacePair;
using roam::Order;
using roamtest::GraphJson;

constexpr const char* kFile = "inplace.json";

bool has_problem(const roam::ValidationReport& r, const std::string& needle) {
  for (const auto& p : r.problems) {
    if (p.find(needle) != std::string::npos) return true;
  }
  return false;
}
std::string problems(const roam::ValidationReport& r) {
  std::string s;
  for (const auto& p : r.problems) s += p + " | ";
  return s;
}

// x (input, 8) -> n0 -> a (1000) -> n1 relu, permission [0, 0] -> r (1000) -> n2 -> y (100).
GraphJson chain() {
  GraphJson b("chain");
  b.tensor("x", 8, "input").tensor("a", 1000).tensor("r", 1000).tensor("y", 100);
  b.op("n0", {"x"}, {"a"}).op("n1", {"a"}, {"r"}).op("n2", {"r"}, {"y"});
  b.doc["ops"][1]["inplace"] = json::array({json::array({0, 0})});
  b.output("y");
  return b;
}

// ---------------------------------------------------------------------------------------------
// The graph rule (bad input names file, field ops[k].inplace and the op id)
// ---------------------------------------------------------------------------------------------

void expect_bad(const json& doc, const std::string& field, const std::string& id,
                const std::string& words) {
  try {
    roam::parse_graph(doc, kFile);
    ADD_FAILURE() << "accepted: " << doc.dump();
  } catch (const roam::InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file(), kFile) << what;
    EXPECT_EQ(e.field(), field) << what;
    EXPECT_EQ(e.id(), id) << what;
    EXPECT_NE(what.find(words), std::string::npos) << words << " in " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(InplaceGraph, ParsesAndWritesBack) {
  const Graph g = chain().parse(kFile);
  ASSERT_EQ(g.ops[1].inplace.size(), 1u);
  EXPECT_EQ(g.ops[1].inplace[0], (std::pair<int32_t, int32_t>{0, 0}));
  EXPECT_TRUE(roam::has_inplace(g));
  const json back = roam::graph_to_json(g);
  EXPECT_EQ(back["ops"][1]["inplace"], json::array({json::array({0, 0})}));
  EXPECT_FALSE(back["ops"][0].contains("inplace"));
  const Graph h = roam::parse_graph(back, "back.json");
  EXPECT_EQ(h.ops[1].inplace, g.ops[1].inplace);
  // Liveness in the graph is as if the op wrote a new storage: r has a storage of its own.
  EXPECT_EQ(g.num_storages(), 3);
}

TEST(InplaceGraph, BadPermissionsAreRefused) {
  auto with = [](const json& value) {
    GraphJson b = chain();
    b.doc["ops"][1]["inplace"] = value;
    return b.doc;
  };
  expect_bad(with("yes"), "ops[1].inplace", "n1", "must be a list of [input position, output position]");
  expect_bad(with(json::array({0, 0})), "ops[1].inplace", "n1", "must be a pair [i, j] of integers");
  expect_bad(with(json::array({json::array({0})})), "ops[1].inplace", "n1", "pair [i, j]");
  expect_bad(with(json::array({json::array({0, 0.5})})), "ops[1].inplace", "n1", "pair [i, j]");
  expect_bad(with(json::array({json::array({1, 0})})), "ops[1].inplace", "n1",
             "input position 1 out of range (the op has 1 inputs)");
  expect_bad(with(json::array({json::array({0, -1})})), "ops[1].inplace", "n1",
             "output position -1 out of range");
  // Sizes differ.
  GraphJson sizes = chain();
  sizes.doc["tensors"][2]["size"] = 999;
  expect_bad(sizes.doc, "ops[1].inplace", "n1", "input 'a' (1000 bytes) and output 'r' (999 bytes) differ in size");
  // The output is an alias.
  GraphJson alias("alias");
  alias.tensor("x", 8, "input").tensor("a", 1000).tensor("av", 1000, "", "a");
  alias.op("n0", {"x"}, {"a"}).op("n1", {"a"}, {"av"});
  alias.doc["ops"][1]["inplace"] = json::array({json::array({0, 0})});
  expect_bad(alias.doc, "ops[1].inplace", "n1", "output 'av' is an alias (of 'a')");
  // The input is resident (through a view of it, too).
  GraphJson resident("resident");
  resident.tensor("w", 64, "param").tensor("wv", 64, "", "w").tensor("o", 64);
  resident.op("n0", {"wv"}, {"o"});
  resident.doc["ops"][0]["inplace"] = json::array({json::array({0, 0})});
  expect_bad(resident.doc, "ops[0].inplace", "n0", "input 'wv' is resident (role 'param')");
}

// ---------------------------------------------------------------------------------------------
// Validity for an order; program-order Tp with and without the pair (hand counts)
// ---------------------------------------------------------------------------------------------

TEST(InplaceOrder, ChainProgramOrderTpByHand) {
  const Graph g = chain().parse(kFile);
  const Order program = g.program_order();
  // Without the pair: step 0 a 1000; step 1 a + r 2000; step 2 r + y 1100.
  EXPECT_EQ(roam::theoretical_peak(g, program, 1), 2000u);
  const std::vector<InplacePair> pairs = roam::inplace_valid_in(g, program);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0], (InplacePair{g.tensor_index.at("r"), g.tensor_index.at("a"), 1}));
  // With it: a and r one storage, live at steps 0-2 (1000); step 2 adds y: 1100.
  const Graph x = roam::apply_inplace(g, pairs);
  EXPECT_EQ(x.num_storages(), 2);
  EXPECT_EQ(x.tensors[x.tensor_index.at("r")].alias_of, x.tensor_index.at("a"));
  EXPECT_FALSE(roam::has_inplace(x));
  EXPECT_EQ(roam::theoretical_peak(x, program, 1), 1100u);
  EXPECT_EQ(roam::inplace_peak(g, program, 1), 1100u);
  // Aligned to 64: 1024 + 128.
  EXPECT_EQ(roam::inplace_peak(g, program, 64), 1152u);
}

TEST(InplaceOrder, PairValidOnlyWhereTheOpIsTheLastUser) {
  // x -> n0 -> a; n1: a -> r (permission); n2: a -> e (another reader of a); n3: r, e -> y.
  GraphJson b("two-readers");
  b.tensor("x", 8, "input").tensor("a", 1000).tensor("r", 1000).tensor("e", 10).tensor("y", 10);
  b.op("n0", {"x"}, {"a"}).op("n1", {"a"}, {"r"}).op("n2", {"a"}, {"e"}).op("n3", {"r", "e"}, {"y"});
  b.doc["ops"][1]["inplace"] = json::array({json::array({0, 0})});
  b.output("y");
  const Graph g = b.parse(kFile);
  // Program order: n2 reads a after n1: no write.
  EXPECT_TRUE(roam::inplace_valid_in(g, {0, 1, 2, 3}).empty());
  // n2 first: n1 is a's last user.
  const auto pairs = roam::inplace_valid_in(g, {0, 2, 1, 3});
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].op, 1);
  // Step 0 a 1000; step 1 (n2) a + e 1010; step 2 (n1) a/r + e 1010; step 3 r + e + y 1020.
  EXPECT_EQ(roam::inplace_peak(g, {0, 2, 1, 3}, 1), 1020u);
  // Without the write the best order holds a + r + e at n1: 2010.
  EXPECT_EQ(roam::inplace_peak(g, {0, 1, 2, 3}, 1), 2010u);
  // a graph output is never written over.
  GraphJson kept = chain();
  kept.output("a");
  const Graph k = kept.parse(kFile);
  EXPECT_TRUE(roam::inplace_valid_in(k, k.program_order()).empty());
  // A permission over a view of a larger storage is not used (the write would keep it live).
  GraphJson view("view");
  view.tensor("x", 8, "input").tensor("a", 2000).tensor("av", 1000, "", "a").tensor("r", 1000).tensor("y", 8);
  view.op("n0", {"x"}, {"a"}).op("v", {"a"}, {"av"}).op("n1", {"av"}, {"r"}).op("n2", {"r"}, {"y"});
  view.doc["ops"][2]["inplace"] = json::array({json::array({0, 0})});
  view.output("y");
  const Graph vg = view.parse(kFile);
  EXPECT_TRUE(roam::inplace_valid_in(vg, vg.program_order()).empty());
}

TEST(InplaceOrder, FirstListedPairOfAnOutputAndOneOutputPerInput) {
  // n1: a, b -> r, s with permissions [0,0] (r over a), [1,0] (r over b), [0,1] (s over a).
  GraphJson b("multi");
  b.tensor("x", 8, "input").tensor("a", 100).tensor("b", 100).tensor("r", 100).tensor("s", 100).tensor("y", 8);
  b.op("n0", {"x"}, {"a", "b"}).op("n1", {"a", "b"}, {"r", "s"}).op("n2", {"r", "s"}, {"y"});
  b.doc["ops"][1]["inplace"] = json::array({json::array({0, 0}), json::array({1, 0}), json::array({0, 1})});
  b.output("y");
  const Graph g = b.parse(kFile);
  const auto pairs = roam::inplace_valid_in(g, g.program_order());
  // r takes a (first listed); r's second pair is skipped; s's pair over a is skipped (a taken).
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].output, g.tensor_index.at("r"));
  EXPECT_EQ(pairs[0].input, g.tensor_index.at("a"));
}

// ---------------------------------------------------------------------------------------------
// The validator's rule on hand-worked plans
// ---------------------------------------------------------------------------------------------

json plan(const Graph& g, int version, const std::vector<std::string>& order, const json& offsets,
          const json& inplace, const json& stats) {
  json doc = {{"format", "roam-plan"}, {"version", version}, {"graph", g.name},
              {"alignment", 1},        {"order", order},     {"offsets", offsets},
              {"stats", stats},
              {"method", {{"order", "hand"}, {"layout", "hand"}, {"options", json::object()}}}};
  if (!inplace.is_null()) doc["inplace"] = inplace;
  if (version == 2) doc["recompute_offsets"] = json::object();
  return doc;
}

json stats(uint64_t resident, uint64_t tp, uint64_t arena, uint64_t lb, double compute = 0) {
  return {{"resident_bytes", resident}, {"theoretical_peak_bytes", tp}, {"arena_bytes", arena},
          {"peak_bytes", resident + arena}, {"lower_bound_bytes", lb},
          {"fragmentation", tp == 0 ? 0.0 : static_cast<double>(arena) / static_cast<double>(tp) - 1},
          {"solve_seconds", 0.0}, {"recompute_seconds", 0.0}, {"compute_seconds", compute},
          {"recomputations", 0}};
}

TEST(InplaceValidator, ChainPlanByHandIsValid) {
  const Graph g = chain().parse(kFile);
  // r over a: storage a lives at steps 0-2 [0, 1000), y at step 2 [1000, 1100). Tp = arena = 1100.
  // The v2 bound: n1 holds a + r less the 1000 B write: 1000; n2 r + y 1100: 1100.
  EXPECT_EQ(roam::recompute_lower_bound(g, 1), 1100u);
  const json doc = plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"r", "a"}},
                        stats(8, 1100, 1100, 1100));
  const auto rep = roam::validate_plan(g, doc, "p.json");
  ASSERT_TRUE(rep.valid) << problems(rep);
  EXPECT_EQ(rep.recomputed.theoretical_peak_bytes, 1100u);
  ASSERT_EQ(rep.inplace.size(), 1u);
  EXPECT_EQ(rep.inplace[0].output, g.tensor_index.at("r"));
  // The instance graph: two instances (a, y), the in-place output none.
  ASSERT_TRUE(rep.instances);
  EXPECT_EQ(rep.instances->graph.num_storages(), 2);
  // y over [0, 100) would overlap a/r live at step 2.
  const json bad = plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 0}}, {{"r", "a"}},
                        stats(8, 1100, 1000, 1100));
  const auto brep = roam::validate_plan(g, bad, "p.json");
  EXPECT_FALSE(brep.valid);
  EXPECT_TRUE(has_problem(brep, "storages 'a' [0, 1000) and 'y' [0, 100) overlap")) << problems(brep);
}

TEST(InplaceValidator, WriteOverAStillReadInputIsRefused) {
  // n2 reads a after n1 wrote r over it.
  GraphJson b("late-reader");
  b.tensor("x", 8, "input").tensor("a", 1000).tensor("r", 1000).tensor("y", 100);
  b.op("n0", {"x"}, {"a"}).op("n1", {"a"}, {"r"}).op("n2", {"a", "r"}, {"y"});
  b.doc["ops"][1]["inplace"] = json::array({json::array({0, 0})});
  b.output("y");
  const Graph g = b.parse(kFile);
  const auto rep = roam::validate_plan(
      g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"r", "a"}}, stats(8, 1100, 1100, 0)),
      "p.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "order[2]: op 'n2' reads tensor 'a' after op 'n1' (order[1]) wrote 'r' "
                               "over it in place (plan field inplace): an in-place write must be the "
                               "last read of the old contents"))
      << problems(rep);
}

TEST(InplaceValidator, ReadThroughAViewMadeBeforeTheWriteIsRefused) {
  // nv makes a view av of a before n1 writes r over a; n2 reads av afterwards.
  GraphJson b("view-reader");
  b.tensor("x", 8, "input").tensor("a", 1000).tensor("av", 1000, "", "a").tensor("r", 1000).tensor("y", 100);
  b.op("n0", {"x"}, {"a"}).op("nv", {"a"}, {"av"}).op("n1", {"a"}, {"r"}).op("n2", {"av", "r"}, {"y"});
  b.doc["ops"][2]["inplace"] = json::array({json::array({0, 0})});
  b.output("y");
  const Graph g = b.parse(kFile);
  // No order allows it: n2 reads a's storage through av after n1.
  EXPECT_TRUE(roam::inplace_valid_in(g, g.program_order()).empty());
  const auto rep = roam::validate_plan(
      g, plan(g, 2, {"n0", "nv", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"r", "a"}}, stats(8, 1100, 1100, 0)),
      "p.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "order[3]: op 'n2' reads tensor 'av' after op 'n1' (order[2]) wrote 'r' over it"))
      << problems(rep);
  // A view of the old contents made by the writing op itself is stale for its later readers.
  GraphJson c("own-view");
  c.tensor("x", 8, "input").tensor("a", 1000).tensor("r", 1000).tensor("av", 1000, "", "a").tensor("y", 100);
  c.op("n0", {"x"}, {"a"}).op("n1", {"a"}, {"r", "av"}).op("n2", {"av"}, {"y"});
  c.doc["ops"][1]["inplace"] = json::array({json::array({0, 0})});
  c.output("y");
  const Graph cg = c.parse(kFile);
  const auto crep = roam::validate_plan(
      cg, plan(cg, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"r", "a"}}, stats(8, 1100, 1100, 0)),
      "p.json");
  EXPECT_TRUE(has_problem(crep, "order[2]: op 'n2' reads tensor 'av' after op 'n1' (order[1]) wrote 'r'"))
      << problems(crep);
}

TEST(InplaceValidator, GraphOutputOverwrittenIsRefused) {
  GraphJson b = chain();
  b.output("a");
  const Graph g = b.parse(kFile);
  const auto rep = roam::validate_plan(
      g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"r", "a"}}, stats(8, 1100, 1100, 0)),
      "p.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "outputs: graph output 'a' is overwritten: op 'n1' (order[1]) wrote 'r' over it"))
      << problems(rep);
}

TEST(InplaceValidator, TwoOutputsOverOneInputAreRefused) {
  GraphJson b("two-over-one");
  b.tensor("x", 8, "input").tensor("a", 100).tensor("r", 100).tensor("s", 100).tensor("y", 8);
  b.op("n0", {"x"}, {"a"}).op("n1", {"a"}, {"r", "s"}).op("n2", {"r", "s"}, {"y"});
  b.doc["ops"][1]["inplace"] = json::array({json::array({0, 0}), json::array({0, 1})});
  b.output("y");
  const Graph g = b.parse(kFile);
  const auto rep = roam::validate_plan(
      g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 100}}, {{"r", "a"}, {"s", "a"}}, stats(8, 108, 108, 0)),
      "p.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "order[1]: op 'n1' writes two outputs over one instance (the one of 'a')"))
      << problems(rep);
}

TEST(InplaceValidator, PairNotListedUnknownTensorsAndOffsetsAreProblems) {
  const Graph g = chain().parse(kFile);
  const json st = stats(8, 1100, 1100, 0);
  // y is not written over r by any permission.
  auto rep = roam::validate_plan(
      g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"r", 1000}}, {{"y", "r"}}, st), "p.json");
  EXPECT_TRUE(has_problem(rep, "inplace.y: op 'n2' may not write 'y' over 'r': not one of its "
                               "permissions (its inplace: none)"))
      << problems(rep);
  rep = roam::validate_plan(g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"zz", "a"}}, st),
                            "p.json");
  EXPECT_TRUE(has_problem(rep, "inplace: unknown tensor 'zz'")) << problems(rep);
  rep = roam::validate_plan(g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"r", "qq"}}, st),
                            "p.json");
  EXPECT_TRUE(has_problem(rep, "inplace.r: unknown tensor 'qq'")) << problems(rep);
  // The in-place output keeps an offset of its own.
  rep = roam::validate_plan(
      g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}, {"r", 0}, {"y", 1000}}, {{"r", "a"}}, st), "p.json");
  EXPECT_TRUE(has_problem(rep, "offsets.r: tensor 'r' is written in place over 'a' (plan field inplace) "
                               "and has no storage of its own"))
      << problems(rep);
}

TEST(InplaceValidator, VersionOnePlanWithInplaceIsRefused) {
  const Graph g = chain().parse(kFile);
  json doc = plan(g, 1, {"n0", "n1", "n2"}, {{"a", 0}, {"y", 1000}}, {{"r", "a"}}, stats(8, 1100, 1100, 0));
  const auto rep = roam::validate_plan(g, doc, "p.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "inplace: a plan that writes outputs over inputs has version 2 (this plan "
                               "says version 1)"))
      << problems(rep);
}

TEST(InplaceValidator, BadShapeIsAnInputError) {
  const Graph g = chain().parse(kFile);
  const json st = stats(8, 1100, 1100, 0);
  try {
    roam::validate_plan(g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}}, json::array({"r"}), st), "p.json");
    ADD_FAILURE() << "accepted";
  } catch (const roam::InputError& e) {
    EXPECT_EQ(e.field(), "inplace");
    EXPECT_NE(std::string(e.what()).find("must be an object"), std::string::npos) << e.what();
  }
  try {
    roam::validate_plan(g, plan(g, 2, {"n0", "n1", "n2"}, {{"a", 0}}, {{"r", 5}}, st), "p.json");
    ADD_FAILURE() << "accepted";
  } catch (const roam::InputError& e) {
    EXPECT_EQ(e.field(), "inplace");
    EXPECT_EQ(e.id(), "r");
  }
}

}  // namespace
