// One segment between key points: memory model, list schedulers, exact search, local search.
//
// Memory model (local op indices 0..k-1). A storage is live at the step of op v, with S the set
// of ops already run, when it is born (pre, or one of its birth ops is in S + {v}) and not yet
// dead (escape, or one of its users is outside S). Hence the live bytes after S depend on S
// only, which is what makes the dynamic program over scheduled sets exact:
//   step(S, v) = mem(S) + bytes born at v,   mem(S + v) = step(S, v) - bytes whose last user is v.
// The segment's peak is max over its steps of step + constant.
#include "roam_segment.h"
#include "list_schedule.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <queue>
#include <string>
#include <tuple>

namespace roam::detail {

void SegmentProblem::build_touch() {
  touch.assign(k, {});
  for (int32_t s = 0; s < static_cast<int32_t>(storages.size()); ++s) {
    const SegStorage& st = storages[s];
    for (int32_t v : st.births) touch[v].push_back({s, kBirth});
    for (int32_t v : st.users) {
      auto& t = touch[v];
      if (!t.empty() && t.back().first == s) {
        t.back().second |= kUser;
      } else {
        t.push_back({s, kUser});
      }
    }
    for (int32_t v : st.direct) {
      for (auto& e : touch[v]) {
        if (e.first == s) e.second |= kDirect;
      }
    }
  }
}

namespace {

uint64_t initial_live(const SegmentProblem& p) {
  uint64_t live = p.constant;
  for (const SegStorage& st : p.storages) {
    if (st.pre) live += st.size;
  }
  return live;
}

// List-scheduling simulator over the segment model. Each op's grow (bytes born at it: storages
// it gives birth to that are not born yet) and freed (bytes whose last user it is, or born at it
// with no user left) are kept up to date as ops run, so that a step costs O(log k) plus the
// op's touches (list_schedule.h):
//   a storage's birth takes it out of the grow of its other birth ops;
//   a storage down to one user that has not run (the XOR of those users) is freed by that user;
//   a storage left with no user before its birth is freed by whichever birth op runs first.
class SegSim {
 public:
  explicit SegSim(const SegmentProblem& p)
      : p_(p), rem_(p.storages.size()), unrun_xor_(p.storages.size(), 0),
        born_(p.storages.size(), 0), birth_only_(p.storages.size()), grow_(p.k, 0),
        freed_(p.k, 0), waiting_(p.k), ready_(p.k) {
    for (size_t s = 0; s < p.storages.size(); ++s) {
      rem_[s] = static_cast<int32_t>(p.storages[s].users.size());
      for (int32_t u : p.storages[s].users) unrun_xor_[s] ^= u;
    }
    for (int32_t v = 0; v < p.k; ++v) {
      for (auto [s, f] : p.touch[v]) {
        const SegStorage& st = p.storages[s];
        if ((f & kBirth) && !(f & kUser)) birth_only_[s].push_back(v);
        if ((f & kBirth) && !st.pre) grow_[v] += st.size;
        if (st.escape) continue;
        if ((f & kUser) ? rem_[s] == 1 : ((f & kBirth) && !st.pre && rem_[s] == 0)) {
          freed_[v] += st.size;
        }
      }
    }
    for (int32_t v = 0; v < p.k; ++v) {
      waiting_[v] = static_cast<int32_t>(p.preds[v].size());
      if (waiting_[v] == 0) ready_.insert(v, grow_[v], net(v));
    }
    live_ = initial_live(p);
  }
  const order_internal::ReadyQueue& ready() const { return ready_; }
  uint64_t live() const { return live_; }
  uint64_t peak() const { return peak_; }
  uint64_t step_peak(int32_t v) const { return live_ + grow_[v]; }
  /// Runs v (ready).
  void run(int32_t v) {
    ready_.erase(v);
    const uint64_t step = step_peak(v);
    peak_ = std::max(peak_, step);
    live_ = step - freed_[v];
    for (auto [s, f] : p_.touch[v]) {
      const SegStorage& st = p_.storages[s];
      if ((f & kBirth) && !born_[s]) {
        born_[s] = 1;
        if (!st.pre) {
          for (int32_t u : st.births) change(u, -static_cast<int64_t>(st.size), 0);
          if (!st.escape && rem_[s] == 0) {
            for (int32_t u : birth_only_[s]) change(u, 0, -static_cast<int64_t>(st.size));
          }
        }
      }
      if (f & kUser) {
        unrun_xor_[s] ^= v;
        --rem_[s];
        if (st.escape) continue;
        if (rem_[s] == 1) change(unrun_xor_[s], 0, static_cast<int64_t>(st.size));
        if (rem_[s] == 0 && !st.pre && !born_[s]) {
          for (int32_t u : birth_only_[s]) change(u, 0, static_cast<int64_t>(st.size));
        }
      }
    }
    for (int32_t w : p_.succs[v]) {
      if (--waiting_[w] == 0) ready_.insert(w, grow_[w], net(w));
    }
  }

