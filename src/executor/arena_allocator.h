// The executor's CPU allocator (DESIGN.md "Executor"): while a planned training step runs, every
// CPU allocation of PyTorch goes through one process-wide c10::Allocator that serves each planned
// storage from one arena at its planned offset and everything else (operator workspaces, anything
// unmatched) from a counted fallback heap. Only c10 is used here (no torch/ATen, no Python).
//
// Protocol (driven by the Python runner, roam/executor/runner.py):
//   session.configure(arena_bytes, alignment, schedule    schedule[k] = planned allocations of the
//                     [, workspaces, loans])               op at step k: (size, offset) pairs;
//                                                          workspaces and loans: below
//   session.install()                                      c10::SetAllocator(kCPU, ..., priority)
//   for each step k of the plan's order:
//     session.begin_op(k); run the op; session.end_op(k, storage pointers of its planned outputs)
//   session.uninstall()                                    the previous CPU allocator is restored
//
// During op k, the r-th request of n bytes (r counted from 0 within the op) takes the pending
// planned allocation of op k with size n and rank r (ranks come from a calibration run, see
// roam/executor/api.py; 0 by default); it is served at arena + offset only if no live block
// overlaps those bytes (checked on every allocation, debug mode or not). Anything else goes to
// the fallback heap. A planned block freed while its op is still running was a workspace of that
// size: its expectation is re-armed for the next request of that size. end_op checks that every
// planned output really sits at its offset.
//
// Loans of pending output slots (optional, from the calibration run): the capture's workspace of
// an op is the most bytes of the op's allocations live at once minus its outputs (GRAPH_FORMAT.md
// `workspace`, "over and above its outputs"), so a kernel whose scratch peaks before its outputs
// exist needs the outputs' slots for that scratch. loans[k] lists (size, rank, output index):
// the rank-th request of `size` bytes during op k (counted like the outputs' ranks) was freed,
// in the calibration run, before that planned output was requested, so it may sit in the
// output's slot while the output is still pending. Such a request is first served in free bytes
// of its lending slots and of the op's workspace block (adjacent ones merge: a scratch may
// straddle a slot and the block), at the place with the most bytes in the slots; a scratch still
// live when its output is requested makes that output refused by the live-set check (divergence,
// as for any occupied slot), never an overlap.
//
// Planned workspaces (plan field workspace_offsets): op k may have a workspace block
// [offset, offset + size) in the arena. Every request during op k that is not one of its planned
// outputs and found no loan is sub-allocated from that block in request order, first fit among
// the block's bytes not held by a live block; a request that does not fit there goes on as below.
//
// Workspaces in free arena bytes (optional, on by default from Python): an unplanned request of at
// least kMinArenaWorkspace bytes during op k is served, best fit, from bytes of the arena that
// are free right now: not in a live block and not reserved for a still pending output of op k
// (the pending outputs that lend to this request, above, are not reserved for it).
// It needs nothing else: a planned allocation of a later op that finds those bytes still taken
// (a workspace that outlived its op) is refused by the live-set check like any other.
//
// Divergence (an expected output not at its offset, a planned slot still occupied, a schedule that
// does not fit the arena) switches the session to ordinary allocation for the rest of the step; the
// first mismatch is kept as a message. Arena blocks already handed out stay valid until freed.
//
// Sizes are bytes. Fallback bytes are counted rounded up to 64 (c10's CPU alignment), the same
// way in every mode, so eager (pass-through) and planned runs are measured alike.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <c10/core/Allocator.h>

