// `roam remat --chain CHAIN.json (--budget BYTES [-o SCHEDULE.json] | --check SCHEDULE.json |
// --frontier)`: rematerialization on a chain (the Rotor model, include/roam/remat_chain.h).
//
// Exit status: 0 solved / valid; 1 --check found the schedule invalid; 2 bad input (unreadable
// or invalid chain or schedule file, bad option; nothing written); 3 no schedule fits the
// budget (one line naming the smallest feasible budget; nothing written), or an internal error.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "roam/graph.h"
#include "roam/remat_chain.h"
#include "verbs.h"

namespace roam::cli {

namespace {

constexpr int kExitInfeasible = 3;

struct RematArgs {
  std::string chain;
  std::string budget;
  std::string check;
  std::string out;
  bool frontier = false;
};

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string mib(uint64_t bytes) { return fixed(static_cast<double>(bytes) / 1048576.0, 1) + " MiB"; }

// "123", "123B", "1.5GiB", "512 MiB": bytes, binary units; a fraction of a byte is dropped.
uint64_t parse_budget(const std::string& text) {
  auto bad = [&](const std::string& why) -> uint64_t {
    throw std::invalid_argument("--budget '" + text + "': " + why +
                                " (bytes, or a number with B, KiB, MiB or GiB)");
  };
  size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
  const std::string num = text.substr(0, end);
  size_t u = end;
  while (u < text.size() && text[u] == ' ') ++u;
  const std::string unit = text.substr(u);
  if (num.empty() || num == "." || num.find('.') != num.rfind('.')) return bad("not a number");
  uint64_t scale = 1;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = uint64_t{1} << 10;
  else if (unit == "MiB") scale = uint64_t{1} << 20;
  else if (unit == "GiB") scale = uint64_t{1} << 30;
  else return bad("unknown unit '" + unit + "'");
  const size_t dot = num.find('.');
  const std::string whole = num.substr(0, dot);
  const std::string frac = dot == std::string::npos ? "" : num.substr(dot + 1);
  if (scale == 1 && !frac.empty() && frac.find_first_not_of('0') != std::string::npos) {
    return bad("a number of bytes must be a whole number");
  }
  // whole * scale + frac * scale, exactly, capped at 2^62.
  constexpr uint64_t kMax = kMaxChainTotalBytes;
  uint64_t w = 0;
  for (char ch : whole) {
    if (w > kMax / 10) return bad("larger than 2^62 bytes");
    w = w * 10 + static_cast<uint64_t>(ch - '0');
  }
  if (w > kMax / scale) return bad("larger than 2^62 bytes");
  uint64_t bytes = w * scale;
  // The fraction: digits d1 d2 ... of frac give sum d_k * scale / 10^k (scale <= 2^30: exact in
  // long double for the 19 digits we read at most).
  long double f = 0, p = 1;
  for (size_t k = 0; k < frac.size() && k < 19; ++k) {
    p /= 10;
    f += (frac[k] - '0') * p;
  }
  bytes += static_cast<uint64_t>(std::floor(f * static_cast<long double>(scale)));
  if (bytes > kMax) return bad("larger than 2^62 bytes");
  return bytes;
}

std::vector<ChainOp> read_schedule(const std::string& path) {
  const nlohmann::json doc = read_json_file(path);
  const nlohmann::json* list = nullptr;
  if (doc.is_object()) {
    auto it = doc.find("schedule");
    if (it == doc.end()) throw InputError(path, "schedule", "", "missing required field");
    list = &*it;
  } else {
    throw InputError(path, "(document)", "", "a schedule file must be a JSON object with a \"schedule\" array");
  }
  if (!list->is_array()) {
    throw InputError(path, "schedule", "", "must be an array of operation names, got " +
                                               std::string(list->type_name()));
  }
  std::vector<ChainOp> ops;
  ops.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& v = (*list)[i];
    if (!v.is_string()) {
      throw InputError(path, "schedule", std::to_string(i),
                       "an operation must be a string such as \"Fe_0\", got " + v.dump());
    }
    try {
      ops.push_back(parse_chain_op(v.get<std::string>()));
    } catch (const std::invalid_argument& e) {
      throw InputError(path, "schedule", std::to_string(i), e.what());
    }
  }
  return ops;
}

std::string header(const Chain& c, const std::string& path) {
  return "chain          " + (c.name.empty() ? path : c.name) + " (" + std::to_string(c.length()) +
         " stages)\n";
}

int run_check(const RematArgs& a, const Chain& chain) {
  const std::vector<ChainOp> ops = read_schedule(a.check);
  const ChainSimulation sim = simulate_chain_schedule(chain, ops);
  if (!sim.valid) {
    std::cout << a.check << ": invalid schedule: " << sim.problem << "\n";
    return kExitInvalid;
  }
  const ChainSchedule nr = no_remat_schedule(chain);
  std::cout << header(chain, a.chain) << "schedule       " << a.check << ": valid, "
            << ops.size() << " operations\n"
            << "time           " << fixed(sim.time, 6) << " s (overhead "
            << fixed(100.0 * (sim.time / nr.time - 1), 2) << "% vs no-remat " << fixed(nr.time, 6)
            << " s)\n"
            << "peak           " << sim.peak_bytes << " B (" << mib(sim.peak_bytes) << ")\n";
  return 0;
}

int run_frontier(const RematArgs& a, const Chain& chain) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto frontier = chain_frontier(chain);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ChainSchedule nr = no_remat_schedule(chain);
  std::cout << header(chain, a.chain) << "breakpoints    " << frontier.size()
            << " (optimal time at budget B = the time of the last row with budget <= B)\n"
            << "solve seconds  " << fixed(secs, 3) << "\n"
            << "budget_bytes budget_MiB time_s overhead_%\n";
  for (const auto& [b, t] : frontier) {
    std::cout << b << " " << fixed(static_cast<double>(b) / 1048576.0, 3) << " " << fixed(t, 6)
              << " " << fixed(100.0 * (t / nr.time - 1), 3) << "\n";
  }
  return 0;
}

