// One branch-and-bound search of the exact static-allocation solver over one instance: a
// skyline search over canonical placements with spatial inference, section lower bounds, a
// dominance rule, a failed-state memo and Luby restarts (include/roam/roam_layout.h).
#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <tuple>
#include <utility>

#include "minimalloc_internal.h"

namespace roam::minimalloc {

namespace {

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

}  // namespace

class Search::Impl {
 public:
  using State = Search::State;

  Impl(Instance inst, const SearchConfig& cfg)
      : in_(std::move(inst)), strong_(cfg.strong), memo_(cfg.memo), leftmost_(cfg.leftmost),
        contact_(cfg.contact),
        restart_base_(cfg.restart_base), seed_(cfg.seed), noise_(cfg.noise) {
    init();
  }

  // Runs until solved, proven infeasible, `nodes() >= node_cap`, *stop, or the deadline.
  State run(int64_t node_cap, const std::atomic<bool>* stop, Clock::time_point deadline,
            bool use_deadline) {
    int64_t tick = 0;
    while (state_ == State::kRunning) {
      if (nodes_ >= node_cap) break;
      if ((++tick & 255) == 0) {
        if (stop && stop->load(std::memory_order_relaxed)) break;
        if (use_deadline && Clock::now() >= deadline) break;
      }
      if (restart_base_ > 0 && nodes_ >= next_restart_) restart();
      if (failed_) {
        if (!backtrack()) {
          state_ = State::kInfeasible;
          break;
        }
        failed_ = false;
        continue;
      }
      step();
    }
    return state_;
  }

  State state() const { return state_; }
  int64_t nodes() const { return nodes_; }
  const std::vector<int64_t>& offsets() const { return off_; }

 private:
  // Restarts (Luby sequence times restart_base_ nodes): back to the root with the candidate
  // order perturbed by a deterministic pseudo-random noise; the failed-state memo is kept.
  static int64_t luby(int64_t i) {  // 1-based: 1 1 2 1 1 2 4 1 1 2 ...
    int64_t k = 1;
    while ((int64_t{1} << k) - 1 < i) ++k;
    while (true) {
      if (i == (int64_t{1} << k) - 1) return int64_t{1} << (k - 1);
      i -= (int64_t{1} << (k - 1)) - 1;
      k = 1;
      while ((int64_t{1} << k) - 1 < i) ++k;
    }
  }

  void restart() {
    undo_to(0);
    choices_.clear();
    cand_pool_.clear();
    pend_pool_.clear();
    pending_ = root_pending_;
    failed_ = false;
    clean();
    ++restart_index_;
    next_restart_ = nodes_ + restart_base_ * luby(restart_index_ + 1);
    uint64_t x = mix(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(restart_index_));
    std::vector<std::pair<double, int>> key(in_.n);
    for (int b = 0; b < in_.n; ++b) {
      x = mix(x);
      const double noise = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
      key[b] = {base_rank_[b] + noise_ * in_.n * noise, b};
    }
    std::sort(key.begin(), key.end());
    for (int r = 0; r < in_.n; ++r) in_.rank[key[r].second] = r;
    for (auto& list : in_.starts) {
      std::sort(list.begin(), list.end(), [&](int a, int b) { return in_.rank[a] < in_.rank[b]; });
    }
  }

  struct Region {
    int lo, hi;
    int64_t count;  // unplaced buffers inside
  };
  struct Choice {
    size_t mark;
    int lo, hi;     // focus region when made
    int sec;
    int64_t h;
    int cand_begin, cand_end, next;
    int pend_begin, pend_end;
    std::pair<uint64_t, uint64_t> key;  // the region's state when made (failed-state memo)
  };
  // Undo records: a placement (buffer, offset), a raise of the run [idx, idx2] from height
  // `old` (blocked), a block of section idx.
  enum Kind : uint8_t { kPlace, kRaise, kBlock };
  struct Entry {
    Kind kind;
    int idx;
    int idx2;
    int64_t old;
  };