namespace roam_exec {

struct PlannedAlloc {
  uint64_t size = 0;    // bytes the kernel is expected to request
  uint64_t offset = 0;  // arena offset, a multiple of the alignment
  uint32_t rank = 0;    // which request of `size` bytes during the op it is (0: the first);
                        // kernels may first allocate a workspace of the output's size
};

enum class Mode : int { kPassThrough = 0, kPlanned = 1, kDiverged = 2 };

struct SessionStats {
  Mode mode = Mode::kPassThrough;
  uint64_t arena_bytes = 0;            // planned arena size (reserved while configured)
  uint64_t arena_high_water = 0;       // max offset + aligned size over blocks served in the arena
  uint64_t arena_live_peak = 0;        // max over time of aligned bytes live in the arena
  uint64_t arena_allocs = 0;           // allocations served in the arena
  uint64_t fallback_allocs = 0;        // allocations served by the fallback heap (n > 0)
  uint64_t fallback_live = 0;          // bytes (rounded to 64) live in the fallback heap now
  uint64_t fallback_peak = 0;          // max over time of fallback_live
  uint64_t total_peak = 0;             // max over time of arena_bytes (if planned) + fallback_live
  uint64_t rearmed = 0;                // planned slots freed inside their op (workspaces)
  uint64_t release_waits = 0;          // planned outputs / workspace-block requests that waited for a late free (set_release_wait)
  uint64_t mismatches = 0;             // divergences detected (>= 1 means the run diverged)
  int64_t first_mismatch_step = -1;
  std::string first_mismatch;          // message of the first one
  uint64_t debug_checks = 0;           // allocations checked against the live set (debug mode)
  uint64_t debug_violations = 0;       // overlaps found (must stay 0)
  std::string first_violation;
  uint64_t outside_ops = 0;            // allocations made between ops (always fallback)
  uint64_t arena_workspaces = 0;       // unplanned requests served from free arena bytes
  uint64_t arena_workspace_bytes = 0;  // their total (aligned) size
  uint64_t block_workspaces = 0;       // requests served from the op's planned workspace block
  uint64_t block_workspace_bytes = 0;  // their total (aligned) size
  uint64_t loan_workspaces = 0;        // requests served in pending output slots (loans)
  uint64_t loan_workspace_bytes = 0;   // their total (aligned) size
};

/// A scratch request that may sit in a pending output's slot (see "Loans" above).
struct Loan {
  uint64_t size = 0;  // bytes of the request
  uint32_t rank = 0;  // which request of `size` bytes during the op (0: the first), all requests
                      // counted, outputs included (the ranks of PlannedAlloc)
  uint32_t out = 0;   // index of the lending output in schedule[k]
};

struct WorkspaceBlock {
  uint64_t offset = 0;  // arena offset of the op's planned workspace (a multiple of alignment)
  uint64_t size = 0;    // bytes (0: the op has none)
};

class Session;

/// One planned (or pass-through) measurement session. Create one per executor; configure it, then
/// install / uninstall around each step. Thread-safe: kernels' worker threads may allocate.
class Session : public std::enable_shared_from_this<Session> {
 public:
  static constexpr uint64_t kMinArenaWorkspace = 4096;  // smaller ones go to the heap
  // The longest a workspace-block request waits for a late free (set_release_wait).
  static constexpr double kBlockReleaseWaitSeconds = 0.002;

  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Reserves the arena (64-byte aligned; pages are touched only when used) and sets the
  /// per-step planned allocations. arena_bytes 0 with an empty schedule means pass-through.
  /// Throws std::invalid_argument when a planned block is misaligned or outside the arena.
  /// `workspaces[k]` (optional; empty or one per step): the planned workspace block of step k.
  /// `loans[k]` (optional; empty or one list per step): the scratch requests of step k that
  /// may sit in a pending output's slot. Throws std::invalid_argument when a loan names an
  /// output that step does not have.
  void configure(uint64_t arena_bytes, uint64_t alignment,
                 std::vector<std::vector<PlannedAlloc>> schedule,
                 std::vector<WorkspaceBlock> workspaces = {},
                 std::vector<std::vector<Loan>> loans = {});
  /// Pass-through mode: every allocation goes to the previous CPU allocator, counted.
  void set_pass_through(bool on);
  void set_debug(bool on);
  bool debug() const;
  /// Serve unplanned requests (workspaces) from free arena bytes when they fit.
  void set_workspaces_in_arena(bool on);
  /// A planned output whose slot is still held by a block the plan has already freed waits up
  /// to `seconds` for another thread to free it before the step diverges (0, the default:
  /// diverge at once). For steps with collectives: the communication library's worker thread
  /// drops its reference to a collective's buffer shortly after the wait on it returns.
  void set_release_wait(double seconds);
  /// Records every allocation and free of the step: (step, bytes, arena offset or -1 for the
  /// fallback heap, +1 alloc / -1 free, address). For calibration and for diagnosing a plan that does not match a run.
  void set_record(bool on);
  std::vector<std::tuple<int32_t, uint64_t, int64_t, int, uint64_t>> events() const;

  /// Installs this session as the CPU allocator (priority `priority`) and resets the per-step
  /// statistics. Throws std::logic_error if some session is already installed.
  void install(uint8_t priority);
  /// Restores the CPU allocator that was installed before. No-op when not installed.
  void uninstall();
  bool installed() const;

  void begin_op(int32_t step);
  /// `ptrs[i]`: storage data pointer of the i-th planned output of `step` (0 when the output is
  /// missing). Returns false (and diverges) when one is not at its planned place.
  bool end_op(int32_t step, const std::vector<uint64_t>& ptrs, const std::string& what);
  /// end_op(step, ptrs, what) then begin_op(next_step) under one lock: one call per op from the
  /// runner when nothing is allocated between the two ops (frees in between are then counted in
  /// next_step, which changes nothing: a block is re-armed only when freed during its own op).
  /// Returns end_op's result.
  bool end_begin_op(int32_t step, const std::vector<uint64_t>& ptrs, const std::string& what,
                    int32_t next_step);
  /// Records an external divergence (e.g. a different graph noticed by the runner).
  void diverge(int64_t step, const std::string& message);

