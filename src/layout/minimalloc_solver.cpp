// The exact static-allocation solver (include/roam/roam_layout.h explains the method): a
// skyline branch and bound over canonical placements with spatial inference, section lower
// bounds, a dominance rule, dynamic decomposition and a deterministic portfolio.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "roam/roam_layout.h"

namespace roam {

const char* to_string(AllocStatus status) {
  switch (status) {
    case AllocStatus::kFeasible: return "feasible";
    case AllocStatus::kInfeasible: return "infeasible";
    case AllocStatus::kUnknown: return "unknown";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
// Sizes, capacities and heights are kept in units of the gcd of all sizes and alignments, as
// int64; anything above this does not fit the search's arithmetic (sums of sizes per section).
constexpr uint64_t kMaxTotal = uint64_t{1} << 60;

int64_t align_up_i(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------
// The instance as one search sees it: buffers of non-zero size in units, their section spans,
// the buffers starting in each section in the order the search tries them.
struct Instance {
  int n = 0;                                // buffers
  int num_sections = 0;
  std::vector<int> sa, sb;                  // section span [sa, sb)
  std::vector<int64_t> size, align;         // units
  std::vector<int> dup_prev;                // previous identical buffer, or -1
  std::vector<std::vector<int>> starts;     // per section: buffers starting there, by heuristic
  std::vector<int> rank;                    // position in the heuristic's order
  int64_t cap = 0;                          // units
};

// What every search of one call shares: the unit, the section spans in forward time, ranks.
struct Prepared {
  std::vector<int> index;                   // buffer -> original buffer index
  uint64_t unit = 1;
  int num_sections = 0;
  std::vector<int> sa, sb;
  std::vector<int64_t> size, align;
  std::vector<int64_t> width;               // lifetime length in input time units
  std::vector<int> dup_prev;
  std::vector<int64_t> section_total;       // units
};

Prepared prepare(const std::vector<AllocBuffer>& buffers) {
  Prepared p;
  uint64_t g = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const AllocBuffer& b = buffers[i];
    if (b.lower >= b.upper) {
      throw std::invalid_argument("buffer " + std::to_string(i) + ": lower " +
                                  std::to_string(b.lower) + " >= upper " + std::to_string(b.upper));
    }
    if (b.alignment == 0) {
      throw std::invalid_argument("buffer " + std::to_string(i) + ": alignment 0");
    }
    if (b.size > kMaxTotal || b.alignment > kMaxTotal || total + b.size > kMaxTotal ||
        total + b.size + b.alignment > kMaxTotal) {
      throw std::invalid_argument("buffer " + std::to_string(i) +
                                  ": sizes too large (total above 2^60)");
    }
    total += b.size;
    if (b.size == 0) continue;
    p.index.push_back(static_cast<int>(i));
    g = std::gcd(g, b.size);
    if (b.alignment > 1) g = std::gcd(g, b.alignment);
  }
  p.unit = g == 0 ? 1 : g;
  const int n = static_cast<int>(p.index.size());
  std::vector<int64_t> events;
  events.reserve(2 * static_cast<size_t>(n));
  for (int i : p.index) {
    events.push_back(buffers[i].lower);
    events.push_back(buffers[i].upper);
  }
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  p.num_sections = events.empty() ? 0 : static_cast<int>(events.size()) - 1;
  auto sec = [&](int64_t t) {
    return static_cast<int>(std::lower_bound(events.begin(), events.end(), t) - events.begin());
  };
  p.sa.resize(n);
  p.sb.resize(n);
  p.size.resize(n);
  p.align.resize(n);
  p.width.resize(n);
  p.dup_prev.assign(n, -1);
  p.section_total.assign(p.num_sections, 0);
  std::map<std::tuple<int, int, int64_t, int64_t>, int> last_same;
  for (int k = 0; k < n; ++k) {
    const AllocBuffer& b = buffers[p.index[k]];
    p.sa[k] = sec(b.lower);
    p.sb[k] = sec(b.upper);
    p.size[k] = static_cast<int64_t>(b.size / p.unit);
    p.align[k] = b.alignment > 1 ? static_cast<int64_t>(b.alignment / p.unit) : 1;
    p.width[k] = b.upper - b.lower;
    for (int s = p.sa[k]; s < p.sb[k]; ++s) p.section_total[s] += p.size[k];
    auto key = std::make_tuple(p.sa[k], p.sb[k], p.size[k], p.align[k]);
    auto it = last_same.find(key);
    if (it != last_same.end()) p.dup_prev[k] = it->second;
    last_same[key] = k;
  }
  return p;
}

// Above these sizes the per-node bound and the failed-state memo cost more than they save.
constexpr uint64_t kStrongSpanLimit = 50000;  // sum over buffers of the sections spanned
constexpr int kMemoBufferLimit = 400;

// Candidate orders: 0 "TA" (the most congested section spanned, then area), 1 "A" (area),
// 2 "TZ" (congestion, then size), 3 "Z" (size), 4 "W" (lifetime). `mirror` reverses time.
Instance make_instance(const Prepared& p, int64_t cap_units, int kind, bool mirror) {
  Instance in;
  in.n = static_cast<int>(p.sa.size());
  in.num_sections = p.num_sections;
  in.size = p.size;
  in.align = p.align;
  in.dup_prev = p.dup_prev;
  in.cap = cap_units;
  in.sa.resize(in.n);
  in.sb.resize(in.n);
  for (int k = 0; k < in.n; ++k) {
    in.sa[k] = mirror ? p.num_sections - p.sb[k] : p.sa[k];
    in.sb[k] = mirror ? p.num_sections - p.sa[k] : p.sb[k];
  }
  std::vector<int> order(in.n);
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int k) {
    const int64_t area_hi = static_cast<int64_t>(
        std::min<long double>(static_cast<long double>(p.size[k]) * p.width[k], 4e18L));
    int64_t total = 0;  // the most congested section it spans
    for (int s = p.sa[k]; s < p.sb[k]; ++s) total = std::max(total, p.section_total[s]);
    switch (kind) {
      case 0: return std::make_tuple(-total, -area_hi, -p.size[k]);
      case 1: return std::make_tuple(-area_hi, -p.size[k], -p.width[k]);
      case 2: return std::make_tuple(-total, -p.size[k], -p.width[k]);
      case 3: return std::make_tuple(-p.size[k], -p.width[k], int64_t{0});
      default: return std::make_tuple(-p.width[k], -p.size[k], int64_t{0});
    }
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  in.starts.assign(in.num_sections, {});
  in.rank.assign(in.n, 0);
  for (int r = 0; r < in.n; ++r) {
    in.starts[in.sa[order[r]]].push_back(order[r]);
    in.rank[order[r]] = r;
  }
  return in;
}

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

// How one search behaves (besides its candidate order, which is in its Instance).
struct SearchConfig {
  bool strong = true;          // the unallocated-floor threshold bound
  bool memo = true;            // remember failed region states
  bool leftmost = false;       // branch at the leftmost lowest cell, not the most constrained
  int64_t restart_base = 1000; // Luby restarts of this many nodes; 0: none
  double noise = 1.0;          // candidate-order perturbation at restarts (x number of buffers)
  uint64_t seed = 1;
};

// One resumable depth-first search (explicit stack of choice points, undo trail).
class Search {
 public:
  enum class State { kRunning, kSolved, kInfeasible };

  Search(Instance inst, const SearchConfig& cfg)
      : in_(std::move(inst)), strong_(cfg.strong), memo_(cfg.memo), leftmost_(cfg.leftmost),
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
    if (best_sec > best_r0) {
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
  int64_t restart_base_ = 1000, next_restart_ = 0, restart_index_ = 0;
  uint64_t seed_ = 1;
  double noise_ = 1.0;
  std::vector<std::pair<int64_t, int>> bases_;
  std::vector<int64_t> acc_;
  static constexpr size_t kMemoCap = 1 << 19;
  KeySet failed_states_;
  static constexpr int kMaxRuns = 64;
};

}  // namespace

uint64_t live_size_lower_bound(const std::vector<AllocBuffer>& buffers) {
  std::vector<std::pair<int64_t, int64_t>> ev;  // (time, +size / -size); ends before starts
  ev.reserve(buffers.size() * 2);
  for (const AllocBuffer& b : buffers) {
    if (b.size == 0 || b.lower >= b.upper) continue;
    ev.emplace_back(b.lower, static_cast<int64_t>(b.size));
    ev.emplace_back(b.upper, -static_cast<int64_t>(b.size));
  }
  std::sort(ev.begin(), ev.end());  // at equal time, negative (ends) first: half-open
  int64_t cur = 0, best = 0;
  for (const auto& [t, d] : ev) {
    cur += d;
    best = std::max(best, cur);
  }
  return static_cast<uint64_t>(best);
}

std::string check_allocation(const std::vector<AllocBuffer>& buffers,
                             const std::vector<uint64_t>& offsets, uint64_t capacity) {
  if (offsets.size() != buffers.size()) {
    return std::to_string(offsets.size()) + " offsets for " + std::to_string(buffers.size()) +
           " buffers";
  }
  std::vector<size_t> idx;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const AllocBuffer& b = buffers[i];
    const uint64_t a = b.alignment == 0 ? 1 : b.alignment;
    if (offsets[i] % a != 0) {
      return "buffer " + std::to_string(i) + ": offset " + std::to_string(offsets[i]) +
             " is not a multiple of its alignment " + std::to_string(a);
    }
    if (offsets[i] > capacity || b.size > capacity - offsets[i]) {
      return "buffer " + std::to_string(i) + ": offset " + std::to_string(offsets[i]) + " + size " +
             std::to_string(b.size) + " exceeds the capacity " + std::to_string(capacity);
    }
    if (b.size > 0) idx.push_back(i);
  }
  // Sweep over time: buffers sorted by lower; active set checked pairwise (simple and exact).
  std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    return std::tie(buffers[x].lower, x) < std::tie(buffers[y].lower, y);
  });
  std::vector<size_t> active;
  for (size_t i : idx) {
    const AllocBuffer& b = buffers[i];
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](size_t j) { return buffers[j].upper <= b.lower; }),
                 active.end());
    for (size_t j : active) {
      const uint64_t e1 = offsets[i] + b.size, e2 = offsets[j] + buffers[j].size;
      if (offsets[i] < e2 && offsets[j] < e1) {
        return "buffers " + std::to_string(j) + " and " + std::to_string(i) +
               " are live together and overlap in [" +
               std::to_string(std::max(offsets[i], offsets[j])) + ", " +
               std::to_string(std::min(e1, e2)) + ")";
      }
    }
    active.push_back(i);
  }
  return "";
}