  void init() {
    const int S = in_.num_sections;
    h_.assign(S, 0);
    blk_.assign(S, 0);
    rem_.assign(S, 0);
    cnt_.assign(S, 0);
    startcnt_.assign(S, 0);
    cross_.assign(S + 1, 0);
    placed_.assign(in_.n, 0);
    off_.assign(in_.n, 0);
    diff_.assign(S + 2, 0);
    acc_.assign(S, 0);
    for (int b = 0; b < in_.n; ++b) {
      for (int s = in_.sa[b]; s < in_.sb[b]; ++s) {
        rem_[s] += in_.size[b];
        ++cnt_[s];
      }
      ++startcnt_[in_.sa[b]];
      for (int i = in_.sa[b] + 1; i < in_.sb[b]; ++i) ++cross_[i];
    }
    tree_.init(S);
    for (int s = 0; s < S; ++s) tree_.set(s, value(s));
    // Root components: boundaries that no buffer crosses.
    int lo = 0;
    std::vector<Region> comps;
    for (int i = 1; i <= S; ++i) {
      if (i == S || cross_[i] == 0) {
        int64_t c = 0;
        for (int s = lo; s < i; ++s) c += startcnt_[s];
        if (c > 0) comps.push_back({lo, i, c});
        lo = i;
      }
    }
    for (auto it = comps.rbegin(); it != comps.rend(); ++it) pending_.push_back(*it);
    root_pending_ = pending_;
    if (strong_) {
      cover_.assign(S, {});
      for (int b = 0; b < in_.n; ++b) {
        for (int s = in_.sa[b]; s < in_.sb[b]; ++s) cover_[s].push_back(b);
      }
      if (!strong_ok(0, S)) failed_root_ = true;
    }
    base_rank_ = in_.rank;
    next_restart_ = restart_base_;
    for (int s = 0; s < S; ++s) {
      if (rem_[s] > in_.cap) failed_root_ = true;
    }
    for (int b = 0; b < in_.n; ++b) {
      if (in_.size[b] > in_.cap) failed_root_ = true;
    }
    if (failed_root_) state_ = State::kInfeasible;
  }

  int64_t value(int s) const { return cnt_[s] > 0 ? 2 * h_[s] + blk_[s] : kInf; }
  int64_t floor_of(int s) const { return h_[s] + blk_[s]; }

  void block(int s) {
    trail_.push_back({kBlock, s, s, 0});
    blk_[s] = 1;
    tree_.set(s, value(s));
  }

  void undo_to(size_t mark) {
    while (trail_.size() > mark) {
      const Entry e = trail_.back();
      trail_.pop_back();
      switch (e.kind) {
        case kPlace: {
          // Before the placement every section of the span was open, unblocked, at `old`.
          const int b = e.idx;
          placed_[b] = 0;
          for (int s = in_.sa[b]; s < in_.sb[b]; ++s) {
            h_[s] = e.old;
            rem_[s] += in_.size[b];
            ++cnt_[s];
          }
          ++startcnt_[in_.sa[b]];
          for (int i = in_.sa[b] + 1; i < in_.sb[b]; ++i) ++cross_[i];
          tree_.assign(in_.sa[b], in_.sb[b], 2 * e.old);
          break;
        }
        case kRaise:
          for (int s = e.idx; s <= e.idx2; ++s) {
            h_[s] = e.old;
            blk_[s] = 1;
          }
          tree_.assign(e.idx, e.idx2 + 1, 2 * e.old + 1);
          break;
        case kBlock:
          blk_[e.idx] = 0;
          tree_.set(e.idx, value(e.idx));
          break;
      }
    }
  }

