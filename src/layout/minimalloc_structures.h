// Data structures of one exact static-allocation search (minimalloc_search.cpp): the section
// tree the skyline is read from, the failed-state memo, section sets and the local nogoods of
// the conflict-directed backjumping. Not a public header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "minimalloc_internal.h"

namespace roam::minimalloc {

// Leftmost minimum and range maximum, with range assignment and point updates (lazy).
class MinTree {
 public:
  void init(int n) {
    n_ = std::max(n, 1);
    mn_.assign(4 * static_cast<size_t>(n_), kInf);
    mx_.assign(4 * static_cast<size_t>(n_), kInf);
    lz_.assign(4 * static_cast<size_t>(n_), -1);
  }
  int64_t max(int lo, int hi) { return max(1, 0, n_, lo, hi); }
  // The first index in [lo, hi) whose value is above v, or hi.
  int first_above(int lo, int hi, int64_t v) { return first_above(1, 0, n_, lo, hi, v); }
  void assign(int lo, int hi, int64_t v) {
    if (lo < hi) assign(1, 0, n_, lo, hi, v);
  }
  void set(int i, int64_t v) { assign(1, 0, n_, i, i + 1, v); }
  // (min value, leftmost index) over [lo, hi); (kInf, -1) when all are kInf.
  std::pair<int64_t, int> query(int lo, int hi) { return query(1, 0, n_, lo, hi); }

 private:
  void push(size_t node) {
    if (lz_[node] >= 0) {
      for (size_t c : {2 * node, 2 * node + 1}) {
        mn_[c] = lz_[node];
        mx_[c] = lz_[node];
        lz_[c] = lz_[node];
      }
      lz_[node] = -1;
    }
  }
  void assign(size_t node, int nl, int nr, int lo, int hi, int64_t v) {
    if (hi <= nl || nr <= lo) return;
    if (lo <= nl && nr <= hi) {
      mn_[node] = v;
      mx_[node] = v;
      lz_[node] = v;
      return;
    }
    push(node);
    const int mid = (nl + nr) / 2;
    assign(2 * node, nl, mid, lo, hi, v);
    assign(2 * node + 1, mid, nr, lo, hi, v);
    mn_[node] = std::min(mn_[2 * node], mn_[2 * node + 1]);
    mx_[node] = std::max(mx_[2 * node], mx_[2 * node + 1]);
  }
  int64_t max(size_t node, int nl, int nr, int lo, int hi) {
    if (hi <= nl || nr <= lo) return std::numeric_limits<int64_t>::min();
    if (lo <= nl && nr <= hi) return mx_[node];
    push(node);
    const int mid = (nl + nr) / 2;
    return std::max(max(2 * node, nl, mid, lo, hi), max(2 * node + 1, mid, nr, lo, hi));
  }
  int first_above(size_t node, int nl, int nr, int lo, int hi, int64_t v) {
    if (hi <= nl || nr <= lo || mx_[node] <= v) return hi;
    if (nr - nl == 1) return nl;
    push(node);
    const int mid = (nl + nr) / 2;
    const int a = first_above(2 * node, nl, mid, lo, hi, v);
    if (a < hi) return a;
    return first_above(2 * node + 1, mid, nr, lo, hi, v);
  }
  std::pair<int64_t, int> query(size_t node, int nl, int nr, int lo, int hi) {
    if (hi <= nl || nr <= lo || mn_[node] >= kInf) return {kInf, -1};
    if (nr - nl == 1) return {mn_[node], nl};
    if (lo <= nl && nr <= hi) {
      // Descend to the leftmost leaf holding the minimum.
      const int64_t m = mn_[node];
      while (nr - nl > 1) {
        push(node);
        const int mid = (nl + nr) / 2;
        if (mn_[2 * node] == m) {
          node = 2 * node;
          nr = mid;
        } else {
          node = 2 * node + 1;
          nl = mid;
        }
      }
      return {m, nl};
    }
    push(node);
    const int mid = (nl + nr) / 2;
    auto a = query(2 * node, nl, mid, lo, hi);
    if (a.first < kInf && a.first <= mn_[2 * node + 1]) return a;
    auto b = query(2 * node + 1, mid, nr, lo, hi);
    return b.first < a.first ? b : a;
  }
  int n_ = 1;
  std::vector<int64_t> mn_, mx_, lz_;
};

// The failed-state memo: an open-addressing set of 128-bit keys (linear probing, load <= 1/2,
// at most `cap` entries; beyond that nothing more is remembered).
class KeySet {
 public:
  explicit KeySet(size_t cap) : cap_(cap) {}
  bool contains(std::pair<uint64_t, uint64_t> k) const {
    if (slots_.empty()) return false;
    if (k.first == 0 && k.second == 0) k.second = 1;  // as in insert
    for (size_t i = k.first & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == k) return true;
      if (slots_[i].first == 0 && slots_[i].second == 0) return false;
    }
  }
  void insert(std::pair<uint64_t, uint64_t> k) {
    if (k.first == 0 && k.second == 0) k.second = 1;  // (0, 0) marks an empty slot
    if (2 * (size_ + 1) > slots_.size()) {
      if (size_ >= cap_) return;
      grow();
    }
    for (size_t i = k.first & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == k) return;
      if (slots_[i].first == 0 && slots_[i].second == 0) {
        slots_[i] = k;
        ++size_;
        return;
      }
    }
  }

 private:
  void grow() {
    std::vector<std::pair<uint64_t, uint64_t>> old = std::move(slots_);
    slots_.assign(old.empty() ? 4096 : 2 * old.size(), {0, 0});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const auto& k : old) {
      if (k.first != 0 || k.second != 0) insert(k);
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> slots_;
  size_t cap_;
  size_t mask_ = 0, size_ = 0;
};