namespace {

std::vector<uint64_t> best_fit_in_order(const std::vector<AllocBuffer>& buffers,
                                        const std::vector<size_t>& order) {
  struct Placed {
    uint64_t off, end;
    int64_t lower, upper;
  };
  std::vector<Placed> placed;  // sorted by offset
  std::vector<uint64_t> out(buffers.size(), 0);
  for (size_t i : order) {
    const AllocBuffer& b = buffers[i];
    if (b.size == 0) continue;
    const uint64_t a = std::max<uint64_t>(b.alignment, 1);
    uint64_t cursor = 0, best_gap = std::numeric_limits<uint64_t>::max(), best_off = 0;
    bool found = false;
    for (const Placed& p : placed) {
      if (p.upper <= b.lower || b.upper <= p.lower) continue;
      const uint64_t start = align_up(cursor, a);
      if (p.off > start && p.off - start >= b.size) {
        const uint64_t gap = p.off - cursor;
        if (gap < best_gap) {
          best_gap = gap;
          best_off = start;
          found = true;
        }
      }
      cursor = std::max(cursor, p.end);
    }
    const uint64_t at = found ? best_off : align_up(cursor, a);
    out[i] = at;
    const Placed e{at, at + b.size, b.lower, b.upper};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), at,
                                   [](uint64_t o, const Placed& p) { return o < p.off; }),
                  e);
  }
  return out;
}