  // Sections changed since the last unallocated-floor check: [dirty_lo_, dirty_hi_).
  void touch(int lo, int hi) {
    if (!strong_) return;
    dirty_lo_ = std::min(dirty_lo_, lo);
    dirty_hi_ = std::max(dirty_hi_, hi);
  }
  void clean() {
    dirty_lo_ = std::numeric_limits<int>::max();
    dirty_hi_ = std::numeric_limits<int>::min();
  }
  bool flush() {
    if (dirty_lo_ >= dirty_hi_) return true;
    const int lo = dirty_lo_, hi = dirty_hi_;
    clean();
    return strong_local(lo, hi);
  }

  void fail(int lo, int hi) {
    failed_ = true;
    fail_lo_ = lo;
    fail_hi_ = hi;
  }

  bool section_ok(int s) const { return floor_of(s) + rem_[s] <= in_.cap; }

  static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  // The state of a region: its open sections' heights and blocks, its unplaced buffers. The
  // search below a state depends on nothing else, so a state that failed once fails again.
  std::pair<uint64_t, uint64_t> region_key(const Region& f) const {
    uint64_t a = mix(static_cast<uint64_t>(f.lo) * 1000003u + static_cast<uint64_t>(f.hi));
    uint64_t b = mix(a ^ 0x5bd1e995u);
    for (int s = f.lo; s < f.hi; ++s) {
      if (cnt_[s] == 0) continue;
      const uint64_t v = static_cast<uint64_t>(2 * h_[s] + blk_[s]);
      a += mix(v * 0x100000001b3ULL + static_cast<uint64_t>(s));
      b ^= mix(v + mix(static_cast<uint64_t>(s) + 0x51ed27u));
      for (int x : in_.starts[s]) {
        if (placed_[x]) continue;
        a += mix(0xabcdefULL + static_cast<uint64_t>(x));
        b ^= mix(static_cast<uint64_t>(x) * 0x9e3779b1u + 7);
      }
    }
    return {a, b};
  }

  // The failed-state memo: an open-addressing set of 128-bit keys (linear probing, load <= 1/2,
  // at most kMemoCap entries; beyond that nothing more is remembered).
  class KeySet {
   public:
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
        if (size_ >= kMemoCap) return;
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
    size_t mask_ = 0, size_ = 0;
  };

  // Can buffer b start at height hh in a run of the lowest sections that ends at r1?
  bool eligible(int b, int r1, int64_t hh) const {
    if (placed_[b] || in_.sb[b] - 1 > r1) return false;
    if (hh % in_.align[b] != 0 || hh + in_.size[b] > in_.cap) return false;
    return in_.dup_prev[b] < 0 || placed_[in_.dup_prev[b]];
  }

  // The unallocated-floor bound over [lo, hi): every unplaced buffer sits at least at the
  // highest floor of its sections (aligned): its base. In each section, for every threshold t
  // among those bases, the buffers whose base is >= t lie above t: t + their sizes <= capacity
  // (t = the lowest base gives "lowest base + everything left <= capacity").
  bool strong_ok(int lo, int hi) {
    bases_.clear();
    for (int s0 = lo; s0 < hi; ++s0) {
      for (int b : in_.starts[s0]) {
        if (placed_[b]) continue;
        int64_t base = 0;
        for (int s = in_.sa[b]; s < in_.sb[b]; ++s) base = std::max(base, floor_of(s));
        base = align_up_i(base, in_.align[b]);
        if (base + in_.size[b] > in_.cap) return false;
        bases_.emplace_back(base, b);
      }
    }
    std::sort(bases_.begin(), bases_.end(), std::greater<>());
    for (int s = lo; s < hi; ++s) acc_[s] = 0;
    for (const auto& [base, b] : bases_) {
      for (int s = in_.sa[b]; s < in_.sb[b]; ++s) {
        acc_[s] += in_.size[b];
        if (base + acc_[s] > in_.cap) return false;
      }
    }
    return true;
  }

