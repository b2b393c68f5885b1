// See arena_allocator.h.
#include "arena_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <c10/core/CPUAllocator.h>
#include <c10/core/Device.h>

namespace roam_exec {

namespace {

constexpr uint64_t kCountAlign = 64;  // c10's CPU allocator alignment: what a block really costs

uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// ---- the process-wide routing allocator
std::mutex g_mu;
std::shared_ptr<Session> g_current;   // installed session, if any
c10::Allocator* g_previous = nullptr;  // allocator in place before the first install

class RoutingAllocator final : public c10::Allocator {
 public:
  // PyTorch 2.x's c10::Allocator: allocate() is non-const (1.13's was const) and copy_data() is
  // pure virtual (Storage copies between two blocks of this allocator: plain CPU memory, so
  // memcpy, as c10's own CPU allocator does).
  c10::DataPtr allocate(size_t n) override {
    std::shared_ptr<Session> s;
    c10::Allocator* prev = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      s = g_current;
      prev = g_previous;
    }
    if (s) return s->allocate(n);
    // Not installed (a storage served during a step and resized after it): plain allocation.
    return (prev != nullptr ? prev : c10::GetDefaultCPUAllocator())->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

RoutingAllocator g_routing;  // never destroyed before the process ends: storages keep a pointer

}  // namespace

c10::Allocator* global_allocator() { return &g_routing; }

namespace {

// ---- live blocks by address: the deleter gets only the data pointer (c10's raw_deleter contract,
// needed by kernels that use Allocator::raw_allocate), so blocks are found in a global registry.
struct Entry {
  std::shared_ptr<Session> session;  // keeps the session (and with it the arena) alive
  bool arena = false;
  uint64_t offset = 0;               // arena blocks
  c10::DataPtr inner;                // fallback blocks: the previous allocator's block
  uint64_t counted = 0;
};

std::mutex g_reg_mu;
std::unordered_map<void*, Entry>& registry() {
  static auto* r = new std::unordered_map<void*, Entry>();  // never destroyed (late frees)
  return *r;
}

void release(void* p) {
  Entry e;
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    auto it = registry().find(p);
    if (it == registry().end()) return;  // cannot happen: every block is registered once
    e = std::move(it->second);
    registry().erase(it);
  }
  if (e.arena) {
    e.session->free_arena_block(e.offset);
  } else {
    e.session->free_fallback_block(reinterpret_cast<uint64_t>(p), 0, e.counted);
  }
  // e.inner (fallback memory) is freed here, outside every lock
}

c10::DataPtr register_block(void* p, Entry&& e) {
  {
    std::lock_guard<std::mutex> lock(g_reg_mu);
    registry()[p] = std::move(e);
  }
  return c10::DataPtr(p, p, &release, c10::Device(c10::DeviceType::CPU));
}

c10::DeleterFnPtr RoutingAllocator::raw_deleter() const { return &release; }

}  // namespace

Session::Session() = default;

Session::~Session() {
  // Every block holds a shared_ptr to the session: nothing can be live here.
  std::free(arena_raw_);
}

void Session::configure(uint64_t arena_bytes, uint64_t alignment,
                        std::vector<std::vector<PlannedAlloc>> schedule,
                        std::vector<WorkspaceBlock> workspaces,
                        std::vector<std::vector<Loan>> loans) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw std::invalid_argument("alignment must be a power of two");
  }
  for (size_t k = 0; k < schedule.size(); ++k) {
    for (const PlannedAlloc& a : schedule[k]) {
      if (a.offset % alignment != 0) {
        throw std::invalid_argument("planned block at step " + std::to_string(k) + " has offset " +
                                    std::to_string(a.offset) + ", not a multiple of " +
                                    std::to_string(alignment));
      }
      if (a.size == 0 || a.offset + round_up(a.size, alignment) > arena_bytes) {
        throw std::invalid_argument("planned block at step " + std::to_string(k) + " (offset " +
                                    std::to_string(a.offset) + ", size " + std::to_string(a.size) +
                                    ") is empty or outside the arena of " +
                                    std::to_string(arena_bytes) + " bytes");
      }
    }
  }
  if (!workspaces.empty() && workspaces.size() != schedule.size()) {
    throw std::invalid_argument("workspaces: " + std::to_string(workspaces.size()) +
                                " blocks for " + std::to_string(schedule.size()) + " steps");
  }
  for (size_t k = 0; k < workspaces.size(); ++k) {
    const WorkspaceBlock& w = workspaces[k];
    if (w.size == 0) continue;
    if (w.offset % alignment != 0 || w.offset + round_up(w.size, alignment) > arena_bytes) {
      throw std::invalid_argument("workspace block of step " + std::to_string(k) + " (offset " +
                                  std::to_string(w.offset) + ", size " + std::to_string(w.size) +
                                  ") is misaligned or outside the arena of " +
                                  std::to_string(arena_bytes) + " bytes");
    }
  }
  if (!loans.empty() && loans.size() != schedule.size()) {
    throw std::invalid_argument("loans: " + std::to_string(loans.size()) + " lists for " +
                                std::to_string(schedule.size()) + " steps");
  }
  for (size_t k = 0; k < loans.size(); ++k) {
    for (const Loan& l : loans[k]) {
      if (l.out >= schedule[k].size() || l.size == 0) {
        throw std::invalid_argument("loan of step " + std::to_string(k) + " (size " +
                                    std::to_string(l.size) + ", rank " + std::to_string(l.rank) +
                                    ") names output " + std::to_string(l.out) + " of " +
                                    std::to_string(schedule[k].size()) + " planned outputs");
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (installed_) throw std::logic_error("configure() while the session is installed");
  if (!arena_live_.empty()) {
    throw std::logic_error("configure() while blocks of the previous arena are still live");
  }
  if (arena_bytes != arena_bytes_ || arena_ == nullptr) {
    std::free(arena_raw_);
    arena_raw_ = nullptr;
    arena_ = nullptr;
    if (arena_bytes > 0) {
      // Aligned to a page and to the plan's alignment; untouched pages cost nothing.
      const uint64_t a = std::max<uint64_t>(alignment, 4096);
      void* p = nullptr;
      if (posix_memalign(&p, a, round_up(arena_bytes, a)) != 0 || p == nullptr) {
        throw std::bad_alloc();
      }
      arena_raw_ = static_cast<uint8_t*>(p);
      arena_ = arena_raw_;
    }
  }
  arena_bytes_ = arena_bytes;
  alignment_ = alignment;
  schedule_ = std::move(schedule);
  workspaces_ = std::move(workspaces);
  loans_ = std::move(loans);
  pending_.assign(schedule_.size(), {});
  ranks_.assign(schedule_.size(), {});
  for (size_t k = 0; k < schedule_.size(); ++k) {
    pending_[k].assign(schedule_[k].size(), 1);
    for (const PlannedAlloc& a : schedule_[k]) ranks_[k].push_back(a.rank);
  }
  pass_through_ = arena_bytes_ == 0 && schedule_.empty();
}

void Session::set_pass_through(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  pass_through_ = on;
}

void Session::set_debug(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  debug_ = on;
}

void Session::set_record(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  record_ = on;
}

std::vector<std::tuple<int32_t, uint64_t, int64_t, int, uint64_t>> Session::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

void Session::set_workspaces_in_arena(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  arena_workspaces_ = on;
}

void Session::set_release_wait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  release_wait_s_ = seconds > 0.0 ? seconds : 0.0;
}

bool Session::debug() const {
  std::lock_guard<std::mutex> lock(mu_);
  return debug_;
}

void Session::install(uint8_t priority) {
  std::lock_guard<std::mutex> glock(g_mu);
  if (g_current) throw std::logic_error("a roam executor session is already installed");
  c10::Allocator* prev = c10::GetAllocator(c10::DeviceType::CPU);
  if (prev == &g_routing) prev = g_previous != nullptr ? g_previous : c10::GetDefaultCPUAllocator();
  {
    std::lock_guard<std::mutex> lock(mu_);
    previous_ = prev;
    priority_ = priority;
    installed_ = true;
    current_ = -1;
    for (auto& p : pending_) std::fill(p.begin(), p.end(), 1);
    st_ = SessionStats{};
    st_.mode = pass_through_ ? Mode::kPassThrough : Mode::kPlanned;
    st_.arena_bytes = pass_through_ ? 0 : arena_bytes_;
    fallback_base_ = fallback_live_;
    st_.total_peak = st_.arena_bytes;
    events_.clear();
  }
  if (g_previous == nullptr) g_previous = prev;
  g_current = shared_from_this();
  c10::SetAllocator(c10::DeviceType::CPU, &g_routing, priority);
  if (c10::GetAllocator(c10::DeviceType::CPU) != &g_routing) {
    g_current.reset();
    std::lock_guard<std::mutex> lock(mu_);
    installed_ = false;
    throw std::runtime_error("c10::SetAllocator(kCPU) was refused (a higher-priority CPU allocator "
                             "is installed); raise the priority");
  }
}

void Session::uninstall() {
  std::lock_guard<std::mutex> glock(g_mu);
  c10::Allocator* prev = nullptr;
  uint8_t priority = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!installed_) return;
    installed_ = false;
    current_ = -1;
    prev = previous_;
    priority = priority_;
  }
  if (g_current.get() == this) g_current.reset();
  c10::SetAllocator(c10::DeviceType::CPU, prev, priority);
}