 private:
  int64_t net(int32_t v) const {
    return static_cast<int64_t>(grow_[v]) - static_cast<int64_t>(freed_[v]);
  }
  void change(int32_t u, int64_t grow_delta, int64_t freed_delta) {
    grow_[u] = static_cast<uint64_t>(static_cast<int64_t>(grow_[u]) + grow_delta);
    freed_[u] = static_cast<uint64_t>(static_cast<int64_t>(freed_[u]) + freed_delta);
    if (ready_.contains(u)) ready_.update(u, grow_[u], net(u));
  }

  const SegmentProblem& p_;
  std::vector<int32_t> rem_;                       // users not yet run
  std::vector<int32_t> unrun_xor_;                 // XOR of the users not yet run
  std::vector<char> born_;
  std::vector<std::vector<int32_t>> birth_only_;   // birth ops that are not users
  std::vector<uint64_t> grow_, freed_;             // per op, for the current state
  std::vector<int32_t> waiting_;
  order_internal::ReadyQueue ready_;
  uint64_t live_ = 0, peak_ = 0;
};

template <typename Pick>
std::vector<int32_t> list_schedule(const SegmentProblem& p, Pick pick) {
  SegSim sim(p);
  std::vector<int32_t> order;
  order.reserve(p.k);
  while (!sim.ready().empty()) {
    const int32_t v = pick(sim.ready(), sim.live(), sim.peak());
    sim.run(v);
    order.push_back(v);
  }
  return order;
}

}  // namespace

std::vector<int32_t> schedule_lescea(const SegmentProblem& p) {
  return list_schedule(p, order_internal::pick_lescea);
}

std::vector<int32_t> schedule_lpmf(const SegmentProblem& p) {
  return list_schedule(p, order_internal::pick_lpmf);
}

namespace {

// The same segment run backwards: an order of it, reversed, is an order of the original with
// the same live intervals (a storage is born at its first user and dies after its last birth
// op). List scheduling on it places ops as late as they can go, e.g. a branch that only
// feeds a late op runs right before it.
SegmentProblem reversed(const SegmentProblem& p) {
  SegmentProblem r;
  r.k = p.k;
  r.preds = p.succs;
  r.succs = p.preds;
  r.constant = p.constant;
  r.storages.reserve(p.storages.size());
  for (const SegStorage& st : p.storages) {
    SegStorage x;
    x.size = st.size;
    x.pre = st.escape;
    x.escape = st.pre;
    if (!x.pre) x.births = st.users;
    x.users = st.births;
    r.storages.push_back(std::move(x));
  }
  r.build_touch();
  return r;
}

template <typename Schedule>
std::vector<int32_t> schedule_reversed(const SegmentProblem& p, Schedule schedule) {
  std::vector<int32_t> order = schedule(reversed(p));
  std::reverse(order.begin(), order.end());
  return order;
}

// ---------------------------------------------------------------------------------------------
// Exact search: bottleneck Dijkstra over downsets (sets of scheduled ops). The cost of a state
// is max(target, largest step so far); states are expanded by increasing cost, deeper first on
// ties, so the first full set popped is optimal. Transitions that cannot beat the upper bound
// are dropped; when the queue empties first, the upper bound is optimal.
// ---------------------------------------------------------------------------------------------
template <int W>
class ExactSearch {
 public:
  ExactSearch(const SegmentProblem& p, const SegmentSettings& settings)
      : p_(p), settings_(settings) {
    pred_mask_.assign(static_cast<size_t>(p.k) * W, 0);
    for (int32_t v = 0; v < p.k; ++v) {
      for (int32_t u : p.preds[v]) set_bit(&pred_mask_[static_cast<size_t>(v) * W], u);
    }
    const size_t ns = p.storages.size();
    birth_mask_.assign(ns * W, 0);
    user_mask_.assign(ns * W, 0);
    for (size_t s = 0; s < ns; ++s) {
      for (int32_t v : p.storages[s].births) set_bit(&birth_mask_[s * W], v);
      for (int32_t v : p.storages[s].users) set_bit(&user_mask_[s * W], v);
    }
  }

