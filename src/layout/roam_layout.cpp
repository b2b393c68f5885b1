// The `roam` arena layout of a graph for a fixed order (include/roam/roam_layout.h explains the
// method: baselines as the bound and fallback, independent windows, exact leaves, concatenation).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <numeric>
#include <thread>

#include "best_fit_gap.h"
#include "roam/roam_layout.h"

namespace roam {

namespace {

constexpr int64_t kDefaultNodeLimit = 20000;

int64_t node_limit_of(const PlanOptions& options) {
  const auto it = options.extra.find("node_limit");
  if (it != options.extra.end() && it->is_number_integer() && it->get<int64_t>() > 0) {
    return it->get<int64_t>();
  }
  return kDefaultNodeLimit;
}

}  // namespace

Layout layout_roam(const Graph& g, const Liveness& live, const PlanOptions& options) {
  const uint64_t alignment = options.alignment;
  layout_internal::check_layout_inputs(g, live, alignment, "roam");
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = g.storages.size();

  // 1. Baselines: the upper bound and the fallback.
  Layout best;
  uint64_t best_arena = 0;
  bool have = false;
  for (const char* m : {"llfb", "greedy_by_size", "best_fit", "pytorch"}) {
    Layout l = make_layout(g, live, m, alignment);
    const uint64_t a = arena_bytes(g, l.offsets, alignment);
    if (!have || a < best_arena) {
      best = std::move(l);
      best_arena = a;
      have = true;
    }
  }
  best.reserved_bytes = best_arena;
  const uint64_t tp = theoretical_peak(g, live, alignment);
  if (n == 0 || best_arena <= tp) return best;

  // 2. Independent windows: cut wherever no lifetime crosses.
  std::vector<AllocBuffer> buffers(n);
  for (size_t s = 0; s < n; ++s) {
    buffers[s] = {live.first[s], int64_t{live.last[s]} + 1,
                  align_up(g.storages[s].size, alignment), 1};
  }
  std::vector<size_t> by_start(n);
  std::iota(by_start.begin(), by_start.end(), size_t{0});
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](size_t a, size_t b) { return buffers[a].lower < buffers[b].lower; });
  std::vector<std::vector<size_t>> windows;
  int64_t reach = std::numeric_limits<int64_t>::min();
  for (size_t s : by_start) {
    if (windows.empty() || buffers[s].lower >= reach) windows.emplace_back();
    windows.back().push_back(s);
    reach = std::max(reach, buffers[s].upper);
  }

  // 3. Exact leaves: every window whose share of the best baseline is above Tp.
  struct Job {
    std::vector<AllocBuffer> buffers;
    std::vector<uint64_t> start;  // the best baseline restricted to the window
    std::vector<uint64_t> result;
    size_t window;
  };
  std::vector<Job> jobs;
  for (size_t w = 0; w < windows.size(); ++w) {
    Job j;
    j.window = w;
    uint64_t h = 0;
    for (size_t s : windows[w]) {
      j.buffers.push_back(buffers[s]);
      j.start.push_back(best.offsets[s]);
      h = std::max(h, best.offsets[s] + buffers[s].size);
    }
    if (h > tp) jobs.push_back(std::move(j));
  }
  const double budget = options.time_limit_seconds;
  AllocSolveOptions so;
  so.node_limit = node_limit_of(options);
  const bool has_node_limit = options.extra.contains("node_limit");
  so.unallocated_floor = true;
  so.time_sweep = true;
  so.max_probes = 4;
  auto run_job = [&](Job& j, int threads) {
    AllocSolveOptions o = so;
    o.threads = threads;
    // A dive takes up to a few hundred nodes per buffer on training graphs; a probe at a
    // tight capacity gets a few restarts' worth. Scale the defaults with the window.
    const auto nb = static_cast<int64_t>(j.buffers.size());
    if (!has_node_limit) o.node_limit = std::max<int64_t>(o.node_limit, 50 * nb);
    o.dive_node_limit = std::max<int64_t>(o.node_limit, 400 * nb);
    const double used =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    o.time_limit_seconds = budget > 0 ? std::max(budget - used, 1e-3) : 0;
    const AllocMinimizeResult r = minimize_allocation(j.buffers, o, &j.start, tp);
    j.result = r.offsets;
  };
  const int threads = std::max(1, options.threads);
  if (jobs.size() == 1 || threads == 1) {
    for (Job& j : jobs) run_job(j, threads);
  } else {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    const int workers = static_cast<int>(std::min<size_t>(jobs.size(), threads));
    for (int t = 0; t < workers; ++t) {
      pool.emplace_back([&] {
        for (size_t k = next++; k < jobs.size(); k = next++) run_job(jobs[k], 1);
      });
    }
    for (auto& th : pool) th.join();
  }

  // 4. Concatenate; keep the best baseline if the solver did not beat it.
  Layout out;
  out.offsets = best.offsets;
  for (const Job& j : jobs) {
    for (size_t k = 0; k < windows[j.window].size(); ++k) {
      out.offsets[windows[j.window][k]] = j.result[k];
    }
  }
  const uint64_t arena = arena_bytes(g, out.offsets, alignment);
  if (arena >= best_arena) return best;
  out.reserved_bytes = arena;
  return out;
}

}  // namespace roam