bool Session::installed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return installed_;
}

void Session::begin_op(int32_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  begin_op_locked(step);
}

bool Session::end_op(int32_t step, const std::vector<uint64_t>& ptrs, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  return end_op_locked(step, ptrs, what);
}

bool Session::end_begin_op(int32_t step, const std::vector<uint64_t>& ptrs,
                           const std::string& what, int32_t next_step) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool ok = end_op_locked(step, ptrs, what);
  begin_op_locked(next_step);
  return ok;
}

void Session::begin_op_locked(int32_t step) {
  current_ = step;
  op_counts_.clear();
  if (step < 0 || static_cast<size_t>(step) >= schedule_.size()) return;
  std::fill(pending_[step].begin(), pending_[step].end(), 1);
  for (size_t i = 0; i < schedule_[step].size(); ++i) schedule_[step][i].rank = ranks_[step][i];
}

bool Session::end_op_locked(int32_t step, const std::vector<uint64_t>& ptrs,
                            const std::string& what) {
  current_ = -1;
  if (st_.mode != Mode::kPlanned) return st_.mode != Mode::kDiverged;
  if (step < 0 || static_cast<size_t>(step) >= schedule_.size()) return true;
  const auto& plan = schedule_[step];
  if (ptrs.size() != plan.size()) {
    diverge_locked(step, what + ": " + std::to_string(ptrs.size()) + " planned outputs seen, " +
                             std::to_string(plan.size()) + " in the plan (different graph)");
    return false;
  }
  const uint64_t base = reinterpret_cast<uint64_t>(arena_);
  for (size_t i = 0; i < plan.size(); ++i) {
    const uint64_t want = base + plan[i].offset;
    if (ptrs[i] == want) continue;
    std::ostringstream m;
    m << what << ": output " << i << " (" << plan[i].size << " bytes) planned at arena offset "
      << plan[i].offset << " but ";
    if (ptrs[i] == 0) {
      m << "it is missing or not a fresh storage";
    } else if (ptrs[i] >= base && ptrs[i] < base + arena_bytes_) {
      m << "served at arena offset " << (ptrs[i] - base) << " (allocation out of order)";
    } else if (pending_[step][i]) {
      m << "no allocation of that size was requested (size mismatch; it lives at " << hex(ptrs[i])
        << ")";
    } else {
      m << "it lives at " << hex(ptrs[i]) << ", outside the arena";
    }
    diverge_locked(step, m.str());
    return false;
  }
  return true;
}

