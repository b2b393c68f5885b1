// Tests of the exact static-allocation solver (solve_allocation, minimize_allocation), the
// best_fit baseline and the `roam` layout (src/layout/minimalloc_solver.cpp, best_fit.cpp,
// roam_layout.cpp). Expected values are worked out by hand in the comments or by brute force
// written here, independently of the library.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/roam_layout.h"
#include "testing.h"

namespace roam {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers written for these tests.

using roamtest::Interval;
using roamtest::interval_graph;
using roamtest::buffers_problem;
using roamtest::graph_layout_problem;
using roamtest::units;
using roamtest::brute_min_height;
constexpr uint64_t U = roamtest::kUnit;


uint64_t arena_of(const Graph& g, const Liveness& live, const std::string& method,
                  const PlanOptions& options) {
  return arena_bytes(g, make_layout(g, live, method, options).offsets, options.alignment);
}

// ---------------------------------------------------------------------------------------------
// best_fit

TEST(BestFitLayout, RegisteredWithRoam) {
  const std::vector<std::string> expected = {"pytorch", "llfb", "greedy_by_size", "best_fit",
                                             "roam"};
  EXPECT_EQ(layout_methods(), expected);
}

// XLA's spatial order breaks size ties by the longer lifetime (greedy_by_size: earlier start).
//   s0 [0,1] 2u, s1 [1,3] 2u, s2 [2,2] 1u.
// best_fit order: s1 (2u, lifetime 2), s0 (2u, lifetime 1), s2:
//   s1 -> 0 [0,2); s0 conflicts s1 (step 1) -> on top, 2 [2,4);
//   s2 [2,2] conflicts only s1 [0,2): no gap below it -> on top, 2 [2,3). Arena 4u.
// greedy_by_size order: s0, s1, s2: s0 -> 0; s1 -> 2; s2 conflicts s1 [2,4): gap [0,2) -> 0.
TEST(BestFitLayout, SpatialOrderLongerLifetimeFirst) {
  const auto ivs = units({{0, 1, 2}, {1, 3, 2}, {2, 2, 1}});
  const Graph g = interval_graph(ivs);
  const Liveness live = compute_liveness(g, g.program_order());
  const Layout bf = layout_best_fit(g, live, U);
  EXPECT_EQ(bf.offsets, (std::vector<uint64_t>{2 * U, 0, 2 * U}));
  EXPECT_EQ(bf.reserved_bytes, 4 * U);
  const Layout gs = layout_greedy_by_size(g, live, U);
  EXPECT_EQ(gs.offsets, (std::vector<uint64_t>{0, 2 * U, 0}));
  EXPECT_EQ(make_layout(g, live, "best_fit", U).offsets, bf.offsets);
}

// ---------------------------------------------------------------------------------------------
// Hand-made layouts with a known optimum.

// Every baseline is one unit worse than the optimum.
//   s0 [0,0] 3u, s1 [0,1] 2u, s2 [1,3] 1u, s3 [2,2] 3u.
// Live bytes per step: 5u (s0+s1), 3u, 4u (s2+s3), 1u, so Tp = 5u, a lower bound.
// llfb (lifetime desc, size desc, idx): s2, s1, s0, s3:
//   s2 -> 0 [0,1); s1 [0,1] conflicts s2 -> 1 [1,3); s0 [0,0] conflicts only s1: the gap
//   [0,1) is too small -> 3 [3,6); s3 [2,2] conflicts only s2 -> 1 [1,4). Arena 6u.
// greedy_by_size (size desc, first asc, idx) and best_fit (size desc, lifetime desc, idx) both
// give s0, s3, s1, s2: s0 -> 0 [0,3); s3 [2,2] conflicts nothing placed -> 0 [0,3);
//   s1 conflicts s0 -> 3 [3,5); s2 [1,3] conflicts s3 [0,3) and s1 [3,5) -> 5 [5,6). Arena 6u.
// An optimum of 5u: s0 0 [0,3), s1 3 [3,5), s2 0 [0,1), s3 1 [1,4).
TEST(RoamLayout, BeatsEveryBaselineOnHandMadeCase) {
  const auto ivs = units({{0, 0, 3}, {0, 1, 2}, {1, 3, 1}, {2, 2, 3}});
  const Graph g = interval_graph(ivs);
  const Liveness live = compute_liveness(g, g.program_order());
  ASSERT_EQ(live.first, (std::vector<int32_t>{0, 0, 1, 2}));
  ASSERT_EQ(live.last, (std::vector<int32_t>{0, 1, 3, 2}));
  EXPECT_EQ(theoretical_peak(g, live, U), 5 * U);
  PlanOptions o;
  o.alignment = U;
  EXPECT_EQ(layout_llfb(g, live, U).offsets, (std::vector<uint64_t>{3 * U, U, 0, U}));
  EXPECT_EQ(arena_of(g, live, "llfb", o), 6 * U);
  EXPECT_EQ(layout_greedy_by_size(g, live, U).offsets,
            (std::vector<uint64_t>{0, 3 * U, 5 * U, 0}));
  EXPECT_EQ(arena_of(g, live, "greedy_by_size", o), 6 * U);
  EXPECT_EQ(arena_of(g, live, "best_fit", o), 6 * U);
  const Layout r = layout_roam(g, live, o);
  EXPECT_EQ(graph_layout_problem(g, live, r.offsets, U), "");
  EXPECT_EQ(arena_bytes(g, r.offsets, U), 5 * U);
  EXPECT_EQ(r.reserved_bytes, 5 * U);
}

// Two independent windows (no lifetime crosses step 3/4), each a copy of the case above: both
// are solved (in parallel with threads) and put side by side in time: 5u.
TEST(RoamLayout, IndependentWindowsSolvedAndConcatenated) {
  const auto ivs = units({{0, 0, 3}, {0, 1, 2}, {1, 3, 1}, {2, 2, 3},
                          {4, 4, 3}, {4, 5, 2}, {5, 7, 1}, {6, 6, 3}});
  const Graph g = interval_graph(ivs);
  const Liveness live = compute_liveness(g, g.program_order());
  ASSERT_EQ(live.last[6], 7);
  PlanOptions o;
  o.alignment = U;
  EXPECT_EQ(arena_of(g, live, "llfb", o), 6 * U);
  EXPECT_EQ(arena_of(g, live, "best_fit", o), 6 * U);
  for (int threads : {1, 2}) {
    o.threads = threads;
    const Layout r = layout_roam(g, live, o);
    EXPECT_EQ(graph_layout_problem(g, live, r.offsets, U), "");
    EXPECT_EQ(arena_bytes(g, r.offsets, U), 5 * U) << threads;
  }
  o.threads = 1;
  const Layout one = layout_roam(g, live, o);
  o.threads = 2;
  EXPECT_EQ(layout_roam(g, live, o).offsets, one.offsets);
}

// The instance of test_layout.cpp where greedy_by_size is worse (5u) than llfb and the optimum
// (4u = Tp): s0 [0,1] 2u, s1 [1,2] 2u, s2 [2,3] 1u, s3 [3,3] 2u. roam reaches 4u.
TEST(RoamLayout, MatchesOptimumWhereGreedyBySizeFails) {
  const auto ivs = units({{0, 1, 2}, {1, 2, 2}, {2, 3, 1}, {3, 3, 2}});
  const Graph g = interval_graph(ivs);
  const Liveness live = compute_liveness(g, g.program_order());
  PlanOptions o;
  o.alignment = U;
  EXPECT_EQ(arena_of(g, live, "greedy_by_size", o), 5 * U);
  const Layout r = make_layout(g, live, "roam", o);
  EXPECT_EQ(graph_layout_problem(g, live, r.offsets, U), "");
  EXPECT_EQ(arena_bytes(g, r.offsets, U), 4 * U);
}

// The instance of test_layout.cpp where llfb is worse (4u) than the optimum (3u = Tp):
// s0 [0,1] 1u, s1 [0,0] 2u, s2 [1,3] 1u.
TEST(RoamLayout, MatchesOptimumWhereLlfbFails) {
  const auto ivs = units({{0, 1, 1}, {0, 0, 2}, {1, 3, 1}});
  const Graph g = interval_graph(ivs);
  const Liveness live = compute_liveness(g, g.program_order());
  PlanOptions o;
  o.alignment = U;
  EXPECT_EQ(arena_of(g, live, "llfb", o), 4 * U);
  const Layout r = layout_roam(g, live, o);
  EXPECT_EQ(graph_layout_problem(g, live, r.offsets, U), "");
  EXPECT_EQ(arena_bytes(g, r.offsets, U), 3 * U);
}

TEST(RoamLayout, EmptyGraphAndBadArguments) {
  const Graph g = interval_graph({});
  const Liveness live = compute_liveness(g, g.program_order());
  const Layout r = layout_roam(g, live, PlanOptions{});
  EXPECT_TRUE(r.offsets.empty());
  EXPECT_EQ(r.reserved_bytes, 0u);
  PlanOptions bad;
  bad.alignment = 0;
  EXPECT_THROW(layout_roam(g, live, bad), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// The exact solver.

// MiniMalloc's README example at capacity 12 (b1..b5), and 11 is proven infeasible: at time 0
// b1, b3 and b5 are live together, 4 + 4 + 4 = 12.
TEST(ExactSolver, MiniMallocExample) {
  const std::vector<AllocBuffer> b = {
      {0, 3, 4, 1}, {3, 9, 4, 1}, {0, 9, 4, 1}, {9, 21, 4, 1}, {0, 21, 4, 1}};
  EXPECT_EQ(live_size_lower_bound(b), 12u);
  const AllocResult r = solve_allocation(b, 12);
  ASSERT_EQ(r.status, AllocStatus::kFeasible);
  EXPECT_EQ(r.height, 12u);
  EXPECT_EQ(buffers_problem(b, r.offsets, 12), "");
  EXPECT_EQ(check_allocation(b, r.offsets, 12), "");
  EXPECT_EQ(solve_allocation(b, 11).status, AllocStatus::kInfeasible);
}

// Half-open lifetimes: a buffer ending at t shares addresses with one starting at t.
TEST(ExactSolver, HalfOpenLifetimes) {
  const std::vector<AllocBuffer> b = {{0, 5, 10, 1}, {5, 9, 10, 1}, {9, 10, 10, 1}};
  EXPECT_EQ(live_size_lower_bound(b), 10u);
  const AllocResult r = solve_allocation(b, 10);
  ASSERT_EQ(r.status, AllocStatus::kFeasible);
  EXPECT_EQ(r.offsets, (std::vector<uint64_t>{0, 0, 0}));
}

// Alignment. A size-3 buffer and a size-4 buffer aligned to 4 are live together: size-4 at 0 and
// size-3 at 4 gives 7, size-3 at 0 and size-4 at 4 gives 8; the optimum is 7, and 6 is below the
// live size. A size-1 buffer and a size-2 buffer aligned to 3: size-2 at 0 and size-1 at 2
// gives 3 (the live size), size-1 at 0 and size-2 at 3 gives 5.
TEST(ExactSolver, Alignment) {
  const std::vector<AllocBuffer> b = {{0, 2, 3, 1}, {0, 2, 4, 4}};
  const AllocResult r = solve_allocation(b, 7);
  ASSERT_EQ(r.status, AllocStatus::kFeasible);
  EXPECT_EQ(r.offsets, (std::vector<uint64_t>{4, 0}));
  EXPECT_EQ(solve_allocation(b, 6).status, AllocStatus::kInfeasible);
  const std::vector<AllocBuffer> c = {{0, 1, 1, 1}, {0, 1, 2, 3}};
  const AllocMinimizeResult m = minimize_allocation(c);
  EXPECT_EQ(m.height, 3u);
  EXPECT_TRUE(m.proven_optimal);
  EXPECT_EQ(buffers_problem(c, m.offsets, 3), "");
}

TEST(ExactSolver, ZeroSizeAndEmpty) {
  EXPECT_EQ(solve_allocation({}, 0).status, AllocStatus::kFeasible);
  const std::vector<AllocBuffer> b = {{0, 3, 0, 1}, {1, 2, 5, 1}};
  const AllocResult r = solve_allocation(b, 5);
  ASSERT_EQ(r.status, AllocStatus::kFeasible);
  EXPECT_EQ(r.height, 5u);
  EXPECT_EQ(solve_allocation(b, 4).status, AllocStatus::kInfeasible);
  EXPECT_THROW(solve_allocation({{3, 3, 1, 1}}, 10), std::invalid_argument);
  EXPECT_THROW(solve_allocation({{0, 3, 1, 0}}, 10), std::invalid_argument);
}

// a [0,2) 2, b [1,3) 2, c [2,4) 2, d [0,4) 1: live sizes 3, 5, 5, 3, bound 5. Height 5: d at 0,
// b at 1, a and c (not live together) both at 3. Capacity 4 is proven infeasible.
TEST(ExactSolver, ReachesBoundAndProvesBelow) {
  const std::vector<AllocBuffer> b = {{0, 2, 2, 1}, {1, 3, 2, 1}, {2, 4, 2, 1}, {0, 4, 1, 1}};
  EXPECT_EQ(live_size_lower_bound(b), 5u);
  const AllocMinimizeResult m = minimize_allocation(b);
  EXPECT_EQ(m.height, 5u);
  EXPECT_TRUE(m.proven_optimal);
  EXPECT_EQ(solve_allocation(b, 4).status, AllocStatus::kInfeasible);
}

// Random tiny instances: the exact solver agrees with brute force -- feasible at the brute-force
// optimum (with a valid layout), proven infeasible one unit below it -- and minimize finds it.
TEST(ExactSolver, EqualsBruteForceOnRandomInstances) {
  std::mt19937_64 rng(20240511);
  int checked = 0;
  for (int it = 0; it < 300; ++it) {
    const int n = 1 + static_cast<int>(rng() % 5);
    const std::vector<AllocBuffer> b = roamtest::random_tiny_buffers(rng, n, 5, 4, 4, it % 3 == 0, 3);
    const uint64_t opt = brute_min_height(b);
    const AllocResult at = solve_allocation(b, opt);
    ASSERT_EQ(at.status, AllocStatus::kFeasible) << "instance " << it;
    EXPECT_LE(at.height, opt);
    EXPECT_EQ(buffers_problem(b, at.offsets, opt), "") << "instance " << it;
    ASSERT_EQ(solve_allocation(b, opt - 1).status, AllocStatus::kInfeasible) << "instance " << it;
    const AllocMinimizeResult m = minimize_allocation(b);
    EXPECT_EQ(m.height, opt) << "instance " << it;
    EXPECT_TRUE(m.proven_optimal) << "instance " << it;
    EXPECT_EQ(buffers_problem(b, m.offsets, opt), "");
    ++checked;
  }
  EXPECT_EQ(checked, 300);
}

// Tight instances where the contact order of the candidates decides the search path: a W x W
// square cut by guillotine cuts into rectangles (time = x, size = height), sometimes with one
// piece removed, so a packing of height W exists by construction. One portfolio search alone
// (heuristics = 1: the most-constrained cell with the contact order) and the whole portfolio
// must agree with brute force: feasible at the optimum, proven infeasible one unit below.
TEST(ExactSolver, ContactOrderAloneEqualsBruteForceOnCutSquares) {
  std::mt19937_64 rng(15);
  int checked = 0;
  for (int it = 0; it < 200; ++it) {
    const int64_t w = 3 + static_cast<int64_t>(rng() % 4);  // side 3..6
    struct Piece {
      int64_t x0, x1, y0, y1;
    };
    std::vector<Piece> pieces{{0, w, 0, w}};
    const int target = 3 + static_cast<int>(rng() % 4);  // 3..6 pieces
    for (int guard = 0; static_cast<int>(pieces.size()) < target && guard < 100; ++guard) {
      const size_t k = rng() % pieces.size();
      const Piece p = pieces[k];
      const bool cut_x = rng() % 2 == 0;
      if (cut_x && p.x1 - p.x0 >= 2) {
        const int64_t c = p.x0 + 1 + static_cast<int64_t>(rng() % (p.x1 - p.x0 - 1));
        pieces[k] = {p.x0, c, p.y0, p.y1};
        pieces.push_back({c, p.x1, p.y0, p.y1});
      } else if (!cut_x && p.y1 - p.y0 >= 2) {
        const int64_t c = p.y0 + 1 + static_cast<int64_t>(rng() % (p.y1 - p.y0 - 1));
        pieces[k] = {p.x0, p.x1, p.y0, c};
        pieces.push_back({p.x0, p.x1, c, p.y1});
      }
    }
    if (it % 2 == 1) pieces.erase(pieces.begin() + static_cast<long>(rng() % pieces.size()));
    std::vector<AllocBuffer> b;
    for (const Piece& p : pieces) {
      b.push_back({p.x0, p.x1, static_cast<uint64_t>(p.y1 - p.y0), 1});
    }
    const uint64_t opt = brute_min_height(b);
    ASSERT_LE(opt, static_cast<uint64_t>(w)) << "instance " << it;  // the square is a packing
    for (int heuristics : {1, 6}) {
      AllocSolveOptions o;
      o.heuristics = heuristics;
      const AllocResult at = solve_allocation(b, opt, o);
      ASSERT_EQ(at.status, AllocStatus::kFeasible) << "instance " << it;
      EXPECT_EQ(buffers_problem(b, at.offsets, opt), "") << "instance " << it;
      EXPECT_EQ(solve_allocation(b, opt - 1, o).status, AllocStatus::kInfeasible)
          << "instance " << it << " heuristics " << heuristics;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 200);
}

// Larger random instances (no brute force): every layout found is valid, a capacity below the
// live-size bound is refused, and the portfolio's answer does not depend on the thread count.
TEST(ExactSolver, ValidAndDeterministicAcrossThreads) {
  std::mt19937_64 rng(77);
  for (int it = 0; it < 20; ++it) {
    const int n = 20 + static_cast<int>(rng() % 40);
    const std::vector<AllocBuffer> b = roamtest::random_tiny_buffers(rng, n, 50, 20, 16, false, 1);
    const uint64_t lb = live_size_lower_bound(b);
    AllocSolveOptions o;
    o.node_limit = 20000;
    o.time_limit_seconds = 0;  // node limits only: deterministic
    const AllocResult one = solve_allocation(b, lb + lb / 10, o);
    o.threads = 3;
    const AllocResult three = solve_allocation(b, lb + lb / 10, o);
    EXPECT_EQ(one.status, three.status);
    EXPECT_EQ(one.offsets, three.offsets);
    if (one.status == AllocStatus::kFeasible) {
      EXPECT_EQ(buffers_problem(b, one.offsets, lb + lb / 10), "");
    }
    EXPECT_EQ(solve_allocation(b, lb - 1, o).status, AllocStatus::kInfeasible);
  }
}

// ---------------------------------------------------------------------------------------------
// The roam layout on random graphs: never worse than any other layout method, always valid,
// the same for any thread count.

TEST(RoamLayoutProperty, NeverWorseThanAnyBaselineOnRandomGraphs) {
  roamtest::RandomGraphOptions ro;
  int graphs = 0;
  for (uint64_t seed = 1; seed <= 250; ++seed) {
    ro.num_ops = 4 + static_cast<int>(seed % 23);
    const Graph g = parse_graph(roamtest::random_graph_json(seed, ro), "<random>");
    for (const char* order_method : {"program", "lescea"}) {
      PlanOptions o;
      o.alignment = seed % 2 ? 64 : 1;
      o.extra["search_node_limit"] = 3000;
      o.time_limit_seconds = 0;
      const Order order = make_order(g, order_method, o);
      const Liveness live = compute_liveness(g, order);
      const Layout r = layout_roam(g, live, o);
      ASSERT_EQ(graph_layout_problem(g, live, r.offsets, o.alignment), "")
          << "seed " << seed << " " << order_method;
      const uint64_t arena = arena_bytes(g, r.offsets, o.alignment);
      EXPECT_EQ(r.reserved_bytes, arena);
      EXPECT_GE(arena, theoretical_peak(g, live, o.alignment));
      for (const std::string& m : layout_methods()) {
        if (m == "roam") continue;
        const Layout l = make_layout(g, live, m, o);
        EXPECT_LE(arena, arena_bytes(g, l.offsets, o.alignment))
            << "seed " << seed << " " << order_method << " vs " << m;
        EXPECT_LE(arena, l.reserved_bytes) << "seed " << seed << " vs " << m;
      }
    }
    ++graphs;
  }
  EXPECT_EQ(graphs, 250);
}

TEST(RoamLayoutProperty, DeterministicAcrossThreads) {
  roamtest::RandomGraphOptions ro;
  ro.num_ops = 40;
  for (uint64_t seed = 300; seed < 310; ++seed) {
    const Graph g = parse_graph(roamtest::random_graph_json(seed, ro), "<random>");
    const Liveness live = compute_liveness(g, g.program_order());
    PlanOptions o;
    o.extra["search_node_limit"] = 5000;
    o.time_limit_seconds = 0;
    const Layout a = layout_roam(g, live, o);
    o.threads = 4;
    const Layout b = layout_roam(g, live, o);
    EXPECT_EQ(a.offsets, b.offsets) << "seed " << seed;
  }
}

}  // namespace
}  // namespace roam
