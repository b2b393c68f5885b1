// The weight-update scheduler of the ROAM order (arXiv 2310.19295, Sec. 4;
// include/roam/roam_order.h step 2): a gap per update group, scored on an estimated memory
// profile of the core, and the artificial edges that put every group in its gap.
#include <algorithm>
#include <cmath>
#include <limits>

#include "roam_order_internal.h"

namespace roam::detail {

namespace {

// Range-add / range-max segment tree (the weight-update scheduler's memory profile).
class MaxTree {
 public:
  explicit MaxTree(const std::vector<int64_t>& values) {
    n_ = static_cast<int32_t>(values.size());
    size_ = 1;
    while (size_ < n_) size_ *= 2;
    mx_.assign(2 * static_cast<size_t>(size_), std::numeric_limits<int64_t>::min() / 4);
    lazy_.assign(2 * static_cast<size_t>(size_), 0);
    for (int32_t i = 0; i < n_; ++i) mx_[size_ + i] = values[i];
    for (int32_t i = size_ - 1; i >= 1; --i) mx_[i] = std::max(mx_[2 * i], mx_[2 * i + 1]);
  }
  void add(int32_t lo, int32_t hi, int64_t d) {
    if (lo <= hi && d != 0) add(1, 0, size_ - 1, lo, hi, d);
  }
  int64_t max(int32_t lo, int32_t hi) const {
    return lo <= hi ? max(1, 0, size_ - 1, lo, hi) : std::numeric_limits<int64_t>::min() / 4;
  }

