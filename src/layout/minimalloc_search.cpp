// One branch-and-bound search of the exact static-allocation solver over one instance: a
// skyline search over canonical placements with spatial inference, section lower bounds, a
// dominance rule, conflict-directed backjumping with local nogoods, a failed-state memo and Luby
// restarts (include/roam/roam_layout.h).
#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <tuple>
#include <utility>

#include "minimalloc_internal.h"
#include "minimalloc_structures.h"

namespace roam::minimalloc {

class Search::Impl {
 public:
  using State = Search::State;

  Impl(Instance inst, const SearchConfig& cfg)
      : in_(std::move(inst)), strong_(cfg.strong), lift_(cfg.strong ? cfg.lift : 0),
        memo_(cfg.memo), backjump_(cfg.backjump), learn_(cfg.learn),
        leftmost_(cfg.leftmost),
        contact_(cfg.contact),
        restart_base_(cfg.restart_base), seed_(cfg.seed), noise_(cfg.noise),
        weights_(cfg.weights), weight_growth_(cfg.weight_growth) {
    precedence_ = lift_ > 0 && cfg.precedence;
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
  Stats stats() const { return stats_; }
  int64_t nodes() const { return nodes_; }
  const std::vector<int64_t>& offsets() const { return off_; }

 private:
  // Restarts (Luby sequence times restart_base_ nodes): back to the root with the candidate
  // order perturbed by a deterministic pseudo-random noise; the failed-state memo is kept. With
  // failure weights the order perturbed is the one by weight (the sum over the buffer's sections,
  // heaviest first; ties in the heuristic's order), not the heuristic's.
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
    const std::vector<int>* order = &base_rank_;
    if (weights_) {
      std::vector<std::pair<double, int>> by_weight(in_.n);
      for (int b = 0; b < in_.n; ++b) {
        double sum = 0;
        for (int sec = in_.sa[b]; sec < in_.sb[b]; ++sec) sum += weight_[sec];
        by_weight[b] = {-sum, base_rank_[b]};
      }
      std::vector<int> ord(in_.n);
      std::iota(ord.begin(), ord.end(), 0);
      std::sort(ord.begin(), ord.end(), [&](int a, int b) { return by_weight[a] < by_weight[b]; });
      for (int r = 0; r < in_.n; ++r) weight_rank_[ord[r]] = r;
      order = &weight_rank_;
    }
    for (int b = 0; b < in_.n; ++b) {
      x = mix(x);
      const double noise = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
      key[b] = {(*order)[b] + noise_ * in_.n * noise, b};
    }
    std::sort(key.begin(), key.end());
    for (int r = 0; r < in_.n; ++r) in_.rank[key[r].second] = r;
    for (auto& list : in_.starts) {
      std::sort(list.begin(), list.end(), [&](int a, int b) { return in_.rank[a] < in_.rank[b]; });
    }
  }

  // Sections a deduction depends on: the range [lo, hi) and up to two more (-1: none). A forced
  // step at the cell (sec, h) of a run [r0, r1] depends on sec and on the run's two neighbours
  // (their height keeps every other buffer over sec out of the run); a raise, a section bound or
  // the unallocated-floor bound on a range.
  struct Why {
    int lo = 0, hi = 0, x1 = -1, x2 = -1;
  };
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
    Why why;        // the sections whose state makes the alternatives exhaustive
  };
  // Undo records: a placement (buffer, offset), a raise of the run [idx, idx2] from height
  // `old` (blocked), a block of section idx.
  enum Kind : uint8_t { kPlace, kRaise, kBlock };
  struct Entry {
    Kind kind;
    int idx;
    int idx2;
    int64_t old;
    Why why;        // a forced record: the sections whose state implies it
  };

