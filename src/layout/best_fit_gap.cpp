// Best-fit gap placement shared by the llfb and greedy_by_size baselines (best_fit_gap.h).
#include "best_fit_gap.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "minimalloc_structures.h"

namespace roam::layout_internal {

void check_layout_inputs(const Graph& g, const Liveness& live, uint64_t alignment,
                         const char* method) {
  const std::string who = std::string("layout '") + method + "': ";
  if (alignment == 0) throw std::invalid_argument(who + "alignment must be at least 1");
  const size_t n = g.storages.size();
  if (live.first.size() != n || live.last.size() != n) {
    throw std::invalid_argument(who + "liveness has " + std::to_string(live.first.size()) + "/" +
                                std::to_string(live.last.size()) +
                                " intervals, graph has " + std::to_string(n) + " storages");
  }
  for (size_t s = 0; s < n; ++s) {
    if (live.first[s] < 0 || live.first[s] > live.last[s]) {
      throw std::invalid_argument(who + "storage " + std::to_string(s) + " has live interval [" +
                                  std::to_string(live.first[s]) + ", " +
                                  std::to_string(live.last[s]) + "]");
    }
  }
}

namespace {

// A placed storage: byte range [offset, end) and live interval [first, last].
struct Placed {
  uint64_t offset;
  uint64_t end;
  int32_t first;
  int32_t last;
};

// The placed storages in increasing offset, kept in chunks of at most 2 * kChunk so that an
// insertion moves O(kChunk) entries instead of O(n).
class OffsetList {
 public:
  static constexpr size_t kChunk = 512;
  void insert(const Placed& p) {
    if (chunks_.empty()) {
      chunks_.push_back({p});
      return;
    }
    auto it = std::upper_bound(chunks_.begin(), chunks_.end(), p.offset,
                               [](uint64_t o, const std::vector<Placed>& c) { return o < c.back().offset; });
    if (it == chunks_.end()) --it;
    std::vector<Placed>& c = *it;
    c.insert(std::upper_bound(c.begin(), c.end(), p.offset,
                              [](uint64_t o, const Placed& q) { return o < q.offset; }),
             p);
    if (c.size() > 2 * kChunk) {
      std::vector<Placed> upper(c.begin() + kChunk, c.end());
      c.resize(kChunk);
      chunks_.insert(it + 1, std::move(upper));
    }
  }
  /// Calls f(p) in increasing offset until it returns false.
  template <typename F>
  void scan(F f) const {
    for (const auto& c : chunks_) {
      for (const Placed& p : c) {
        if (!f(p)) return;
      }
    }
  }

 private:
  std::vector<std::vector<Placed>> chunks_;
};

// Finds the placed storages whose live interval meets [first, last] without looking at the
// others: every storage has a leaf (storages sorted by first step), a node holds the largest
// last step among the placed storages below it; the storages with first step <= `last` are a
// prefix of the leaves, and a subtree whose largest last step is below `first` holds none.
// O((k + 1) log n) for k results; counting them first is O(log T) (two Fenwick trees over
// steps), so that the caller can choose between collecting and scanning everything.
class IntervalIndex {
 public:
  IntervalIndex(const Liveness& live, size_t n) : first_(live.first), last_(live.last) {
    order_.resize(n);
    for (size_t s = 0; s < n; ++s) order_[s] = static_cast<StorageIdx>(s);
    std::sort(order_.begin(), order_.end(), [&](StorageIdx a, StorageIdx b) {
      return first_[a] != first_[b] ? first_[a] < first_[b] : a < b;
    });
    leaf_of_.resize(n);
    for (size_t i = 0; i < n; ++i) leaf_of_[order_[i]] = static_cast<int32_t>(i);
    while (size_ < n) size_ *= 2;
    max_last_.assign(2 * size_, -1);
    int32_t steps = 1;
    for (size_t s = 0; s < n; ++s) steps = std::max(steps, last_[s] + 1);
    by_last_.assign(steps + 1, 0);
    by_first_.assign(steps + 1, 0);
  }
  void add(StorageIdx s) {
    size_t i = size_ + leaf_of_[s];
    max_last_[i] = last_[s];
    for (i /= 2; i >= 1; i /= 2) max_last_[i] = std::max(max_last_[2 * i], max_last_[2 * i + 1]);
    fenwick_add(by_last_, last_[s]);
    fenwick_add(by_first_, first_[s]);
    ++count_;
  }
  size_t count() const { return count_; }
  /// How many placed storages are live at some step of [first, last].
  size_t count_meeting(int32_t first, int32_t last) const {
    return count_ - fenwick_prefix(by_last_, first - 1) -
           (count_ - fenwick_prefix(by_first_, last));
  }
  /// Appends the placed storages live at some step of [first, last] to `out`.
  void collect_meeting(int32_t first, int32_t last, std::vector<StorageIdx>& out) const {
    // Leaves [0, end) have first step <= last.
    const size_t end = static_cast<size_t>(
        std::upper_bound(order_.begin(), order_.end(), last,
                         [&](int32_t l, StorageIdx s) { return l < first_[s]; }) -
        order_.begin());
    collect(1, 0, size_, end, first, out);
  }