uint64_t height_of(const std::vector<AllocBuffer>& buffers, const std::vector<uint64_t>& off) {
  uint64_t h = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].size > 0) h = std::max(h, off[i] + buffers[i].size);
  }
  return h;
}

}  // namespace

std::vector<uint64_t> best_fit_allocation(const std::vector<AllocBuffer>& buffers) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const AllocBuffer& a = buffers[x];
    const AllocBuffer& b = buffers[y];
    if (a.size != b.size) return a.size > b.size;
    if (a.upper - a.lower != b.upper - b.lower) return a.upper - a.lower > b.upper - b.lower;
    return x < y;
  });
  return best_fit_in_order(buffers, order);
}

namespace {

struct PortfolioEntry {
  int kind;
  bool mirror;
  bool leftmost;
};

// The MiniMalloc-style portfolio branches at the most constrained cell; the time-sweep one (for
// training graphs, where sweeping time from one end packs nested lifetimes well) at the leftmost.
const std::vector<PortfolioEntry>& portfolio_entries(bool time_sweep) {
  static const std::vector<PortfolioEntry> kConstrained = {
      {0, false, false}, {0, true, false}, {1, false, false}, {1, true, false},
      {2, false, false}, {2, true, false}, {4, false, true},  {4, true, true},
      {0, false, true},  {0, true, true}};
  static const std::vector<PortfolioEntry> kSweep = {
      {4, false, true}, {4, true, true}, {0, false, true}, {0, true, true},
      {1, false, true}, {1, true, true}, {0, false, false}, {0, true, false},
      {1, false, false}, {1, true, false}};
  return time_sweep ? kSweep : kConstrained;
}

struct Portfolio {
  bool infeasible = false;
  int winner = -1;
  std::vector<int64_t> offsets;  // the winner's, in units
  int64_t nodes = 0;
};

// Runs the portfolio at capacity `cap` (units). lowest == false: the winner is the search that
// needed the fewest nodes to a solution (ties: the lowest index). lowest == true (dives): every
// search runs to its first solution or the node limit; the winner is the first search (by index)
// whose height is <= `target`, else the lowest height (ties: the lowest index); searches after a
// search that reached the target stop. Either way the result does not depend on the threads.
Portfolio run_portfolio(const Prepared& p, int64_t cap, const AllocSolveOptions& options,
                        bool lowest, int64_t target = 0) {
  const auto t0 = Clock::now();
  const int n = static_cast<int>(p.sa.size());
  const auto& entries = portfolio_entries(options.time_sweep);
  const int K = std::clamp(options.heuristics, 1, static_cast<int>(entries.size()));
  uint64_t spans = 0;
  for (int k = 0; k < n; ++k) spans += static_cast<uint64_t>(p.sb[k] - p.sa[k]);
  std::vector<std::unique_ptr<Search>> searches;
  for (int k = 0; k < K; ++k) {
    SearchConfig cfg;
    cfg.strong = options.unallocated_floor && spans <= kStrongSpanLimit;
    cfg.memo = n <= kMemoBufferLimit;
    cfg.leftmost = entries[k].leftmost;
    cfg.restart_base = lowest ? 0 : (n <= 500 ? 1000 : 100 * static_cast<int64_t>(n));
    cfg.seed = static_cast<uint64_t>(k) + 1;
    searches.push_back(
        std::make_unique<Search>(make_instance(p, cap, entries[k].kind, entries[k].mirror), cfg));
  }
  const bool use_deadline = options.time_limit_seconds > 0;
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(
               // at most 1e9 s: more would overflow the clock's nanoseconds
               std::chrono::duration<double>(use_deadline ? std::min(options.time_limit_seconds, 1e9) : 0));
  const int64_t node_limit =
      options.node_limit > 0 ? options.node_limit : std::numeric_limits<int64_t>::max() / 2;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

  std::atomic<int64_t> best_key{kNone};  // nodes * K + k of the best finished search
  std::atomic<int> cut{K};               // dives: the first index that reached the target
  auto height_of_search = [&](const Search& s) {
    int64_t h = 0;
    const auto& off = s.offsets();
    for (int b = 0; b < n; ++b) h = std::max(h, off[b] + p.size[b]);
    return h;
  };
  std::atomic<bool> infeasible{false};
  std::atomic<bool> stop{false};
  auto worker = [&](int t, int T) {
    std::vector<int> mine;
    for (int k = t; k < K; k += T) mine.push_back(k);
    constexpr int64_t kChunk = 2048;
    int64_t cap_nodes = 0;
    std::vector<bool> active(mine.size(), true);
    bool any = true;
    while (any) {
      any = false;
      cap_nodes += kChunk;
      for (size_t j = 0; j < mine.size(); ++j) {
        if (!active[j]) continue;
        const int k = mine[j];
        Search& s = *searches[k];
        const int64_t bk = lowest ? kNone : best_key.load();
        // A search that can no longer beat the best key stops (exact: see the header).
        const int64_t my_cap =
            std::min({cap_nodes, node_limit, bk == kNone ? node_limit : (bk - k) / K + 1});
        if (lowest && k > cut.load()) {
          active[j] = false;
          continue;
        }
        const auto st = s.run(my_cap, &stop, deadline, use_deadline);
        if (st == Search::State::kSolved && lowest && height_of_search(s) <= target) {
          int cur = cut.load();
          while (k < cur && !cut.compare_exchange_weak(cur, k)) {}
        }
        if (st == Search::State::kSolved) {
          const int64_t key = s.nodes() * K + k;
          int64_t cur = best_key.load();
          while (key < cur && !best_key.compare_exchange_weak(cur, key)) {}
          active[j] = false;
        } else if (st == Search::State::kInfeasible) {
          infeasible = true;
          stop = true;
          active[j] = false;
        } else if (stop.load() || s.nodes() >= node_limit ||
                   (use_deadline && Clock::now() >= deadline)) {
          active[j] = false;
        } else if (!lowest) {
          const int64_t b2 = best_key.load();
          if (b2 != kNone && s.nodes() * K + k > b2) active[j] = false;
        }
        any = any || active[j];
      }
    }
  };
  const int T = std::clamp(options.threads, 1, K);
  if (T == 1) {
    worker(0, 1);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < T; ++t) pool.emplace_back(worker, t, T);
    for (auto& th : pool) th.join();
  }
  Portfolio out;
  for (const auto& s : searches) out.nodes += s->nodes();
  out.infeasible = infeasible.load();
  if (out.infeasible) return out;
  if (lowest && cut.load() < K) {
    out.winner = cut.load();
  } else if (lowest) {
    int64_t best_h = kNone;
    for (int k = 0; k < K; ++k) {
      if (searches[k]->state() != Search::State::kSolved) continue;
      const int64_t h = height_of_search(*searches[k]);
      if (h < best_h) {
        best_h = h;
        out.winner = k;
      }
    }
  } else if (best_key.load() != kNone) {
    out.winner = static_cast<int>(best_key.load() % K);
  }
  if (out.winner >= 0) out.offsets = searches[out.winner]->offsets();
  return out;
}

}  // namespace