  void init() {
    const int S = in_.num_sections;
    words_ = (S + 63) / 64 + 1;
    // Conflict sets cost a set of sections per choice on the stack: past kMaxConflictWords words
    // (huge instances) the search falls back to skipping the choices of independent regions.
    if (static_cast<int64_t>(in_.n) * words_ > kMaxConflictWords) backjump_ = false;
    if (!backjump_) {
      learn_ = false;
      words_ = 1;
    }
    stats_.backjump = backjump_;
    conflict_.assign(words_, 0);
    strong_set_.assign(words_, 0);
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
    lift_now_ = lift_ > 1;
    if (lift_) {
      low1_.assign(S, 0);
      low2_.assign(S, 0);
      low1_of_.assign(S, -1);
      top_base_.assign(S, 0);
      min_base_.assign(S, 0);
      hot_.assign(S, 0);
      sec_mark_.assign(S, 0);
      buf_mark_.assign(in_.n, 0);
      base_of_.assign(in_.n, 0);
      floor_base_.assign(in_.n, 0);
      last_lift_.assign(in_.n, -1);
      ceil_.assign(in_.n, 0);
      ceil_mark_.assign(in_.n, 0);
      prec_base_.assign(in_.n, 0);
      prec_mark_.assign(in_.n, 0);
      ceil_sec_.assign(in_.n, -1);
      prec_j_.assign(in_.n, -1);
      prec_sec_.assign(in_.n, -1);
    }
    uhash_.assign(S, 0);
    bhash_.resize(in_.n);
    nogoods_.init(S);
    // Per section: the unplaced bytes, buffers and hash, and per boundary the buffers crossing
    // it, from differences at the ends of each span (a loop over every span is quadratic when
    // lifetimes are long).
    for (int b = 0; b < in_.n; ++b) {
      bhash_[b] = mix(static_cast<uint64_t>(b) * 0x2545f4914f6cdd1dULL + 0x1234567ULL);
      const int a = in_.sa[b], e = in_.sb[b];
      rem_[a] += in_.size[b];
      ++cnt_[a];
      uhash_[a] ^= bhash_[b];
      if (e < S) {
        rem_[e] -= in_.size[b];
        --cnt_[e];
        uhash_[e] ^= bhash_[b];
      }
      ++startcnt_[a];
      ++cross_[a + 1];
      --cross_[e];  // crossing boundaries a + 1 .. e - 1 (none when e = a + 1)
    }
    for (int s = 1; s < S; ++s) {
      rem_[s] += rem_[s - 1];
      cnt_[s] += cnt_[s - 1];
      uhash_[s] ^= uhash_[s - 1];
    }
    for (int i = 1; i <= S; ++i) cross_[i] += cross_[i - 1];
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
    if (weights_) {
      weight_.assign(S, 0.0);
      weight_rank_ = in_.rank;
    }
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
    trail_.push_back({kBlock, s, s, 0, why_});
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
            uhash_[s] ^= bhash_[b];
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
    // The lowest-buffer rule runs here, at branching points only (lift = 1). After every
    // candidate's placement too (lift = 2), with one round, single searches on the hardest
    // generated instances solved 11 of 114 runs instead of 10 in the same nodes, in 1.7x the time.
    lift_now_ = lift_ > 0;
    const bool ok = strong_local(lo, hi);
    lift_now_ = lift_ > 1;
    return ok;
  }

  // Failure weights (SearchConfig::weights): every failure adds bump_ to each section of its
  // reason (a failed bound's or cell's, not the conflicts backjumping accumulates); bump_ grows
  // by weight_growth_ per failure, so recent failures count more (as VSIDS in SAT solvers).
  void weigh(const Why& w) {
    if (!weights_) return;
    for (int s = w.lo; s < w.hi; ++s) weight_[s] += bump_;
    if (w.x1 >= 0) weight_[w.x1] += bump_;
    if (w.x2 >= 0) weight_[w.x2] += bump_;
    grow_bump();
  }
  void weigh(const uint64_t* set) {
    if (!weights_ || !backjump_) return;  // without backjumping the sets are not kept
    for (int w = 0; w < words_; ++w) {
      for (uint64_t m = set[w]; m; m &= m - 1) {
        const int sec = w * 64 + __builtin_ctzll(m);
        if (sec < in_.num_sections) weight_[sec] += bump_;
      }
    }
    grow_bump();
  }
  void grow_bump() {
    bump_ *= weight_growth_;
    if (bump_ > 1e100) {  // rescale: only the ratios matter
      for (double& x : weight_) x *= 1e-100;
      bump_ *= 1e-100;
    }
  }