  // The same bound after a change of the sections [a, e): only the buffers meeting [a, e) can
  // have a new base, so only the sections they span are checked again (the others passed at
  // the parent node with the same data).
  bool strong_local(int a, int e) {
    int A = a, E = e;
    for (int b : cover_[a]) {
      if (!placed_[b]) A = std::min(A, in_.sa[b]);
    }
    for (int b : cover_[e - 1]) {
      if (!placed_[b]) E = std::max(E, in_.sb[b]);
    }
    // Floors of [A, E) in a sparse table: each base is then one range-max lookup.
    const int L = E - A;
    int levels = 1;
    while ((1 << levels) <= L) ++levels;
    if (sparse_.size() < static_cast<size_t>(levels)) sparse_.resize(levels);
    for (int j = 0; j < levels; ++j) {
      if (sparse_[j].size() < static_cast<size_t>(L)) sparse_[j].resize(L);
    }
    for (int i = 0; i < L; ++i) sparse_[0][i] = floor_of(A + i);
    for (int j = 1; j < levels; ++j) {
      const int w = 1 << (j - 1);
      for (int i = 0; i + (1 << j) <= L; ++i) {
        sparse_[j][i] = std::max(sparse_[j - 1][i], sparse_[j - 1][i + w]);
      }
    }
    keys_.clear();
    const bool packed = in_.cap < (int64_t{1} << 40) && in_.n < (1 << 23);
    bases_.clear();
    auto add = [&](int b) {
      int64_t base;
      const int lo = std::max(in_.sa[b], A), hi = std::min(in_.sb[b], E);
      const int j = 31 - __builtin_clz(static_cast<unsigned>(hi - lo));
      base = std::max(sparse_[j][lo - A], sparse_[j][hi - A - (1 << j)]);
      // A buffer reaching outside [A, E) spans sections the change did not touch.
      for (int s = in_.sa[b]; s < A; ++s) base = std::max(base, floor_of(s));
      for (int s = E; s < in_.sb[b]; ++s) base = std::max(base, floor_of(s));
      base = align_up_i(base, in_.align[b]);
      if (packed) {
        keys_.push_back((static_cast<uint64_t>(base) << 23) | static_cast<uint64_t>(b));
      } else {
        bases_.emplace_back(base, b);
      }
      return base + in_.size[b] <= in_.cap;
    };
    for (int b : cover_[A]) {
      if (!placed_[b] && !add(b)) return false;
    }
    for (int s0 = A + 1; s0 < E; ++s0) {
      for (int b : in_.starts[s0]) {
        if (!placed_[b] && !add(b)) return false;
      }
    }
    for (int s = A; s < E; ++s) acc_[s] = 0;
    auto accumulate = [&](int64_t base, int b) {
      const int from = std::max(in_.sa[b], A), to = std::min(in_.sb[b], E);
      const int64_t room = in_.cap - base;
      for (int s = from; s < to; ++s) {
        acc_[s] += in_.size[b];
        if (acc_[s] > room) return false;
      }
      return true;
    };
    if (packed) {
      std::sort(keys_.begin(), keys_.end(), std::greater<>());
      for (uint64_t k : keys_) {
        if (!accumulate(static_cast<int64_t>(k >> 23), static_cast<int>(k & ((1u << 23) - 1)))) {
          return false;
        }
      }
    } else {
      std::sort(bases_.begin(), bases_.end(), std::greater<>());
      for (const auto& [base, b] : bases_) {
        if (!accumulate(base, b)) return false;
      }
    }
    return true;
  }

  void place(int b, int64_t at) {
    trail_.push_back({kPlace, b, b, at});
    placed_[b] = 1;
    off_[b] = at;
    const int64_t top = at + in_.size[b];
    tree_.assign(in_.sa[b], in_.sb[b], 2 * top);
    for (int s = in_.sa[b]; s < in_.sb[b]; ++s) {
      h_[s] = top;
      rem_[s] -= in_.size[b];
      if (--cnt_[s] == 0) tree_.set(s, kInf);
    }
    --startcnt_[in_.sa[b]];
    cuts_.clear();
    for (int i = in_.sa[b] + 1; i < in_.sb[b]; ++i) {
      if (--cross_[i] == 0) cuts_.push_back(i);
    }
    Region f = pending_.back();
    if (cuts_.empty()) {
      --pending_.back().count;
      return;
    }
    pending_.pop_back();
    std::vector<Region> pieces;
    int lo = f.lo;
    cuts_.push_back(f.hi);
    for (int cut : cuts_) {
      int64_t c = 0;
      for (int s = lo; s < cut; ++s) c += startcnt_[s];
      if (c > 0) pieces.push_back({lo, cut, c});
      lo = cut;
    }
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) pending_.push_back(*it);
  }

