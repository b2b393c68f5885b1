// Tests of the subgraph tree of the `roam` layout (src/layout/roam_layout.cpp): the split into
// dependent subgraphs under a node limit, the shared storages (CIFO / COFI / COFO) and their
// assignment, the conflict repair, and layout_roam with extra["node_limit"]. Expected values are
// worked out by hand in the comments or recounted here independently of the library.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
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

using roamtest::Interval;
using roamtest::interval_graph;
using roamtest::buffers_problem;
using roamtest::graph_layout_problem;
using roamtest::units;
constexpr uint64_t U = roamtest::kUnit;

// ---------------------------------------------------------------------------------------------
// Independent checkers.

uint64_t height_of(const std::vector<AllocBuffer>& b, const std::vector<uint64_t>& off) {
  uint64_t h = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i].size > 0) h = std::max(h, off[i] + b[i].size);
  }
  return h;
}

// The buffers layout_roam builds from a graph: [first, last + 1), aligned sizes.
std::vector<AllocBuffer> graph_buffers(const Graph& g, const Liveness& live, uint64_t alignment) {
  std::vector<AllocBuffer> b;
  for (size_t s = 0; s < g.storages.size(); ++s) {
    b.push_back({live.first[s], int64_t{live.last[s]} + 1,
                 align_up(g.storages[s].size, alignment), 1});
  }
  return b;
}

// Recount of a tree: leaves partition [min lower, max upper) in time order; every leaf's own
// and shared lists and kinds match the definitions; every buffer is assigned to the leaf that
// holds its lower end; `shared` marks the buffers listed as shared somewhere.
std::string tree_problem(const std::vector<AllocBuffer>& b, const SubgraphTree& t) {
  if (b.empty()) return t.leaves.empty() ? "" : "leaves without buffers";
  int64_t lo = b[0].lower, hi = b[0].upper;
  for (const AllocBuffer& x : b) {
    lo = std::min(lo, x.lower);
    hi = std::max(hi, x.upper);
  }
  if (t.leaves.empty() || t.leaves.front().begin != lo || t.leaves.back().end != hi) {
    return "leaves do not cover the time range";
  }
  std::vector<bool> shared(b.size(), false);
  for (size_t k = 0; k < t.leaves.size(); ++k) {
    const SubgraphLeaf& l = t.leaves[k];
    if (l.begin >= l.end) return "empty leaf " + std::to_string(k);
    if (k > 0 && t.leaves[k - 1].end != l.begin) return "gap before leaf " + std::to_string(k);
    std::vector<size_t> own, sh;
    std::vector<SharedKind> kinds;
    for (size_t i = 0; i < b.size(); ++i) {
      if (b[i].upper <= l.begin || b[i].lower >= l.end) continue;
      const bool in_lo = b[i].lower >= l.begin, in_hi = b[i].upper <= l.end;
      if (in_lo && in_hi) {
        own.push_back(i);
      } else {
        sh.push_back(i);
        kinds.push_back(in_lo ? SharedKind::kCIFO : in_hi ? SharedKind::kCOFI : SharedKind::kCOFO);
        shared[i] = true;
      }
      if (b[i].lower >= l.begin && b[i].lower < l.end && t.assigned_leaf[i] != k) {
        return "buffer " + std::to_string(i) + " not assigned to leaf " + std::to_string(k);
      }
    }
    if (own != l.own || sh != l.shared || kinds != l.kinds) {
      return "leaf " + std::to_string(k) + " lists differ from the recount";
    }
  }
  if (shared != t.shared) return "shared flags differ from the recount";
  return "";
}

// The most buffers live together (recount: every lower end is a candidate time).
size_t most_live(const std::vector<AllocBuffer>& b) {
  size_t most = 0;
  for (const AllocBuffer& x : b) {
    size_t c = 0;
    for (const AllocBuffer& y : b) c += y.lower <= x.lower && x.lower < y.upper;
    most = std::max(most, c);
  }
  return most;
}

std::vector<AllocBuffer> random_buffers(std::mt19937_64& rng, int n, int horizon, int max_len,
                                        uint64_t max_size, bool aligned) {
  std::vector<AllocBuffer> b;
  for (int i = 0; i < n; ++i) {
    AllocBuffer x;
    x.lower = static_cast<int64_t>(rng() % horizon);
    x.upper = x.lower + 1 + static_cast<int64_t>(rng() % max_len);
    x.size = 1 + rng() % max_size;
    x.alignment = aligned ? 1 + rng() % 3 : 1;
    b.push_back(x);
  }
  return b;
}