 private:
  void add(int32_t node, int32_t l, int32_t r, int32_t lo, int32_t hi, int64_t d) {
    if (hi < l || r < lo) return;
    if (lo <= l && r <= hi) {
      mx_[node] += d;
      lazy_[node] += d;
      return;
    }
    const int32_t mid = (l + r) / 2;
    add(2 * node, l, mid, lo, hi, d);
    add(2 * node + 1, mid + 1, r, lo, hi, d);
    mx_[node] = std::max(mx_[2 * node], mx_[2 * node + 1]) + lazy_[node];
  }
  int64_t max(int32_t node, int32_t l, int32_t r, int32_t lo, int32_t hi) const {
    if (hi < l || r < lo) return std::numeric_limits<int64_t>::min() / 4;
    if (lo <= l && r <= hi) return mx_[node];
    const int32_t mid = (l + r) / 2;
    return std::max(max(2 * node, l, mid, lo, hi), max(2 * node + 1, mid + 1, r, lo, hi)) +
           lazy_[node];
  }
  int32_t n_ = 0, size_ = 1;
  std::vector<int64_t> mx_, lazy_;
};

}  // namespace

std::vector<int32_t> schedule_groups(const Prep& p, const Settings& settings) {
  const int32_t m = p.m;
  const auto nc = static_cast<int32_t>(p.core_ops.size());
  const auto ng = static_cast<int32_t>(p.groups.size());
  std::vector<int32_t> chosen(ng, 0);
  if (ng == 0) return chosen;
  // The profile below adds bytes in int64: up to every storage plus, per group, its held and
  // transient bytes (groups may hold the same storage). Sizes near the reader's 2^62 cap could
  // overflow that, so bytes are counted in units of 2^shift bytes, shift the smallest that
  // keeps the worst sum below 2^61 (0 for any real graph: the decisions are unchanged there).
  long double worst = 0;
  for (const uint64_t sz : p.size) worst += static_cast<long double>(sz);
  for (const Group& gr : p.groups) worst += static_cast<long double>(gr.X);
  worst *= 2.0L * ng + 4;
  int shift = 0;
  while (worst >= 2305843009213693952.0L) {  // 2^61
    worst /= 2;
    ++shift;
  }
  auto units = [shift](uint64_t bytes) { return static_cast<int64_t>(bytes >> shift); };
  // Core profile in program order: live bytes at every core step and after it.
  std::vector<int64_t> delta(static_cast<size_t>(nc) + 1, 0), dying(nc, 0);
  for (StorageIdx s = 0; s < static_cast<StorageIdx>(p.size.size()); ++s) {
    if (p.births[s].empty()) continue;
    int32_t b = nc;
    bool group_born = false;
    for (OpIdx v : p.births[s]) {
      if (p.core_pos[v] >= 0)
        b = std::min(b, p.core_pos[v]);
      else
        group_born = true;
    }
    if (b == nc || (group_born && p.births[s].size() == 1)) continue;
    int32_t e = b;
    for (OpIdx u : p.users[s]) {
      if (p.core_pos[u] >= 0) e = std::max(e, p.core_pos[u]);
    }
    if (p.escape[s]) e = nc - 1;
    const int64_t sz = units(p.size[s]);
    delta[b] += sz;
    delta[e + 1] -= sz;
    if (!p.escape[s]) dying[e] += sz;
  }
  std::vector<int64_t> live(nc), after(nc);
  int64_t running = 0;
  for (int32_t t = 0; t < nc; ++t) {
    running += delta[t];
    live[t] = running;
    after[t] = running - dying[t];
  }
  // Entries: 2i = gap i, 2i+1 = key point i.
  const int32_t E = 2 * m + 1;
  std::vector<int64_t> gap_peak(m + 1, 0), level(m + 1, 0), base(E, 0);
  for (int32_t i = 0; i <= m; ++i) {
    const int32_t lo = i == 0 ? -1 : p.core_pos[p.core_keys[i - 1]];
    const int32_t hi = i == m ? nc : p.core_pos[p.core_keys[i]];
    int64_t lv = lo >= 0 ? after[lo] : 0, pk = 0;
    for (int32_t t = lo + 1; t < hi; ++t) {
      pk = std::max(pk, live[t]);
      lv = std::min(lv, after[t]);
    }
    gap_peak[i] = pk;
    level[i] = lv;
    base[2 * i] = std::max(pk, lv);
    if (i < m) base[2 * i + 1] = live[p.core_pos[p.core_keys[i]]];
  }
  MaxTree tree(base);
  auto entry_of_core = [&](int32_t cpos) {
    const OpIdx v = p.core_ops[cpos];
    return p.key_index[v] >= 0 ? 2 * p.key_index[v] + 1 : 2 * p.gap_of[v];
  };
  // Unavoidable holds: from the end of an external storage's core life to the group's window.
  for (const Group& gr : p.groups) {
    for (auto [s, end] : gr.external) {
      tree.add(entry_of_core(end) + 1, 2 * gr.e - 1, units(p.size[s]));
    }
  }
  std::vector<int64_t> sum_g(m + 1, 0), max_extra(m + 1, 0);
  auto gap_value = [&](int32_t j, int64_t sg, int64_t mx) {
    return std::max(gap_peak[j], level[j] + sg + mx);
  };
  // Heads and whole groups first (largest X first), then tails (they follow their head).
  std::vector<int32_t> by_size(ng);
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](int32_t a, int32_t b) {
    const bool ta = p.groups[a].part == 2, tb = p.groups[b].part == 2;
    if (ta != tb) return tb;
    return p.groups[a].X > p.groups[b].X;
  });
  for (int32_t gi : by_size) {
    const Group& gr = p.groups[gi];
    const int64_t G = units(gr.G);
    const int64_t extra = units(gr.X) - units(gr.G);
    const int32_t head_gap = gr.part == 2 ? chosen[gr.sibling] : -1;
    const int32_t e = std::max(gr.e, head_gap);
    auto apply = [&](int32_t j, int64_t sign) {
      const int64_t old_v = gap_value(j, sum_g[j], max_extra[j]);
      const int64_t new_v = gap_value(j, sum_g[j] + G, std::max(max_extra[j], extra));
      tree.add(2 * j, 2 * j, sign * (new_v - old_v));
      for (auto [s, end] : gr.external) {
        tree.add(std::max(entry_of_core(end) + 1, 2 * e), 2 * j - 1,
                 sign * units(p.size[s]));
      }
      if (head_gap >= 0)
        tree.add(2 * head_gap + 1, 2 * j - 1, sign * units(gr.from_head));
    };
    if (!gr.births && gr.X == gr.G) {
      // The unit makes no storage and needs no bytes beyond what it reads (an Adam head's
      // in-place moment updates, an SGD update): running it later only holds what it reads
      // longer, so its earliest gap dominates. There it costs nothing beyond the holds up to
      // the gap (already in the profile): it can run right after the last of its
      // predecessors, which the segment search does when that is best.
      chosen[gi] = e;
      continue;
    }
    std::vector<int32_t> cand;
    for (int32_t j = e; j <= std::min(gr.l, e + settings.delay_radius); ++j) cand.push_back(j);
    if (cand.empty() || cand.back() != gr.l) cand.push_back(std::max(gr.l, e));
    int32_t best = cand.front();
    std::pair<int64_t, int64_t> best_key{std::numeric_limits<int64_t>::max(), 0};
    for (int32_t j : cand) {
      apply(j, +1);
      const std::pair<int64_t, int64_t> key{tree.max(0, E - 1), tree.max(2 * e, 2 * j)};
      apply(j, -1);
      if (key < best_key) {
        best_key = key;
        best = j;
      }
    }
    apply(best, +1);
    sum_g[best] += G;
    max_extra[best] = std::max(max_extra[best], extra);
    chosen[gi] = best;
  }
  return chosen;
}