int run_solve(const RematArgs& a, const Chain& chain) {
  const uint64_t budget = parse_budget(a.budget);
  if (!a.out.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(a.out, a.chain, ec)) {
      throw InputError(a.out, "-o", "", "is the chain file itself; choose another name");
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<ChainSchedule> s = solve_chain(chain, budget);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s) {
    const uint64_t need = min_feasible_budget(chain);
    std::cerr << "roam: infeasible: no schedule of " << (chain.name.empty() ? a.chain : chain.name)
              << " fits in " << budget << " bytes; the smallest feasible budget is " << need
              << " bytes (" << mib(need) << "); nothing written\n";
    return kExitInfeasible;
  }
  const ChainSimulation sim = simulate_chain_schedule(chain, s->ops);
  if (!sim.valid || sim.peak_bytes != s->peak_bytes || sim.peak_bytes > budget ||
      std::fabs(sim.time - s->time) > 1e-9 * std::max(1.0, std::fabs(sim.time))) {
    throw InternalError("the schedule fails the independent check: " +
                        (sim.valid ? "the simulator's time " + fixed(sim.time, 9) + " s / peak " +
                                         std::to_string(sim.peak_bytes) + " B differ from the solver's " +
                                         fixed(s->time, 9) + " s / " + std::to_string(s->peak_bytes) + " B"
                                   : sim.problem));
  }
  if (!a.out.empty()) {
    nlohmann::json doc;
    nlohmann::json ops = nlohmann::json::array();
    for (const ChainOp& op : s->ops) ops.push_back(to_string(op));
    doc["schedule"] = std::move(ops);
    doc["time"] = sim.time;
    doc["peak_bytes"] = sim.peak_bytes;
    write_json_file(a.out, doc, 1);
  }
  const ChainSchedule nr = no_remat_schedule(chain);
  std::cout << header(chain, a.chain) << "budget         " << budget << " B (" << mib(budget) << ")\n"
            << "time           " << fixed(sim.time, 6) << " s (overhead "
            << fixed(100.0 * (sim.time / nr.time - 1), 2) << "% vs no-remat " << fixed(nr.time, 6)
            << " s)\n"
            << "peak           " << sim.peak_bytes << " B (" << mib(sim.peak_bytes)
            << "; no-remat peak " << nr.peak_bytes << " B)\n"
            << "operations     " << s->ops.size() << "\n"
            << "solve seconds  " << fixed(secs, 3) << "\n";
  if (!a.out.empty()) std::cout << "written to     " << a.out << "\n";
  return 0;
}