  // A run [s, r1] of blocked sections at height hh is the lowest point: raise it (see header).
  bool raise(int s, int r1, int64_t hh, const Region& f) {
    int64_t nv = kInf;
    if (s - 1 >= f.lo) nv = std::min(nv, value(s - 1));
    if (r1 + 1 < f.hi) nv = std::min(nv, value(r1 + 1));
    within_.clear();
    for (int sec = s; sec <= r1; ++sec) {
      for (int b : in_.starts[sec]) {
        if (placed_[b] || in_.sb[b] - 1 > r1) continue;
        within_.push_back(b);
        if (hh % in_.align[b] != 0) nv = std::min(nv, 2 * align_up_i(hh, in_.align[b]));
      }
    }
    if (nv >= kInf) return false;
    const int64_t H = nv >> 1;
    for (int b : within_) {
      if (align_up_i(hh, in_.align[b]) + in_.size[b] <= H) return false;  // dominance
    }
    trail_.push_back({kRaise, s, r1, hh});
    for (int sec = s; sec <= r1; ++sec) {
      h_[sec] = H;
      blk_[sec] = static_cast<uint8_t>(nv & 1);
    }
    tree_.assign(s, r1 + 1, nv);
    for (int sec = s; sec <= r1; ++sec) {
      if (!section_ok(sec)) return false;
    }
    touch(s, r1 + 1);
    return true;
  }

