// Internal to src/order: the ready set of a memory-aware list scheduler and the two choice rules
// built on it, shared by the whole-graph schedulers (baseline_orders.cpp) and the segment
// schedulers (roam_segment.cpp):
//   LESCEA (the heuristic baseline of the ROAM paper, arXiv 2310.19295): among ready ops whose
//     step peak stays within the running peak, the one leaving the least live memory; otherwise
//     the one with the smallest step peak;
//   lpmf (PyTorch Inductor's least-peak-memory-first, torch/_inductor/memory.py): the smallest
//     (max(running peak, step peak), live bytes after the op).
// Ties go to the lowest op index (the program position) in both.
//
// Each ready op v carries grow(v), the bytes it adds to the live set while it runs (step peak =
// live + grow), and net(v) = live after - live before (signed). Both rules then depend on the
// ready set only through two queries, answered here in O(log n) expected time, so a schedule of
// n ops costs O((n + E) log n) where E counts the (op, storage) incidences, instead of the
// O(n * ready width) of scanning the ready list at every step.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace roam::order_internal {

/// The ready ops, as a treap keyed by (grow, op) whose nodes also hold the smallest (net, op) of
/// their subtree. Node priorities are a fixed hash of the op index: deterministic, and balanced in
/// expectation. Memory: O(n) for ops 0..n-1.
class ReadyQueue {
 public:
  explicit ReadyQueue(int32_t n)
      : grow_(n, 0), net_(n, 0), left_(n, -1), right_(n, -1), best_(n, -1), in_(n, 0) {}

  bool empty() const { return root_ < 0; }
  bool contains(int32_t v) const { return in_[v] != 0; }
  uint64_t grow(int32_t v) const { return grow_[v]; }

  /// Adds v (not in the queue) with its keys.
  void insert(int32_t v, uint64_t grow, int64_t net) {
    grow_[v] = grow;
    net_[v] = net;
    left_[v] = right_[v] = -1;
    best_[v] = v;
    in_[v] = 1;
    int32_t a, b;
    split(root_, grow, v, a, b);  // a: keys < (grow, v)
    root_ = merge(merge(a, v), b);
  }

  /// Removes v (in the queue).
  void erase(int32_t v) {
    int32_t a, b, m, c;
    split(root_, grow_[v], v, a, b);          // a < (grow, v) <= b
    split(b, grow_[v], v + 1, m, c);          // m = {v}
    in_[v] = 0;
    root_ = merge(a, c);
    (void)m;
  }

  /// New keys for v (in the queue).
  void update(int32_t v, uint64_t grow, int64_t net) {
    erase(v);
    insert(v, grow, net);
  }

  /// The op with the smallest (net, op) among those with grow <= limit; -1 when there is none.
  int32_t min_net_within(uint64_t limit) const {
    int32_t found = -1;
    for (int32_t t = root_; t >= 0;) {
      if (grow_[t] <= limit) {
        found = better(found, better(t, left_[t] >= 0 ? best_[left_[t]] : -1));
        t = right_[t];
      } else {
        t = left_[t];
      }
    }
    return found;
  }

  /// The op with the smallest (grow, op); -1 when empty.
  int32_t first() const {
    int32_t t = root_;
    if (t < 0) return -1;
    while (left_[t] >= 0) t = left_[t];
    return t;
  }

 private:
  static uint32_t priority(int32_t v) {
    uint64_t x = static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL;  // splitmix64
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<uint32_t>(x ^ (x >> 31));
  }
  // Smaller (net, op) of two ops; -1 is "none".
  int32_t better(int32_t a, int32_t b) const {
    if (a < 0) return b;
    if (b < 0) return a;
    if (net_[a] != net_[b]) return net_[a] < net_[b] ? a : b;
    return a < b ? a : b;
  }
  void pull(int32_t t) {
    int32_t b = t;
    if (left_[t] >= 0) b = better(b, best_[left_[t]]);
    if (right_[t] >= 0) b = better(b, best_[right_[t]]);
    best_[t] = b;
  }
  static bool less(uint64_t ga, int32_t va, uint64_t gb, int32_t vb) {
    return ga != gb ? ga < gb : va < vb;
  }
  // Splits t into keys < (grow, v) and keys >= (grow, v).
  void split(int32_t t, uint64_t grow, int32_t v, int32_t& lo, int32_t& hi) {
    if (t < 0) {
      lo = hi = -1;
      return;
    }
    if (less(grow_[t], t, grow, v)) {
      split(right_[t], grow, v, right_[t], hi);
      lo = t;
    } else {
      split(left_[t], grow, v, lo, left_[t]);
      hi = t;
    }
    pull(t);
  }
  // Every key of a is below every key of b.
  int32_t merge(int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    if (priority(a) > priority(b)) {
      right_[a] = merge(right_[a], b);
      pull(a);
      return a;
    }
    left_[b] = merge(a, left_[b]);
    pull(b);
    return b;
  }

  std::vector<uint64_t> grow_;
  std::vector<int64_t> net_;
  std::vector<int32_t> left_, right_, best_;
  std::vector<char> in_;
  int32_t root_ = -1;
};

/// LESCEA's next op, given the live bytes and the running peak; -1 when nothing is ready.
inline int32_t pick_lescea(const ReadyQueue& q, uint64_t live, uint64_t running_peak) {
  if (running_peak >= live) {
    const int32_t keep = q.min_net_within(running_peak - live);
    if (keep >= 0) return keep;
  }
  return q.first();
}

/// lpmf's next op, given the live bytes and the running peak; -1 when nothing is ready.
inline int32_t pick_lpmf(const ReadyQueue& q, uint64_t live, uint64_t running_peak) {
  if (running_peak >= live) {
    const int32_t keep = q.min_net_within(running_peak - live);
    if (keep >= 0) return keep;
  }
  const int32_t first = q.first();
  return first < 0 ? -1 : q.min_net_within(q.grow(first));
}

}  // namespace roam::order_internal
