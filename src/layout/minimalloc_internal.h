// Internals of the exact static-allocation solver shared by its two files:
// minimalloc_search.cpp (one branch-and-bound search over one instance) and
// minimalloc_solver.cpp (preparation, the portfolio of searches, fit and minimize).
// include/roam/roam_layout.h explains the method. Not a public header.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "roam/roam_layout.h"

namespace roam::minimalloc {

using Clock = std::chrono::steady_clock;
constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
// Sizes, capacities and heights are kept in units of the gcd of all sizes and alignments, as
// int64; anything above this does not fit the search's arithmetic (sums of sizes per section).
constexpr uint64_t kMaxTotal = uint64_t{1} << 60;

inline int64_t align_up_i(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

inline double seconds_since(Clock::time_point t0) {
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
  std::vector<int64_t> congestion;          // per buffer: the largest section_total it spans
};

// Validates `buffers` (throws std::invalid_argument naming the buffer) and computes the unit,
// the sections and the per-buffer spans every search shares.
Prepared prepare(const std::vector<AllocBuffer>& buffers);

// Candidate orders: 0 "TA" (the most congested section spanned, then area), 1 "A" (area),
// 2 "TZ" (congestion, then size), 3 "Z" (size), 4 "W" (lifetime). `mirror` reverses time.
Instance make_instance(const Prepared& p, int64_t cap_units, int kind, bool mirror);

// How one search behaves (besides its candidate order, which is in its Instance).
struct SearchConfig {
  bool strong = true;          // the unallocated-floor threshold bound
  int lift = 1;                // the lowest-buffer rule raising bases in that bound: 0 off, 1 at
                               // branching points, 2 also after every candidate's placement
  bool precedence = true;      // the precedence rule after the lowest-buffer rule (lift > 0)
  bool memo = true;            // remember failed region states
  bool backjump = true;        // conflict-directed backjumping (false: the previous rule, the
                               // choices of independent regions skipped; no nogoods)
  bool learn = true;           // local nogoods from the backjumping conflicts
  bool leftmost = false;       // branch at the leftmost lowest cell, not the most constrained
  bool contact = false;        // candidates whose top meets a neighbouring section's height
                               // first (then the heuristic's order)
  int64_t restart_base = 1000; // Luby restarts of this many nodes; 0: none
  double noise = 1.0;          // candidate-order perturbation at restarts (x number of buffers)
  uint64_t seed = 1;
  bool weights = false;        // failure weights (dom/wdeg): restarts order candidates by the
                               // failures their sections took part in, and ties of the
                               // branching cell go to the most failed section
  double weight_growth = 1.05; // per failure, the growth of what the next one adds
};

// One resumable depth-first search (explicit stack of choice points, undo trail).
class Search {
 public:
  enum class State { kRunning, kSolved, kInfeasible };

  Search(Instance inst, const SearchConfig& cfg);
  ~Search();
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;

  // Runs until solved, proven infeasible, `nodes() >= node_cap`, *stop, or the deadline.
  State run(int64_t node_cap, const std::atomic<bool>* stop, Clock::time_point deadline,
            bool use_deadline);
  State state() const;
  int64_t nodes() const;
  // Whether backjumping is on (off: configured so, or a huge instance), how often it skipped a
  // choice, nogoods were learnt, a nogood failed a state.
  struct Stats {
    bool backjump = false;
    int64_t skipped = 0, learnt = 0, nogood_hits = 0;
    int64_t lifts = 0;  // bases raised by the lowest-buffer rule
    int64_t weighed_ties = 0;  // cells chosen over an equal one by failure weight
    int64_t precedences = 0;   // bases raised by the precedence rule
  };
  Stats stats() const;
  // Offsets in units per buffer of the instance, once solved.
  const std::vector<int64_t>& offsets() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace roam::minimalloc
