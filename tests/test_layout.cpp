// Tests of the baseline arena layouts (src/layout): llfb, greedy_by_size, pytorch.
//
// Every hand-worked case is a chain of ops n0, n1, ... run in program order; storage i is the
// tensor "s<i>", produced by op `first` and read by op `last`, so its live interval is exactly
// [first, last] (GRAPH_FORMAT.md "Liveness").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "testing.h"

namespace roam {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * 1024;

using roamtest::Interval;
using roamtest::interval_graph;

// Liveness of the program order, checked against the intended intervals.
Liveness interval_liveness(const Graph& g, const std::vector<Interval>& ivs) {
  Liveness live = compute_liveness(g, g.program_order());
  EXPECT_EQ(live.first.size(), ivs.size());
  for (size_t i = 0; i < ivs.size() && i < live.first.size(); ++i) {
    EXPECT_EQ(g.tensors[g.storages[i].root].id, "s" + std::to_string(i));
    EXPECT_EQ(live.first[i], ivs[i].first) << "storage " << i;
    EXPECT_EQ(live.last[i], ivs[i].last) << "storage " << i;
  }
  return live;
}

// Brute force over all pairs: conflicting storages (intersecting live intervals) must get
// disjoint byte ranges. Returns a description of the first violation, or "".
std::string find_overlap(const Graph& g, const Liveness& live, const std::vector<uint64_t>& off,
                         uint64_t alignment) {
  const int32_t n = g.num_storages();
  for (int32_t a = 0; a < n; ++a) {
    const uint64_t ea = off[a] + align_up(g.storages[a].size, alignment);
    for (int32_t b = a + 1; b < n; ++b) {
      if (live.last[a] < live.first[b] || live.last[b] < live.first[a]) continue;
      const uint64_t eb = off[b] + align_up(g.storages[b].size, alignment);
      if (off[a] < eb && off[b] < ea) {
        return "storages " + std::to_string(a) + " and " + std::to_string(b) + " overlap";
      }
    }
  }
  return "";
}

// Offsets in units of `unit` bytes (the hand-worked cases are written in units).
std::vector<uint64_t> in_units(const std::vector<uint64_t>& offsets, uint64_t unit) {
  std::vector<uint64_t> out;
  for (uint64_t o : offsets) {
    EXPECT_EQ(o % unit, 0u);
    out.push_back(o / unit);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// llfb and greedy_by_size. Sizes are written in units of U = 64 bytes with alignment 64; the raw
// sizes are u*64 - 5 bytes, so every storage must be rounded up to u units.
constexpr uint64_t U = roamtest::kUnit;
using roamtest::units;

TEST(LayoutRegistry, MethodsAndDispatch) {
  EXPECT_EQ(layout_methods(),
            (std::vector<std::string>{"pytorch", "llfb", "greedy_by_size", "best_fit", "roam"}));
  const auto ivs = units({{0, 1, 2}, {1, 2, 1}});
  const Graph g = interval_graph(ivs);
  const Liveness live = interval_liveness(g, ivs);
  for (const std::string& m : layout_methods()) {
    const Layout l = make_layout(g, live, m, U);
    EXPECT_EQ(l.offsets.size(), 2u) << m;
  }
  EXPECT_EQ(make_layout(g, live, "llfb", U).offsets, layout_llfb(g, live, U).offsets);
  try {
    make_layout(g, live, "nope", U);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nope"), std::string::npos) << what;
    EXPECT_NE(what.find("pytorch, llfb, greedy_by_size, best_fit, roam"), std::string::npos) << what;
  }
  EXPECT_THROW(make_layout(g, live, "llfb", 0), std::invalid_argument);
  Liveness bad = live;
  bad.first.pop_back();
  EXPECT_THROW(layout_greedy_by_size(g, bad, U), std::invalid_argument);
}

TEST(LayoutRegistry, ArenaBytes) {
  // s0 = 100 B at 0 -> ends at 128; s1 = 1 B at 256 -> ends at 320 with alignment 64.
  const std::vector<Interval> ivs = {{0, 0, 100}, {1, 1, 1}};
  const Graph g = interval_graph(ivs);
  EXPECT_EQ(arena_bytes(g, {0, 256}, 64), 320u);
  EXPECT_EQ(arena_bytes(g, {512, 0}, 64), 640u);
  EXPECT_EQ(arena_bytes(g, {0, 256}, 1), 257u);
  EXPECT_THROW(arena_bytes(g, {0}, 64), std::invalid_argument);
}

TEST(LayoutRegistry, EmptyGraph) {
  const Graph g = interval_graph({}, 3);
  const Liveness live = compute_liveness(g, g.program_order());
  for (const std::string& m : layout_methods()) {
    const Layout l = make_layout(g, live, m, 64);
    EXPECT_TRUE(l.offsets.empty()) << m;
    EXPECT_EQ(l.reserved_bytes, 0u) << m;
  }
}

// Both orders place this instance the same way, and the last storage must choose between two
// gaps: the best (smallest) fit, not the first.
//   s0 [1,2] 2u, s1 [1,2] 1u, s2 [2,3] 1u, s3 [2,3] 2u, s4 [3,3] 1u.
// llfb order (lifetime desc, size desc, idx): s0(1,2u) s3(1,2u) s1(1,1u) s2(1,1u) s4(0,1u);
// greedy order (size desc, first, idx):       s0(2u,f1) s3(2u,f2) s1(1u,f1) s2(1u,f2) s4(1u,f3).
//   s0 -> 0 (nothing placed)                                  [0,2)
//   s3 conflicts s0 [0,2): no gap below, on top -> 2          [2,4)
//   s1 conflicts s0, s3: no gap -> 4                          [4,5)
//   s2 conflicts s0, s3, s1 (all live at step 2) -> 5         [5,6)
//   s4 [3,3] conflicts s3 [2,4) and s2 [5,6): gaps [0,2) (2u) and [4,5) (1u); best fit is the
//      1u gap -> 4 (first fit would take 0).
// Arena 6u = Tp (step 2 holds s0..s3 = 2+1+1+2), so this is optimal.
TEST(LayoutBestFit, PicksSmallestGap) {
  const auto ivs = units({{1, 2, 2}, {1, 2, 1}, {2, 3, 1}, {2, 3, 2}, {3, 3, 1}});
  const Graph g = interval_graph(ivs);
  const Liveness live = interval_liveness(g, ivs);
  EXPECT_EQ(theoretical_peak(g, live, U), 6 * U);
  for (const Layout& l : {layout_llfb(g, live, U), layout_greedy_by_size(g, live, U)}) {
    EXPECT_EQ(in_units(l.offsets, U), (std::vector<uint64_t>{0, 4, 5, 2, 4}));
    EXPECT_EQ(l.reserved_bytes, 6 * U);
    EXPECT_EQ(arena_bytes(g, l.offsets, U), 6 * U);
  }
}

// greedy_by_size is worse than the optimum, and worse than llfb:
//   s0 [0,1] 2u, s1 [1,2] 2u, s2 [2,3] 1u, s3 [3,3] 2u.
// Tp = 4u (step 1: s0 + s1; steps 2 and 3 hold 3u), a lower bound on any arena.
// greedy_by_size order: s0 (2u, f0), s1 (2u, f1), s3 (2u, f3), s2 (1u):
//   s0 -> 0 [0,2); s1 conflicts s0 -> 2 [2,4); s3 [3,3] conflicts neither s0 nor s1 -> 0 [0,2);
//   s2 [2,3] conflicts s3 [0,2) and s1 [2,4): no gap -> 4 [4,5). Arena 5u > 4u.
// llfb order: lifetimes s0 1, s1 1, s2 1, s3 0 -> s0 (2u), s1 (2u), s2 (1u), s3:
//   s0 -> 0 [0,2); s1 -> 2 [2,4); s2 [2,3] conflicts only s1 [2,4): gap [0,2) fits -> 0 [0,1);
//   s3 [3,3] conflicts only s2 [0,1): no gap -> 1 [1,3). Arena 4u = Tp: optimal.
TEST(LayoutGreedyBySize, WorseThanOptimumAndLlfb) {
  const auto ivs = units({{0, 1, 2}, {1, 2, 2}, {2, 3, 1}, {3, 3, 2}});
  const Graph g = interval_graph(ivs);
  const Liveness live = interval_liveness(g, ivs);
  EXPECT_EQ(theoretical_peak(g, live, U), 4 * U);

  const Layout greedy = layout_greedy_by_size(g, live, U);
  EXPECT_EQ(in_units(greedy.offsets, U), (std::vector<uint64_t>{0, 2, 4, 0}));
  EXPECT_EQ(greedy.reserved_bytes, 5 * U);

  const Layout llfb = layout_llfb(g, live, U);
  EXPECT_EQ(in_units(llfb.offsets, U), (std::vector<uint64_t>{0, 2, 0, 1}));
  EXPECT_EQ(llfb.reserved_bytes, 4 * U);
}

// llfb is worse than greedy_by_size (and than the optimum):
//   s0 [0,1] 1u, s1 [0,0] 2u, s2 [1,3] 1u.     Tp = 3u (step 0: s0 + s1).
// llfb order: lifetimes s2 2, s0 1, s1 0:
//   s2 -> 0 [0,1); s0 conflicts s2 -> 1 [1,2); s1 [0,0] conflicts only s0 [1,2): the gap [0,1)
//   is 1u < 2u -> on top, 2 [2,4). Arena 4u.
// greedy_by_size order: s1 (2u), s0 (1u, f0), s2 (1u, f1):
//   s1 -> 0 [0,2); s0 conflicts s1 -> 2 [2,3); s2 [1,3] conflicts only s0 [2,3): gap [0,2)
//   fits -> 0 [0,1). Arena 3u = Tp: optimal.
TEST(LayoutLlfb, WorseThanGreedyBySize) {
  const auto ivs = units({{0, 1, 1}, {0, 0, 2}, {1, 3, 1}});
  const Graph g = interval_graph(ivs);
  const Liveness live = interval_liveness(g, ivs);
  EXPECT_EQ(theoretical_peak(g, live, U), 3 * U);

  const Layout llfb = layout_llfb(g, live, U);
  EXPECT_EQ(in_units(llfb.offsets, U), (std::vector<uint64_t>{1, 2, 0}));
  EXPECT_EQ(llfb.reserved_bytes, 4 * U);

  const Layout greedy = layout_greedy_by_size(g, live, U);
  EXPECT_EQ(in_units(greedy.offsets, U), (std::vector<uint64_t>{2, 0, 0}));
  EXPECT_EQ(greedy.reserved_bytes, 3 * U);
}

// Tie-breaks and non-conflicting reuse, alignment 1 (sizes used as they are):
//   s0 [0,3] 10, s1 [0,0] 30, s2 [1,1] 30, s3 [2,3] 20, s4 [3,3] 5.
// llfb order: lifetimes s0 3, s3 1, then s1, s2, s4 (0) by size desc then idx: s1, s2, s4.
//   s0 -> 0 [0,10); s3 [2,3] conflicts s0 -> 10 [10,30); s1 [0,0] conflicts s0 -> 10 [10,40);
//   s2 [1,1] conflicts s0 only -> 10 [10,40); s4 [3,3] conflicts s0 [0,10), s3 [10,30) -> 30.
//   Arena 40 = Tp (step 0: 10 + 30).
// greedy order: s1 (30, f0), s2 (30, f1), s3 (20), s0 (10), s4 (5):
//   s1 -> 0; s2 -> 0 (no conflict); s3 -> 0 (no conflict with s1, s2); s0 [0,3] conflicts
//   s1, s2 [0,30) and s3 [0,20) -> 30 [30,40); s4 [3,3] conflicts s3 [0,20), s0 [30,40): gap
//   [20,30) fits -> 20. Arena 40.
TEST(LayoutLlfb, TieBreaksAndReuse) {
  const std::vector<Interval> ivs = {{0, 3, 10}, {0, 0, 30}, {1, 1, 30}, {2, 3, 20}, {3, 3, 5}};
  const Graph g = interval_graph(ivs);
  const Liveness live = interval_liveness(g, ivs);
  const Layout llfb = layout_llfb(g, live, 1);
  EXPECT_EQ(llfb.offsets, (std::vector<uint64_t>{0, 10, 10, 10, 30}));
  EXPECT_EQ(llfb.reserved_bytes, 40u);
  const Layout greedy = layout_greedy_by_size(g, live, 1);
  EXPECT_EQ(greedy.offsets, (std::vector<uint64_t>{30, 0, 0, 0, 20}));
  EXPECT_EQ(greedy.reserved_bytes, 40u);
}

// ---------------------------------------------------------------------------------------------
// pytorch (caching allocator simulation). Alignment 64 unless stated: every request is rounded
// up to a multiple of 512 bytes.

struct PtCase {
  Graph g;
  Liveness live;
  Layout layout;
};

PtCase run_pytorch(const std::vector<Interval>& ivs, uint64_t alignment = 64) {
  PtCase c{interval_graph(ivs), {}, {}};
  c.live = interval_liveness(c.g, ivs);
  c.layout = layout_pytorch(c.g, c.live, alignment);
  EXPECT_EQ(find_overlap(c.g, c.live, c.layout.offsets, alignment), "");
  return c;
}

// (a) 1000 B and 3000 B round to 1024 and 3072, both <= 1 MiB: small pool. The first request
// finds no free block, creates a 2 MiB segment at 0 and splits it (remainder 2 MiB - 1024 >=
// 512): s0 at 0, free block [1024, 2 MiB). s1 is carved from that block at 1024.
// Reserved = one 2 MiB segment; arena = 1024 + align_up(3000, 64) = 1024 + 3008 = 4032.
TEST(LayoutPytorch, SmallRequestsShareA2MiBSegment) {
  const PtCase c = run_pytorch({{0, 1, 1000}, {0, 1, 3000}});
  EXPECT_EQ(c.layout.offsets, (std::vector<uint64_t>{0, 1024}));
  EXPECT_EQ(c.layout.reserved_bytes, 2 * MiB);
  EXPECT_EQ(arena_bytes(c.g, c.layout.offsets, 64), 4032u);
}

// (b) A freed block is reused by best fit (smallest adequate block, not the lowest address).
// Step 0 allocates s0 8192 @0, s1 1024 @8192, s2 2048 @9216, s3 512 @11264 (free tail from
// 11776). After step 1, s0 and s2 are freed; their neighbours s1, s3 are live, so no merging:
// free blocks (size, addr) = (2048, 9216), (8192, 0), (2 MiB - 11776, 11776).
// Step 2: s4 1500 B -> 1536: smallest block >= 1536 is (2048, 9216) -> s4 @9216, split (the
// remainder 512 >= 512) leaving (512, 10752). s5 500 B -> 512: smallest block >= 512 is
// (512, 10752) -> s5 @10752, whole block. First fit would have put both at 0.
TEST(LayoutPytorch, FreedBlockReusedByBestFit) {
  const PtCase c = run_pytorch(
      {{0, 1, 8192}, {0, 2, 1024}, {0, 1, 2048}, {0, 2, 512}, {2, 2, 1500}, {2, 2, 500}});
  EXPECT_EQ(c.layout.offsets, (std::vector<uint64_t>{0, 8192, 9216, 11264, 9216, 10752}));
  EXPECT_EQ(c.layout.reserved_bytes, 2 * MiB);
}

// (c) s0 = 5 MiB (large pool, < 10 MiB) creates a 20 MiB segment at 0, split since the
// remainder 15 MiB > 1 MiB: s0 @0, free (15 MiB, 5 MiB). At step 1, s1 = 12 MiB takes that
// block (best fit) and splits it (remainder 3 MiB > 1 MiB): s1 @5 MiB, free (3 MiB, 17 MiB).
// s2 = 4 MiB does not fit the 3 MiB block: a new 20 MiB segment at 20 MiB, s2 @20 MiB.
// Reserved = 40 MiB.
TEST(LayoutPytorch, LargeRequestSharesA20MiBSegment) {
  const PtCase c = run_pytorch({{0, 1, 5 * MiB}, {1, 1, 12 * MiB}, {1, 1, 4 * MiB}});
  EXPECT_EQ(c.layout.offsets, (std::vector<uint64_t>{0, 5 * MiB, 20 * MiB}));
  EXPECT_EQ(c.layout.reserved_bytes, 40 * MiB);
}

// (d) s0 = 30 MiB (>= 10 MiB) gets a segment of its size rounded to 2 MiB: 30 MiB at 0, no
// remainder. s1 = 10 MiB + 1 B rounds to 10 MiB + 512 and gets a 12 MiB segment at 30 MiB; the
// remainder 2 MiB - 512 > 1 MiB is split off as a free block at 40 MiB + 512. s2 = 1.5 MiB
// (large pool) fits that block (2 MiB - 512 >= 1.5 MiB): s2 @40 MiB + 512; the remainder
// 0.5 MiB - 512 <= 1 MiB is not split. Reserved = 30 + 12 = 42 MiB.
TEST(LayoutPytorch, HugeRequestGetsItsOwnSegment) {
  const PtCase c = run_pytorch({{0, 0, 30 * MiB}, {0, 0, 10 * MiB + 1}, {0, 0, 3 * MiB / 2}});
  EXPECT_EQ(c.layout.offsets, (std::vector<uint64_t>{0, 30 * MiB, 40 * MiB + 512}));
  EXPECT_EQ(c.layout.reserved_bytes, 42 * MiB);
}

// (e) Coalescing: step 0 allocates four 4 KiB blocks s0 @0, s1 @4K, s2 @8K, s3 @12K (s3 lives
// to the end as a guard; free tail from 16K). After step 1 s0 and s2 are freed (4 KiB each);
// after step 2 s1 is freed and merges with both neighbours into one free 12 KiB block @0.
// Step 3: s4 = 12 KiB fits only the merged block among blocks of that size: best fit is
// (12 KiB, 0) rather than the 2 MiB - 16 KiB tail -> s4 @0.
TEST(LayoutPytorch, CoalescedNeighboursServeALargerRequest) {
  const PtCase c = run_pytorch(
      {{0, 1, 4 * KiB}, {0, 2, 4 * KiB}, {0, 1, 4 * KiB}, {0, 4, 4 * KiB}, {3, 3, 12 * KiB}});
  EXPECT_EQ(c.layout.offsets, (std::vector<uint64_t>{0, 4 * KiB, 8 * KiB, 12 * KiB, 0}));
  EXPECT_EQ(c.layout.reserved_bytes, 2 * MiB);
}

// Pools are separate and segments are never returned: s0 = 5 MiB takes a 20 MiB large segment
// at 0; s1 = 1000 B (small pool) cannot use the large pool's free 15 MiB and opens a 2 MiB
// small segment at 20 MiB. After step 0 both are freed (each segment coalesces back into one
// free block) but nothing is released: s2 = 8 MiB at step 1 reuses the large segment @0 and
// s3 = 1 MiB (exactly kSmallSize: small pool) reuses the small segment @20 MiB.
// Reserved stays 22 MiB.
TEST(LayoutPytorch, PoolsAreSeparateAndSegmentsKept) {
  const PtCase c = run_pytorch({{0, 0, 5 * MiB}, {0, 0, 1000}, {1, 1, 8 * MiB}, {1, 1, MiB}});
  EXPECT_EQ(c.layout.offsets, (std::vector<uint64_t>{0, 20 * MiB, 0, 20 * MiB}));
  EXPECT_EQ(c.layout.reserved_bytes, 22 * MiB);
}

// Alignment above 512 becomes the rounding unit: with alignment 1024, 1000 -> 1024,
// 1500 -> 2048, 100 -> 1024: offsets 0, 1024, 3072 (with alignment 64 they would be 0, 1024,
// 2560 since 1500 -> 1536).
TEST(LayoutPytorch, AlignmentAbove512IsTheUnit) {
  const std::vector<Interval> ivs = {{0, 0, 1000}, {0, 0, 1500}, {0, 0, 100}};
  EXPECT_EQ(run_pytorch(ivs, 1024).layout.offsets, (std::vector<uint64_t>{0, 1024, 3072}));
  EXPECT_EQ(run_pytorch(ivs, 64).layout.offsets, (std::vector<uint64_t>{0, 1024, 2560}));
}

// ---------------------------------------------------------------------------------------------
// Properties on random interval sets (fixed seeds).

std::vector<Interval> random_intervals(std::mt19937_64& rng, int32_t n, int32_t steps) {
  std::uniform_int_distribution<int32_t> first_d(0, steps - 1);
  std::geometric_distribution<int32_t> len_d(0.3);
  std::uniform_int_distribution<int32_t> kind_d(0, 99);
  std::vector<Interval> ivs;
  for (int32_t i = 0; i < n; ++i) {
    Interval iv;
    iv.first = first_d(rng);
    // Mostly short lives, some living to the end (like saved activations).
    iv.last = kind_d(rng) < 15 ? steps - 1 : std::min(steps - 1, iv.first + len_d(rng));
    const int32_t kind = kind_d(rng);
    uint64_t lo = 1, hi = 4096;  // small pool
    if (kind >= 60) lo = 4097, hi = 1200 * KiB;   // around the small/large boundary
    if (kind >= 85) lo = MiB, hi = 32 * MiB;      // large pool, both segment rules
    iv.size = std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
    ivs.push_back(iv);
  }
  std::stable_sort(ivs.begin(), ivs.end(),
                   [](const Interval& a, const Interval& b) { return a.first < b.first; });
  return ivs;
}

TEST(LayoutProperty, RandomIntervalSets) {
  const uint64_t alignments[] = {1, 8, 64, 256, 512, 1024, 4096};
  int cases = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    const int32_t steps = std::uniform_int_distribution<int32_t>(1, 30)(rng);
    const int32_t n = std::uniform_int_distribution<int32_t>(1, 60)(rng);
    const uint64_t alignment = alignments[seed % std::size(alignments)];
    const std::vector<Interval> ivs = random_intervals(rng, n, steps);
    const Graph g = interval_graph(ivs, steps);
    const Liveness live = interval_liveness(g, ivs);
    const uint64_t tp = theoretical_peak(g, live, alignment);
    for (const std::string& m : layout_methods()) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " method " + m);
      const Layout l = make_layout(g, live, m, alignment);
      ASSERT_EQ(l.offsets.size(), ivs.size());
      for (uint64_t o : l.offsets) ASSERT_EQ(o % alignment, 0u);
      ASSERT_EQ(find_overlap(g, live, l.offsets, alignment), "");
      const uint64_t arena = arena_bytes(g, l.offsets, alignment);
      EXPECT_GE(arena, tp);
      if (m == "pytorch") {
        EXPECT_GE(l.reserved_bytes, arena);
        EXPECT_EQ(l.reserved_bytes % (2 * MiB), 0u);  // a sum of segment sizes
      } else {
        EXPECT_EQ(l.reserved_bytes, arena);
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 300);
}

// 20k storages over 4000 steps: every method stays valid at scale (speed is measured in bench/,
// not asserted here).
TEST(LayoutProperty, TwentyThousandStorages) {
  std::mt19937_64 rng(20000);
  const int32_t steps = 4000;
  const std::vector<Interval> ivs = random_intervals(rng, 20000, steps);
  const Graph g = interval_graph(ivs, steps);
  const Liveness live = compute_liveness(g, g.program_order());
  const uint64_t alignment = 64;
  const uint64_t tp = theoretical_peak(g, live, alignment);
  for (const std::string& m : layout_methods()) {
    const Layout l = make_layout(g, live, m, alignment);
    const uint64_t arena = arena_bytes(g, l.offsets, alignment);
    EXPECT_GE(arena, tp) << m;
    EXPECT_EQ(find_overlap(g, live, l.offsets, alignment), "") << m;
  }
}

}  // namespace
}  // namespace roam