  void step() {
    ++nodes_;
    while (!pending_.empty() && pending_.back().count == 0) pending_.pop_back();
    if (pending_.empty()) {
      state_ = State::kSolved;
      return;
    }
    const Region f = pending_.back();
    const auto [vmin, s] = tree_.query(f.lo, f.hi);
    if (s < 0) {  // cannot happen: a region with unplaced buffers has an open section
      fail(f.lo, f.hi);
      return;
    }
    const int r1 = tree_.first_above(s, f.hi, vmin) - 1;  // the run at the lowest value
    const int64_t hh = vmin >> 1;
    if (vmin & 1) {
      if (!raise(s, r1, hh, f)) fail(f.lo, f.hi);
      return;
    }
    // The cell to branch on: among the sections at the lowest height (the runs at that height,
    // up to kMaxRuns of them), the one with the fewest alternatives (candidates, plus the waste
    // when its section can afford it). Ties: the leftmost.
    int best_sec = -1, best_alt = std::numeric_limits<int>::max(), best_r0 = s, best_r1 = r1;
    int run_lo = s, run_hi = r1;
    if (leftmost_) {  // the leftmost cell: no scan of the run (it can be long)
      best_sec = s;
      best_alt = (hh + 1 + rem_[s] <= in_.cap ? 1 : 0);
      for (int b : in_.starts[s]) best_alt += eligible(b, r1, hh) ? 1 : 0;
    }
    for (int runs = 0; !leftmost_; ++runs) {
      for (int sec = run_lo; sec <= run_hi + 1; ++sec) diff_[sec] = 0;
      for (int sec = run_lo; sec <= run_hi; ++sec) {
        for (int b : in_.starts[sec]) {
          if (!eligible(b, run_hi, hh)) continue;
          ++diff_[in_.sa[b]];
          --diff_[in_.sb[b]];
        }
      }
      int acc = 0;
      for (int sec = run_lo; sec <= run_hi; ++sec) {
        acc += diff_[sec];
        const int alt = acc + (hh + 1 + rem_[sec] <= in_.cap ? 1 : 0);
        if (alt < best_alt) {
          best_alt = alt;
          best_sec = sec;
          best_r0 = run_lo;
          best_r1 = run_hi;
        }
      }
      if (best_alt == 0 || runs + 1 >= kMaxRuns || run_hi + 1 >= f.hi) break;
      const auto [v2, s2] = tree_.query(run_hi + 1, f.hi);
      if (v2 != vmin) break;
      run_lo = s2;
      run_hi = tree_.first_above(s2, f.hi, vmin) - 1;
    }
    if (best_alt == 0) {
      fail(f.lo, f.hi);
      return;
    }
    const int cb = static_cast<int>(cand_pool_.size());
    for (int sec = best_r0; sec <= best_sec; ++sec) {
      for (int b : in_.starts[sec]) {
        if (in_.sb[b] > best_sec && eligible(b, best_r1, hh)) cand_pool_.push_back(b);
      }
    }
    const int ce = static_cast<int>(cand_pool_.size());
    if (contact_ && ce - cb > 1) {
      // Contact first: a candidate whose top would meet the height of the section just before
      // or just after its span levels the skyline there (a tight packing is a stack of such
      // contacts); 2 contacts before 1 before none, then the heuristic's order. Only the order
      // of the alternatives changes, never the set: the search stays complete.
      auto contacts = [&](int b) {
        const int64_t top = hh + in_.size[b];
        return (in_.sa[b] > 0 && h_[in_.sa[b] - 1] == top ? 1 : 0) +
               (in_.sb[b] < in_.num_sections && h_[in_.sb[b]] == top ? 1 : 0);
      };
      std::stable_sort(cand_pool_.begin() + cb, cand_pool_.end(), [&](int a, int b) {
        const int x = contacts(a), y = contacts(b);
        if (x != y) return x > y;
        return in_.rank[a] < in_.rank[b];
      });
    } else if (best_sec > best_r0) {
      std::sort(cand_pool_.begin() + cb, cand_pool_.end(),
                [&](int a, int b) { return in_.rank[a] < in_.rank[b]; });
    }
    if (ce == cb) {  // nothing can start here: the cell is wasted (forced)
      block(best_sec);
      if (!section_ok(best_sec)) fail(f.lo, f.hi);
      touch(best_sec, best_sec + 1);
      return;
    }
    if (ce - cb == 1 && best_alt == 1) {  // one buffer must start here (forced)
      const int b = cand_pool_[cb];
      cand_pool_.pop_back();
      place(b, hh);
      touch(in_.sa[b], in_.sb[b]);
      return;
    }
    // A branching point: first the unallocated-floor bound over everything changed since the
    // last check (floors only rise along a branch, so one check over the union of the changed
    // ranges prunes whatever the checks after each forced step would have; they were most of
    // the time on large instances).
    if (!flush()) {
      cand_pool_.resize(cb);
      fail(f.lo, f.hi);
      return;
    }
    // A branching point: a state of this region that failed before fails again.
    std::pair<uint64_t, uint64_t> key{0, 0};
    if (memo_) {
      key = region_key(f);
      if (failed_states_.contains(key)) {
        cand_pool_.resize(cb);
        fail(f.lo, f.hi);
        return;
      }
    }
    const int sec_choice = best_sec;
    Choice c{trail_.size(), f.lo, f.hi, sec_choice, hh, cb, ce, 0,
             static_cast<int>(pend_pool_.size()), 0, {0, 0}};
    pend_pool_.insert(pend_pool_.end(), pending_.begin(), pending_.end());
    c.pend_end = static_cast<int>(pend_pool_.size());
    c.key = key;
    choices_.push_back(c);
    if (!apply(choices_.back())) {
      const Choice& d = choices_.back();
      const int lo = d.lo, hi = d.hi;
      undo_to(d.mark);
      pop_choice();
      fail(lo, hi);
    }
  }