void Session::diverge(int64_t step, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  diverge_locked(step, message);
}

void Session::diverge_locked(int64_t step, const std::string& message) {
  ++st_.mismatches;
  if (st_.first_mismatch.empty()) {
    st_.first_mismatch = message;
    st_.first_mismatch_step = step;
  }
  if (st_.mode == Mode::kPlanned) st_.mode = Mode::kDiverged;
}

SessionStats Session::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SessionStats s = st_;
  s.fallback_live = static_cast<uint64_t>(std::max<int64_t>(0, fallback_live_ - fallback_base_));
  return s;
}

uint64_t Session::arena_base() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reinterpret_cast<uint64_t>(arena_);
}

uint64_t Session::arena_live_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return arena_live_.size();
}

std::vector<std::pair<uint64_t, uint64_t>> Session::live_ranges() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> out(debug_live_.begin(), debug_live_.end());
  return out;
}

std::string Session::describe(uint64_t offset, const ArenaBlock& b) {
  return std::string(b.expect == -3   ? "workspace in a pending output's slot"
                     : b.expect == -2 ? "planned workspace"
                     : b.expect < 0   ? "workspace"
                                      : "block") +
         " at offset " +
         std::to_string(offset) + " (" + std::to_string(b.span) + " bytes, served at step " +
         std::to_string(b.step) + ")";
}