  // Returns true when the search finished (found an order with cost < ub, written to `order`,
  // or proved that none exists).
  bool run(uint64_t target, uint64_t ub, std::vector<int32_t>& order, int64_t& states_used,
           bool& timed_out) {
    timed_out = false;
    const uint64_t ub_cost = std::max(ub, target);
    new_state(std::array<uint64_t, W>{}, initial_live(p_) - p_.constant, target, -1, -1, 0);
    using Key = std::tuple<uint64_t, int32_t, int32_t>;  // cost, -depth, state
    std::priority_queue<Key, std::vector<Key>, std::greater<Key>> pq;
    pq.push({target, 0, 0});
    int64_t pops = 0;
    while (!pq.empty()) {
      const auto [cost, negdepth, idx] = pq.top();
      pq.pop();
      if (closed_[idx] || cost != cost_[idx]) continue;
      closed_[idx] = 1;
      if ((++pops & 1023) == 0 && std::chrono::steady_clock::now() > settings_.deadline) {
        timed_out = true;
        states_used = static_cast<int64_t>(cost_.size());
        return false;
      }
      const int32_t depth = -negdepth;
      if (depth == p_.k) {
        order.assign(p_.k, -1);
        for (int32_t s = idx, d = p_.k - 1; parent_[s] >= 0; s = parent_[s], --d) order[d] = op_[s];
        states_used = static_cast<int64_t>(cost_.size());
        return true;
      }
      std::array<uint64_t, W> mask;
      std::memcpy(mask.data(), &masks_[static_cast<size_t>(idx) * W], sizeof mask);
      const uint64_t mem = mem_[idx];
      for (int32_t v = 0; v < p_.k; ++v) {
        if (test_bit(mask.data(), v) ||
            !subset(&pred_mask_[static_cast<size_t>(v) * W], mask.data())) {
          continue;
        }
        std::array<uint64_t, W> next = mask;
        set_bit(next.data(), v);
        uint64_t add = 0, freed = 0;
        for (auto [s, f] : p_.touch[v]) {
          const SegStorage& st = p_.storages[s];
          const uint64_t* bm = &birth_mask_[static_cast<size_t>(s) * W];
          const bool was_born = st.pre || intersects(bm, mask.data());
          if ((f & kBirth) && !was_born) add += st.size;
          if (!st.escape && ((f & kUser) || !was_born) &&
              subset(&user_mask_[static_cast<size_t>(s) * W], next.data())) {
            freed += st.size;
          }
        }
        const uint64_t step = mem + add + p_.constant;
        const uint64_t c = std::max(cost, step);
        if (c >= ub_cost) continue;
        const uint64_t nmem = mem + add - freed;
        const int32_t j = find(next);
        if (j >= 0) {
          if (closed_[j] || cost_[j] <= c) continue;
          cost_[j] = c;
          parent_[j] = idx;
          op_[j] = v;
          pq.push({c, -(depth + 1), j});
        } else {
          if (static_cast<int64_t>(cost_.size()) >= settings_.exact_state_limit) {
            states_used = static_cast<int64_t>(cost_.size());
            return false;
          }
          const int32_t n = new_state(next, nmem, c, idx, v, depth + 1);
          pq.push({c, -(depth + 1), n});
        }
      }
    }
    states_used = static_cast<int64_t>(cost_.size());
    order.clear();  // nothing beats the upper bound
    return true;
  }

