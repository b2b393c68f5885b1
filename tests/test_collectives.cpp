// Collective ops (docs/COLLECTIVES.md: op field `collective`, the rule, plan field
// `collectives`): read and written back, kept in program order by every order method and by the
// recomputation planner, checked by the validator; bad input refused with exit status 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "roam/order.h"
#include "roam/remat.h"
#include "roam/validate.h"
#include "testing.h"

namespace {

using nlohmann::json;
using roamtest::GraphJson;

// Two independent branches from the input x, then a join (alignment 1, sizes in bytes):
//   pA: x -> hA (100)   cA: all_gather hA -> rA (400)
//   pB: x -> hB (200)   cB: all_reduce hB -> rB (200)
//   J:  rA, rB -> out (50, the graph output)
// Program order pA cA pB cB J. At each collective its input and output are live, and so is the
// output of the collective that ran before it (J reads it later):
//   cA second: hA + rA + rB = 100 + 400 + 200 = 700;   cB second: hB + rB + rA = 200 + 200 + 400 = 800.
// Every other step holds less (J: 400 + 200 + 50 = 650). So without the rule the best order
// runs branch B first, Tp 700 (pB 200, cB 400, pA 300, cA 700, J 650); with cA before cB, as
// program order has it, every order holds 800 at cB, and program order reaches it: the
// constrained optimum is 800.
constexpr uint64_t kUnconstrainedTp = 700;
constexpr uint64_t kConstrainedTp = 800;

GraphJson two_branches(bool collectives = true) {
  GraphJson b("two-collectives");
  b.tensor("x", 8, "input").tensor("hA", 100).tensor("rA", 400).tensor("hB", 200).tensor("rB", 200)
      .tensor("out", 50);
  b.op("pA", {"x"}, {"hA"}).op("cA", {"hA"}, {"rA"}).op("pB", {"x"}, {"hB"}).op("cB", {"hB"}, {"rB"})
      .op("J", {"rA", "rB"}, {"out"}).output("out");
  if (collectives) {
    b.doc["ops"][1]["collective"] = {{"kind", "all_gather"}, {"group", "dp"}};
    b.doc["ops"][3]["collective"] = {{"kind", "all_reduce"}};
  }
  return b;
}

// The collective ops of `order` (first appearances), by id.
std::vector<std::string> collectives_run(const roam::Graph& g, const roam::Order& order) {
  std::vector<std::string> ids;
  for (roam::OpIdx v : order) {
    if (g.ops[v].collective && std::find(ids.begin(), ids.end(), g.ops[v].id) == ids.end()) {
      ids.push_back(g.ops[v].id);
    }
  }
  return ids;
}

std::vector<std::string> program_collectives(const roam::Graph& g) {
  std::vector<std::string> ids;
  for (const roam::Op& op : g.ops) {
    if (op.collective) ids.push_back(op.id);
  }
  return ids;
}

std::string all_problems(const roam::ValidationReport& rep) {
  std::string s;
  for (const std::string& p : rep.problems) s += p + "\n";
  return s;
}

TEST(Collectives, ReadWrittenBackAndChainedInPreds) {
  const roam::Graph g = two_branches().parse();
  ASSERT_EQ(g.collectives, (std::vector<roam::OpIdx>{1, 3}));
  EXPECT_EQ(g.ops[1].collective->kind, "all_gather");
  EXPECT_EQ(g.ops[1].collective->group, std::optional<std::string>("dp"));
  EXPECT_EQ(g.ops[3].collective->group, std::nullopt);
  EXPECT_FALSE(g.ops[0].collective.has_value());
  // cB depends on cA (the implicit edge) besides its data predecessor pB.
  EXPECT_EQ(g.preds[3], (std::vector<roam::OpIdx>{1, 2}));
  const json back = roam::graph_to_json(g);
  EXPECT_EQ(back["ops"][1]["collective"], json({{"kind", "all_gather"}, {"group", "dp"}}));
  EXPECT_EQ(back["ops"][3]["collective"], json({{"kind", "all_reduce"}}));
  EXPECT_FALSE(back["ops"][0].contains("collective"));
  const roam::Graph h = roam::parse_graph(back, "round-trip.json");
  for (roam::OpIdx v = 0; v < g.num_ops(); ++v) EXPECT_EQ(h.ops[v].collective, g.ops[v].collective);
}

TEST(Collectives, HandWorkedOptimaWithAndWithoutTheRule) {
  const roam::Graph g = two_branches().parse();
  const roam::Graph free = two_branches(false).parse();
  // The brute force over every valid order agrees with the numbers worked out above.
  EXPECT_EQ(roamtest::brute_downsets(roamtest::brute_model(g), 1).min_tp, kConstrainedTp);
  EXPECT_EQ(roamtest::brute_downsets(roamtest::brute_model(free), 1).min_tp, kUnconstrainedTp);
  // Without the rule roam swaps the two branches (cB first) and reaches 700 ...
  const roam::Order swapped = roam::make_order(free, "roam", 1);
  EXPECT_EQ(roam::theoretical_peak(free, swapped, 1), kUnconstrainedTp);
  EXPECT_LT(std::find(swapped.begin(), swapped.end(), 3) - swapped.begin(),
            std::find(swapped.begin(), swapped.end(), 1) - swapped.begin());
  // ... with it, roam keeps cA before cB and reaches the constrained optimum, 800.
  const roam::PlanResult r = roam::make_plan(g, roamtest::request("auto", "auto", 1));
  EXPECT_EQ(r.plan.stats.theoretical_peak_bytes, kConstrainedTp);
  EXPECT_LE(r.plan.stats.lower_bound_bytes, kConstrainedTp);
  EXPECT_EQ(collectives_run(g, r.plan.order), (std::vector<std::string>{"cA", "cB"}));
  const json doc = roam::plan_to_json(g, r.plan);
  EXPECT_EQ(doc["collectives"], json({"cA", "cB"}));
  const roam::ValidationReport rep = roam::validate_plan(g, doc, "p.json");
  EXPECT_TRUE(rep.valid) << all_problems(rep);
  // A graph without collectives gets no field.
  EXPECT_FALSE(roam::plan_to_json(free, roam::make_plan(free, roamtest::request("auto", "auto", 1)).plan)
                   .contains("collectives"));
}

TEST(Collectives, EveryOrderMethodKeepsProgramOrder) {
  const roam::Graph g = two_branches().parse();
  for (const std::string& method : roam::order_methods()) {
    const roam::Order o = roam::make_order(g, method, 1);
    EXPECT_TRUE(roam::is_topological(g, o)) << method;
    EXPECT_EQ(collectives_run(g, o), (std::vector<std::string>{"cA", "cB"})) << method;
    // No order of this graph beats 800 (see above).
    EXPECT_GE(roam::theoretical_peak(g, o, 1), kConstrainedTp) << method;
    const roam::PlanResult r = roam::make_plan(g, roamtest::request(method, "llfb", 1));
    const json doc = roam::plan_to_json(g, r.plan);
    EXPECT_EQ(doc["collectives"], json({"cA", "cB"})) << method;
    const roam::ValidationReport rep = roam::validate_plan(g, doc, "p.json");
    EXPECT_TRUE(rep.valid) << method << ": " << all_problems(rep);
  }
  EXPECT_EQ(roam::theoretical_peak(g, roam::make_order(g, "roam", 1), 1), kConstrainedTp);
}

// Random training-like graphs with a quarter of their ops made collectives: every order method
// (and the whole default plan) runs them in program order and the plans validate.
TEST(Collectives, RandomGraphsEveryMethod) {
  int graphs = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    roamtest::RandomGraphOptions o;
    o.num_ops = 24;
    json doc = roamtest::random_graph_json(seed, o);
    std::mt19937_64 rng(seed);
    static const char* kKinds[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"};
    for (json& op : doc["ops"]) {
      if (rng() % 4 == 0) op["collective"] = {{"kind", kKinds[rng() % 4]}};
    }
    const roam::Graph g = roam::parse_graph(doc, "random.json");
    if (g.collectives.size() < 2) continue;
    ++graphs;
    const std::vector<std::string> want = program_collectives(g);
    for (const std::string& method : roam::order_methods()) {
      const roam::Order ord = roam::make_order(g, method, 64);
      EXPECT_TRUE(roam::is_topological(g, ord)) << seed << " " << method;
      EXPECT_EQ(collectives_run(g, ord), want) << seed << " " << method;
    }
    roam::PlanRequest req = roamtest::request("auto", "auto", 64);
    req.options.time_limit_seconds = 2;
    const roam::PlanResult r = roam::make_plan(g, req);
    EXPECT_EQ(collectives_run(g, r.plan.order), want) << seed;
    const roam::ValidationReport rep = roam::validate_plan(g, roam::plan_to_json(g, r.plan), "p.json");
    EXPECT_TRUE(rep.valid) << seed << ": " << all_problems(rep);
  }
  EXPECT_GE(graphs, 12);
}

// ---- the validator ---------------------------------------------------------------------------

// A plan of the graph without collectives in the swapped order pB cB pA cA J (Tp 700, a valid
// layout of that order), to be checked against the graph with collectives.
json swapped_plan() {
  const roam::Graph free = two_branches(false).parse();
  const roam::Order swapped = {2, 3, 0, 1, 4};
  const roam::PlanResult r =
      roam::make_plan_for_order(free, swapped, 0.0, roamtest::request("program", "llfb", 1), 0);
  json doc = roam::plan_to_json(free, r.plan);
  EXPECT_EQ(doc["stats"]["theoretical_peak_bytes"], kUnconstrainedTp);
  return doc;
}

TEST(Collectives, ValidateRefusesSwappedCollectives) {
  const roam::Graph g = two_branches().parse();
  json doc = swapped_plan();
  doc["collectives"] = {"cB", "cA"};  // what the order runs: still refused
  roam::ValidationReport rep = roam::validate_plan(g, doc, "p.json");
  EXPECT_FALSE(rep.valid);
  const std::string all = all_problems(rep);
  EXPECT_NE(all.find("collective op 'cB' (order[1]) runs before collective op 'cA' (order[3]), "
                     "which comes before it in program order"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("collectives: ['cB', 'cA'] is not the graph's collective ops in program order, "
                     "['cA', 'cB']"),
            std::string::npos)
      << all;
  // The implicit edge is not reported a second time as a dependency, and the bound over valid
  // orders (800 here) above this invalid order's Tp (700) is no bug in the bound.
  EXPECT_EQ(all.find("depends on"), std::string::npos) << all;
  EXPECT_EQ(all.find("bug in the bound"), std::string::npos) << all;
  // Listing program order while the order runs them swapped: refused for both reasons.
  doc["collectives"] = {"cA", "cB"};
  rep = roam::validate_plan(g, doc, "p.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_NE(all_problems(rep).find("runs before collective op 'cA'"), std::string::npos);
  EXPECT_NE(all_problems(rep).find("the plan lists ['cA', 'cB'] but its order runs the collective ops "
                                   "as ['cB', 'cA']"),
            std::string::npos)
      << all_problems(rep);
  // The same plan is valid for the graph without collectives (without the field).
  doc.erase("collectives");
  rep = roam::validate_plan(two_branches(false).parse(), doc, "p.json");
  EXPECT_TRUE(rep.valid) << all_problems(rep);
}

TEST(Collectives, ValidateChecksTheCollectivesField) {
  const roam::Graph g = two_branches().parse();
  const json good = roam::plan_to_json(g, roam::make_plan(g, roamtest::request("program", "llfb", 1)).plan);
  ASSERT_TRUE(roam::validate_plan(g, good, "p.json").valid);
  auto problems_of = [&](const json& doc) {
    const roam::ValidationReport rep = roam::validate_plan(g, doc, "p.json");
    EXPECT_FALSE(rep.valid) << doc.dump();
    return all_problems(rep);
  };
  json bad = good;
  bad.erase("collectives");
  EXPECT_NE(problems_of(bad).find("collectives: missing; the graph has 2 collective op(s)"), std::string::npos);
  bad["collectives"] = {"cB", "cA"};
  EXPECT_NE(problems_of(bad).find("the plan lists ['cB', 'cA'] but its order runs the collective ops as "
                                  "['cA', 'cB']"),
            std::string::npos);
  bad["collectives"] = {"cA"};
  EXPECT_NE(problems_of(bad).find("the plan lists ['cA'] but"), std::string::npos);
  bad["collectives"] = {"cA", "cB", "cB"};
  EXPECT_NE(problems_of(bad).find("the plan lists ['cA', 'cB', 'cB'] but"), std::string::npos);
  bad["collectives"] = {"cA", "pB"};
  EXPECT_NE(problems_of(bad).find("collectives[1]: op 'pB' is not a collective op"), std::string::npos);
  bad["collectives"] = {"cA", "ghost"};
  EXPECT_NE(problems_of(bad).find("collectives[1]: unknown op 'ghost'"), std::string::npos);
  // On a graph without collectives the field is refused, even empty.
  const roam::Graph free = two_branches(false).parse();
  json extra = roam::plan_to_json(free, roam::make_plan(free, roamtest::request("program", "llfb", 1)).plan);
  ASSERT_TRUE(roam::validate_plan(free, extra, "p.json").valid);
  for (const json& list : {json::array(), json({"cA", "cB"})}) {
    extra["collectives"] = list;
    const roam::ValidationReport rep = roam::validate_plan(free, extra, "p.json");
    EXPECT_FALSE(rep.valid);
    EXPECT_NE(all_problems(rep).find("collectives: the graph has no collective ops"), std::string::npos)
        << all_problems(rep);
  }
  // Another shape is unreadable (InputError, exit status 2 in the CLI).
  for (const json& shape : {json("cA"), json({1, 2}), json::object()}) {
    bad["collectives"] = shape;
    try {
      roam::validate_plan(g, bad, "p.json");
      ADD_FAILURE() << shape.dump() << " accepted";
    } catch (const roam::InputError& e) {
      EXPECT_EQ(e.file(), "p.json");
      EXPECT_EQ(e.field().rfind("collectives", 0), 0u) << e.what();
    }
  }
}

// ---- bad input -------------------------------------------------------------------------------

struct BadCollective {
  const char* what;
  json collective;
  bool recomputable;
  std::string field;  // exact InputError::field()
  std::string word;   // in the message
};

std::vector<BadCollective> bad_collectives() {
  return {
      {"not an object", json("all_reduce"), false, "ops[1].collective", "must be an object"},
      {"a list", json::array({"all_reduce"}), false, "ops[1].collective", "must be an object"},
      {"kind missing", json({{"group", "dp"}}), false, "ops[1].collective.kind", "missing required field"},
      {"kind empty", json({{"kind", ""}}), false, "ops[1].collective.kind", "non-empty string"},
      {"kind a number", json({{"kind", 3}}), false, "ops[1].collective.kind", "non-empty string"},
      {"kind null", json({{"kind", nullptr}}), false, "ops[1].collective.kind", "non-empty string"},
      {"group a number", json({{"kind", "all_reduce"}, {"group", 0}}), false, "ops[1].collective.group",
       "must be a string"},
      // null is refused, not read as absent: an op meant as a collective must not silently
      // lose its place in the collective order
      {"null", json(nullptr), false, "ops[1].collective", "must be an object"},
      {"group null", json({{"kind", "all_reduce"}, {"group", nullptr}}), false,
       "ops[1].collective.group", "must be a string"},
      {"recomputable", json({{"kind", "all_reduce"}}), true, "ops[1].recomputable",
       "must not be recomputable"},
  };
}

GraphJson with_bad(const BadCollective& b) {
  GraphJson g = two_branches(false);
  g.doc["ops"][1]["collective"] = b.collective;
  if (b.recomputable) g.doc["ops"][1]["recomputable"] = true;
  return g;
}

TEST(Collectives, BadInputNamesFileFieldAndOp) {
  for (const BadCollective& b : bad_collectives()) {
    try {
      roam::parse_graph(with_bad(b).doc, "bad.json");
      ADD_FAILURE() << b.what << ": accepted";
    } catch (const roam::InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.file(), "bad.json") << what;
      EXPECT_EQ(e.field(), b.field) << what;
      EXPECT_EQ(e.id(), "cA") << what;
      EXPECT_NE(what.find(b.word), std::string::npos) << b.what << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  // `recomputable: false` is fine.
  GraphJson ok = two_branches();
  ok.doc["ops"][1]["recomputable"] = false;
  EXPECT_NO_THROW(ok.parse());
}

// A cycle that only the implicit collective order closes: cA (first in the file) reads the
// output of cB, the next collective, which by the rule runs after it. The message says which
// edge is the rule's, since no field of the file names it.
TEST(Collectives, CycleThroughTheCollectiveOrderSaysSo) {
  GraphJson b("collective-cycle");
  b.tensor("x", 8, "input").tensor("hB", 200).tensor("rB", 200).tensor("rA", 400);
  b.op("cA", {"rB"}, {"rA"}).op("pB", {"x"}, {"hB"}).op("cB", {"hB"}, {"rB"}).output("rA");
  b.doc["ops"][0]["collective"] = {{"kind", "all_gather"}};
  b.doc["ops"][2]["collective"] = {{"kind", "all_reduce"}};
  try {
    roam::parse_graph(b.doc, "cycle.json");
    ADD_FAILURE() << "accepted";
  } catch (const roam::InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file(), "cycle.json") << what;
    EXPECT_NE(what.find("dependency cycle through 2 op(s)"), std::string::npos) << what;
    EXPECT_NE(what.find("cA -> (collective order) cB"), std::string::npos) << what;
    EXPECT_NE(what.find("cB -> cA"), std::string::npos) << what;
  }
  // with cA an ordinary op there is no cycle, only a file order that breaks a data edge
  b.doc["ops"][0].erase("collective");
  try {
    roam::parse_graph(b.doc, "cycle.json");
    ADD_FAILURE() << "accepted";
  } catch (const roam::InputError& e) {
    EXPECT_EQ(std::string(e.what()).find("dependency cycle"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("listed before op 'cB'"), std::string::npos) << e.what();
  }
}

TEST(Collectives, CliExitStatusAndMessages) {
  roamtest::TempDir dir;
  // Bad input: exit 2, one line naming the file, the field and the op, no plan written.
  for (const BadCollective& b : bad_collectives()) {
    const std::string path = dir.file("bad.json");
    roamtest::write_text(path, with_bad(b).doc.dump());
    const roamtest::CliResult r = roamtest::run_roam(dir, "plan '" + path + "' -o '" + dir.file("p.json") + "'");
    EXPECT_EQ(r.status, 2) << b.what << ": " << r.err;
    for (const std::string& s : {path, b.field, std::string("(id 'cA')"), b.word}) {
      EXPECT_NE(r.err.find(s), std::string::npos) << b.what << ": " << s << " in " << r.err;
    }
    EXPECT_FALSE(std::filesystem::exists(dir.file("p.json"))) << b.what;
  }
  // A plan written by roam lists the collectives and validates (exit 0); swapped, exit 1 with
  // both ids named; an unreadable `collectives`, exit 2.
  const std::string graph = dir.file("g.json"), plan = dir.file("p.json");
  roamtest::write_text(graph, two_branches().doc.dump());
  roamtest::CliResult r = roamtest::run_roam(dir, "plan '" + graph + "' -o '" + plan + "' --alignment 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(roamtest::read_text(plan))["collectives"], json({"cA", "cB"}));
  EXPECT_EQ(roamtest::run_roam(dir, "validate '" + graph + "' '" + plan + "'").status, 0);
  json swapped = swapped_plan();
  swapped["collectives"] = {"cA", "cB"};
  roamtest::write_text(plan, swapped.dump());
  r = roamtest::run_roam(dir, "validate '" + graph + "' '" + plan + "'");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("collective op 'cB' (order[1]) runs before collective op 'cA' (order[3])"),
            std::string::npos)
      << r.out << r.err;
  swapped["collectives"] = "cA";
  roamtest::write_text(plan, swapped.dump());
  r = roamtest::run_roam(dir, "validate '" + graph + "' '" + plan + "'");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("field collectives"), std::string::npos) << r.err;
}

// ---- recomputation ---------------------------------------------------------------------------

// A training step with an all-gather of a parameter shard in the middle of the forward pass and
// the gradients all-reduced in the backward pass (alignment 64, sizes in bytes; x and ws
// resident, 128):
//   F1: x -> a1 (1024)          AG: all_gather ws -> wf (256)     F2: a1, wf -> a2 (1024)
//   F3: a2 -> a3 (1024)         L: a3 -> loss (64, graph output)
//   B3: loss, a3 -> d2 (64)     B2: d2, a2, wf -> d1 (64), g2 (256)   AR2: all_reduce g2 -> r2 (256)
//   B1: d1, a1 -> g1 (256)      AR1: all_reduce g1 -> r1 (256)        U: r1, r2 -> upd (64, output)
// F1, F2, F3 are recomputable (cost 1 s each), nothing else is.
// Without recomputation every order holds a1, wf, a2, a3, loss and d2 at B3: 3 x 1024 + 256 + 64
// + 64 = 3456 bytes, peak 128 + 3456 = 3584 (no step holds more). Budget 3000: recomputing F1
// after AR2 (a1 dropped after F2, its last forward reader) holds at most 2432 at B3 (wf, a2,
// a3, loss, d2; F2 2304, F3 2304, L 2368, F1#1 1408, B1 1664), peak 2560, for 1 s. Dropping a2
// instead still holds a1, wf, a2, a3 at F3 (3328 + 128 > 3000); dropping both costs 2 s. So the
// least recompute seconds at 3000 are 1 s, F1 recomputed once, the collectives each run once.
constexpr uint64_t kRematNoRecomputePeak = 3584;
constexpr uint64_t kRematBudget = 3000;
constexpr uint64_t kRematTp = 2432;

GraphJson remat_step() {
  GraphJson b("collective-remat");
  b.tensor("x", 64, "input").tensor("ws", 64, "param").tensor("a1", 1024).tensor("wf", 256)
      .tensor("a2", 1024).tensor("a3", 1024).tensor("loss", 64).tensor("d2", 64).tensor("d1", 64)
      .tensor("g2", 256).tensor("r2", 256).tensor("g1", 256).tensor("r1", 256).tensor("upd", 64);
  b.op("F1", {"x"}, {"a1"}).op("AG", {"ws"}, {"wf"}).op("F2", {"a1", "wf"}, {"a2"})
      .op("F3", {"a2"}, {"a3"}).op("L", {"a3"}, {"loss"})
      .op("B3", {"loss", "a3"}, {"d2"}, "backward").op("B2", {"d2", "a2", "wf"}, {"d1", "g2"}, "backward")
      .op("AR2", {"g2"}, {"r2"}, "backward").op("B1", {"d1", "a1"}, {"g1"}, "backward")
      .op("AR1", {"g1"}, {"r1"}, "backward").op("U", {"r1", "r2"}, {"upd"}, "update")
      .output("loss").output("upd");
  for (json& op : b.doc["ops"]) {
    const std::string id = op["id"];
    if (id == "AG") op["collective"] = {{"kind", "all_gather"}, {"group", "dp"}};
    if (id == "AR1" || id == "AR2") op["collective"] = {{"kind", "all_reduce"}, {"group", "dp"}};
    if (id[0] == 'F') op["recomputable"] = true;
    op["cost"] = id[0] == 'F' ? 1.0 : 0.5;
  }
  return b;
}

TEST(Collectives, RecomputationRunsEachCollectiveOnceInOrder) {
  const roam::Graph g = remat_step().parse();
  const roam::PlanRequest req = roamtest::request("auto", "auto", 64);
  const roam::PlanResult base = roam::make_plan(g, req);
  ASSERT_EQ(base.plan.stats.peak_bytes, kRematNoRecomputePeak);
  const roam::PlanResult r = roam::plan_with_budget(g, req, kRematBudget);
  EXPECT_EQ(r.plan.version, 2);
  EXPECT_GT(r.plan.stats.recomputations, 0u);
  EXPECT_LE(r.plan.stats.peak_bytes, kRematBudget);
  EXPECT_EQ(r.plan.stats.theoretical_peak_bytes, kRematTp);
  EXPECT_EQ(r.plan.stats.recomputations, 1u);
  EXPECT_DOUBLE_EQ(r.plan.stats.recompute_seconds, 1.0);
  EXPECT_EQ(std::count(r.plan.order.begin(), r.plan.order.end(), g.op_index.at("F1")), 2);
  for (const char* id : {"AG", "AR2", "AR1"}) {
    const roam::OpIdx v = g.op_index.at(id);
    EXPECT_EQ(std::count(r.plan.order.begin(), r.plan.order.end(), v), 1) << id;
  }
  EXPECT_EQ(collectives_run(g, r.plan.order), (std::vector<std::string>{"AG", "AR2", "AR1"}));
  const json doc = roam::plan_to_json(g, r.plan);
  EXPECT_EQ(doc["collectives"], json({"AG", "AR2", "AR1"}));
  const roam::ValidationReport rep = roam::validate_plan(g, doc, "p.json");
  EXPECT_TRUE(rep.valid) << all_problems(rep);
  // A version-2 plan that runs a collective twice is refused, naming it as a collective.
  json twice = doc;
  twice["order"].push_back("AR1");
  const roam::ValidationReport rep2 = roam::validate_plan(g, twice, "p.json");
  EXPECT_FALSE(rep2.valid);
  EXPECT_NE(all_problems(rep2).find("op 'AR1' runs again but is a collective op (collective kind "
                                    "'all_reduce'), which runs exactly once"),
            std::string::npos)
      << all_problems(rep2);
}

}  // namespace