bool Session::arena_range_free_locked(uint64_t offset, uint64_t span, std::string* who) const {
  // Blocks are disjoint, so only the block starting at or before `offset` and the first one
  // after it can overlap [offset, offset + span).
  auto it = arena_live_.upper_bound(offset);
  if (it != arena_live_.end() && it->first < offset + span) {
    if (who) *who = describe(it->first, it->second);
    return false;
  }
  if (it != arena_live_.begin()) {
    --it;
    if (it->first + it->second.span > offset) {
      if (who) *who = describe(it->first, it->second);
      return false;
    }
  }
  return true;
}

void Session::debug_check_locked(uint64_t begin, uint64_t end) {
  ++st_.debug_checks;
  auto it = debug_live_.upper_bound(begin);
  bool bad = false;
  uint64_t ob = 0, oe = 0;
  if (it != debug_live_.end() && it->first < end) {
    bad = true;
    ob = it->first;
    oe = it->second;
  } else if (it != debug_live_.begin()) {
    --it;
    if (it->second > begin) {
      bad = true;
      ob = it->first;
      oe = it->second;
    }
  }
  if (bad) {
    ++st_.debug_violations;
    if (st_.first_violation.empty()) {
      st_.first_violation = "new block [" + hex(begin) + ", " + hex(end) + ") overlaps live block [" +
                            hex(ob) + ", " + hex(oe) + ")";
    }
  }
  debug_live_[begin] = end;
}

void Session::note_total_locked() {
  const int64_t fb = fallback_live_ - fallback_base_;
  const uint64_t f = fb > 0 ? static_cast<uint64_t>(fb) : 0;
  st_.fallback_peak = std::max(st_.fallback_peak, f);
  st_.total_peak = std::max(st_.total_peak, st_.arena_bytes + f);
}

