// The list schedulers (LESCEA, lpmf) keep their ready set in a treap (src/order/list_schedule.h)
// so that a step costs O(log n). Checked here against their definitions written the slow way:
// scan every ready op at every step and recount its step peak and the bytes it frees from
// scratch. Same orders, same peaks, on random graphs and random segment problems.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "../src/order/list_schedule.h"
#include "../src/order/roam_segment.h"
#include "roam/analysis.h"
#include "roam/order.h"
#include "testing.h"

namespace {

using roam::Graph;
using roam::Order;
using roam::OpIdx;
using roam::StorageIdx;

enum class Rule { kLescea, kLpmf };

// One step's choice from the definitions: (step peak, live after) of every ready op (ready in
// increasing op index), the first best wins ties.
size_t pick_by_definition(Rule rule, const std::vector<std::pair<uint64_t, uint64_t>>& keys,
                          uint64_t running_peak) {
  size_t best = 0;
  if (rule == Rule::kLpmf) {
    std::pair<uint64_t, uint64_t> best_key{std::numeric_limits<uint64_t>::max(), 0};
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::pair<uint64_t, uint64_t> key{std::max(running_peak, keys[i].first), keys[i].second};
      if (key < best_key) { best_key = key; best = i; }
    }
    return best;
  }
  size_t keep = keys.size();
  uint64_t keep_after = std::numeric_limits<uint64_t>::max(), grow_peak = keep_after;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].first <= running_peak) {
      if (keys[i].second < keep_after) { keep_after = keys[i].second; keep = i; }
    } else if (keys[i].first < grow_peak) {
      grow_peak = keys[i].first;
      best = i;
    }
  }
  return keep != keys.size() ? keep : best;
}

// Whole graph: an op adds the storages it produces; it frees those whose every other user ran.
Order graph_schedule_by_definition(const Graph& g, uint64_t alignment, Rule rule) {
  auto size = [&](StorageIdx s) { return roam::align_up(g.storages[s].size, alignment); };
  std::vector<char> ran(g.ops.size(), 0);
  std::vector<uint64_t> produced(g.ops.size(), 0);
  for (StorageIdx s = 0; s < g.num_storages(); ++s) produced[g.storages[s].producer] += size(s);
  uint64_t live = 0, peak = 0;
  Order order;
  while (order.size() < g.ops.size()) {
    std::vector<OpIdx> ready;
    for (OpIdx v = 0; v < g.num_ops(); ++v) {
      if (ran[v]) continue;
      bool ok = true;
      for (OpIdx p : g.preds[v]) ok = ok && ran[p];
      if (ok) ready.push_back(v);
    }
    std::vector<std::pair<uint64_t, uint64_t>> keys;
    for (OpIdx v : ready) {
      uint64_t freed = 0;
      for (StorageIdx s : g.op_storages[v]) {
        if (g.storages[s].graph_output) continue;
        bool others_ran = true;
        for (OpIdx u : g.storages[s].users) others_ran = others_ran && (u == v || ran[u]);
        if (others_ran) freed += size(s);
      }
      keys.push_back({live + produced[v], live + produced[v] - freed});
    }
    const size_t i = pick_by_definition(rule, keys, peak);
    peak = std::max(peak, keys[i].first);
    live = keys[i].second;
    ran[ready[i]] = 1;
    order.push_back(ready[i]);
  }
  return order;
}

TEST(ListSchedulers, GraphOrdersEqualTheirDefinitionOnRandomGraphs) {
  int compared = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    roamtest::RandomGraphOptions o;
    o.num_ops = 4 + static_cast<int>(seed % 45);
    o.p_after = seed % 3 == 0 ? 0.3 : 0.1;
    const Graph g = roam::parse_graph(roamtest::random_graph_json(seed, o), "random.json");
    for (uint64_t alignment : {uint64_t{1}, uint64_t{512}}) {
      EXPECT_EQ(roam::order_lescea(g, alignment), graph_schedule_by_definition(g, alignment, Rule::kLescea))
          << "seed " << seed;
      EXPECT_EQ(roam::order_lpmf(g, alignment), graph_schedule_by_definition(g, alignment, Rule::kLpmf))
          << "seed " << seed;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 300);
}

// Segment model (roam_segment.h): a storage is born at the first of its birth ops to run (pre:
// before the segment), dies after its last user (escape: never), or at its birth when it has no
// user left then.
struct SegRun {
  std::vector<int32_t> order;
  uint64_t peak = 0;
};

SegRun segment_schedule_by_definition(const roam::detail::SegmentProblem& p, Rule rule) {
  const size_t ns = p.storages.size();
  std::vector<char> ran(p.k, 0), born(ns, 0);
  std::vector<int32_t> left(ns);
  uint64_t live = p.constant;
  for (size_t s = 0; s < ns; ++s) {
    left[s] = static_cast<int32_t>(p.storages[s].users.size());
    if (p.storages[s].pre) live += p.storages[s].size;
  }
  auto has = [](const std::vector<int32_t>& list, int32_t v) {
    return std::find(list.begin(), list.end(), v) != list.end();
  };
  SegRun r;
  while (r.order.size() < static_cast<size_t>(p.k)) {
    std::vector<int32_t> ready;
    for (int32_t v = 0; v < p.k; ++v) {
      bool ok = !ran[v];
      for (int32_t u : p.preds[v]) ok = ok && ran[u];
      if (ok) ready.push_back(v);
    }
    std::vector<std::pair<uint64_t, uint64_t>> keys;
    for (int32_t v : ready) {
      uint64_t step = live, freed = 0;
      for (size_t s = 0; s < ns; ++s) {
        const auto& st = p.storages[s];
        const bool birth = has(st.births, v), user = has(st.users, v);
        const bool born_now = birth && !st.pre && !born[s];
        if (born_now) step += st.size;
        if (st.escape) continue;
        if ((user && left[s] == 1) || (!user && born_now && left[s] == 0)) freed += st.size;
      }
      keys.push_back({step, step - freed});
    }
    const size_t i = pick_by_definition(rule, keys, r.peak);
    const int32_t v = ready[i];
    r.peak = std::max(r.peak, keys[i].first);
    live = keys[i].second;
    ran[v] = 1;
    for (size_t s = 0; s < ns; ++s) {
      if (has(p.storages[s].births, v)) born[s] = 1;
      if (has(p.storages[s].users, v)) --left[s];
    }
    r.order.push_back(v);
  }
  return r;
}