 private:
  void collect(size_t node, size_t lo, size_t hi, size_t end, int32_t first,
               std::vector<StorageIdx>& out) const {
    if (lo >= end || max_last_[node] < first) return;
    if (hi - lo == 1) {
      out.push_back(order_[lo]);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    collect(2 * node, lo, mid, end, first, out);
    collect(2 * node + 1, mid, hi, end, first, out);
  }
  // Fenwick trees over steps 0..T-1 (index step + 1).
  static void fenwick_add(std::vector<size_t>& f, int32_t step) {
    for (size_t i = static_cast<size_t>(step) + 1; i < f.size(); i += i & (~i + 1)) ++f[i];
  }
  static size_t fenwick_prefix(const std::vector<size_t>& f, int32_t step) {  // steps <= step
    size_t total = 0;
    if (step < 0) return 0;
    for (size_t i = std::min(static_cast<size_t>(step) + 1, f.size() - 1); i > 0; i -= i & (~i + 1)) {
      total += f[i];
    }
    return total;
  }

  const std::vector<int32_t>& first_;
  const std::vector<int32_t>& last_;
  std::vector<StorageIdx> order_;
  std::vector<int32_t> leaf_of_;
  size_t size_ = 1;
  std::vector<int32_t> max_last_;
  std::vector<size_t> by_last_, by_first_;
  size_t count_ = 0;
};

}  // namespace

Layout place_best_fit_gap(const Graph& g, const Liveness& live, uint64_t alignment,
                          const std::vector<StorageIdx>& sequence,
                          std::chrono::steady_clock::time_point deadline) {
  const size_t n = g.storages.size();
  if (sequence.size() != n) {
    throw std::invalid_argument("place_best_fit_gap: sequence has " +
                                std::to_string(sequence.size()) + " storages, graph has " +
                                std::to_string(n));
  }
  Layout out;
  out.offsets.assign(n, 0);
  std::vector<bool> seen(n, false);
  OffsetList placed;
  IntervalIndex index(live, n);
  std::vector<StorageIdx> meeting;
  std::vector<Placed> conflicts;
  // Collecting k conflicting storages and sorting them costs about k * 2 log2(n) steps; a scan
  // of every placed storage one step each.
  size_t log_n = 1;
  while ((size_t{1} << log_n) < n) ++log_n;
  uint64_t arena = 0;
  const bool timed = deadline != std::chrono::steady_clock::time_point::max();
  bool late = false;
  // Past the deadline: a skyline over steps (per step the highest end live there), from the
  // storages placed so far (sequence[0, placed)); a storage then goes at the highest end over
  // its live interval, above every storage live with it.
  minimalloc::MinTree skyline;
  auto start_skyline = [&](size_t placed) {
    int32_t steps = 1;
    for (const int32_t l : live.last) steps = std::max(steps, l + 1);
    skyline.init(steps);
    skyline.assign(0, steps, 0);
    std::vector<StorageIdx> by_end(sequence.begin(),
                                   sequence.begin() + static_cast<ptrdiff_t>(placed));
    auto end_of = [&](StorageIdx t) {
      return out.offsets[t] + align_up(g.storages[t].size, alignment);
    };
    std::sort(by_end.begin(), by_end.end(),
              [&](StorageIdx a, StorageIdx b) { return end_of(a) < end_of(b); });
    for (StorageIdx t : by_end) {  // ascending ends: a later assignment is the larger end
      skyline.assign(live.first[t], live.last[t] + 1, static_cast<int64_t>(end_of(t)));
    }
  };
  for (size_t i = 0; i < sequence.size(); ++i) {
    const StorageIdx s = sequence[i];
    if (s < 0 || static_cast<size_t>(s) >= n || seen[s]) {
      throw std::invalid_argument("place_best_fit_gap: sequence is not a permutation of the "
                                  "storages (entry " + std::to_string(s) + ")");
    }
    seen[s] = true;
    const uint64_t size = align_up(g.storages[s].size, alignment);
    const int32_t first = live.first[s];
    const int32_t last = live.last[s];
    if (timed && !late && (i + 1) % 256 == 0 && std::chrono::steady_clock::now() >= deadline) {
      late = true;
      start_skyline(i);
    }
    if (late) {  // sizes are aligned, so are the ends
      const int64_t at = std::max<int64_t>(0, skyline.max(first, last + 1));
      skyline.assign(first, last + 1, at + static_cast<int64_t>(size));
      out.offsets[s] = static_cast<uint64_t>(at);
      arena = std::max(arena, out.offsets[s] + size);
      continue;
    }

    // The conflicting storages in increasing offset; `cursor` is the largest end among those
    // seen so far, and one starting above it leaves the gap [cursor, its offset).
    uint64_t cursor = 0;
    uint64_t best_gap = std::numeric_limits<uint64_t>::max();
    uint64_t best_offset = 0;
    bool found = false;
    auto visit = [&](const Placed& p) {
      if (p.offset > cursor) {
        const uint64_t gap = p.offset - cursor;
        if (gap >= size && gap < best_gap) {  // strict: ties keep the lower offset
          best_gap = gap;
          best_offset = cursor;
          found = true;
          if (gap == size) return false;  // an exact fit cannot be beaten
        }
      }
      cursor = std::max(cursor, p.end);
      return true;
    };
    const size_t k = index.count_meeting(first, last);
    if (k * 2 * log_n < index.count()) {
      meeting.clear();
      index.collect_meeting(first, last, meeting);
      conflicts.clear();
      for (StorageIdx t : meeting) {
        const uint64_t t_size = align_up(g.storages[t].size, alignment);
        conflicts.push_back({out.offsets[t], out.offsets[t] + t_size, live.first[t], live.last[t]});
      }
      std::sort(conflicts.begin(), conflicts.end(),
                [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
      for (const Placed& p : conflicts) {
        if (!visit(p)) break;
      }
    } else if (k > 0) {
      placed.scan([&](const Placed& p) {
        if (p.last < first || p.first > last) return true;  // live intervals disjoint
        return visit(p);
      });
    }
    const uint64_t offset = found ? best_offset : cursor;
    out.offsets[s] = offset;
    arena = std::max(arena, offset + size);
    placed.insert({offset, offset + size, first, last});
    index.add(s);
  }
  out.reserved_bytes = arena;
  return out;
}

}  // namespace roam::layout_internal