  // A failure: its sections become the conflict that backtrack() walks back (with backjumping).
  void fail(const Why& w) {
    weigh(w);
    failed_ = true;
    if (!backjump_) return;
    clear_set(conflict_.data());
    add_why(conflict_.data(), w);
  }
  void fail(int lo, int hi) { fail(Why{lo, hi, -1, -1}); }
  void fail_set(const uint64_t* set) {
    failed_ = true;
    if (backjump_) std::copy(set, set + words_, conflict_.begin());
  }
  // The cell (sec, h) of the run [r0, r1] of region f: sec and the run's neighbours in f.
  static Why cell_why(int sec, int r0, int r1, const Region& f) {
    return {sec, sec + 1, r0 - 1 >= f.lo ? r0 - 1 : -1, r1 + 1 < f.hi ? r1 + 1 : -1};
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

  // Can buffer b start at height hh in a run of the lowest sections that ends at r1?
  bool eligible(int b, int r1, int64_t hh) const {
    if (placed_[b] || in_.sb[b] - 1 > r1) return false;
    if (hh % in_.align[b] != 0 || hh + in_.size[b] > in_.cap) return false;
    return in_.dup_prev[b] < 0 || placed_[in_.dup_prev[b]];
  }

  // A section of b's span whose floor alone puts b's base at t or above: `near` when it does,
  // else the nearest one to it.
  int floor_witness(int b, int64_t t, int near) const {
    auto ok = [&](int s) { return align_up_i(floor_of(s), in_.align[b]) >= t; };
    if (near >= in_.sa[b] && near < in_.sb[b] && ok(near)) return near;
    int best = -1, dist = std::numeric_limits<int>::max();
    for (int s = in_.sa[b]; s < in_.sb[b]; ++s) {
      if (ok(s) && std::abs(s - near) < dist) {
        dist = std::abs(s - near);
        best = s;
      }
    }
    return best;
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
    for (int b : lifted_) last_lift_[b] = -1;
    lifted_.clear();
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
    cur_.clear();
    const bool packed = in_.cap < (int64_t{1} << 40) && in_.n < (1 << 23);
    bases_.clear();
    auto push_base = [&](int64_t base, int b) {  // the threshold check's (base, buffer) pairs
      if (packed) {
        keys_.push_back((static_cast<uint64_t>(base) << 23) | static_cast<uint64_t>(b));
      } else {
        bases_.emplace_back(base, b);
      }
    };
    auto add = [&](int b) {
      int64_t base;
      const int lo = std::max(in_.sa[b], A), hi = std::min(in_.sb[b], E);
      const int j = 31 - __builtin_clz(static_cast<unsigned>(hi - lo));
      base = std::max(sparse_[j][lo - A], sparse_[j][hi - A - (1 << j)]);
      // A buffer reaching outside [A, E) spans sections the change did not touch.
      for (int s = in_.sa[b]; s < A; ++s) base = std::max(base, floor_of(s));
      for (int s = E; s < in_.sb[b]; ++s) base = std::max(base, floor_of(s));
      base = align_up_i(base, in_.align[b]);
      if (lift_) {
        base_of_[b] = floor_base_[b] = base;
        cur_.push_back(b);
      }
      push_base(base, b);
      if (base + in_.size[b] <= in_.cap) return true;
      if (backjump_) {  // the conflict: one section whose floor alone lifts b that high
        const int sec = floor_witness(b, base, in_.sa[b]);
        clear_set(strong_set_.data());
        bits_add_range(strong_set_.data(), sec, sec + 1);
      }
      return false;
    };
    for (int b : cover_[A]) {
      if (!placed_[b] && !add(b)) return false;
    }
    for (int s0 = A + 1; s0 < E; ++s0) {
      for (int b : in_.starts[s0]) {
        if (!placed_[b] && !add(b)) return false;
      }
    }
    if (lift_now_ && !lift_bases(A, E)) return false;
    if (!lifted_.empty()) {  // the threshold check below runs on the raised bases
      keys_.clear();
      bases_.clear();
      for (int b : cur_) push_base(base_of_[b], b);
    }
    for (int s = A; s < E; ++s) acc_[s] = 0;
    int fail_sec = -1;
    auto accumulate = [&](int64_t base, int b) {
      const int from = std::max(in_.sa[b], A), to = std::min(in_.sb[b], E);
      const int64_t room = in_.cap - base;
      for (int s = from; s < to; ++s) {
        acc_[s] += in_.size[b];
        if (acc_[s] > room) {
          fail_sec = s;
          return false;
        }
      }
      return true;
    };
    // A failure at fail_sec depends on the buffers counted there being unplaced (their spans all
    // meet fail_sec) and on their bases being at least the last one: per buffer, one section
    // whose floor alone lifts it that high.
    auto explain = [&](auto buffer_at, auto base_at, size_t upto) {
      if (!backjump_) return;
      uint64_t* set = strong_set_.data();
      clear_set(set);
      bits_add_range(set, fail_sec, fail_sec + 1);
      const int64_t t = base_at(upto);
      for (size_t i = 0; i <= upto; ++i) {
        const int b = buffer_at(i);
        if (in_.sa[b] <= fail_sec && fail_sec < in_.sb[b]) {
          if (lift_now_) {  // its base may come from the lowest-buffer rule
            explain_base(b, t, std::numeric_limits<int>::max(), fail_sec, set);
            continue;
          }
          const int sec = floor_witness(b, t, fail_sec);
          bits_add_range(set, sec, sec + 1);
        }
      }
      explained();
    };
    if (packed) {
      std::sort(keys_.begin(), keys_.end(), std::greater<>());
      for (size_t i = 0; i < keys_.size(); ++i) {
        const uint64_t k = keys_[i];
        if (!accumulate(static_cast<int64_t>(k >> 23), static_cast<int>(k & ((1u << 23) - 1)))) {
          explain([&](size_t j) { return static_cast<int>(keys_[j] & ((1u << 23) - 1)); },
                  [&](size_t j) { return static_cast<int64_t>(keys_[j] >> 23); }, i);
          return false;
        }
      }
    } else {
      std::sort(bases_.begin(), bases_.end(), std::greater<>());
      for (size_t i = 0; i < bases_.size(); ++i) {
        if (!accumulate(bases_[i].first, bases_[i].second)) {
          explain([&](size_t j) { return bases_[j].second; },
                  [&](size_t j) { return bases_[j].first; }, i);
          return false;
        }
      }
    }
    return true;
  }

  // The lowest-buffer rule. In section s the free space above the floor is cap - floor(s), of
  // which the unplaced buffers over s need rem(s): at most slack(s) = cap - floor(s) - rem(s)
  // stays empty there. A buffer whose base is above floor(s) + slack(s) = cap - rem(s) cannot be
  // the lowest buffer of s (the space below it would stay empty): another buffer of s lies below
  // it, so its base rises to the lowest top another buffer over s can have (its base + size).
  // Raised bases raise tops, so the rule runs in rounds (each on the previous round's bases)
  // until nothing rises or kLiftRounds. A section where no buffer can be the lowest fails. Works
  // on the buffers of this check (cur_, bases in base_of_, from the floors in floor_base_);
  // every raise is a record (lifts_) that explain_base() walks back. False: a raised buffer no
  // longer fits under the capacity, or a section has no lowest buffer (the conflict in
  // strong_set_).
  bool lift_bases(int A, int E) {
    lifts_.clear();
    // Round 1 looks at every section of [A, E) and every buffer of the check; a later round only
    // at the sections a raise of the previous round spans and the buffers over them (elsewhere
    // nothing changed).
    secs_.clear();
    for (int s = A; s < E; ++s) secs_.push_back(s);
    evals_ = cur_;
    for (int round = 1;; ++round) {
      for (int s : secs_) {
        low1_[s] = low2_[s] = kInf;
        low1_of_[s] = -1;
        top_base_[s] = std::numeric_limits<int64_t>::min();
        min_base_[s] = kInf;
      }
      auto count = [&](int b, int s) {
        const int64_t base = base_of_[b], top = base + in_.size[b];
        if (top < low1_[s]) {
          low2_[s] = low1_[s];
          low1_[s] = top;
          low1_of_[s] = b;
        } else if (top < low2_[s]) {
          low2_[s] = top;
        }
        top_base_[s] = std::max(top_base_[s], base);
        min_base_[s] = std::min(min_base_[s], base);
      };
      if (round == 1) {
        for (int b : cur_) {
          const int from = std::max(in_.sa[b], A), to = std::min(in_.sb[b], E);
          for (int s = from; s < to; ++s) count(b, s);
        }
      } else {
        for (int s : secs_) {
          for (int b : cover_[s]) {
            if (!placed_[b]) count(b, s);
          }
        }
      }
      bool hot = false;
      for (int s : secs_) {
        const int64_t above = in_.cap - rem_[s];
        if (min_base_[s] > above && min_base_[s] < kInf) {
          // No buffer of s can be the lowest: the raises would climb each other to the top.
          if (backjump_) {
            clear_set(strong_set_.data());
            bits_add_range(strong_set_.data(), s, s + 1);
            explain_not_lowest(s, -1, round - 1, strong_set_.data());
            explained();
          }
          return false;
        }
        hot_[s] = min_base_[s] < kInf && top_base_[s] > above;  // a base above floor + slack
        hot = hot || hot_[s];
      }
      if ((round == 1 && !hot) || round > kLiftRounds) return precede(A, E, round);
      const size_t first = lifts_.size();
      for (int b : evals_) {
        const int64_t base = base_of_[b];
        const int from = std::max(in_.sa[b], A), to = std::min(in_.sb[b], E);
        int64_t best = base;
        int at = -1;
        for (int s = from; s < to; ++s) {
          if (!hot_[s] || base <= in_.cap - rem_[s]) continue;
          const int64_t low = low1_of_[s] == b ? low2_[s] : low1_[s];
          if (low > best) {
            best = low;
            at = s;
          }
        }
        if (at >= 0) {
          best = best >= kInf ? kInf : align_up_i(best, in_.align[b]);
          lifts_.push_back({b, round, at, best, last_lift_[b]});
        }
      }
      if (lifts_.size() == first) return precede(A, E, round);
      stats_.lifts += static_cast<int64_t>(lifts_.size() - first);
      ++epoch_;
      secs_.clear();
      evals_.clear();
      for (size_t i = first; i < lifts_.size(); ++i) {  // the round's raises, all at once
        const Lift& l = lifts_[i];
        if (last_lift_[l.b] < 0) lifted_.push_back(l.b);
        last_lift_[l.b] = static_cast<int>(i);
        base_of_[l.b] = l.base;
        if (!raised_fits(l.b, round)) return false;
        const int from = std::max(in_.sa[l.b], A), to = std::min(in_.sb[l.b], E);
        for (int s = from; s < to; ++s) {
          if (sec_mark_[s] == epoch_) continue;
          sec_mark_[s] = epoch_;
          secs_.push_back(s);
        }
      }
      for (int s : secs_) {
        for (int b : cover_[s]) {
          if (placed_[b] || buf_mark_[b] == epoch_) continue;
          buf_mark_[b] = epoch_;
          evals_.push_back(b);
        }
      }
    }
  }

  // The precedence rule, after the lowest-buffer rule's rounds (as round r, on their bases). A
  // section s where one unplaced buffer j alone can be the lowest (every other one's base is above
  // cap - rem(s)) puts j at cap - rem(s) or below: j's ceiling (the lowest over such sections).
  // A buffer k sharing a section with j whose top cannot be at or below that ceiling cannot lie
  // below j, so it lies above: its base rises to j's base + size (aligned up). One raise per
  // buffer (the highest), recorded in lifts_ for explain_lift(). False: a raised buffer no longer
  // fits under the capacity (the conflict in strong_set_).
  bool precede(int A, int E, int r) {
    if (!precedence_) return true;
    const int64_t ep = ++prec_epoch_;
    prec_js_.clear();
    for (int s = A; s < E; ++s) {
      if (cnt_[s] == 0) continue;
      const int64_t thr = in_.cap - rem_[s];
      int only = -1, lowest = 0;
      for (int b : cover_[s]) {
        if (placed_[b] || base_of_[b] > thr) continue;
        only = b;
        if (++lowest > 1) break;
      }
      if (lowest != 1) continue;
      if (ceil_mark_[only] != ep) {
        ceil_mark_[only] = ep;
        ceil_[only] = thr;
        ceil_sec_[only] = s;
        prec_js_.push_back(only);
      } else if (thr < ceil_[only]) {
        ceil_[only] = thr;
        ceil_sec_[only] = s;
      }
    }
    prec_raised_.clear();
    for (int j : prec_js_) {
      const int64_t top = base_of_[j] + in_.size[j], ceiling = ceil_[j];
      const int from = std::max(in_.sa[j], A), to = std::min(in_.sb[j], E);
      for (int s = from; s < to; ++s) {
        for (int k : cover_[s]) {
          if (placed_[k] || k == j || base_of_[k] + in_.size[k] <= ceiling) continue;
          const int64_t v = align_up_i(top, in_.align[k]);
          if (v <= base_of_[k]) continue;
          if (prec_mark_[k] != ep) {
            prec_mark_[k] = ep;
            prec_raised_.push_back(k);
          } else if (v <= prec_base_[k]) {
            continue;
          }
          prec_base_[k] = v;
          prec_j_[k] = j;
          prec_sec_[k] = s;
        }
      }
    }
    stats_.precedences += static_cast<int64_t>(prec_raised_.size());
    for (int k : prec_raised_) {  // all at once: every raise above came from round r - 1's bases
      const int j = prec_j_[k];
      lifts_.push_back({k, r, ceil_sec_[j], prec_base_[k], last_lift_[k], j, prec_sec_[k]});
      if (last_lift_[k] < 0) lifted_.push_back(k);
      last_lift_[k] = static_cast<int>(lifts_.size() - 1);
      base_of_[k] = prec_base_[k];
    }
    for (int k : prec_raised_) {
      if (!raised_fits(k, r)) return false;
    }
    return true;
  }

  // Whether b's base, raised in round r, still fits under the capacity (if not, the conflict goes
  // to strong_set_).
  bool raised_fits(int b, int r) {
    if (base_of_[b] <= in_.cap - in_.size[b]) return true;
    if (backjump_) {
      clear_set(strong_set_.data());
      explain_base(b, in_.cap - in_.size[b] + 1, r, in_.sa[b], strong_set_.data());
      explained();
    }
    return false;
  }

  // Adds to `set` why no unplaced buffer of s but `except` (-1: none) can be the lowest of s:
  // each one's base after `round` rounds is above cap - rem(s).
  void explain_not_lowest(int s, int except, int round, uint64_t* set) {
    const int64_t above = in_.cap - rem_[s];
    for (int c : cover_[s]) {
      if (!placed_[c] && c != except) explain_base(c, above + 1, round, s, set);
    }
  }

  // Adds to `set` sections whose state puts b's base at t or above after `round` rounds of the
  // lowest-buffer and precedence rules: one section whose floor alone does it (the one nearest
  // `near`), else the earliest raise of b up to that round that reaches t (explain_lift()).
  void explain_base(int b, int64_t t, int round, int near, uint64_t* set) {
    if (floor_base_[b] >= t) {
      const int w = floor_witness(b, t, near);
      if (w >= 0) {
        bits_add_range(set, w, w + 1);
      } else {  // cannot happen (the base comes from these floors): the whole span holds it
        bits_add_range(set, in_.sa[b], in_.sb[b]);
      }
      return;
    }
    int use = -1;
    for (int i = last_lift_[b]; i >= 0; i = lifts_[i].prev) {
      if (lifts_[i].round <= round && lifts_[i].base >= t) use = i;
    }
    if (use < 0) {  // cannot happen: then b's whole span, which certainly holds the reason
      bits_add_range(set, in_.sa[b], in_.sb[b]);
      return;
    }
    explain_lift(use, set);
  }

  // Why the raise lifts_[i] (buffer b to base v at section s in round r) holds: s's own state
  // (floor and unplaced buffers: its slack), b's base after round r - 1 above cap - rem(s), and
  // every other unplaced buffer c over s with its base after round r - 1 at v - size(c) or above.
  // Each raise is explained once per conflict.
  void explain_lift(int i, uint64_t* set) {
    if (lift_seen_.size() < lifts_.size()) lift_seen_.resize(lifts_.size(), 0);
    if (lift_seen_[i]) return;
    lift_seen_[i] = 1;
    lift_seen_list_.push_back(i);
    const Lift l = lifts_[i];
    bits_add_range(set, l.sec, l.sec + 1);
    if (l.j >= 0) {  // a precedence (precede()): j alone could be the lowest of l.sec
      bits_add_range(set, l.sec2, l.sec2 + 1);
      const int64_t ceiling = in_.cap - rem_[l.sec];
      explain_not_lowest(l.sec, l.j, l.round - 1, set);
      // b's top above the ceiling; j's top high enough that aligned up it gives b's base.
      explain_base(l.b, ceiling - in_.size[l.b] + 1, l.round - 1, l.sec2, set);
      const int64_t a = in_.align[l.b];
      explain_base(l.j, (l.base - 1) / a * a + 1 - in_.size[l.j], l.round - 1, l.sec, set);
      return;
    }
    explain_base(l.b, in_.cap - rem_[l.sec] + 1, l.round - 1, l.sec, set);
    // The raised base is the lowest top aligned up: any top above the multiple of b's alignment
    // below it gives the same base.
    const int64_t a = in_.align[l.b];
    const int64_t top = (l.base - 1) / a * a + 1;
    for (int c : cover_[l.sec]) {
      if (placed_[c] || c == l.b) continue;
      const int64_t need = top - in_.size[c];
      if (need <= align_up_i(floor_of(l.sec), in_.align[c])) continue;  // s's floor does it
      explain_base(c, need, l.round - 1, l.sec, set);
    }
  }
  // Clears the explained marks after a conflict is built.
  void explained() {
    for (int i : lift_seen_list_) lift_seen_[i] = 0;
    lift_seen_list_.clear();
  }

  void place(int b, int64_t at) {
    trail_.push_back({kPlace, b, b, at, why_});
    placed_[b] = 1;
    off_[b] = at;
    const int64_t top = at + in_.size[b];
    tree_.assign(in_.sa[b], in_.sb[b], 2 * top);
    for (int s = in_.sa[b]; s < in_.sb[b]; ++s) {
      h_[s] = top;
      uhash_[s] ^= bhash_[b];
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
    const Why why{std::max(s - 1, f.lo), std::min(r1 + 2, f.hi), -1, -1};
    if (nv >= kInf) {
      fail(why);
      return false;
    }
    const int64_t H = nv >> 1;
    for (int b : within_) {
      if (align_up_i(hh, in_.align[b]) + in_.size[b] <= H) {  // dominance
        fail(why);
        return false;
      }
    }
    trail_.push_back({kRaise, s, r1, hh, why});
    for (int sec = s; sec <= r1; ++sec) {
      h_[sec] = H;
      blk_[sec] = static_cast<uint8_t>(nv & 1);
    }
    tree_.assign(s, r1 + 1, nv);
    for (int sec = s; sec <= r1; ++sec) {
      if (!section_ok(sec)) {
        fail(sec, sec + 1);
        return false;
      }
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
    fail_region_ = f;
    const auto [vmin, s] = tree_.query(f.lo, f.hi);
    if (s < 0) {  // cannot happen: a region with unplaced buffers has an open section
      fail(f.lo, f.hi);
      return;
    }
    const int r1 = tree_.first_above(s, f.hi, vmin) - 1;  // the run at the lowest value
    const int64_t hh = vmin >> 1;
    if (vmin & 1) {
      raise(s, r1, hh, f);
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
        // Ties: the heaviest section with failure weights, else the leftmost.
        const bool heavier = weights_ && alt == best_alt && weight_[sec] > weight_[best_sec];
        if (heavier) ++stats_.weighed_ties;
        if (alt < best_alt || heavier) {
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
      fail(cell_why(best_sec, best_r0, best_r1, f));
      return;
    }
    why_ = cell_why(best_sec, best_r0, best_r1, f);
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
      if (!section_ok(best_sec)) fail(best_sec, best_sec + 1);
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
    // A branching point: a local nogood that holds fails it at once (cheaper than the bound).
    if (learn_ && nogood_holds(best_sec)) {
      cand_pool_.resize(cb);
      return;
    }
    // Then the unallocated-floor bound over everything changed since the last check (floors only
    // rise along a branch, so one check over the union of the changed ranges prunes whatever the
    // checks after each forced step would have; they were most of the time on large instances).
    if (!flush()) {
      cand_pool_.resize(cb);
      weigh(strong_set_.data());
      fail_set(strong_set_.data());
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
             static_cast<int>(pend_pool_.size()), 0, {0, 0}, why_};
    pend_pool_.insert(pend_pool_.end(), pending_.begin(), pending_.end());
    c.pend_end = static_cast<int>(pend_pool_.size());
    c.key = key;
    choices_.push_back(c);
    if (backjump_) {
      conf_pool_.resize(choices_.size() * words_);
      clear_set(conf_of(choices_.size() - 1));
    }
    if (!apply(choices_.back())) {  // every alternative failed at once: exhausted
      if (!backjump_) {
        undo_to(choices_.back().mark);
        pop_choice();
        failed_ = true;
        return;
      }
      const size_t k = choices_.size() - 1;
      add_why(conf_of(k), choices_.back().why);
      if (learn_) learn(choices_.back().sec, conf_of(k));
      fail_set(conf_of(k));
      undo_to(choices_.back().mark);
      pop_choice();
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
    uint64_t* conf = backjump_ ? conf_of(choices_.size() - 1) : nullptr;
    auto merge = [&](const uint64_t* set) {
      if (conf) {
        for (int w = 0; w < words_; ++w) conf[w] |= set[w];
      }
    };
    const int ncand = c.cand_end - c.cand_begin;
    while (true) {
      if (c.next < ncand) {
        const int b = cand_pool_[c.cand_begin + c.next++];
        why_ = Why{};
        place(b, c.h);
        if (!strong_ || strong_local(in_.sa[b], in_.sb[b])) return true;
        weigh(strong_set_.data());
        merge(strong_set_.data());
        undo_to(c.mark);
        restore_pending(c);
        ++nodes_;
        continue;
      }
      if (c.next == ncand) {
        ++c.next;
        why_ = Why{};
        block(c.sec);
        if (!section_ok(c.sec)) {
          if (conf) add_why(conf, Why{c.sec, c.sec + 1, -1, -1});
        } else if (!strong_ || strong_local(c.sec, c.sec + 1)) {
          return true;
        } else {
          weigh(strong_set_.data());
          merge(strong_set_.data());
        }
        undo_to(c.mark);
        restore_pending(c);
        return false;
      }
      return false;
    }
  }

  // Conflict sets: bitsets of sections, words_ words each.
  uint64_t* conf_of(size_t k) { return conf_pool_.data() + k * words_; }
  void clear_set(uint64_t* x) const { std::fill(x, x + words_, 0); }
  void add_why(uint64_t* x, const Why& w) const {
    bits_add_range(x, w.lo, w.hi);
    if (w.x1 >= 0) bits_add_range(x, w.x1, w.x1 + 1);
    if (w.x2 >= 0) bits_add_range(x, w.x2, w.x2 + 1);
  }
  // Local nogoods: the state of a set of sections (each one's floor and unplaced buffers) under
  // which a choice ran out of alternatives; any state that agrees on those sections fails too.
  uint64_t section_part(int s) const {
    return mix(mix(static_cast<uint64_t>(s) * 0x9e3779b97f4a7c15ULL +
                   static_cast<uint64_t>(2 * h_[s] + blk_[s])) ^
               uhash_[s]);
  }
  void learn(int anchor, const uint64_t* set) {
    if (nogoods_.learn(anchor, set, words_, [&](int s) { return section_part(s); })) {
      ++stats_.learnt;
    }
  }
  // A nogood at `anchor` that holds now: a failure on its sections, true.
  bool nogood_holds(int anchor) {
    const std::vector<int>* secs =
        nogoods_.find(anchor, [&](int s) { return section_part(s); });
    if (!secs) return false;
    ++stats_.nogood_hits;
    failed_ = true;
    clear_set(conflict_.data());
    for (int s : *secs) bits_add_range(conflict_.data(), s, s + 1);
    return true;
  }
  // Sections an undo record changed.
  std::pair<int, int> effect(const Entry& e) const {
    if (e.kind == kPlace) return {in_.sa[e.idx], in_.sb[e.idx]};
    return {e.idx, e.idx2 + 1};
  }

  // Conflict-directed backjumping. Every step the search takes without a choice is implied by
  // the state of a few sections (its Why), every failure too; walking the trail back from a
  // failure, the conflict (a set of sections) takes in the Why of each forced record that
  // changed one of its sections. A choice whose decision changed none of them did not cause the
  // failure: its other alternatives would fail the same way, so it is skipped. A choice whose
  // decision did tries its next alternative; when it has none left, its conflict is the union of
  // its alternatives' conflicts and the sections that made them its only alternatives.
  bool backtrack() {
    if (!backjump_) return backtrack_regions();
    uint64_t* x = conflict_.data();
    while (!choices_.empty()) {
      Choice& c = choices_.back();
      const size_t k = choices_.size() - 1;
      while (trail_.size() > c.mark + 1) {
        const Entry& e = trail_.back();
        const auto [a, b] = effect(e);
        if (bits_meets(x, a, b)) add_why(x, e.why);
        undo_to(trail_.size() - 1);
      }
      const auto [a, b] = effect(trail_[c.mark]);
      if (!bits_meets(x, a, b)) {  // independent of the failure: skip it
        ++stats_.skipped;
        undo_to(c.mark);
        pop_choice();
        continue;
      }
      uint64_t* conf = conf_of(k);
      for (int w = 0; w < words_; ++w) conf[w] |= x[w];
      undo_to(c.mark);
      restore_pending(c);
      clean();
      ++nodes_;
      if (apply(c)) return true;
      add_why(conf, c.why);
      std::copy(conf, conf + words_, x);
      // The memo keeps the state of c's region; only a conflict inside the region proves that
      // state fails (a nogood from an earlier, larger region can reach outside it).
      if (memo_ && bits_within(conf, words_, c.lo, c.hi)) failed_states_.insert(c.key);
      if (learn_) learn(c.sec, conf);
      undo_to(c.mark);
      pop_choice();
    }
    return false;
  }

  // Without conflict sets: a failure is blamed on its whole region, and the choices made in
  // other regions (independent: no unplaced buffer connects them) are skipped.
  bool backtrack_regions() {
    int xlo = fail_region_.lo, xhi = fail_region_.hi;
    while (!choices_.empty()) {
      Choice& c = choices_.back();
      if (c.hi <= xlo || c.lo >= xhi) {
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
  int lift_;  // the lowest-buffer rule in the unallocated-floor bound (SearchConfig::lift)
  bool lift_now_ = false;  // in this check
  bool memo_;
  bool backjump_;
  bool learn_;
  Stats stats_;
  State state_ = State::kRunning;
  bool failed_ = false;
  bool failed_root_ = false;
  // Backjumping and local nogoods.
  Why why_;                           // the reason of the next forced record
  std::vector<uint64_t> strong_set_;  // the last failed unallocated-floor check's sections
  Region fail_region_{0, 0, 0};       // the region of the last step (without backjumping)
  int words_ = 1;                     // 64-bit words per section set
  static constexpr int64_t kMaxConflictWords = int64_t{1} << 22;  // buffers x words: 32 MiB
  std::vector<uint64_t> conflict_;    // the last failure's sections, walked back by backtrack()
  std::vector<uint64_t> conf_pool_;   // per choice: its alternatives' conflicts
  std::vector<uint64_t> uhash_;       // per section: hash of its unplaced buffers
  std::vector<uint64_t> bhash_;       // per buffer: its hash
  NogoodStore nogoods_;
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
  // Failure weights (SearchConfig::weights): per section, and the order they give at restarts.
  bool weights_ = false;
  double weight_growth_ = 1.05;
  double bump_ = 1.0;
  std::vector<double> weight_;
  std::vector<int> weight_rank_;
  std::vector<std::pair<int64_t, int>> bases_;
  std::vector<int64_t> acc_;
  // The lowest-buffer rule (lift_bases): this check's raises; per section the two lowest tops,
  // the buffer with the lowest, the highest and lowest base; per buffer its base now and from
  // the floors, its last raise.
  struct Lift {
    int b, round, sec;
    int64_t base;
    int prev;  // b's previous raise in lifts_, or -1
    int j = -1;     // a precedence: the buffer b lies above (j alone can be the lowest of sec)
    int sec2 = -1;  // and a section j and b share
  };
  std::vector<Lift> lifts_;                       // this check's raises, in rounds
  // The precedence rule (precede()): per buffer its ceiling and the section giving it, its raise
  // (base, the buffer below it, the section they share), epoch marks; the round's buffers.
  bool precedence_ = true;  // SearchConfig::precedence (with the lowest-buffer rule only)
  int64_t prec_epoch_ = 0;
  std::vector<int64_t> ceil_, ceil_mark_, prec_base_, prec_mark_;
  std::vector<int> ceil_sec_, prec_j_, prec_sec_, prec_js_, prec_raised_;
  std::vector<int64_t> low1_, low2_, top_base_, min_base_;  // per section
  // Rounds of raises per check. Fixpoints take many (raises climbing each other), most of the
  // failures they catch come in the first; on the 40 generated instances 2 rounds and 8 fitted
  // the same number (28 within 10 s), 1 round 27, 2 with the lower median time.
  static constexpr int kLiftRounds = 2;
  std::vector<uint8_t> hot_;                      // per section: a base above floor + slack
  std::vector<int64_t> sec_mark_, buf_mark_;      // visited in round epoch_
  int64_t epoch_ = 0;
  std::vector<int> secs_, evals_;                 // the sections and buffers of a round
  std::vector<int64_t> base_of_, floor_base_;     // per buffer: base now, base from floors
  std::vector<int> low1_of_, last_lift_, lifted_, cur_, lift_seen_list_;
  std::vector<uint8_t> lift_seen_;
  static constexpr size_t kMemoCap = 1 << 19;
  KeySet failed_states_{kMemoCap};
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
Search::Stats Search::stats() const { return impl_->stats(); }
const std::vector<int64_t>& Search::offsets() const { return impl_->offsets(); }

}  // namespace roam::minimalloc