c10::DataPtr Session::allocate(size_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  if (current_ < 0) ++st_.outside_ops;
  if (n > 0 && st_.mode == Mode::kPlanned && current_ >= 0 &&
      static_cast<size_t>(current_) < schedule_.size()) {
    uint32_t rank = 0;
    {
      auto c = std::find_if(op_counts_.begin(), op_counts_.end(),
                            [n](const auto& e) { return e.first == n; });
      if (c == op_counts_.end()) {
        op_counts_.emplace_back(n, 1);
      } else {
        rank = c->second++;
      }
    }
    auto& plan = schedule_[current_];
    auto& pend = pending_[current_];
    for (size_t i = 0; i < plan.size(); ++i) {
      if (!pend[i] || plan[i].size != n || plan[i].rank != rank) continue;
      const uint64_t span = round_up(n, alignment_);
      std::string who;
      bool free_now = arena_range_free_locked(plan[i].offset, span, &who);
      if (!free_now && release_wait_s_ > 0.0) {
        const uint64_t off = plan[i].offset;
        free_now = freed_cv_.wait_for(lock, std::chrono::duration<double>(release_wait_s_),
                                      [&] { return arena_range_free_locked(off, span, nullptr); });
        if (free_now) ++st_.release_waits;
      }
      if (!free_now) {
        diverge_locked(current_, "step " + std::to_string(current_) + ": planned block at offset " +
                                     std::to_string(plan[i].offset) + " (" + std::to_string(n) +
                                     " bytes) is still occupied by the live " + who);
        break;  // served by the fallback heap below
      }
      pend[i] = 0;
      return serve_arena_locked(plan[i].offset, span, n, static_cast<int32_t>(i), lock);
    }
    // not a planned output: a scratch (workspace) request
    std::vector<uint8_t> lent;  // per planned output of the op: 1 = lends its slot to it
    if (!loans_.empty() && st_.mode == Mode::kPlanned) {
      for (const Loan& l : loans_[current_]) {
        if (l.size != n || l.rank != rank || !pend[l.out]) continue;
        if (lent.empty()) lent.assign(plan.size(), 0);
        lent[l.out] = 1;
      }
      if (!lent.empty()) {
        const uint64_t span = round_up(n, alignment_);
        const int64_t off = find_loan_fit_locked(span, lent);
        if (off >= 0) {
          ++st_.loan_workspaces;
          st_.loan_workspace_bytes += span;
          return serve_arena_locked(static_cast<uint64_t>(off), span, n, -3, lock);
        }
      }
    }
    if (st_.mode == Mode::kPlanned && !workspaces_.empty() && workspaces_[current_].size > 0) {
      const uint64_t span = round_up(n, alignment_);
      int64_t off = find_block_fit_locked(span);
      if (off < 0 && release_wait_s_ > 0.0 && span >= kMinArenaWorkspace &&
          find_block_fit_locked(span, true) >= 0) {
        // the block is held by an earlier op's storage the plan has freed by now: a late
        // free (a process group's worker thread), waited for briefly. Only for a request of
        // at least kMinArenaWorkspace bytes (a smaller one goes to the fallback heap at once),
        // and at most kBlockReleaseWaitSeconds: gloo may also hold a collective's scratch
        // until it takes its next collective, which this op has yet to launch (every rank
        // would wait out the whole time); such a request then goes on to free arena bytes
        const double wait_s = std::min(release_wait_s_, kBlockReleaseWaitSeconds);
        if (freed_cv_.wait_for(lock, std::chrono::duration<double>(wait_s),
                               [&] { return find_block_fit_locked(span) >= 0; })) {
          ++st_.release_waits;
        }
        off = find_block_fit_locked(span);
      }
      if (off >= 0) {
        ++st_.block_workspaces;
        st_.block_workspace_bytes += span;
        return serve_arena_locked(static_cast<uint64_t>(off), span, n, -2, lock);
      }
    }
    if (arena_workspaces_ && n >= kMinArenaWorkspace && st_.mode == Mode::kPlanned) {
      const uint64_t span = round_up(n, alignment_);
      const int64_t off = find_arena_gap_locked(span, lent);
      if (off >= 0) {
        ++st_.arena_workspaces;
        st_.arena_workspace_bytes += span;
        return serve_arena_locked(static_cast<uint64_t>(off), span, n, -1, lock);
      }
    }
  }
  return allocate_fallback_locked(n, lock);
}

c10::DataPtr Session::serve_arena_locked(uint64_t offset, uint64_t span, size_t n,
                                         int32_t expect, std::unique_lock<std::mutex>& lock) {
  arena_live_[offset] = ArenaBlock{span, current_, expect};
  arena_live_bytes_ += span;
  st_.arena_live_peak = std::max(st_.arena_live_peak, arena_live_bytes_);
  if (expect >= 0 || expect == -2) {  // planned outputs and planned workspace blocks
    st_.arena_high_water = std::max(st_.arena_high_water, offset + span);
    if (expect >= 0) ++st_.arena_allocs;
  }
  uint8_t* p = arena_ + offset;
  if (record_) {
    events_.emplace_back(current_, n, static_cast<int64_t>(offset), 1,
                         reinterpret_cast<uint64_t>(p));
  }
  if (debug_) {
    const uint64_t b = reinterpret_cast<uint64_t>(p);
    debug_check_locked(b, b + span);
  }
  Entry e;
  e.session = shared_from_this();
  e.arena = true;
  e.offset = offset;
  lock.unlock();
  return register_block(p, std::move(e));
}

