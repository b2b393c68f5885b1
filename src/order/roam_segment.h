// Internal: one segment between key points as a self-contained order problem, and its solver
// (portfolio of list schedules, exact bottleneck-Dijkstra over scheduled sets, local search).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace roam::detail {

/// An internal invariant of the roam order failed (a bug, never bad input): order_roam catches
/// it, warns, and returns the best baseline order instead.
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

/// A storage as seen from one segment. Local op indices.
struct SegStorage {
  uint64_t size = 0;            // aligned bytes
  bool pre = false;             // born before the segment (live from its first step)
  bool escape = false;          // live after the segment's last step
  std::vector<int32_t> births;  // local ops whose first run gives it birth (empty when pre)
  std::vector<int32_t> users;   // local ops that read or write it (or run a pinned op that does)
  std::vector<int32_t> direct;  // users that descend from a birth op (subset of users)
};

/// Touch entry of an op: storage index and flags.
constexpr uint8_t kBirth = 1;
constexpr uint8_t kUser = 2;
constexpr uint8_t kDirect = 4;  // a user that surely runs after the storage is born

struct SegmentProblem {
  int32_t k = 0;                                   // ops
  std::vector<std::vector<int32_t>> preds, succs;  // local dependencies (incl. artificial)
  std::vector<SegStorage> storages;
  std::vector<std::vector<std::pair<int32_t, uint8_t>>> touch;  // per op, unique storages
  uint64_t constant = 0;  // bytes live at every step of the segment that no op of it touches
  /// Fills `touch` from storages; call once after storages are set.
  void build_touch();
};

/// Peak live bytes of `order` (local indices) under the segment's model.
uint64_t segment_peak(const SegmentProblem& p, const std::vector<int32_t>& order);

/// LESCEA and lpmf list schedules of the segment (list_schedule.h), local op indices.
std::vector<int32_t> schedule_lescea(const SegmentProblem& p);
std::vector<int32_t> schedule_lpmf(const SegmentProblem& p);

/// Static lower bound on the segment's peak (constant + per op: storages it must hold).
uint64_t segment_lower_bound(const SegmentProblem& p);

struct SegmentSettings {
  bool exact = true;
  int32_t exact_node_limit = 192;
  int64_t exact_state_limit = 200000;
  int64_t local_search_swaps = 1000000;
  std::chrono::steady_clock::time_point deadline;  // safety stop only
};

struct SegmentResult {
  std::vector<int32_t> order;
  uint64_t peak = 0;
  bool exact_finished = false;  // exact search completed: peak is optimal (or <= target)
  bool time_limit_hit = false;
  int64_t states = 0;
  int64_t swaps = 0;
};

/// Solves one segment. `hints` are topological local orders (e.g. baselines restricted to the
/// segment); `target` is a value below which the segment's peak does not matter (a lower
/// bound on the whole order's Tp): the search stops as soon as it reaches it.
SegmentResult solve_segment(const SegmentProblem& p, const std::vector<std::vector<int32_t>>& hints,
                            const SegmentSettings& settings, uint64_t target);

/// Kahn's algorithm with priority: among ready ops, the smallest rank first. Throws
/// InternalError when the graph has a cycle.
std::vector<int32_t> priority_topological(const std::vector<std::vector<int32_t>>& preds,
                                          const std::vector<std::vector<int32_t>>& succs,
                                          const std::vector<int64_t>& rank);

}  // namespace roam::detail