 private:
  static void set_bit(uint64_t* m, int32_t v) { m[v / 64] |= uint64_t{1} << (v % 64); }
  static bool test_bit(const uint64_t* m, int32_t v) { return (m[v / 64] >> (v % 64)) & 1; }
  static bool subset(const uint64_t* a, const uint64_t* b) {
    for (int w = 0; w < W; ++w) {
      if (a[w] & ~b[w]) return false;
    }
    return true;
  }
  static bool intersects(const uint64_t* a, const uint64_t* b) {
    for (int w = 0; w < W; ++w) {
      if (a[w] & b[w]) return true;
    }
    return false;
  }
  static uint64_t hash(const std::array<uint64_t, W>& m) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int w = 0; w < W; ++w) {
      h ^= m[w] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdull;
    }
    return h ^ (h >> 33);
  }
  int32_t find(const std::array<uint64_t, W>& m) const {
    if (slots_.empty()) return -1;
    const size_t cap = slots_.size();
    for (size_t i = hash(m) & (cap - 1);; i = (i + 1) & (cap - 1)) {
      const int32_t s = slots_[i];
      if (s < 0) return -1;
      if (std::memcmp(&masks_[static_cast<size_t>(s) * W], m.data(), sizeof(uint64_t) * W) == 0) {
        return s;
      }
    }
  }
  void insert_slot(int32_t s) {
    const size_t cap = slots_.size();
    std::array<uint64_t, W> m;
    std::memcpy(m.data(), &masks_[static_cast<size_t>(s) * W], sizeof m);
    size_t i = hash(m) & (cap - 1);
    while (slots_[i] >= 0) i = (i + 1) & (cap - 1);
    slots_[i] = s;
  }
  int32_t new_state(const std::array<uint64_t, W>& m, uint64_t mem, uint64_t cost, int32_t parent,
                    int32_t op, int32_t /*depth*/) {
    const auto s = static_cast<int32_t>(cost_.size());
    masks_.insert(masks_.end(), m.begin(), m.end());
    mem_.push_back(mem);
    cost_.push_back(cost);
    parent_.push_back(parent);
    op_.push_back(op);
    closed_.push_back(0);
    if ((cost_.size()) * 2 > slots_.size()) {
      slots_.assign(std::max<size_t>(1024, slots_.size() * 2), -1);
      for (int32_t t = 0; t <= s; ++t) insert_slot(t);
    } else {
      insert_slot(s);
    }
    return s;
  }

  const SegmentProblem& p_;
  const SegmentSettings& settings_;
  std::vector<uint64_t> pred_mask_, birth_mask_, user_mask_;
  std::vector<uint64_t> masks_, mem_, cost_;
  std::vector<int32_t> parent_, op_;
  std::vector<char> closed_;
  std::vector<int32_t> slots_;
};