int64_t Session::find_block_fit_locked(uint64_t span, bool own_blocks_only) const {
  const WorkspaceBlock& w = workspaces_[current_];
  const uint64_t end = w.offset + round_up(w.size, alignment_);
  uint64_t cursor = w.offset;
  // live blocks are disjoint and ordered by offset: start from the last one at or before the
  // block's first byte (it may reach into it), walk the gaps in address order
  auto it = arena_live_.upper_bound(w.offset);
  if (it != arena_live_.begin()) --it;
  for (; it != arena_live_.end() && it->first < end; ++it) {
    if (own_blocks_only && it->second.step != current_) continue;
    const uint64_t b = it->first, e = it->first + it->second.span;
    if (e <= cursor) continue;
    if (b >= cursor + span) break;  // the gap before this block fits
    cursor = std::max(cursor, e);
  }
  return cursor + span <= end ? static_cast<int64_t>(cursor) : -1;
}

int64_t Session::find_loan_fit_locked(uint64_t span, const std::vector<uint8_t>& lent) const {
  // The lending slots and the op's workspace block, merged where adjacent: a scratch may
  // straddle a lending slot and the block next to it.
  std::vector<std::pair<uint64_t, uint64_t>> slots;  // lending slots [begin, end), sorted
  const auto& plan = schedule_[current_];
  for (size_t i = 0; i < plan.size(); ++i) {
    if (lent[i]) slots.emplace_back(plan[i].offset, plan[i].offset + round_up(plan[i].size, alignment_));
  }
  std::sort(slots.begin(), slots.end());
  std::vector<std::pair<uint64_t, uint64_t>> region(slots);
  if (!workspaces_.empty() && workspaces_[current_].size > 0) {
    const WorkspaceBlock& w = workspaces_[current_];
    region.emplace_back(w.offset, w.offset + round_up(w.size, alignment_));
    std::sort(region.begin(), region.end());
  }
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : region) {
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  auto lent_overlap = [&](uint64_t c) {
    uint64_t o = 0;
    for (const auto& [sb, se] : slots) {
      const uint64_t b = std::max(sb, c), e = std::min(se, c + span);
      if (e > b) o += e - b;
    }
    return o;
  };
  // Best: the most bytes in lending slots (the fewest taken from the block), then flush with
  // an end of its free range (no range split in two), then the smaller range, then the lower
  // address.
  int64_t best = -1;
  uint64_t best_overlap = 0, best_gap = UINT64_MAX;
  bool best_flush = false;
  auto consider_gap = [&](uint64_t a, uint64_t b) {
    if (b <= a || b - a < span) return;
    std::vector<uint64_t> cand{a, b - span};
    for (const auto& [sb, se] : slots) {
      cand.push_back(sb);
      if (se >= span) cand.push_back(se - span);
    }
    for (uint64_t c : cand) {
      c = std::min(std::max(c, a), b - span);
      const uint64_t o = lent_overlap(c);
      if (o == 0) continue;
      const bool flush = c == a || c + span == b;
      const bool better =
          best < 0 || o > best_overlap ||
          (o == best_overlap &&
           (flush != best_flush ? flush
                                : (b - a != best_gap ? b - a < best_gap
                                                     : c < static_cast<uint64_t>(best))));
      if (better) {
        best = static_cast<int64_t>(c);
        best_overlap = o;
        best_flush = flush;
        best_gap = b - a;
      }
    }
  };
  for (const auto& [rb, re] : merged) {
    // the gaps between live blocks inside [rb, re), in address order
    uint64_t cursor = rb;
    auto it = arena_live_.upper_bound(rb);
    if (it != arena_live_.begin()) --it;
    for (; it != arena_live_.end() && it->first < re; ++it) {
      const uint64_t b = it->first, e = it->first + it->second.span;
      if (e <= cursor) continue;
      if (b > cursor) consider_gap(cursor, b);
      cursor = std::max(cursor, e);
    }
    if (re > cursor) consider_gap(cursor, re);
  }
  return best;
}

