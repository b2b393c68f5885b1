// The time limit bounds the whole plan: every stage checks the deadline and, once it has passed,
// takes its fallback (the best baseline order, the first baseline layout, no baseline pairs, a
// smaller but still valid bound). Tested by what the planners do with a deadline that has
// already passed, not by timing them (speed lives in bench/).
#include <gtest/gtest.h>

#include <chrono>

#include "roam/analysis.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/validate.h"
#include "testing.h"

namespace {

using Clock = std::chrono::steady_clock;

roam::Graph large_random_graph(uint64_t seed, int ops) {
  roamtest::RandomGraphOptions o;
  o.num_ops = ops;
  return roam::parse_graph(roamtest::random_graph_json(seed, o), "random.json");
}

TEST(TimeLimit, PassedDeadlineGivesAValidPlanFromTheFallbacks) {
  const roam::Graph g = large_random_graph(5, 3000);
  roam::PlanRequest req;
  req.options.deadline = Clock::now() - std::chrono::seconds(1);
  const roam::PlanResult r = roam::make_plan(g, req);
  const roam::ValidationReport rep = roam::validate_plan(g, roam::plan_to_json(g, r.plan), "plan");
  ASSERT_TRUE(rep.valid) << rep.problems.front();
  // No roam candidate: the best baseline order by Tp, and the search was cut.
  const auto& os = r.plan.options["order_stats"];
  EXPECT_TRUE(os["time_limit_hit"].get<bool>());
  EXPECT_TRUE(os["variants"].empty());
  uint64_t best_baseline = UINT64_MAX;
  for (const auto& [name, tp] : os["baselines"].items()) best_baseline = std::min(best_baseline, tp.get<uint64_t>());
  EXPECT_EQ(r.plan.stats.theoretical_peak_bytes, best_baseline);
  // Every baseline pair (program, lescea, lpmf, bfs, dfs x llfb, greedy_by_size, best_fit)
  // skipped, none run.
  EXPECT_EQ(r.plan.options["baseline_pairs_skipped"].size(), 15u);
  EXPECT_TRUE(r.plan.options["baseline_pairs"].empty());
  // The layout: at most llfb's arena on that order with the deadline passed (the roam layout's
  // first baseline, all it computes once its time is spent: 255 storages by best fit, the rest
  // on the skyline), and at least the whole llfb's here (the cut costs bytes on this graph).
  const roam::Liveness live = roam::compute_liveness(g, r.plan.order);
  const roam::Layout cut = roam::layout_llfb(g, live, 64, Clock::now() - std::chrono::seconds(1));
  EXPECT_LE(r.plan.stats.arena_bytes, cut.reserved_bytes);
  EXPECT_GE(r.plan.stats.arena_bytes, roam::layout_llfb(g, live, 64).reserved_bytes);
}

TEST(TimeLimit, NoDeadlineRunsEveryPair) {
  const roam::Graph g = large_random_graph(6, 300);
  const roam::PlanResult r = roam::make_plan(g, roam::PlanRequest{});
  EXPECT_EQ(r.plan.options["baseline_pairs"].size(), 15u);
  EXPECT_FALSE(r.plan.options.contains("baseline_pairs_skipped"));
}

TEST(TimeLimit, BoundStoppedEarlyIsSmallerAndStillBelowEveryOrder) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const roam::Graph g = large_random_graph(seed, 200);
    bool stopped = false;
    const uint64_t full = roam::lower_bound(g, 64, nullptr, Clock::time_point::max(), &stopped);
    EXPECT_FALSE(stopped);
    EXPECT_EQ(full, roam::lower_bound(g, 64));
    const uint64_t early = roam::lower_bound(g, 64, nullptr, Clock::now() - std::chrono::seconds(1), &stopped);
    EXPECT_LE(early, full) << "seed " << seed;
    // At least the largest op's own storages (what every order holds at that op's step).
    uint64_t own = 0;
    for (roam::OpIdx v = 0; v < g.num_ops(); ++v) {
      uint64_t bytes = 0;
      for (roam::StorageIdx s : g.op_storages[v]) bytes += roam::align_up(g.storages[s].size, 64);
      own = std::max(own, bytes);
    }
    EXPECT_GE(early, own) << "seed " << seed;
    for (const std::string& m : roam::order_methods()) {
      EXPECT_LE(early, roam::theoretical_peak(g, roam::make_order(g, m, 64), 64)) << m;
    }
  }
}

// The must-live bytes of a subset of ops equal the full computation's on those ops; the others
// get their own storages' bytes.
TEST(TimeLimit, MustLiveOfListedOpsEqualsTheFullComputation) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const roam::Graph g = large_random_graph(seed, 150);
    const auto full = roam::lower_bound_per_op(g, 64);
    std::vector<roam::OpIdx> some;
    for (roam::OpIdx v = 0; v < g.num_ops(); v += 1 + static_cast<int>(seed % 4)) some.push_back(v);
    const auto part = roam::lower_bound_per_op(g, 64, some);
    std::vector<char> listed(g.num_ops(), 0);
    for (roam::OpIdx v : some) listed[v] = 1;
    for (roam::OpIdx v = 0; v < g.num_ops(); ++v) {
      uint64_t own = 0;
      for (roam::StorageIdx s : g.op_storages[v]) own += roam::align_up(g.storages[s].size, 64);
      EXPECT_EQ(part[v], listed[v] ? full[v] : own) << "seed " << seed << " op " << v;
    }
  }
}

}  // namespace