// ---------------------------------------------------------------------------------------------
// Local search: slide single ops through adjacent swaps. A swap of the ops at steps i and i+1
// changes only those two steps' live bytes, so it costs O(degree + log k).
// Objective, lexicographic: (peak, number of steps at the peak, sum of live bytes over steps).
// With `blocks`, blocks slide too: an op with the run of ops just before it that feed it (each a
// predecessor of a later op of the run; at most kBlock ops) moves later as one, and an op with
// the run just after it that it feeds moves earlier as one. A chain whose single steps each hold more (a
// SiLU derivative sigmoid(x) * (1 + x * (1 - sigmoid(x))) computed ahead of the gradient that
// multiplies it: every partial result is an extra tensor) moves to where its transient is cheap.
// ---------------------------------------------------------------------------------------------
class LocalSearch {
 public:
  LocalSearch(const SegmentProblem& p, std::vector<int32_t> order, const SegmentSettings& settings,
              bool blocks)
      : p_(p),
        settings_(settings),
        blocks_(blocks),
        ord_(std::move(order)),
        pos_(p.k),
        first_(p.storages.size()),
        last_(p.storages.size()),
        mark_(p.storages.size(), 0) {
    const int32_t k = p.k;
    for (int32_t i = 0; i < k; ++i) pos_[ord_[i]] = i;
    std::vector<int64_t> delta(static_cast<size_t>(k) + 1, 0);
    for (size_t s = 0; s < p.storages.size(); ++s) {
      const SegStorage& st = p.storages[s];
      int32_t f = k, l = -1;
      for (int32_t v : st.births) f = std::min(f, pos_[v]);
      for (int32_t v : st.users) l = std::max(l, pos_[v]);
      if (st.pre) f = 0;
      if (st.escape) l = k - 1;
      f = std::min(f, k - 1);  // no birth op and not pre: not produced by the model
      if (l < f) l = f;        // no user and no escape: not produced either (live at birth only)
      first_[s] = f;
      last_[s] = l;
      delta[f] += static_cast<int64_t>(st.size);
      delta[l + 1] -= static_cast<int64_t>(st.size);
    }
    size_ = 1;
    while (size_ < k) size_ *= 2;
    tmax_.assign(2 * static_cast<size_t>(size_), 0);
    tcnt_.assign(2 * static_cast<size_t>(size_), 0);
    live_.assign(k, 0);
    int64_t running = 0;
    for (int32_t t = 0; t < k; ++t) {
      running += delta[t];
      live_[t] = static_cast<uint64_t>(running);
      sum_ += live_[t];
      tmax_[size_ + t] = live_[t];
      tcnt_[size_ + t] = 1;
    }
    for (int32_t i = size_ - 1; i >= 1; --i) pull(i);
    preds_sorted_ = p.preds;
    for (auto& v : preds_sorted_) std::sort(v.begin(), v.end());
  }

  using Objective = std::tuple<uint64_t, int32_t, uint64_t>;
  Objective objective() const { return {tmax_[1], tcnt_[1], sum_}; }

  void run(int64_t& swaps, bool& timed_out) {
    const int32_t k = p_.k;
    const int32_t reach = std::min(k, 512);
    bool improved = true;
    while (improved && !timed_out && swaps < settings_.local_search_swaps) {
      improved = false;
      const std::vector<int32_t> snapshot = ord_;
      for (int32_t u : snapshot) {
        if (swaps >= settings_.local_search_swaps || timed_out) break;
        if (slide(u, reach, +1, swaps, timed_out) || slide(u, reach, -1, swaps, timed_out) ||
            (blocks_ && (slide_block(u, reach, +1, swaps, timed_out) ||
                         slide_block(u, reach, -1, swaps, timed_out)))) {
          improved = true;
        }
      }
    }
  }
  const std::vector<int32_t>& order() const { return ord_; }
  uint64_t peak() const { return tmax_[1]; }