// ---------------------------------------------------------------------------------------------
// split_subgraph

// b0 [0,2) 1, b1 [0,6) 2, b2 [1,3) 1, b3 [3,5) 1, b4 [4,6) 1; at most 3 live together, 5 > 4.
// b1 spans the root [0,6) (spanning 1, m = 4 others). Cuts among the end points {1,...,5}:
//   t=1: R = 5 (nothing ends by 1): no progress.   t=5: L = 5: no progress.
//   t=2: L 3, ended 1 (b0), R 4; crossing b1 + b2 = 3 bytes.
//   t=3: L 3, ended 2 (b0, b2), R 3; crossing b1 = 2 bytes.
//   t=4: L 4, ended 2, R 3; crossing b1 + b3 = 3 bytes.
// All three are in the middle; t = 3 crosses the fewest bytes. Left [0,3): b0, b1, b2 (3 <= 4),
// right [3,6): b1, b3, b4. b1 is CIFO on the left (created there: assigned to leaf 0) and COFI
// on the right.
TEST(SplitSubgraph, HandMadeSplitAtFewestCrossingBytes) {
  const std::vector<AllocBuffer> b = {{0, 2, 1, 1}, {0, 6, 2, 1}, {1, 3, 1, 1},
                                      {3, 5, 1, 1}, {4, 6, 1, 1}};
  const SubgraphTree t = split_subgraph(b, 4);
  ASSERT_EQ(t.leaves.size(), 2u);
  EXPECT_EQ(t.leaves[0].begin, 0);
  EXPECT_EQ(t.leaves[0].end, 3);
  EXPECT_EQ(t.leaves[1].begin, 3);
  EXPECT_EQ(t.leaves[1].end, 6);
  EXPECT_EQ(t.leaves[0].own, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(t.leaves[0].shared, (std::vector<size_t>{1}));
  EXPECT_EQ(t.leaves[0].kinds, (std::vector<SharedKind>{SharedKind::kCIFO}));
  EXPECT_EQ(t.leaves[1].own, (std::vector<size_t>{3, 4}));
  EXPECT_EQ(t.leaves[1].shared, (std::vector<size_t>{1}));
  EXPECT_EQ(t.leaves[1].kinds, (std::vector<SharedKind>{SharedKind::kCOFI}));
  EXPECT_EQ(t.assigned_leaf, (std::vector<size_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(t.shared, (std::vector<bool>{false, true, false, false, false}));
  EXPECT_EQ(t.leaves[0].size(), 3u);
  EXPECT_EQ(tree_problem(b, t), "");
  EXPECT_STREQ(to_string(SharedKind::kCOFO), "COFO");
}

// A long buffer L [0,9) size 4 over nine unit buffers s_k [k,k+1) size 1 (index k+1), limit 3.
// Every cut crosses only L (4 bytes), so the tie-breaks decide: the smallest |L(t) - R(t)|,
// then the smallest t. [0,9): L(t) = t+1, R(t) = 10-t -> t = 4 (|5-6| = 1; t = 5 ties, larger).
// [0,4): L(t) = t+1, R(t) = 5-t -> t = 2: leaves [0,2), [2,4) with L + 2 unit buffers each.
// [4,9): L(t) = t-3, R(t) = 10-t -> t = 6 (|3-4|; t = 7 ties): leaf [4,6) and [6,9) with 4
// buffers -> t = 7 (|2-3|; t = 8 ties): leaves [6,7) (L, s6) and [7,9) (L, s7, s8).
// L is CIFO in [0,2), COFO in [2,4), [4,6), [6,7) and COFI in [7,9).
TEST(SplitSubgraph, SpanningBufferIsCofoInTheMiddleLeaves) {
  std::vector<AllocBuffer> b = {{0, 9, 4, 1}};
  for (int k = 0; k < 9; ++k) b.push_back({k, k + 1, 1, 1});
  const SubgraphTree t = split_subgraph(b, 3);
  ASSERT_EQ(t.leaves.size(), 5u);
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 2}, {2, 4}, {4, 6}, {6, 7}, {7, 9}};
  const std::vector<SharedKind> kinds = {SharedKind::kCIFO, SharedKind::kCOFO, SharedKind::kCOFO,
                                         SharedKind::kCOFO, SharedKind::kCOFI};
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(t.leaves[k].begin, ranges[k].first) << k;
    EXPECT_EQ(t.leaves[k].end, ranges[k].second) << k;
    EXPECT_EQ(t.leaves[k].shared, (std::vector<size_t>{0})) << k;
    EXPECT_EQ(t.leaves[k].kinds, (std::vector<SharedKind>{kinds[k]})) << k;
    EXPECT_LE(t.leaves[k].size(), 3u);
  }
  EXPECT_EQ(t.leaves[4].own, (std::vector<size_t>{8, 9}));
  EXPECT_EQ(t.assigned_leaf[0], 0u);
  EXPECT_EQ(tree_problem(b, t), "");
}