AllocResult solve_allocation(const std::vector<AllocBuffer>& buffers, uint64_t capacity,
                             const AllocSolveOptions& options) {
  const auto t0 = Clock::now();
  const Prepared p = prepare(buffers);
  AllocResult res;
  auto finish = [&](AllocResult& r) -> AllocResult {
    r.seconds = seconds_since(t0);
    return r;
  };
  const int n = static_cast<int>(p.index.size());
  if (n == 0) {
    res.status = AllocStatus::kFeasible;
    res.offsets.assign(buffers.size(), 0);
    return finish(res);
  }
  const int64_t cap = static_cast<int64_t>(std::min<uint64_t>(capacity / p.unit, kMaxTotal));
  for (int k = 0; k < n; ++k) {
    if (p.size[k] > cap) {
      res.status = AllocStatus::kInfeasible;
      return finish(res);
    }
  }
  for (int64_t t : p.section_total) {
    if (t > cap) {
      res.status = AllocStatus::kInfeasible;
      return finish(res);
    }
  }

  const Portfolio run = run_portfolio(p, cap, options, /*lowest=*/false);
  res.nodes = run.nodes;
  if (run.infeasible) {
    res.status = AllocStatus::kInfeasible;
  } else if (run.winner >= 0) {
    res.status = AllocStatus::kFeasible;
    res.offsets.assign(buffers.size(), 0);
    for (int k = 0; k < n; ++k) {
      res.offsets[p.index[k]] = static_cast<uint64_t>(run.offsets[k]) * p.unit;
    }
  } else {
    res.status = AllocStatus::kUnknown;
  }
  if (res.status == AllocStatus::kFeasible) res.height = height_of(buffers, res.offsets);
  return finish(res);
}