// Artificial edges that put every group in its gap; groups sharing a gap without core ops are
// chained (by X - G when `by_extra`, else in program order).
std::vector<std::pair<OpIdx, OpIdx>> placement_edges(const Prep& p, const std::vector<int32_t>& gap,
                                                     bool by_extra) {
  std::vector<std::pair<OpIdx, OpIdx>> edges;
  const auto ng = static_cast<int32_t>(p.groups.size());
  std::vector<std::vector<int32_t>> in_gap(p.m + 1);
  for (int32_t gi = 0; gi < ng; ++gi) {
    const Group& gr = p.groups[gi];
    const int32_t j = gap[gi];
    in_gap[j].push_back(gi);
    if (j >= 1) {
      for (OpIdx v : gr.entries) edges.push_back({p.core_keys[j - 1], v});
    }
    if (j < p.m) {
      for (OpIdx v : gr.exits) edges.push_back({v, p.core_keys[j]});
    }
  }
  const auto nc = static_cast<int32_t>(p.core_ops.size());
  for (int32_t j = 0; j <= p.m; ++j) {
    auto& list = in_gap[j];
    if (list.size() < 2) continue;
    const int32_t lo = j == 0 ? -1 : p.core_pos[p.core_keys[j - 1]];
    const int32_t hi = j == p.m ? nc : p.core_pos[p.core_keys[j]];
    if (hi - lo > 1) continue;  // the gap has core ops: leave the groups to the segment search
    if (by_extra) {
      std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
        return p.groups[a].X - p.groups[a].G < p.groups[b].X - p.groups[b].G;
      });
    }
    // A tail never goes before its head: defer it until its head is placed.
    std::vector<int32_t> fixed;
    std::vector<char> placed(p.groups.size(), 0), here(p.groups.size(), 0);
    for (int32_t gi : list) here[gi] = 1;
    std::vector<int32_t> waiting(p.groups.size(), -1);  // head -> its deferred tail
    for (int32_t gi : list) {
      const Group& gr = p.groups[gi];
      if (gr.part == 2 && here[gr.sibling] && !placed[gr.sibling]) {
        waiting[gr.sibling] = gi;
        continue;
      }
      fixed.push_back(gi);
      placed[gi] = 1;
      if (waiting[gi] >= 0) {
        fixed.push_back(waiting[gi]);
        placed[waiting[gi]] = 1;
      }
    }
    list = std::move(fixed);
    for (size_t i = 1; i < list.size(); ++i) {
      for (OpIdx a : p.groups[list[i - 1]].exits) {
        for (OpIdx b : p.groups[list[i]].entries) edges.push_back({a, b});
      }
    }
  }
  return edges;
}

std::vector<int32_t> placement(const Prep& p, GroupPlacement mode, const Settings& settings) {
  std::vector<int32_t> gap(p.groups.size());
  for (size_t i = 0; i < p.groups.size(); ++i) {
    gap[i] = mode == GroupPlacement::kEarliest ? p.groups[i].e : p.groups[i].l;
  }
  if (mode == GroupPlacement::kScheduled) gap = schedule_groups(p, settings);
  return gap;
}

}  // namespace roam::detail