 private:
  void pull(int32_t i) {
    const uint64_t a = tmax_[2 * i], b = tmax_[2 * i + 1];
    if (a > b) {
      tmax_[i] = a;
      tcnt_[i] = tcnt_[2 * i];
    } else if (b > a) {
      tmax_[i] = b;
      tcnt_[i] = tcnt_[2 * i + 1];
    } else {
      tmax_[i] = a;
      tcnt_[i] = tcnt_[2 * i] + tcnt_[2 * i + 1];
    }
  }
  void set_live(int32_t t, uint64_t v) {
    sum_ -= live_[t];
    sum_ += v;
    live_[t] = v;
    int32_t i = size_ + t;
    tmax_[i] = v;
    for (i /= 2; i >= 1; i /= 2) pull(i);
  }
  bool edge(int32_t a, int32_t b) const {  // a is a predecessor of b
    const auto& pr = preds_sorted_[b];
    return std::binary_search(pr.begin(), pr.end(), a);
  }
  // Swaps the ops at steps i and i+1 (caller checks there is no edge between them).
  void swap_at(int32_t i) {
    const int32_t a = ord_[i], b = ord_[i + 1];
    int64_t d0 = 0, d1 = 0;
    for (auto [s, f] : p_.touch[b]) mark_[s] = f | 0x80;
    auto process = [&](int32_t s, uint8_t fa, uint8_t fb) {
      const SegStorage& st = p_.storages[s];
      const int32_t F = first_[s], L = last_[s];
      int32_t nf = F, nl = L;
      if (!st.pre) {
        if (F == i)
          nf = (fb & kBirth) ? i : i + 1;
        else if (F == i + 1)
          nf = i;
      }
      if (!st.escape) {
        if (L == i + 1)
          nl = (fa & kUser) ? i + 1 : i;
        else if (L == i)
          nl = i + 1;
      }
      if (nl < nf) nl = nf;
      const auto sz = static_cast<int64_t>(st.size);
      d0 += sz * ((nf <= i && i <= nl) - (F <= i && i <= L));
      d1 += sz * ((nf <= i + 1 && i + 1 <= nl) - (F <= i + 1 && i + 1 <= L));
      first_[s] = nf;
      last_[s] = nl;
    };
    for (auto [s, f] : p_.touch[a]) {
      const uint8_t fb = (mark_[s] & 0x80) ? static_cast<uint8_t>(mark_[s] & 0x7f) : 0;
      process(s, f, fb);
      mark_[s] = 0x40;  // done
    }
    for (auto [s, f] : p_.touch[b]) {
      if (mark_[s] != 0x40) process(s, 0, f);
    }
    for (auto [s, f] : p_.touch[a]) mark_[s] = 0;
    for (auto [s, f] : p_.touch[b]) mark_[s] = 0;
    ord_[i] = b;
    ord_[i + 1] = a;
    pos_[a] = i + 1;
    pos_[b] = i;
    if (d0 != 0) set_live(i, static_cast<uint64_t>(static_cast<int64_t>(live_[i]) + d0));
    if (d1 != 0) set_live(i + 1, static_cast<uint64_t>(static_cast<int64_t>(live_[i + 1]) + d1));
  }
  // Slides u up to `reach` steps in direction dir; keeps the best position if it improves.
  bool slide(int32_t u, int32_t reach, int dir, int64_t& swaps, bool& timed_out) {
    const Objective start = objective();
    Objective best = start;
    int32_t moved = 0, best_moved = 0;
    const int32_t k = p_.k;
    while (moved < reach && swaps < settings_.local_search_swaps) {
      const int32_t p = pos_[u];
      if (dir > 0) {
        if (p + 1 >= k || edge(u, ord_[p + 1])) break;
        swap_at(p);
      } else {
        if (p == 0 || edge(ord_[p - 1], u)) break;
        swap_at(p - 1);
      }
      ++moved;
      if ((++swaps & 4095) == 0 && std::chrono::steady_clock::now() > settings_.deadline) {
        timed_out = true;
      }
      const Objective o = objective();
      if (o < best) {
        best = o;
        best_moved = moved;
      }
      if (timed_out) break;
    }
    while (moved > best_moved) {
      const int32_t p = pos_[u];
      if (dir > 0)
        swap_at(p - 1);
      else
        swap_at(p);
      --moved;
    }
    return best < start;
  }

