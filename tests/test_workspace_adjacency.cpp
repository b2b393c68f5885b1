// place_workspaces_beside_outputs (roam/layout.h): an op's workspace block moved next to one of
// its output slots where those bytes are free at its step; worked by hand, then on random graphs
// (every plan stays valid, the arena and Tp do not change).
#include <gtest/gtest.h>

#include <random>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "roam/plan.h"
#include "roam/validate.h"
#include "testing.h"

namespace roam {
namespace {

// n0 makes a (256 B); n1 makes b (512 B) with a 256 B workspace; n2 reads b (and a, when
// a_live_at_n1). Laid out by hand: b @ 0, a @ 512, the workspace @ 768, arena 1024. The block
// [768, 1024) touches a's slot, not b's. The bytes just above b, [512, 768), are a's while n1
// runs when a is read by n2: nothing moves. When a is dead by then (read by nobody after n0),
// they are free at n1's step: the block moves to 512, right above b (the arena, whose top the
// block was, becomes 768).
Graph two_ops(bool a_live_at_n1) {
  nlohmann::json doc = {
      {"format", "roam-graph"}, {"version", 1}, {"name", "adjacency"},
      {"tensors", {{{"id", "a"}, {"size", 256}}, {{"id", "b"}, {"size", 512}},
                   {{"id", "c"}, {"size", 64}}}},
      {"ops", {{{"id", "n0"}, {"target", "t"}, {"phase", "forward"}, {"inputs", nlohmann::json::array()},
                {"outputs", {"a"}}},
               {{"id", "n1"}, {"target", "t"}, {"phase", "forward"}, {"inputs", nlohmann::json::array()},
                {"outputs", {"b"}}, {"workspace", 256}},
               {{"id", "n2"}, {"target", "t"}, {"phase", "forward"},
                {"inputs", a_live_at_n1 ? nlohmann::json{"a", "b"} : nlohmann::json{"b"}},
                {"outputs", {"c"}}}}},
      {"outputs", {"c"}}};
  return parse_graph(doc, "adjacency");
}

TEST(WorkspaceAdjacency, MovesTheBlockBesideAnOutputWhereTheBytesAreFree) {
  for (bool a_live : {true, false}) {
    const Graph g = two_ops(a_live);
    const Liveness live = compute_liveness(g, g.program_order());
    // storages: a, b, c, then the workspace of n1
    ASSERT_EQ(g.num_storages(), 4);
    std::vector<uint64_t> off = {512, 0, 0, 768};
    const uint64_t moved = place_workspaces_beside_outputs(g, live, off, 64);
    if (a_live) {
      EXPECT_EQ(moved, 0u);
      EXPECT_EQ(off[3], 768u);  // [512, 768) is a's while n1 runs
    } else {
      EXPECT_EQ(moved, 1u);
      EXPECT_EQ(off[3], 512u);  // right above b ([0, 512)), a is dead by then
    }
    // the block was the top of the arena: moved, the arena shrinks to a's end
    EXPECT_EQ(arena_bytes(g, off, 64), a_live ? 1024u : 768u);
  }
}

TEST(WorkspaceAdjacency, NeverGrowsTheArenaAndKeepsEveryPlanValid) {
  // (and make_plan ran the pass already: running it again moves nothing)
  std::mt19937_64 rng(7);
  int moved_total = 0;
  for (int k = 0; k < 60; ++k) {
    roamtest::RandomGraphOptions o;
    o.num_ops = 8 + static_cast<int>(rng() % 30);
    nlohmann::json doc = roamtest::random_graph_json(1000 + k, o);
    for (auto& op : doc["ops"]) {  // a workspace on about 40% of the ops
      if (rng() % 5 < 2) op["workspace"] = 64 + rng() % 4000;
    }
    const Graph g = parse_graph(doc, "random");
    for (const char* layout : {"llfb", "best_fit", "greedy_by_size", "roam"}) {
      const PlanResult r = make_plan(g, roamtest::request("program", layout, 64));
      const ValidationReport rep = validate_plan(g, plan_to_json(g, r.plan), "random");
      ASSERT_TRUE(rep.valid) << layout << " " << (rep.problems.empty() ? "" : rep.problems[0]);
      // the pass itself on this layout: arena unchanged, every block beside an output or put
      // back where it was
      const Liveness live = compute_liveness(g, r.plan.order);
      std::vector<uint64_t> off = r.plan.offsets;
      if (off.size() != static_cast<size_t>(g.num_storages())) continue;  // in-place plans
      std::vector<uint64_t> again = off;
      moved_total += static_cast<int>(place_workspaces_beside_outputs(g, live, again, 64));
      EXPECT_LE(arena_bytes(g, again, 64), arena_bytes(g, off, 64));
      EXPECT_EQ(again, off) << "make_plan already placed every block it could";
    }
  }
  EXPECT_GE(moved_total, 0);
}

}  // namespace
}  // namespace roam
