// `roam layout --csv IN [--capacity BYTES | --minimize] [-o OUT]`: a layout-only problem in
// MiniMalloc's CSV format, solved by the exact solver (include/roam/roam_layout.h).
//
// Exit status: 0 solved; 1 no solution at --capacity (proven, or none found within the limits:
// the message says which); 2 bad input; 3 the solution failed the independent check (a bug;
// nothing is written).
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <string>

#include "roam/csv_layout.h"
#include "roam/roam_layout.h"
#include "verbs.h"

namespace roam::cli {

namespace {

struct LayoutArgs {
  std::string csv;
  std::string out;
  int64_t capacity = 0;
  bool minimize = false;
  int threads = 1;
  double time_limit = 60;
  int64_t node_limit = 2'000'000;
};

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

int run_layout(const LayoutArgs& a, const CLI::App& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool have_capacity = cmd.count("--capacity") > 0;
  if (!a.out.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(a.csv, a.out, ec)) {
      throw roam::InputError(a.out, "-o", "", "is the input CSV itself; choose another name");
    }
  }
  progress("reading " + a.csv);
  const CsvLayoutProblem p = read_layout_csv(a.csv);
  const uint64_t lb = live_size_lower_bound(p.buffers);
  AllocSolveOptions opt;
  opt.threads = a.threads;
  opt.time_limit_seconds = a.time_limit;
  opt.node_limit = a.node_limit;

  std::vector<uint64_t> offsets;
  uint64_t height = 0;
  uint64_t proven = 0;              // --minimize: every smaller height proven infeasible
  std::vector<AllocProbe> probes;   // --minimize: the capacities tried
  std::string verdict;
  if (have_capacity) {
    progress("solving at capacity " + std::to_string(a.capacity));
    const AllocResult r = solve_allocation(p.buffers, static_cast<uint64_t>(a.capacity), opt);
    if (r.status != AllocStatus::kFeasible) {
      std::cout << "buffers        " << p.buffers.size() << "\n"
                << "capacity       " << a.capacity << "\n"
                << "lower bound    " << lb << " (max total size live at once)\n"
                << "result         "
                << (r.status == AllocStatus::kInfeasible
                        ? "infeasible: proven that no layout fits in the capacity"
                        : "no layout found within the limits (not proven infeasible)")
                << "\n"
                << "nodes          " << r.nodes << "\n"
                << "seconds        " << secs(r.seconds) << "\n";
      return kExitInvalid;
    }
    offsets = r.offsets;
    height = r.height;
    verdict = std::string("fits in the capacity") +
              (height == lb ? " (height = lower bound: optimal)" : "");
  } else {
    progress("minimizing the height");
    const AllocMinimizeResult r = minimize_allocation(p.buffers, opt);
    offsets = r.offsets;
    height = r.height;
    proven = r.proven_lower_bound;
    probes = r.probes;
    if (height == lb) {
      verdict = "minimized: height = lower bound (optimal)";
    } else if (r.proven_optimal) {
      verdict = "minimized: height above the lower bound, proven optimal (every smaller height "
                "proven infeasible)";
    } else {
      char gap[160];
      std::snprintf(gap, sizeof gap,
                    "minimized: not proven optimal (gap %llu between the proven lower bound and "
                    "the height, %.2f%%)",
                    static_cast<unsigned long long>(height - proven),
                    100.0 * static_cast<double>(height - proven) / static_cast<double>(height));
      verdict = gap;
    }
  }
  const uint64_t cap = have_capacity ? static_cast<uint64_t>(a.capacity) : height;
  const std::string problem = check_allocation(p.buffers, offsets, cap);
  if (!problem.empty()) throw InternalError("the layout fails the independent check: " + problem);
  if (!a.out.empty()) write_layout_csv(a.out, p, offsets);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "buffers        " << p.buffers.size() << "\n";
  if (have_capacity) std::cout << "capacity       " << a.capacity << "\n";
  std::cout << "height         " << height << "\n"
            << "lower bound    " << lb << " (max total size live at once)\n";
  if (!have_capacity) {
    std::cout << "proven bound   " << proven
              << " (every smaller height proven infeasible: the lower bound, or a probe's proof)\n";
    int feasible = 0, infeasible = 0, cut = 0;
    for (const AllocProbe& q : probes) {
      (q.status == AllocStatus::kFeasible     ? feasible
       : q.status == AllocStatus::kInfeasible ? infeasible
                                              : cut)++;
    }
    std::cout << "probes         " << probes.size() << " fit attempts: " << feasible
              << " fit, " << infeasible << " proven infeasible, " << cut
              << " cut by the node or time limit\n";
    for (const AllocProbe& q : probes) {
      std::cout << "  capacity " << q.capacity << "  " << to_string(q.status);
      if (q.status == AllocStatus::kFeasible) std::cout << " (height " << q.height << ")";
      std::cout << "  " << q.node_limit << " nodes per search, " << q.nodes << " used, "
                << secs(q.seconds) << " s\n";
    }
  }
  std::cout << "result         " << verdict << "\n"
            << "seconds        " << secs(seconds) << "\n";
  if (!a.out.empty()) std::cout << "written to     " << a.out << "\n";
  return 0;
}

void add_layout_verb(CLI::App& app, Verbs& verbs) {
  static LayoutArgs args;
  CLI::App* cmd = app.add_subcommand(
      "layout",
      "Solve a layout-only problem (MiniMalloc CSV: id, lower, upper exclusive (or legacy end "
      "inclusive), size, optional alignment): find an offset per buffer, check the solution "
      "independently, print the height, the live-size lower bound and seconds, and write the CSV "
      "with an offset column with -o (an offset or hint column in the input is ignored: the "
      "problem is solved anew). With --capacity it must fit (exit 1 if not); otherwise "
      "(--minimize, the default) it finds the smallest height it can: greedy and dive layouts, "
      "then rounds of fit attempts (the lowest height not excluded first, then bisection up to "
      "the best height found) with a node budget per search that grows x4 per round up to "
      "--search-node-limit; it prints every capacity tried, the best height and the proven "
      "lower bound (the live-size bound, or one above a capacity proven infeasible). Sizes and "
      "heights are in the file's unit (bytes); seconds are wall clock.\nExit 0 solved, 1 no solution at --capacity, 2 bad input (nothing "
      "written), 3 internal error.");
  cmd->add_option("--csv", args.csv, "input CSV file")->required();
  cmd->add_option("-o,--output", args.out, "solution CSV to write (atomically)");
  auto* capo = cmd->add_option("--capacity", args.capacity, "memory capacity (same unit as size)")
                   ->check(CLI::Range(int64_t{1}, int64_t{1} << 62));
  auto* mino = cmd->add_flag("--minimize", args.minimize, "find the smallest height (default)");
  capo->excludes(mino);
  mino->excludes(capo);
  cmd->add_option("--threads", args.threads,
                  "portfolio threads (the result is the same for any count)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--time-limit", args.time_limit, "wall-clock limit in seconds")
      ->check(finite_seconds(1e-3, 1e6))->capture_default_str();
  cmd->add_option("--search-node-limit", args.node_limit, "search nodes per portfolio search and probe")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 62))->capture_default_str();
  verbs.push_back({cmd, [cmd] { return run_layout(args, *cmd); }});
}

[[maybe_unused]] const bool kRegistered = register_verb(40, &add_layout_verb);

}  // namespace

}  // namespace roam::cli