  // Slides the block of u (see above; dir +1: u and the ops just before it that feed it, moved
  // later; -1: u and the ops just after it that it feeds, moved earlier) up to `reach` steps,
  // one op w across the whole block per step (|block| adjacent swaps, none across an edge);
  // keeps the best position if it improves. Blocks of one op are left to slide().
  bool slide_block(int32_t u, int32_t reach, int dir, int64_t& swaps, bool& timed_out) {
    static constexpr int32_t kBlock = 32;
    const int32_t k = p_.k;
    // The block is ord_[lo..hi]; it grows from u while the next op outward has an edge to it.
    int32_t lo = pos_[u], hi = pos_[u];
    if (dir > 0) {
      while (lo > 0 && hi - lo + 1 < kBlock) {
        const int32_t c = ord_[lo - 1];
        bool feeds = false;
        for (int32_t x = lo; x <= hi && !feeds; ++x) feeds = edge(c, ord_[x]);
        if (!feeds) break;
        --lo;
      }
    } else {
      while (hi + 1 < k && hi - lo + 1 < kBlock) {
        const int32_t c = ord_[hi + 1];
        bool fed = false;
        for (int32_t x = lo; x <= hi && !fed; ++x) fed = edge(ord_[x], c);
        if (!fed) break;
        ++hi;
      }
    }
    if (lo == hi) return false;
    const Objective start = objective();
    Objective best = start;
    std::vector<int32_t> done;  // swap indices, in the order applied (each undoes itself)
    size_t best_done = 0;
    for (int32_t moved = 0; moved < reach && swaps < settings_.local_search_swaps; ++moved) {
      if (dir > 0) {
        if (hi + 1 >= k) break;
        const int32_t w = ord_[hi + 1];
        bool blocked = false;
        for (int32_t x = lo; x <= hi && !blocked; ++x) blocked = edge(ord_[x], w);
        if (blocked) break;
        for (int32_t i = hi; i >= lo; --i) {
          swap_at(i);
          done.push_back(i);
        }
        ++lo;
        ++hi;
      } else {
        if (lo == 0) break;
        const int32_t w = ord_[lo - 1];
        bool blocked = false;
        for (int32_t x = lo; x <= hi && !blocked; ++x) blocked = edge(w, ord_[x]);
        if (blocked) break;
        for (int32_t i = lo - 1; i < hi; ++i) {
          swap_at(i);
          done.push_back(i);
        }
        --lo;
        --hi;
      }
      swaps += hi - lo + 1;
      if ((swaps & ~int64_t{4095}) != ((swaps - (hi - lo + 1)) & ~int64_t{4095}) &&
          std::chrono::steady_clock::now() > settings_.deadline) {
        timed_out = true;
      }
      const Objective o = objective();
      if (o < best) {
        best = o;
        best_done = done.size();
      }
      if (timed_out) break;
    }
    while (done.size() > best_done) {
      swap_at(done.back());
      done.pop_back();
    }
    return best < start;
  }

  const SegmentProblem& p_;
  const SegmentSettings& settings_;
  bool blocks_ = false;
  std::vector<int32_t> ord_, pos_, first_, last_;
  std::vector<uint8_t> mark_;
  std::vector<std::vector<int32_t>> preds_sorted_;
  std::vector<uint64_t> live_;
  int32_t size_ = 1;
  std::vector<uint64_t> tmax_;
  std::vector<int32_t> tcnt_;
  uint64_t sum_ = 0;
};

template <int W>
bool run_exact(const SegmentProblem& p, const SegmentSettings& settings, uint64_t target,
               uint64_t ub, std::vector<int32_t>& order, int64_t& states, bool& timed_out) {
  ExactSearch<W> search(p, settings);
  return search.run(target, ub, order, states, timed_out);
}

}  // namespace

uint64_t segment_peak(const SegmentProblem& p, const std::vector<int32_t>& order) {
  SegSim sim(p);
  for (int32_t v : order) {
    if (v < 0 || v >= p.k || !sim.ready().contains(v)) {
      throw InternalError("segment order runs local op " + std::to_string(v) +
                          " before its dependencies");
    }
    sim.run(v);
  }
  return sim.peak();
}

uint64_t segment_lower_bound(const SegmentProblem& p) {
  uint64_t always = p.constant, best = 0;
  for (const SegStorage& st : p.storages) {
    if (st.pre && st.escape) always += st.size;
  }
  for (int32_t v = 0; v < p.k; ++v) {
    uint64_t at = 0;
    for (auto [s, f] : p.touch[v]) {
      const SegStorage& st = p.storages[s];
      if (st.pre && st.escape) continue;
      // Surely live at v: a storage born before the segment that v uses, one that v uses after
      // its birth for sure, or one born by v alone.
      if ((st.pre && (f & kUser)) || (f & kDirect) || (st.births.size() == 1 && (f & kBirth))) {
        at += st.size;
      }
    }
    best = std::max(best, at);
  }
  return always + best;
}