// Sets of sections as 64-bit words (the backjumping's conflicts): add [lo, hi); any of [lo, hi)?
inline void bits_add_range(uint64_t* x, int lo, int hi) {
  for (int i = lo; i < hi;) {
    const int w = i >> 6, o = i & 63, n = std::min(64 - o, hi - i);
    x[w] |= (n == 64 ? ~uint64_t{0} : ((uint64_t{1} << n) - 1)) << o;
    i += n;
  }
}
inline bool bits_meets(const uint64_t* x, int lo, int hi) {
  for (int i = lo; i < hi;) {
    const int w = i >> 6, o = i & 63, n = std::min(64 - o, hi - i);
    if (x[w] & ((n == 64 ? ~uint64_t{0} : ((uint64_t{1} << n) - 1)) << o)) return true;
    i += n;
  }
  return false;
}

// Is every section of x (words 64-bit words) in [lo, hi)?
inline bool bits_within(const uint64_t* x, int words, int lo, int hi) {
  for (int w = 0; w < words; ++w) {
    uint64_t m = x[w];
    for (; m; m &= m - 1) {
      const int s = w * 64 + __builtin_ctzll(m);
      if (s < lo || s >= hi) return false;
    }
  }
  return true;
}

// Local nogoods: per anchor section (the cell of the choice that learnt them, always one of their
// sections), up to kPerAnchor of them, the oldest replaced first; sets of more than kMaxSections
// sections are not kept, nor any once kMaxTotal sections are kept in all. A nogood's key is the sum of part(s) over its sections, part(s) hashing
// the current state of section s; the anchor's part, kept apart, rejects most at one lookup.
class NogoodStore {
 public:
  static constexpr size_t kPerAnchor = 16, kMaxSections = 64, kMaxTotal = size_t{1} << 22;
  void init(int sections) {
    lists_.assign(sections, {});
    next_.assign(sections, 0);
  }
  // Keeps the sections of `set` (words 64-bit words) at `anchor`; false when too many or none.
  template <class Part>
  bool learn(int anchor, const uint64_t* set, int words, Part part) {
    secs_.clear();
    for (int w = 0; w < words; ++w) {
      for (uint64_t m = set[w]; m; m &= m - 1) secs_.push_back(w * 64 + __builtin_ctzll(m));
      if (secs_.size() > kMaxSections) return false;
    }
    if (secs_.empty()) return false;
    auto& list = lists_[anchor];
    Nogood* g;
    if (list.size() < kPerAnchor) {
      if (total_ + secs_.size() > kMaxTotal) return false;
      g = &list.emplace_back();
    } else {
      g = &list[next_[anchor]];
      next_[anchor] = static_cast<uint8_t>((next_[anchor] + 1) % kPerAnchor);
      if (total_ - g->secs.size() + secs_.size() > kMaxTotal) return false;
      total_ -= g->secs.size();
    }
    total_ += secs_.size();
    g->secs.assign(secs_.begin(), secs_.end());
    g->key = 0;
    for (int s : secs_) g->key += part(s);
    g->anchor_part = part(anchor);
    return true;
  }
  // The sections of a nogood at `anchor` that holds in the current state, or nullptr.
  template <class Part>
  const std::vector<int>* find(int anchor, Part part) const {
    const auto& list = lists_[anchor];
    if (list.empty()) return nullptr;
    const uint64_t a = part(anchor);
    for (const Nogood& g : list) {
      if (g.anchor_part != a) continue;
      uint64_t key = 0;
      for (int s : g.secs) key += part(s);
      if (key == g.key) return &g.secs;
    }
    return nullptr;
  }

 private:
  struct Nogood {
    uint64_t key = 0, anchor_part = 0;
    std::vector<int> secs;
  };
  std::vector<std::vector<Nogood>> lists_;
  std::vector<uint8_t> next_;  // per anchor: the slot replaced next
  std::vector<int> secs_;
  size_t total_ = 0;  // sections kept in all
};

}  // namespace roam::minimalloc
