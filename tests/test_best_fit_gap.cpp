// The best-fit gap placement behind llfb, greedy_by_size and best_fit finds a storage's
// conflicting neighbours through an interval index (or one pass in offset order, whichever is
// cheaper). Checked against the definition written the slow way: look at every placed storage,
// keep those whose live intervals meet, take the smallest gap that fits, lowest offset first.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <random>

#include "../src/layout/best_fit_gap.h"
#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "testing.h"

namespace {

using roam::Graph;
using roam::Liveness;
using roam::StorageIdx;

std::vector<uint64_t> place_by_definition(const std::vector<uint64_t>& sizes, const Liveness& live,
                                          const std::vector<StorageIdx>& sequence) {
  std::vector<uint64_t> offset(sizes.size(), 0);
  std::vector<StorageIdx> placed;
  for (StorageIdx s : sequence) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // conflicting (offset, end)
    for (StorageIdx t : placed) {
      if (live.last[t] < live.first[s] || live.first[t] > live.last[s]) continue;
      ranges.push_back({offset[t], offset[t] + sizes[t]});
    }
    std::sort(ranges.begin(), ranges.end());
    uint64_t cursor = 0, best_gap = std::numeric_limits<uint64_t>::max(), best = 0;
    bool found = false;
    for (auto [o, e] : ranges) {
      if (o > cursor && o - cursor >= sizes[s] && o - cursor < best_gap) {
        best_gap = o - cursor;
        best = cursor;
        found = true;
      }
      cursor = std::max(cursor, e);
    }
    offset[s] = found ? best : cursor;
    placed.push_back(s);
  }
  return offset;
}

// n storages, one per op, whose live intervals are then replaced by random ones: short ones
// (a few steps, so that the interval index answers) mixed with long ones (so that the pass over
// everything does).
struct Instance {
  Graph g;
  Liveness live;
  std::vector<uint64_t> sizes;  // aligned to 64
};

Instance random_instance(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  roamtest::GraphJson b("bfg-" + std::to_string(seed));
  for (int i = 0; i < n; ++i) {
    const std::string t = "t" + std::to_string(i);
    b.tensor(t, 1 + rng() % 5000);
    b.op("n" + std::to_string(i), {}, {t});
  }
  Instance x{roam::parse_graph(b.doc, "bfg.json"), {}, {}};
  const int steps = n;
  x.live.first.resize(x.g.storages.size());
  x.live.last.resize(x.g.storages.size());
  for (size_t s = 0; s < x.g.storages.size(); ++s) {
    const int32_t f = static_cast<int32_t>(rng() % steps);
    const int32_t len = rng() % 10 == 0 ? static_cast<int32_t>(rng() % steps) : static_cast<int32_t>(rng() % 6);
    x.live.first[s] = f;
    x.live.last[s] = std::min(steps - 1, f + len);
    x.sizes.push_back(roam::align_up(x.g.storages[s].size, 64));
  }
  return x;
}

TEST(BestFitGap, EqualsTheDefinitionOnRandomIntervals) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Instance x = random_instance(seed, seed % 2 ? 400 : 1500);
    std::vector<StorageIdx> sequence(x.g.storages.size());
    std::iota(sequence.begin(), sequence.end(), StorageIdx{0});
    std::shuffle(sequence.begin(), sequence.end(), std::mt19937_64(seed));
    const roam::Layout l = roam::layout_internal::place_best_fit_gap(x.g, x.live, 64, sequence);
    const std::vector<uint64_t> want = place_by_definition(x.sizes, x.live, sequence);
    ASSERT_EQ(l.offsets, want) << "seed " << seed;
    uint64_t arena = 0;
    for (size_t s = 0; s < want.size(); ++s) arena = std::max(arena, want[s] + x.sizes[s]);
    EXPECT_EQ(l.reserved_bytes, arena);
    // The three baselines are this placement with their own sequences: each equals the
    // definition too, and its layout has no overlap (checked pairwise).
    for (const char* m : {"llfb", "greedy_by_size", "best_fit"}) {
      const roam::Layout b = roam::make_layout(x.g, x.live, m, roam::PlanOptions{});
      for (size_t s = 0; s < want.size(); ++s) {
        for (size_t t = s + 1; t < want.size(); ++t) {
          if (x.live.last[s] < x.live.first[t] || x.live.last[t] < x.live.first[s]) continue;
          ASSERT_TRUE(b.offsets[s] + x.sizes[s] <= b.offsets[t] ||
                      b.offsets[t] + x.sizes[t] <= b.offsets[s])
              << m << " seed " << seed << " storages " << s << ", " << t;
        }
      }
    }
  }
}

// A deadline already passed: the first 255 storages are placed by the definition (the clock is
// read at the 256th), every later one at the highest end among the storages placed before it
// whose live intervals meet its own (recounted here pairwise), so the layout stays valid.
TEST(BestFitGap, PastTheDeadlineTheRestGoOnTheSkyline) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const Instance x = random_instance(seed + 100, 900);
    std::vector<StorageIdx> sequence(x.g.storages.size());
    std::iota(sequence.begin(), sequence.end(), StorageIdx{0});
    std::shuffle(sequence.begin(), sequence.end(), std::mt19937_64(seed));
    const roam::Layout l = roam::layout_internal::place_best_fit_gap(
        x.g, x.live, 64, sequence, std::chrono::steady_clock::time_point::min() + std::chrono::seconds(1));
    const std::vector<StorageIdx> head(sequence.begin(), sequence.begin() + 255);
    const std::vector<uint64_t> want_head = place_by_definition(x.sizes, x.live, head);
    uint64_t arena = 0;
    for (size_t i = 0; i < sequence.size(); ++i) {
      const StorageIdx s = sequence[i];
      uint64_t want = 0;
      if (i < 255) {
        want = want_head[s];
      } else {
        for (size_t j = 0; j < i; ++j) {
          const StorageIdx t = sequence[j];
          if (x.live.last[t] < x.live.first[s] || x.live.first[t] > x.live.last[s]) continue;
          want = std::max(want, l.offsets[t] + x.sizes[t]);
        }
      }
      ASSERT_EQ(l.offsets[s], want) << "seed " << seed << " position " << i;
      arena = std::max(arena, want + x.sizes[s]);
    }
    EXPECT_EQ(l.reserved_bytes, arena);
  }
}

// Worked by hand, every storage 64 B: A and B live over steps 0-2, C at step 1, D at step 3.
// A goes to 0; B meets A: on top, 64; C meets both with no gap between them: 128; D meets
// nothing: 0. Arena 192.
TEST(BestFitGap, HandWorkedPlacement) {
  roamtest::GraphJson b("bfg-hand");
  for (const char* t : {"A", "B", "C", "D"}) {
    b.tensor(t, 64);
    b.op(std::string("n") + t, {}, {t});
  }
  const Graph g = roam::parse_graph(b.doc, "hand.json");
  Liveness live;
  live.first = {0, 0, 1, 3};
  live.last = {2, 2, 1, 3};
  const roam::Layout l = roam::layout_internal::place_best_fit_gap(g, live, 64, {0, 1, 2, 3});
  EXPECT_EQ(l.offsets, (std::vector<uint64_t>{0, 64, 128, 0}));
  EXPECT_EQ(l.reserved_bytes, 192u);
  // Placing C before B leaves B on top of C: A 0, C 64, B 128.
  const roam::Layout m = roam::layout_internal::place_best_fit_gap(g, live, 64, {0, 2, 1, 3});
  EXPECT_EQ(m.offsets, (std::vector<uint64_t>{0, 128, 64, 0}));
}

}  // namespace