  SessionStats stats() const;
  uint64_t arena_base() const;   // address of the arena (0 when none)
  /// Blocks still live in the arena (after a step: storages that escaped it).
  uint64_t arena_live_blocks() const;
  /// Addresses [begin, end) of every live block handed out by this session (debug listing).
  std::vector<std::pair<uint64_t, uint64_t>> live_ranges() const;

  /// Called by the process-wide allocator for every CPU allocation while installed.
  c10::DataPtr allocate(size_t n);
  /// Called by the deleter (after the block left the address registry).
  void free_arena_block(uint64_t offset);
  void free_fallback_block(uint64_t ptr, uint64_t size, uint64_t counted);

 private:
  struct ArenaBlock {
    uint64_t span = 0;        // aligned size
    int32_t step = -1;        // op during which it was served
    int32_t expect = -1;      // index in schedule_[step]; -1 free-arena workspace, -2 from the
                              // op's planned workspace block, -3 in pending output slots (loan)
  };
  c10::DataPtr allocate_fallback_locked(size_t n, std::unique_lock<std::mutex>& lock);
  /// Best-fit free arena range of `span` bytes during the current op, or -1; the pending outputs
  /// marked in `lent` (may be empty) are not reserved.
  int64_t find_arena_gap_locked(uint64_t span, const std::vector<uint8_t>& lent) const;
  /// Range of `span` bytes not overlapping a live block inside the slots of the current op's
  /// pending outputs marked in `lent` and its workspace block (adjacent ones merged) that has
  /// the most bytes in those slots (then: flush with an end of its free range, the smaller
  /// range, the lower address); -1 when none has a byte in them.
  int64_t find_loan_fit_locked(uint64_t span, const std::vector<uint8_t>& lent) const;
  /// First-fit range of `span` bytes inside the current op's workspace block, or -1.
  /// `own_blocks_only`: only the live blocks served during the current op count (would it
  /// fit once the earlier ops' blocks the plan has freed are freed).
  int64_t find_block_fit_locked(uint64_t span, bool own_blocks_only = false) const;
  c10::DataPtr serve_arena_locked(uint64_t offset, uint64_t span, size_t n, int32_t expect,
                                  std::unique_lock<std::mutex>& lock);
  void diverge_locked(int64_t step, const std::string& message);
  void begin_op_locked(int32_t step);
  bool end_op_locked(int32_t step, const std::vector<uint64_t>& ptrs, const std::string& what);
  static std::string describe(uint64_t offset, const ArenaBlock& b);
  bool arena_range_free_locked(uint64_t offset, uint64_t span, std::string* who) const;
  void debug_check_locked(uint64_t begin, uint64_t end);
  void note_total_locked();

  mutable std::mutex mu_;
  std::condition_variable freed_cv_;  // notified on every arena free (set_release_wait)
  double release_wait_s_ = 0.0;
  c10::Allocator* previous_ = nullptr;  // restored by uninstall
  uint8_t priority_ = 0;
  bool installed_ = false;
  bool pass_through_ = true;
  bool debug_ = false;
  bool record_ = false;
  bool arena_workspaces_ = false;
  std::vector<std::tuple<int32_t, uint64_t, int64_t, int, uint64_t>> events_;  // + address
  std::vector<std::pair<uint64_t, uint32_t>> op_counts_;  // requests per size in the current op

  uint8_t* arena_raw_ = nullptr;
  uint8_t* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  uint64_t alignment_ = 64;
  std::vector<std::vector<PlannedAlloc>> schedule_;
  std::vector<std::vector<uint8_t>> pending_;  // per step, per planned alloc: 1 = not yet served
  std::vector<std::vector<uint32_t>> ranks_;   // the configured ranks (re-arming changes them)
  std::vector<WorkspaceBlock> workspaces_;     // per step (empty: no planned workspaces)
  std::vector<std::vector<Loan>> loans_;       // per step (empty: no loans)

  int32_t current_ = -1;
  std::map<uint64_t, ArenaBlock> arena_live_;    // offset -> block
  uint64_t arena_live_bytes_ = 0;
  std::map<uint64_t, uint64_t> debug_live_;      // begin -> end, every live block (debug mode)
  int64_t fallback_live_ = 0;    // may go below the step's baseline when older blocks die
  int64_t fallback_base_ = 0;    // fallback_live_ at install
  SessionStats st_;
};

/// The process-wide c10 CPU allocator that routes to the installed session (or to the previous
/// allocator when none is installed: storages served here may be resized after a step).
c10::Allocator* global_allocator();

}  // namespace roam_exec
