// Tests of minimize_allocation (`roam layout --minimize`, src/layout/minimalloc_solver.cpp): the
// result is never above a capacity at which one of its fit attempts found a layout, nor above
// what solve_allocation finds at any capacity it tried with the same node budget; its proven
// lower bound never exceeds the optimum. Optima come from a brute-force packer written here (every
// aligned offset of every buffer, depth first), or are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "roam/roam_layout.h"
#include "testing.h"

namespace roam {
namespace {

using roamtest::brute_min_height;

// Offsets valid at `cap`: aligned, inside, no two buffers live together overlap (pairwise).
bool valid(const std::vector<AllocBuffer>& b, const std::vector<uint64_t>& off, uint64_t cap) {
  return roamtest::buffers_problem(b, off, cap).empty();
}

// a [0,2) size 3 and b [1,3) size 3, both aligned to 2: live together at time 1, so the live-size
// bound is 6; but both offsets are even and the ranges must be disjoint, so one buffer is at 0 and
// the other at 4 or above: the minimum height is 7 (a at 0, b at 4). Capacity 6 is infeasible, so
// --minimize must say 7, proven (the proven bound is 7, from its probe at 6).
TEST(Minimize, AlignmentGapWorkedOutByHand) {
  const std::vector<AllocBuffer> b = {{0, 2, 3, 2}, {1, 3, 3, 2}};
  EXPECT_EQ(live_size_lower_bound(b), 6u);
  EXPECT_EQ(brute_min_height(b), 7u);
  const AllocMinimizeResult m = minimize_allocation(b);
  EXPECT_EQ(m.height, 7u);
  EXPECT_EQ(m.lower_bound, 6u);
  EXPECT_EQ(m.proven_lower_bound, 7u);
  EXPECT_TRUE(m.proven_optimal);
  EXPECT_TRUE(valid(b, m.offsets, 7));
  ASSERT_FALSE(m.probes.empty());
  EXPECT_EQ(m.probes[0].capacity, 6u);  // the lowest height not excluded is tried first
  EXPECT_EQ(m.probes[0].status, AllocStatus::kInfeasible);
}

// The failure: a fit at the lower bound needs more nodes than the first round of probes
// gives, and the old bisection never went back to it. With one node per search in the first
// round, the rounds must come back to the lowest height with larger budgets and reach the
// brute-force optimum, proven.
TEST(Minimize, ReturnsToTheLowestHeightWithLargerBudgets) {
  std::mt19937_64 rng(15);
  int checked = 0;
  for (int it = 0; it < 200; ++it) {
    const int n = 2 + static_cast<int>(rng() % 5);
    const std::vector<AllocBuffer> b = roamtest::random_tiny_buffers(rng, n, 5, 4, 4, it % 4 == 0, 3);
    const uint64_t opt = brute_min_height(b);
    AllocSolveOptions o;
    o.time_limit_seconds = 0;  // node limits only: deterministic
    o.probe_node_start = 1;
    o.node_limit = 1 << 20;
    o.dive_node_limit = 1;     // the dives stop at once: the probes must do the work
    const AllocMinimizeResult m = minimize_allocation(b, o);
    EXPECT_EQ(m.height, opt) << "instance " << it;
    EXPECT_TRUE(m.proven_optimal) << "instance " << it;
    EXPECT_EQ(m.proven_lower_bound, opt) << "instance " << it;
    EXPECT_TRUE(valid(b, m.offsets, m.height)) << "instance " << it;
    ++checked;
  }
  EXPECT_EQ(checked, 200);
}

// 20-40 buffers over 40 time steps, lifetimes 1-15, sizes 1-12 (no alignment).
std::vector<AllocBuffer> random_buffers(std::mt19937_64& rng) {
  const int n = 20 + static_cast<int>(rng() % 21);
  return roamtest::random_tiny_buffers(rng, n, 40, 15, 12, false, 1);
}

// Node limits only (deterministic); the dives stop at once, so the probes do the work.
AllocSolveOptions probe_options() {
  AllocSolveOptions o;
  o.time_limit_seconds = 0;
  o.probe_node_start = 50;
  o.node_limit = 3200;
  o.dive_node_limit = 1;
  return o;
}

// Property on random instances (20-40 buffers, no brute force needed for the invariant): for every
// capacity minimize tried, a fit attempt at that capacity with the same node budget (what
// `roam layout --capacity C --search-node-limit N` runs) gets the same outcome, and the result is
// never above the height it finds. The proven lower bound is at most the height, and a probe
// proven infeasible is below the height.
TEST(Minimize, NeverAboveTheFitsItTried) {
  std::mt19937_64 rng(1515);
  int probes = 0;
  for (int it = 0; it < 12; ++it) {
    const std::vector<AllocBuffer> b = random_buffers(rng);
    AllocSolveOptions o = probe_options();
    const AllocMinimizeResult m = minimize_allocation(b, o);
    ASSERT_TRUE(valid(b, m.offsets, m.height)) << "instance " << it;
    EXPECT_LE(m.lower_bound, m.proven_lower_bound);
    EXPECT_LE(m.proven_lower_bound, m.height);
    for (const AllocProbe& q : m.probes) {
      AllocSolveOptions f = o;
      f.node_limit = q.node_limit;
      const AllocResult fit = solve_allocation(b, q.capacity, f);
      EXPECT_EQ(fit.status, q.status) << "instance " << it << " capacity " << q.capacity;
      if (fit.status == AllocStatus::kFeasible) {
        EXPECT_LE(m.height, fit.height) << "instance " << it << " capacity " << q.capacity;
      }
      if (q.status == AllocStatus::kInfeasible) {
        EXPECT_LT(q.capacity, m.height);
        EXPECT_LE(q.capacity + 1, m.proven_lower_bound);
      }
      ++probes;
    }
  }
  EXPECT_GT(probes, 0);
}

// The second pass's work bounds (roam layout): at most probes_per_round probes at each node
// budget; no probe starts whose budget x heuristics
// would take the probes' nodes above probe_nodes_total; never above a fit it tried, the proven
// bound never above the height (random instances of 20-40 buffers).
TEST(Minimize, ProbesPerRoundAndNodeTotalBoundTheWork) {
  std::mt19937_64 rng(2026);
  int capped_rounds = 0;
  for (int it = 0; it < 12; ++it) {
    const std::vector<AllocBuffer> b = random_buffers(rng);
    AllocSolveOptions o = probe_options();
    o.probes_per_round = 2;
    o.probe_nodes_total = it % 2 ? 0 : 20000;
    const AllocMinimizeResult m = minimize_allocation(b, o);
    ASSERT_TRUE(valid(b, m.offsets, m.height)) << "instance " << it;
    EXPECT_LE(m.lower_bound, m.proven_lower_bound);
    EXPECT_LE(m.proven_lower_bound, m.height);
    std::map<int64_t, int> per_budget;
    int64_t nodes = 0;
    for (const AllocProbe& q : m.probes) {
      if (o.probe_nodes_total > 0) {  // checked before the probe, with the budget x heuristics
        EXPECT_LE(nodes + q.node_limit * o.heuristics, o.probe_nodes_total) << "instance " << it;
      }
      nodes += q.nodes;
      if (++per_budget[q.node_limit] == 2) ++capped_rounds;
      EXPECT_LE(per_budget[q.node_limit], 2) << "instance " << it << " budget " << q.node_limit;
      if (q.status == AllocStatus::kFeasible) {
        EXPECT_LE(m.height, q.height);
      }
    }
  }
  EXPECT_GT(capped_rounds, 0);  // some round did use its two probes
}

// Tiny random instances against the brute-force packer with small budgets and few probes (so the
// result need not be optimal): the proven lower bound never exceeds the optimum, the height never
// goes below it, and a result marked optimal is the optimum.
TEST(Minimize, BoundsAgreeWithBruteForceUnderSmallBudgets) {
  std::mt19937_64 rng(4242);
  for (int it = 0; it < 150; ++it) {
    const int n = 3 + static_cast<int>(rng() % 4);
    const std::vector<AllocBuffer> b = roamtest::random_tiny_buffers(rng, n, 6, 4, 5, it % 3 == 0, 2);
    const uint64_t opt = brute_min_height(b);
    AllocSolveOptions o;
    o.time_limit_seconds = 0;
    o.probe_node_start = 1 + static_cast<int64_t>(rng() % 3);
    o.node_limit = 4;
    o.dive_node_limit = 1;
    o.max_probes = 1 + static_cast<int>(rng() % 3);
    const AllocMinimizeResult m = minimize_allocation(b, o);
    EXPECT_TRUE(valid(b, m.offsets, m.height)) << "instance " << it;
    EXPECT_GE(m.height, opt) << "instance " << it;
    EXPECT_LE(m.proven_lower_bound, opt) << "instance " << it;
    if (m.proven_optimal) {
      EXPECT_EQ(m.height, opt) << "instance " << it;
    }
  }
}


// A time limit that passes during the greedy layouts (here before any search: 1 ns): the buffers
// not yet placed go on top of the placed ones, so the layout stays valid and aligned, and the
// height is its own maximum end (recounted here). 3000 buffers with long lifetimes, aligned to
// up to 8.
TEST(Minimize, TimeLimitDuringTheGreedyLayoutsKeepsThemValid) {
  std::mt19937_64 rng(77);
  const std::vector<AllocBuffer> b = roamtest::random_tiny_buffers(rng, 3000, 2000, 1500, 4096, true, 8);
  AllocSolveOptions o;
  o.time_limit_seconds = 1e-9;
  const AllocMinimizeResult m = minimize_allocation(b, o);
  ASSERT_EQ(m.offsets.size(), b.size());
  uint64_t top = 0;
  for (size_t i = 0; i < b.size(); ++i) top = std::max(top, m.offsets[i] + b[i].size);
  EXPECT_EQ(m.height, top);
  EXPECT_TRUE(valid(b, m.offsets, m.height));
  EXPECT_GE(m.height, m.lower_bound);
  EXPECT_FALSE(m.proven_optimal);
}

}  // namespace
}  // namespace roam