// A random segment whose storages are consistent with its dependencies: every user descends
// from a birth op (so a storage is live when its last user frees it); some storages have a
// second birth op, some none (pre), some escape, some have no user.
roam::detail::SegmentProblem random_segment(uint64_t seed) {
  std::mt19937_64 rng(seed);
  roam::detail::SegmentProblem p;
  p.k = 2 + static_cast<int32_t>(rng() % 30);
  p.preds.assign(p.k, {});
  p.succs.assign(p.k, {});
  std::vector<std::vector<char>> reach(p.k, std::vector<char>(p.k, 0));  // reach[a][b]: a before b
  for (int32_t v = 1; v < p.k; ++v) {
    for (int32_t u = 0; u < v; ++u) {
      if (rng() % 4 != 0) continue;
      p.preds[v].push_back(u);
      p.succs[u].push_back(v);
      reach[u][v] = 1;
      for (int32_t w = 0; w < u; ++w) reach[w][v] |= reach[w][u];
    }
  }
  p.constant = rng() % 100;
  const int ns = 1 + static_cast<int>(rng() % 40);
  for (int i = 0; i < ns; ++i) {
    roam::detail::SegStorage st;
    st.size = 1 + rng() % 1000;
    st.pre = rng() % 6 == 0;
    st.escape = rng() % 7 == 0;
    const int32_t b = static_cast<int32_t>(rng() % p.k);
    if (!st.pre) {
      st.births.push_back(b);
      if (rng() % 4 == 0) {
        const int32_t b2 = static_cast<int32_t>(rng() % p.k);
        if (b2 != b) st.births.push_back(b2);
      }
      std::sort(st.births.begin(), st.births.end());
    }
    for (int32_t v = 0; v < p.k; ++v) {
      const bool after_birth = st.pre || v == b || reach[b][v];
      if (after_birth && rng() % 3 == 0) st.users.push_back(v);
    }
    st.direct = st.users;
    p.storages.push_back(std::move(st));
  }
  p.build_touch();
  return p;
}

TEST(ListSchedulers, SegmentOrdersAndPeaksEqualTheirDefinitionOnRandomSegments) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const roam::detail::SegmentProblem p = random_segment(seed);
    const SegRun lescea = segment_schedule_by_definition(p, Rule::kLescea);
    const SegRun lpmf = segment_schedule_by_definition(p, Rule::kLpmf);
    EXPECT_EQ(roam::detail::schedule_lescea(p), lescea.order) << "seed " << seed;
    EXPECT_EQ(roam::detail::schedule_lpmf(p), lpmf.order) << "seed " << seed;
    EXPECT_EQ(roam::detail::segment_peak(p, lescea.order), lescea.peak) << "seed " << seed;
    EXPECT_EQ(roam::detail::segment_peak(p, lpmf.order), lpmf.peak) << "seed " << seed;
  }
}

TEST(ListSchedulers, SegmentPeakRejectsAnOrderThatBreaksADependency) {
  roam::detail::SegmentProblem p;
  p.k = 2;
  p.preds = {{}, {0}};
  p.succs = {{1}, {}};
  p.build_touch();
  EXPECT_THROW(roam::detail::segment_peak(p, {1, 0}), roam::detail::InternalError);
  EXPECT_EQ(roam::detail::segment_peak(p, {0, 1}), 0u);
}

// The treap against a plain list under random inserts, updates and erases.
TEST(ListSchedulers, ReadyQueueAnswersLikeAScanOfItsContents) {
  std::mt19937_64 rng(11);
  const int32_t n = 200;
  roam::order_internal::ReadyQueue q(n);
  std::vector<char> in(n, 0);
  std::vector<uint64_t> grow(n, 0);
  std::vector<int64_t> net(n, 0);
  for (int step = 0; step < 20000; ++step) {
    const int32_t v = static_cast<int32_t>(rng() % n);
    const uint64_t g = rng() % 50;
    const int64_t d = static_cast<int64_t>(rng() % 61) - 30;
    if (!in[v]) {
      q.insert(v, g, d);
    } else if (rng() % 2) {
      q.update(v, g, d);
    } else {
      q.erase(v);
      in[v] = 0;
      continue;
    }
    in[v] = 1;
    grow[v] = g;
    net[v] = d;
    const uint64_t limit = rng() % 55;
    int32_t want_within = -1, want_first = -1;
    for (int32_t u = 0; u < n; ++u) {
      if (!in[u]) continue;
      if (want_first < 0 || grow[u] < grow[want_first]) want_first = u;
      if (grow[u] <= limit && (want_within < 0 || net[u] < net[want_within])) want_within = u;
    }
    ASSERT_EQ(q.first(), want_first) << "step " << step;
    ASSERT_EQ(q.min_net_within(limit), want_within) << "step " << step;
    ASSERT_TRUE(q.contains(v));
  }
}

}  // namespace