int run_remat(const RematArgs& a, const CLI::App& cmd) {
  const int modes = (cmd.count("--budget") > 0) + (cmd.count("--check") > 0) + (a.frontier ? 1 : 0);
  if (modes != 1) {
    throw std::invalid_argument("remat: give exactly one of --budget, --check, --frontier");
  }
  if (cmd.count("-o") > 0 && (a.out.empty() || cmd.count("--budget") == 0)) {
    throw std::invalid_argument("remat: -o needs a file name and goes with --budget");
  }
  if (cmd.count("--budget") > 0) parse_budget(a.budget);  // a bad budget fails before any work
  progress("reading " + a.chain);
  const Chain chain = load_chain(a.chain);
  if (!a.check.empty() || cmd.count("--check") > 0) return run_check(a, chain);
  if (a.frontier) return run_frontier(a, chain);
  return run_solve(a, chain);
}

void add_remat_verb(CLI::App& app, Verbs& verbs) {
  static RematArgs args;
  CLI::App* cmd = app.add_subcommand(
      "remat",
      "Rematerialization on a chain (the Rotor model of bench/rotor/README.md: stages with "
      "forward/backward times, activation, record and transient sizes). --budget: the "
      "minimum-time schedule whose peak fits, exact in bytes; prints time, peak, overhead vs the "
      "no-remat schedule and solve seconds, and with -o writes {\"schedule\": [\"Fc_0\", ...], "
      "\"time\": s, \"peak_bytes\": n} (atomically; checked by the simulator first). --check: "
      "validates a schedule file with the simulator. --frontier: every (budget, optimal time) "
      "breakpoint. Sizes are bytes (--budget also takes B, KiB, MiB, GiB: binary units), times "
      "seconds. Method: the dynamic program of Beaumont et al., \"Optimal re-materialization "
      "strategies for heterogeneous chains\", ACM TOMS 2024, with each table entry an exact "
      "staircase of (bytes, seconds) breakpoints instead of 500 memory slots (Fn only continues "
      "a forward run, as in Rotor's schedules; see include/roam/remat_chain.h).\nExit 0 solved or "
      "valid, 1 --check: invalid schedule, 2 bad input (nothing written), 3 no schedule fits the "
      "budget (the smallest feasible budget is named; nothing written) or internal error.");
  cmd->add_option("--chain", args.chain, "chain file (JSON, or gzip .json.gz)")->required();
  auto* budget = cmd->add_option("--budget", args.budget,
                                 "memory budget: bytes, or a number with B, KiB, MiB, GiB");
  auto* check = cmd->add_option("--check", args.check, "schedule file to validate");
  auto* frontier = cmd->add_flag("--frontier", args.frontier, "print every (budget, time) breakpoint");
  budget->excludes(check)->excludes(frontier);
  check->excludes(budget)->excludes(frontier);
  frontier->excludes(budget)->excludes(check);
  cmd->add_option("-o,--output", args.out, "schedule file to write with --budget (atomically)");
  verbs.push_back({cmd, [cmd] { return run_remat(args, *cmd); }});
}

[[maybe_unused]] const bool kRegistered = register_verb(45, &add_remat_verb);

}  // namespace

}  // namespace roam::cli