AllocMinimizeResult minimize_allocation(const std::vector<AllocBuffer>& buffers,
                                        const AllocSolveOptions& options,
                                        const std::vector<uint64_t>* start,
                                        uint64_t good_enough) {
  const auto t0 = Clock::now();
  AllocMinimizeResult r;
  const Prepared p = prepare(buffers);  // validates
  r.lower_bound = live_size_lower_bound(buffers);
  // Upper bound: the best of the greedy layouts (and `start`).
  {
    r.offsets = best_fit_allocation(buffers);
    r.height = height_of(buffers, r.offsets);
    std::vector<size_t> order(buffers.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      const int64_t wx = buffers[x].upper - buffers[x].lower;
      const int64_t wy = buffers[y].upper - buffers[y].lower;
      if (wx != wy) return wx > wy;
      if (buffers[x].size != buffers[y].size) return buffers[x].size > buffers[y].size;
      return x < y;
    });
    std::vector<uint64_t> o2 = best_fit_in_order(buffers, order);
    const uint64_t h2 = height_of(buffers, o2);
    if (h2 < r.height) {
      r.offsets = std::move(o2);
      r.height = h2;
    }
    if (start && start->size() == buffers.size() &&
        check_allocation(buffers, *start, std::numeric_limits<uint64_t>::max()).empty()) {
      const uint64_t h3 = height_of(buffers, *start);
      if (h3 < r.height) {
        r.offsets = *start;
        r.height = h3;
      }
    }
  }
  // Dives: every portfolio search at a capacity nothing reaches, to its first solution (no
  // backtracking is needed there); the lowest is a strong upper bound on training graphs.
  if (!p.index.empty()) {
    AllocSolveOptions o = options;
    if (options.time_limit_seconds > 0) {
      o.time_limit_seconds = std::max(options.time_limit_seconds - seconds_since(t0), 1e-3);
    }
    if (options.dive_node_limit > 0) o.node_limit = options.dive_node_limit;
    const int64_t target_units = static_cast<int64_t>(
        std::max((r.lower_bound + p.unit - 1) / p.unit, (good_enough + p.unit - 1) / p.unit));
    const Portfolio d =
        run_portfolio(p, static_cast<int64_t>(kMaxTotal), o, /*lowest=*/true, target_units);
    r.nodes += d.nodes;
    if (d.winner >= 0) {
      std::vector<uint64_t> off(buffers.size(), 0);
      for (size_t k = 0; k < p.index.size(); ++k) {
        off[p.index[k]] = static_cast<uint64_t>(d.offsets[k]) * p.unit;
      }
      const uint64_t h = height_of(buffers, off);
      if (h < r.height) {
        r.offsets = std::move(off);
        r.height = h;
      }
    }
  }
  const uint64_t unit = p.unit;
  // Heights of canonical solutions are multiples of the unit.
  uint64_t lo = (r.lower_bound + unit - 1) / unit * unit;  // smallest height not yet excluded
  const bool use_deadline = options.time_limit_seconds > 0;
  auto remaining = [&]() {
    return use_deadline ? options.time_limit_seconds - seconds_since(t0) : 0.0;
  };
  auto probe = [&](uint64_t cap, int64_t nodes) -> AllocResult {
    AllocSolveOptions o = options;
    o.node_limit = nodes;
    if (use_deadline) o.time_limit_seconds = std::max(remaining(), 1e-3);
    AllocResult a = solve_allocation(buffers, cap, o);
    r.nodes += a.nodes;
    r.probes.push_back({cap, nodes, a.status, a.height, a.nodes, a.seconds});
    return a;
  };
  // Bisection between the largest height proven infeasible (+1) and the best height found,
  // first with a small node budget per probe, then again over what the limit left open with a
  // budget four times larger, up to options.node_limit (anytime: every round can only improve).
  const uint64_t target = std::max(lo, (good_enough + unit - 1) / unit * unit);
  const int64_t full = options.node_limit > 0 ? options.node_limit
                                              : std::numeric_limits<int64_t>::max() / 8;
  int64_t budget = std::min<int64_t>(full, std::max<int64_t>(options.probe_node_start, 1));
  int probes = 0;
  uint64_t proven_lo = lo;  // every height below it is proven infeasible
  while (r.height > target && proven_lo < r.height) {
    bool open = false;  // some probe of this round was cut by the limit
    uint64_t round_lo = proven_lo;
    bool first = true;
    while (round_lo < r.height && r.height > target) {
      if (use_deadline && remaining() <= 0) break;
      if (options.max_probes > 0 && probes >= options.max_probes) break;
      ++probes;
      // First the lowest height not excluded (the target: the lower bound unless good_enough
      // is higher), then bisection; every round again, with its larger budget.
      const uint64_t mid = first ? std::max(target, round_lo)
                                 : round_lo + ((r.height - round_lo) / unit / 2) * unit;
      first = false;
      const AllocResult a = probe(mid, budget);
      if (a.status == AllocStatus::kFeasible) {
        r.offsets = a.offsets;
        r.height = a.height;
      } else {
        if (a.status == AllocStatus::kInfeasible) proven_lo = std::max(proven_lo, mid + unit);
        if (a.status == AllocStatus::kUnknown) open = true;
        round_lo = mid + unit;
      }
    }
    if (!open || budget >= full || (use_deadline && remaining() <= 0) ||
        (options.max_probes > 0 && probes >= options.max_probes)) {
      break;
    }
    budget = std::min(full, budget * 4);
  }
  r.proven_lower_bound = std::max(r.lower_bound, std::min(proven_lo, r.height));
  r.proven_optimal = r.height <= r.lower_bound || proven_lo >= r.height;
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace roam