  void restore_pending(const Choice& c) {
    pending_.assign(pend_pool_.begin() + c.pend_begin, pend_pool_.begin() + c.pend_end);
  }

  void pop_choice() {
    const Choice& c = choices_.back();
    cand_pool_.resize(c.cand_begin);
    pend_pool_.resize(c.pend_begin);
    choices_.pop_back();
  }

  // Applies the next alternative of `c` that passes the immediate checks; false when none is left.
  bool apply(Choice& c) {
    const int ncand = c.cand_end - c.cand_begin;
    while (true) {
      if (c.next < ncand) {
        const int b = cand_pool_[c.cand_begin + c.next++];
        place(b, c.h);
        if (!strong_ || strong_local(in_.sa[b], in_.sb[b])) return true;
        undo_to(c.mark);
        restore_pending(c);
        ++nodes_;
        continue;
      }
      if (c.next == ncand) {
        ++c.next;
        block(c.sec);
        if (section_ok(c.sec) && (!strong_ || strong_local(c.sec, c.sec + 1))) return true;
        undo_to(c.mark);
        restore_pending(c);
        return false;
      }
      return false;
    }
  }

  bool backtrack() {
    int xlo = fail_lo_, xhi = fail_hi_;
    while (!choices_.empty()) {
      Choice& c = choices_.back();
      if (c.hi <= xlo || c.lo >= xhi) {  // independent of the failure: skip its alternatives
        pop_choice();
        continue;
      }
      undo_to(c.mark);
      restore_pending(c);
      clean();
      ++nodes_;
      if (apply(c)) return true;
      xlo = c.lo;
      xhi = c.hi;
      if (memo_) failed_states_.insert(c.key);
      undo_to(c.mark);
      pop_choice();
    }
    return false;
  }

  Instance in_;
  bool strong_;
  bool memo_;
  State state_ = State::kRunning;
  bool failed_ = false;
  bool failed_root_ = false;
  int fail_lo_ = 0, fail_hi_ = 0;
  int dirty_lo_ = std::numeric_limits<int>::max(), dirty_hi_ = std::numeric_limits<int>::min();
  int64_t nodes_ = 0;
  std::vector<int64_t> h_, rem_;
  std::vector<uint8_t> blk_, placed_;
  std::vector<int> cnt_, startcnt_, cross_;
  std::vector<int64_t> off_;
  MinTree tree_;
  std::vector<Entry> trail_;
  std::vector<Choice> choices_;
  std::vector<int> cand_pool_;
  std::vector<Region> pend_pool_;
  std::vector<Region> pending_;
  std::vector<int> cuts_, within_, diff_;
  std::vector<Region> root_pending_;
  std::vector<std::vector<int>> cover_;  // per section: the buffers spanning it
  std::vector<std::vector<int64_t>> sparse_;
  std::vector<uint64_t> keys_;
  std::vector<int> base_rank_;
  bool leftmost_ = false;
  bool contact_ = false;
  int64_t restart_base_ = 1000, next_restart_ = 0, restart_index_ = 0;
  uint64_t seed_ = 1;
  double noise_ = 1.0;
  std::vector<std::pair<int64_t, int>> bases_;
  std::vector<int64_t> acc_;
  static constexpr size_t kMemoCap = 1 << 19;
  KeySet failed_states_;
  static constexpr int kMaxRuns = 64;
};

Search::Search(Instance inst, const SearchConfig& cfg)
    : impl_(std::make_unique<Impl>(std::move(inst), cfg)) {}
Search::~Search() = default;
Search::State Search::run(int64_t node_cap, const std::atomic<bool>* stop,
                          Clock::time_point deadline, bool use_deadline) {
  return impl_->run(node_cap, stop, deadline, use_deadline);
}
Search::State Search::state() const { return impl_->state(); }
int64_t Search::nodes() const { return impl_->nodes(); }
const std::vector<int64_t>& Search::offsets() const { return impl_->offsets(); }

}  // namespace roam::minimalloc