std::vector<int32_t> priority_topological(const std::vector<std::vector<int32_t>>& preds,
                                          const std::vector<std::vector<int32_t>>& succs,
                                          const std::vector<int64_t>& rank) {
  const auto k = static_cast<int32_t>(preds.size());
  std::vector<int32_t> waiting(k);
  using Item = std::pair<int64_t, int32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (int32_t v = 0; v < k; ++v) {
    waiting[v] = static_cast<int32_t>(preds[v].size());
    if (waiting[v] == 0) ready.push({rank[v], v});
  }
  std::vector<int32_t> order;
  order.reserve(k);
  while (!ready.empty()) {
    const int32_t v = ready.top().second;
    ready.pop();
    order.push_back(v);
    for (int32_t w : succs[v]) {
      if (--waiting[w] == 0) ready.push({rank[w], w});
    }
  }
  if (static_cast<int32_t>(order.size()) != k) {
    throw InternalError("dependency cycle among " + std::to_string(k - static_cast<int32_t>(order.size())) +
                        " of " + std::to_string(k) + " ops (artificial edges contradict the graph)");
  }
  return order;
}

SegmentResult solve_segment(const SegmentProblem& p, const std::vector<std::vector<int32_t>>& hints,
                            const SegmentSettings& settings, uint64_t target) {
  SegmentResult r;
  if (p.k == 0) return r;
  auto consider = [&](std::vector<int32_t> order) {
    const uint64_t peak = segment_peak(p, order);
    if (r.order.empty() || peak < r.peak) {
      r.order = std::move(order);
      r.peak = peak;
    }
  };
  // Past the deadline only the first hint (any valid order will do) is taken.
  auto out_of_time = [&] {
    if (r.order.empty() || std::chrono::steady_clock::now() <= settings.deadline) return false;
    r.time_limit_hit = true;
    return true;
  };
  for (const auto& h : hints) {
    if (out_of_time()) return r;
    consider(h);
  }
  if (p.k > 1) {
    if (out_of_time()) return r;
    consider(schedule_lescea(p));
    if (out_of_time()) return r;
    consider(schedule_lpmf(p));
    if (out_of_time()) return r;
    consider(schedule_reversed(p, schedule_lescea));
    if (out_of_time()) return r;
    consider(schedule_reversed(p, schedule_lpmf));
  }
  if (out_of_time()) return r;
  const uint64_t floor = std::max(target, segment_lower_bound(p));
  if (r.peak <= floor) {
    r.exact_finished = true;
    return r;
  }
  if (settings.exact && p.k <= settings.exact_node_limit && p.k <= 256) {
    std::vector<int32_t> order;
    bool finished = false;
    if (p.k <= 64) {
      finished = run_exact<1>(p, settings, floor, r.peak, order, r.states, r.time_limit_hit);
    } else if (p.k <= 128) {
      finished = run_exact<2>(p, settings, floor, r.peak, order, r.states, r.time_limit_hit);
    } else {
      finished = run_exact<4>(p, settings, floor, r.peak, order, r.states, r.time_limit_hit);
    }
    if (finished) {
      if (!order.empty()) consider(std::move(order));
      r.exact_finished = true;
      return r;
    }
  }
  if (r.time_limit_hit || settings.local_search_swaps <= 0 || p.k < 2) return r;
  // Single-op slides, then (from the same start, with a budget of its own) single-op and block
  // slides; the second is kept only where it is strictly better, so adding the block moves never
  // costs a segment anything (on a 5,000-op random DAG they alone end 1.5% higher).
  const std::vector<int32_t> start = r.order;
  LocalSearch ls(p, start, settings, false);
  ls.run(r.swaps, r.time_limit_hit);
  consider(ls.order());
  if (r.peak <= floor || r.time_limit_hit) return r;
  int64_t block_swaps = 0;
  LocalSearch lb(p, start, settings, true);
  lb.run(block_swaps, r.time_limit_hit);
  r.swaps += block_swaps;
  consider(lb.order());
  return r;
}

}  // namespace roam::detail