// No split when the set fits, or when some time point has more live buffers than the limit
// (no tree meets the limit then: one leaf, solved whole).
TEST(SplitSubgraph, NoSplitWhenUnderLimitOrInfeasible) {
  const std::vector<AllocBuffer> b = {{0, 4, 1, 1}, {0, 4, 1, 1}, {0, 4, 1, 1}, {4, 5, 1, 1}};
  EXPECT_EQ(split_subgraph(b, 4).leaves.size(), 1u);  // 4 buffers, limit 4
  const SubgraphTree t = split_subgraph(b, 2);         // 3 live at time 0 > 2
  ASSERT_EQ(t.leaves.size(), 1u);
  EXPECT_EQ(t.leaves[0].own, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(t.leaves[0].shared.empty());
  EXPECT_EQ(tree_problem(b, t), "");
  // At the limit 3 it splits at 4, the only cut: [0,4) with three, [4,5) with one.
  const SubgraphTree u = split_subgraph(b, 3);
  ASSERT_EQ(u.leaves.size(), 2u);
  EXPECT_EQ(u.leaves[0].end, 4);
  EXPECT_EQ(u.leaves[1].own, (std::vector<size_t>{3}));
  EXPECT_TRUE(split_subgraph({}, 2).leaves.empty());
}

TEST(SplitSubgraph, BadArgumentsThrow) {
  const std::vector<AllocBuffer> b = {{0, 2, 1, 1}};
  EXPECT_THROW(split_subgraph(b, 1), std::invalid_argument);
  EXPECT_THROW(split_subgraph(b, 0), std::invalid_argument);
  EXPECT_THROW(split_subgraph(b, -5), std::invalid_argument);
  EXPECT_THROW(split_subgraph({{3, 3, 1, 1}}, 4), std::invalid_argument);
  EXPECT_NO_THROW(split_subgraph(b, 2));
}

// Random buffer sets: every leaf is under the limit whenever the limit can be met (the most
// live buffers <= limit), else there is one leaf; the lists recount exactly.
TEST(SplitSubgraph, RandomSetsMeetTheLimitAndRecount) {
  std::mt19937_64 rng(5150);
  int split = 0;
  for (int it = 0; it < 300; ++it) {
    const int n = 1 + static_cast<int>(rng() % 30);
    const auto b = random_buffers(rng, n, 40, 1 + static_cast<int>(rng() % 10), 16, false);
    const int64_t limit = 2 + static_cast<int64_t>(rng() % 7);
    const SubgraphTree t = split_subgraph(b, limit);
    ASSERT_EQ(tree_problem(b, t), "") << "instance " << it;
    if (most_live(b) <= static_cast<size_t>(limit)) {
      for (const SubgraphLeaf& l : t.leaves) {
        EXPECT_LE(l.size(), static_cast<size_t>(limit)) << "instance " << it;
      }
    } else {
      EXPECT_EQ(t.leaves.size(), 1u) << "instance " << it;
    }
    split += t.leaves.size() > 1;
  }
  EXPECT_GT(split, 100);  // the property is not vacuous (174 of 300 are split)
}

// ---------------------------------------------------------------------------------------------
// repair_conflicts

// Buffers (alignment 1), offsets given, S = shared:
//   0 S [0,10) 4 @0    1 S [2,8) 2 @2    2 [0,3) 3 @4    3 [4,6) 1 @3
//   4 [5,9) 1 @6       5 [6,7) 3 @9      6 [3,6) 2 @10
// Keep order: 0, 1 (shared by lower), then 2..6. Buffer 1 bytes [2,4) meet 0's [0,4): displaced.
// 3 bytes [3,4) meet 0: displaced. 2, 4, 5, 6 meet no kept buffer: kept.
// Re-place by size: 1 (2 bytes) then 3 (1 byte).
//   1 over [2,8) meets 0 [0,4), 2 [4,7), 4 [6,7), 5 [9,12), 6 [10,12): the first gap is [7,9)
//     (2 bytes, before 5): offset 7.
//   3 over [4,6) meets 0 [0,4), 4 [6,7), 1 [7,9), 6 [10,12) (not 2: ends at 3; not 5: starts at
//     6): gaps [4,6) (2 bytes) and [9,10) (1 byte): the smaller one wins: offset 9.
// Result: 0, 7, 4, 9, 6, 9, 10; height 12 (buffers 5 and 6 end at 12).
TEST(RepairConflicts, HandMadeSharedFirstThenBestFit) {
  const std::vector<AllocBuffer> b = {{0, 10, 4, 1}, {2, 8, 2, 1}, {0, 3, 3, 1}, {4, 6, 1, 1},
                                      {5, 9, 1, 1},  {6, 7, 3, 1}, {3, 6, 2, 1}};
  const std::vector<uint64_t> off = {0, 2, 4, 3, 6, 9, 10};
  const std::vector<bool> shared = {true, true, false, false, false, false, false};
  ASSERT_NE(buffers_problem(b, off), "");
  const ConflictRepair r = repair_conflicts(b, off, shared);
  EXPECT_EQ(r.offsets, (std::vector<uint64_t>{0, 7, 4, 9, 6, 9, 10}));
  EXPECT_EQ(r.displaced, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(r.height, 12u);
  EXPECT_EQ(buffers_problem(b, r.offsets), "");
}

// A valid layout is returned unchanged; alignment is respected when re-placing: buffer 1
// (alignment 4) meets buffer 0 at [0,3): the gap [3,8) below buffer 2 starts at 3, aligned 4,
// and 4 + 2 <= 8: offset 4.
TEST(RepairConflicts, ValidLayoutUnchangedAndAlignmentRespected) {
  const std::vector<AllocBuffer> b = {{0, 4, 3, 1}, {0, 4, 2, 4}, {0, 4, 1, 1}};
  const ConflictRepair same = repair_conflicts(b, {0, 4, 8}, {false, false, false});
  EXPECT_EQ(same.offsets, (std::vector<uint64_t>{0, 4, 8}));
  EXPECT_TRUE(same.displaced.empty());
  EXPECT_EQ(same.height, 9u);
  // Buffer 1 at 0 collides with the shared buffer 0: moved to 4.
  const ConflictRepair r = repair_conflicts(b, {0, 0, 8}, {true, false, false});
  EXPECT_EQ(r.offsets, (std::vector<uint64_t>{0, 4, 8}));
  EXPECT_EQ(r.displaced, (std::vector<size_t>{1}));
  EXPECT_THROW(repair_conflicts(b, {0, 0}, {true, false, false}), std::invalid_argument);
  EXPECT_THROW(repair_conflicts(b, {0, 0, 0}, {true}), std::invalid_argument);
}

// Random conflicting layouts: the repair always yields a valid layout, keeps every buffer that
// was not displaced where it was, and keeps the first shared buffer (by lower) in place.
TEST(RepairConflicts, RandomLayoutsBecomeValid) {
  std::mt19937_64 rng(99);
  for (int it = 0; it < 200; ++it) {
    const int n = 1 + static_cast<int>(rng() % 25);
    const auto b = random_buffers(rng, n, 20, 8, 8, it % 2 == 0);
    std::vector<uint64_t> off;
    std::vector<bool> shared;
    for (const AllocBuffer& x : b) {
      off.push_back((rng() % 12) * x.alignment);
      shared.push_back(rng() % 3 == 0);
    }
    const ConflictRepair r = repair_conflicts(b, off, shared);
    ASSERT_EQ(buffers_problem(b, r.offsets), "") << "instance " << it;
    EXPECT_EQ(r.height, height_of(b, r.offsets));
    std::vector<bool> moved(b.size(), false);
    for (size_t d : r.displaced) moved[d] = true;
    for (size_t i = 0; i < b.size(); ++i) {
      if (!moved[i]) {
        EXPECT_EQ(r.offsets[i], off[i]) << "instance " << it << " buffer " << i;
      }
    }
    if (buffers_problem(b, off).empty()) {
      EXPECT_TRUE(r.displaced.empty());
    }
    size_t first_shared = b.size();
    for (size_t i = 0; i < b.size(); ++i) {
      if (shared[i] && (first_shared == b.size() || b[i].lower < b[first_shared].lower)) {
        first_shared = i;
      }
    }
    if (first_shared < b.size()) {
      EXPECT_FALSE(moved[first_shared]) << "instance " << it;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// subgraph_tree_allocation: split, leaves solved on their own, concatenation, repair.

// X [0,4) 2 bytes aligned 2 (buffer 0), a [0,1) 2 bytes aligned 4, b [2,3) 3 bytes.
// At most 2 live; 3 > limit 2: split. X spans the root. Cuts: t=1 (L 2, R 2, crossing X 2
// bytes), t=2 (L 2, R 2, crossing 2 bytes), t=3 (L 3: no progress) -> t = 1.
// Leaf 0 [0,1): X (CIFO, clipped [0,1)) and a. Height 4 needs a at 0 and X at 2 (X at 0 puts a
// at 4, aligned: 6): unique optimum X 2, a 0.
// Leaf 1 [1,4): X (COFI) and b. Height 5 needs X at 0 and b at 2 (b at 0 pushes X to 4: 6).
// Concatenation: X from leaf 0 (where it is created): 2; a 0; b 2 (leaf 1). b [2,5) meets X
// [2,4) at time 2: conflict. b is displaced; over [2,3) it meets only X [2,4): no gap below
// 2 holds 3 bytes, so it goes on top: 4. Height 7 (the whole set's optimum is 6: X 0, a 4, b 2).
TEST(SubgraphTreeAllocation, HandMadeSplitWithSharedConflictRepaired) {
  const std::vector<AllocBuffer> b = {{0, 4, 2, 2}, {0, 1, 2, 4}, {2, 3, 3, 1}};
  const SubgraphTree t = split_subgraph(b, 2);
  ASSERT_EQ(t.leaves.size(), 2u);
  EXPECT_EQ(t.leaves[0].end, 1);
  EXPECT_EQ(t.leaves[0].kinds, (std::vector<SharedKind>{SharedKind::kCIFO}));
  EXPECT_EQ(t.leaves[1].kinds, (std::vector<SharedKind>{SharedKind::kCOFI}));
  AllocSolveOptions o;
  o.time_limit_seconds = 0;
  const SubgraphTreeResult r = subgraph_tree_allocation(b, 2, o);
  EXPECT_EQ(r.offsets, (std::vector<uint64_t>{2, 0, 4}));
  EXPECT_EQ(r.height, 7u);
  EXPECT_EQ(r.leaves, 2u);
  EXPECT_EQ(r.shared, 1u);
  EXPECT_EQ(r.displaced, 1u);
  EXPECT_EQ(buffers_problem(b, r.offsets), "");
  // Unlimited (one leaf): the optimum 6.
  EXPECT_EQ(subgraph_tree_allocation(b, 3, o).height, 6u);
  EXPECT_EQ(minimize_allocation(b).height, 6u);
}

// Random buffer sets with limits 4..8: valid, the counts recount, never below the live-size
// bound, and the same offsets for 1 and 2 threads.
TEST(SubgraphTreeAllocation, RandomSetsValidAndDeterministic) {
  std::mt19937_64 rng(4242);
  int with_shared = 0;
  int repaired = 0;
  for (int it = 0; it < 120; ++it) {
    const int n = 10 + static_cast<int>(rng() % 30);
    const auto b = random_buffers(rng, n, 50, 1 + static_cast<int>(rng() % 10), 12, it % 3 == 0);
    const int64_t limit = 4 + static_cast<int64_t>(rng() % 5);
    AllocSolveOptions o;
    o.time_limit_seconds = 0;
    o.node_limit = 5000;
    o.time_sweep = true;
    const SubgraphTreeResult one = subgraph_tree_allocation(b, limit, o);
    ASSERT_EQ(buffers_problem(b, one.offsets), "") << "instance " << it;
    EXPECT_EQ(one.height, height_of(b, one.offsets));
    EXPECT_GE(one.height, live_size_lower_bound(b));
    const SubgraphTree t = split_subgraph(b, limit);
    EXPECT_EQ(one.leaves, t.leaves.size());
    EXPECT_EQ(one.shared, static_cast<size_t>(std::count(t.shared.begin(), t.shared.end(), true)));
    with_shared += one.shared > 0;
    repaired += one.displaced > 0;
    o.threads = 2;
    const SubgraphTreeResult two = subgraph_tree_allocation(b, limit, o);
    EXPECT_EQ(two.offsets, one.offsets) << "instance " << it;
  }
  EXPECT_GT(with_shared, 40);  // the property is not vacuous: shared buffers (59 of 120) ...
  EXPECT_GT(repaired, 35);     // ... and conflicts to repair (54 of 120)
}

// ---------------------------------------------------------------------------------------------
// layout_roam with extra["node_limit"]

// The hand-made case of test_roam_layout.cpp (every baseline 6u, optimum 5u):
//   s0 [0,0] 3u, s1 [0,1] 2u, s2 [1,3] 1u, s3 [2,2] 3u; buffers s0 [0,1), s1 [0,2), s2 [1,4),
//   s3 [2,3); at most 2 live. With node_limit 2 (4 storages):
//   [0,4): cuts t=1 (crossing s1, 2u), t=2 (crossing s2, 1u), t=3 (L = 4: no progress) -> 2.
//   [0,2) holds s0, s1, s2 (3 > 2): s1 spans it; the only cut t=1 -> [0,1) {s0, s1} and
//   [1,2) {s1, s2}. [2,4) holds s2, s3.
// Leaves: [0,1) own s0, shared s1 (CIFO); [1,2) shared s1 (COFI) and s2 (CIFO); [2,4) own s3,
// shared s2 (COFI). The best baseline (llfb: s0 3u, s1 1u, s2 0, s3 1u) restricted to [1,2)
// and [2,4) is 3u and 4u <= Tp = 5u: they keep it. On [0,1) it is 6u: solved. There s0 (3u)
// and s1 (2u) are live together; minimize_allocation's first greedy (size desc) puts s0 at 0 and
// s1 at 3u: 5u, the lower bound, so it stops there.
// Concatenation: s0 0, s1 3u (leaf [0,1), where it is created), s2 0 (leaf [1,2)), s3 1u.
// No conflict: s1 [3u,5u) vs s2 [0,1u); s2 vs s3 [1u,4u). Arena 5u < 6u.
TEST(RoamLayoutSplit, HandMadeSplitBeatsEveryBaseline) {
  const auto ivs = units({{0, 0, 3}, {0, 1, 2}, {1, 3, 1}, {2, 2, 3}});
  const Graph g = interval_graph(ivs);
  const Liveness live = compute_liveness(g, g.program_order());
  PlanOptions o;
  o.alignment = U;
  o.time_limit_seconds = 0;
  for (const std::string& m : layout_methods()) {
    if (m == "roam") continue;
    EXPECT_GE(arena_bytes(g, make_layout(g, live, m, o).offsets, U), 6 * U) << m;
  }
  EXPECT_EQ(layout_llfb(g, live, U).offsets, (std::vector<uint64_t>{3 * U, U, 0, U}));
  const auto b = graph_buffers(g, live, U);
  const SubgraphTree t = split_subgraph(b, 2);
  ASSERT_EQ(t.leaves.size(), 3u);
  EXPECT_EQ(t.leaves[0].end, 1);
  EXPECT_EQ(t.leaves[1].end, 2);
  EXPECT_EQ(t.leaves[1].shared, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(t.leaves[1].kinds, (std::vector<SharedKind>{SharedKind::kCOFI, SharedKind::kCIFO}));
  EXPECT_EQ(t.assigned_leaf, (std::vector<size_t>{0, 0, 1, 2}));
  o.extra["node_limit"] = 2;
  const Layout r = layout_roam(g, live, o);
  EXPECT_EQ(r.offsets, (std::vector<uint64_t>{0, 3 * U, 0, U}));
  EXPECT_EQ(r.reserved_bytes, 5 * U);
  EXPECT_EQ(graph_layout_problem(g, live, r.offsets, U), "");
}

// Random graphs, node limits 4..8: the layout validates, its arena is <= every baseline's, at
// least Tp, and the same for 1 and 2 threads. Many of them are really split.
TEST(RoamLayoutSplit, RandomGraphsValidNeverWorseDeterministic) {
  roamtest::RandomGraphOptions ro;
  int split = 0;
  int split_and_better = 0;  // split, and below every baseline: the tree's layout was used
  int graphs = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    ro.num_ops = 6 + static_cast<int>(seed % 25);
    const Graph g = parse_graph(roamtest::random_graph_json(seed, ro), "<random>");
    PlanOptions o;
    o.alignment = seed % 2 ? 64 : 1;
    o.time_limit_seconds = 0;
    o.extra["node_limit"] = 4 + static_cast<int>(seed % 5);
    o.extra["search_node_limit"] = 3000;
    const Order order = make_order(g, seed % 3 ? "program" : "lescea", o);
    const Liveness live = compute_liveness(g, order);
    const Layout r = layout_roam(g, live, o);
    ASSERT_EQ(graph_layout_problem(g, live, r.offsets, o.alignment), "") << "seed " << seed;
    const uint64_t arena = arena_bytes(g, r.offsets, o.alignment);
    EXPECT_EQ(r.reserved_bytes, arena);
    EXPECT_GE(arena, theoretical_peak(g, live, o.alignment));
    uint64_t best_baseline = UINT64_MAX;
    for (const char* m : {"llfb", "greedy_by_size", "best_fit", "pytorch"}) {
      const Layout l = make_layout(g, live, m, o);
      const uint64_t a = arena_bytes(g, l.offsets, o.alignment);
      EXPECT_LE(arena, a) << "seed " << seed << " vs " << m;
      best_baseline = std::min(best_baseline, a);
    }
    o.threads = 2;
    EXPECT_EQ(layout_roam(g, live, o).offsets, r.offsets) << "seed " << seed;
    const auto b = graph_buffers(g, live, o.alignment);
    const bool was_split =
        split_subgraph(b, o.extra["node_limit"].get<int64_t>()).leaves.size() > 1;
    split += was_split;
    split_and_better += was_split && arena < best_baseline;
    ++graphs;
  }
  EXPECT_EQ(graphs, 200);
  EXPECT_GT(split, 50);            // 68 of 200 are split ...
  EXPECT_GE(split_and_better, 1);  // ... and on one of them the tree's layout beats every
                                   // baseline (see HandMadeSplitBeatsEveryBaseline for a case
                                   // worked out by hand)
}

// node_limit must be an integer >= 2; the message names the knob. Checked before anything
// else, so even an empty graph refuses it.
TEST(RoamLayoutSplit, BadNodeLimitThrows) {
  const auto ivs = units({{0, 0, 3}, {0, 1, 2}, {1, 3, 1}, {2, 2, 3}});
  const Graph g = interval_graph(ivs);
  const Liveness live = compute_liveness(g, g.program_order());
  const Graph empty = interval_graph({});
  const Liveness empty_live = compute_liveness(empty, empty.program_order());
  for (const nlohmann::json& bad :
       {nlohmann::json(1), nlohmann::json(0), nlohmann::json(-4), nlohmann::json(2.5),
        nlohmann::json("64"), nlohmann::json(true), nlohmann::json(nullptr)}) {
    PlanOptions o;
    o.alignment = U;
    o.extra["node_limit"] = bad;
    for (const auto* gl : {&g, &empty}) {
      const Liveness& lv = gl == &g ? live : empty_live;
      try {
        layout_roam(*gl, lv, o);
        ADD_FAILURE() << "accepted node_limit " << bad.dump();
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("node_limit"), std::string::npos) << e.what();
      }
    }
    EXPECT_THROW(make_layout(g, live, "roam", o), std::invalid_argument);
  }
  PlanOptions ok;
  ok.alignment = U;
  ok.extra["node_limit"] = 2;
  EXPECT_NO_THROW(layout_roam(g, live, ok));
  ok.extra["node_limit"] = uint64_t{1} << 63;  // above int64: clamped, no split
  EXPECT_EQ(arena_bytes(g, layout_roam(g, live, ok).offsets, U), 5 * U);
}

}  // namespace
}  // namespace roam