int64_t Session::find_arena_gap_locked(uint64_t span, const std::vector<uint8_t>& lent) const {
  // Occupied: live blocks, and the outputs of the current op that are still to come (but for
  // those that lend their slot to this request).
  std::vector<std::pair<uint64_t, uint64_t>> reserved;  // [begin, end)
  const auto& plan = schedule_[current_];
  for (size_t i = 0; i < plan.size(); ++i) {
    if (pending_[current_][i] && (lent.empty() || !lent[i])) {
      reserved.emplace_back(plan[i].offset, plan[i].offset + round_up(plan[i].size, alignment_));
    }
  }
  std::sort(reserved.begin(), reserved.end());
  auto r = reserved.begin();
  auto it = arena_live_.begin();
  uint64_t cursor = 0;
  int64_t best = -1;
  uint64_t best_size = UINT64_MAX;
  auto consider = [&](uint64_t gap_end) {
    if (gap_end > cursor && gap_end - cursor >= span && gap_end - cursor < best_size) {
      best = static_cast<int64_t>(cursor);
      best_size = gap_end - cursor;
    }
  };
  while (it != arena_live_.end() || r != reserved.end()) {
    uint64_t b = 0, e = 0;
    if (r == reserved.end() || (it != arena_live_.end() && it->first <= r->first)) {
      b = it->first;
      e = it->first + it->second.span;
      ++it;
    } else {
      b = r->first;
      e = r->second;
      ++r;
    }
    consider(b);
    cursor = std::max(cursor, e);
  }
  consider(arena_bytes_);
  return best;
}

c10::DataPtr Session::allocate_fallback_locked(size_t n, std::unique_lock<std::mutex>& lock) {
  c10::Allocator* prev = previous_ != nullptr ? previous_ : c10::GetDefaultCPUAllocator();
  if (n == 0) {
    lock.unlock();
    return prev->allocate(0);
  }
  lock.unlock();
  c10::DataPtr inner = prev->allocate(n);
  lock.lock();
  const uint64_t counted = round_up(n, kCountAlign);
  fallback_live_ += static_cast<int64_t>(counted);
  ++st_.fallback_allocs;
  void* p = inner.get();
  if (record_) events_.emplace_back(current_, n, -1, 1, reinterpret_cast<uint64_t>(p));
  note_total_locked();
  if (debug_) {
    const uint64_t b = reinterpret_cast<uint64_t>(p);
    debug_check_locked(b, b + n);
  }
  Entry e;
  e.session = shared_from_this();
  e.inner = std::move(inner);
  e.counted = counted;
  lock.unlock();
  return register_block(p, std::move(e));
}

void Session::free_arena_block(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = arena_live_.find(offset);
  if (it == arena_live_.end()) return;  // cannot happen: every block is freed once
  const ArenaBlock b = it->second;
  arena_live_.erase(it);
  arena_live_bytes_ -= b.span;
  freed_cv_.notify_all();
  if (record_) {
    events_.emplace_back(current_, b.span, static_cast<int64_t>(offset), -1,
                         reinterpret_cast<uint64_t>(arena_) + offset);
  }
  debug_live_.erase(reinterpret_cast<uint64_t>(arena_) + offset);
  // A planned block freed while its own op still runs was a workspace of the planned size:
  // the output is still to come, so its expectation is armed again.
  if (installed_ && st_.mode == Mode::kPlanned && current_ >= 0 && b.step == current_ &&
      b.expect >= 0 && static_cast<size_t>(current_) < schedule_.size()) {
    // ... at the next request of that size
    PlannedAlloc& pa = schedule_[current_][b.expect];
    auto c = std::find_if(op_counts_.begin(), op_counts_.end(),
                          [&pa](const auto& e) { return e.first == pa.size; });
    pa.rank = c == op_counts_.end() ? 0 : c->second;
    pending_[current_][b.expect] = 1;
    ++st_.rearmed;
  }
}

void Session::free_fallback_block(uint64_t ptr, uint64_t /*size*/, uint64_t counted) {
  std::lock_guard<std::mutex> lock(mu_);
  fallback_live_ -= static_cast<int64_t>(counted);
  if (record_) events_.emplace_back(current_, counted, -1, -1, ptr);
  debug_live_.erase(ptr);
}

}  // namespace roam_exec
