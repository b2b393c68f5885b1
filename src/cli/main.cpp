// The `roam` command: a thin shell over libroam.
//
// Exit status: 0 success; 1 `validate` found the plan invalid; 2 bad input (unreadable or
// invalid graph/plan file, bad option); 3 internal error (a planner produced a plan that fails
// validation: a bug, nothing is written), or `plan --budget` with a budget roam cannot meet.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <optional>
#include <string>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/headline.h"
#include "roam/inplace.h"
#include "roam/layout.h"
#include "roam/options.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/remat.h"
#include "roam/validate.h"
#include "plan_verbs.h"
#include "verbs.h"

namespace roam::cli {

namespace {
bool g_quiet = false;

std::vector<std::pair<int, VerbAdder>>& verb_registry() {
  static std::vector<std::pair<int, VerbAdder>> registry;
  return registry;
}
}  // namespace

const std::chrono::steady_clock::time_point g_start = std::chrono::steady_clock::now();

double seconds_since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}

void progress(const std::string& msg) {
  if (g_quiet || !::isatty(STDERR_FILENO)) return;
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << seconds_since_start();
  std::cerr << "roam: [" << os.str() << " s] " << msg << "\n";
}

bool register_verb(int rank, VerbAdder adder) {
  verb_registry().emplace_back(rank, adder);
  return true;
}

// Shared by the planning verbs (plan_verbs.h).

constexpr double kMiB = 1024.0 * 1024.0;

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / kMiB);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Every plan roam prints or writes goes through the independent validator first.
nlohmann::json checked_plan_json(const roam::Graph& g, const roam::Plan& plan,
                                 roam::ValidationReport* report) {
  nlohmann::json doc = roam::plan_to_json(g, plan);
  // A version-1 plan's bound is roam::lower_bound's own (computed once, shared by compare's
  // rows): checked against itself rather than proven again; `roam validate` proves it anew.
  roam::ValidationReport rep = roam::validate_plan(
      g, doc, "(generated plan)",
      plan.version == 1 ? std::optional<uint64_t>(plan.stats.lower_bound_bytes) : std::nullopt);
  if (!rep.valid) {
    throw InternalError("the " + plan.order_method + "/" + plan.layout_method +
                        " plan fails validation: " + rep.problems.front());
  }
  if (report) *report = std::move(rep);
  return doc;
}

/// The bound on Tp over the orders of the graph (no recomputation, in-place writes allowed): a
/// version-1 plan's lower_bound_bytes, or what a plan of version 2 only because it writes in
/// place records in method.options.order_lower_bound_bytes (roam/plan.h).
uint64_t order_lower_bound(const roam::Plan& plan) {
  if (auto it = plan.options.find("order_lower_bound_bytes");
      it != plan.options.end() && it->is_number_unsigned()) {
    return it->get<uint64_t>();
  }
  return plan.stats.lower_bound_bytes;
}

/// One line: what is live at the plan's peak step (the op there and its module, how many
/// storages, the three largest with the module of the op that made them). Recounted from the
/// validator's instance graph of the plan, so recomputed instances (id#k) count as themselves.
std::string peak_line(const roam::ValidationReport& rep, uint64_t alignment) {
  if (!rep.instances) return "";
  const roam::Graph& x = rep.instances->graph;
  if (x.num_ops() == 0) return "";
  const roam::Liveness live = roam::compute_liveness(x, x.program_order());
  const std::vector<uint64_t> bytes = roam::live_bytes_per_step(x, live, alignment);
  const auto t = static_cast<int32_t>(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
  std::vector<roam::StorageIdx> here;
  for (roam::StorageIdx s = 0; s < x.num_storages(); ++s) {
    if (live.first[s] <= t && t <= live.last[s]) here.push_back(s);
  }
  std::stable_sort(here.begin(), here.end(), [&](roam::StorageIdx a, roam::StorageIdx b) {
    return x.storages[a].size > x.storages[b].size;
  });
  // An op outside every module's forward: the optimizer's update, or the loss and glue.
  auto module_of = [&](roam::OpIdx v) {
    if (!x.ops[v].module.empty()) return x.ops[v].module;
    return std::string(x.ops[v].phase == roam::Phase::kUpdate ? "optimizer update" : "no module");
  };
  std::string line = "op index " + std::to_string(t) + " (" + x.ops[t].id + " " + x.ops[t].target +
                     ", " + module_of(t) + "): " + std::to_string(here.size()) + " storages; largest ";
  for (size_t i = 0; i < here.size() && i < 3; ++i) {
    const roam::Storage& st = x.storages[here[i]];
    line += (i ? ", " : "") + x.storage_name(here[i]) + " " + mib(st.size) + " MiB (" +
            module_of(st.producer) + ")";
  }
  return line + "; roam viz draws it";
}

roam::Graph load(const std::string& path) {
  progress("reading " + path);
  roam::Graph g = roam::load_graph(path);
  progress("graph " + g.name + ": " + std::to_string(g.ops.size()) + " ops, " +
           std::to_string(g.storages.size()) + " storages");
  return g;
}

// Said after an infeasible budget that the resident tensors alone exceed (nothing planned can
// help there): "; the resident tensors ... alone take N B (X MiB)"; empty otherwise.
std::string below_resident(const roam::Graph& g, uint64_t budget) {
  if (budget >= g.resident_bytes) return "";
  return "; the resident tensors (parameters, buffers, optimizer state, inputs) alone take " +
         std::to_string(g.resident_bytes) + " B (" + mib(g.resident_bytes) + " MiB)";
}

}  // namespace roam::cli

namespace {

using roam::cli::InternalError;
using roam::cli::kExitBadInput;
using roam::cli::kExitInternal;
using roam::cli::kExitInvalid;
using roam::cli::progress;
using roam::cli::below_resident;
using roam::cli::checked_plan_json;
using roam::cli::CompareRequest;
using roam::cli::fixed;
using roam::cli::load;
using roam::cli::mib;
using roam::cli::order_lower_bound;
using roam::cli::peak_line;



std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}





void check_method(const std::string& option, const std::string& name,
                  const std::vector<std::string>& methods) {
  if (name == "auto" || std::find(methods.begin(), methods.end(), name) != methods.end()) return;
  throw std::invalid_argument(option + ": unknown method '" + name + "' (valid: auto, " +
                              join(methods) + ")");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// --order-option / --layout-option KEY=VALUE (repeatable) and --node-limit: the roam planners'
/// knobs (roam::extra_option_specs), recorded in the plan's method.options.extra.
void add_planner_knobs(CLI::App* cmd, std::vector<std::string>& order_options,
                       std::vector<std::string>& layout_options, std::optional<int64_t>& node_limit) {
  std::string order_keys, layout_keys;
  for (const roam::ExtraOptionSpec& s : roam::extra_option_specs()) {
    std::string& keys = std::string(s.kind) == "order" ? order_keys : layout_keys;
    keys += std::string("\n  ") + s.key + " (" + s.type + "): " + s.help;
    if (std::string(s.type) == "int" || std::string(s.type) == "number") {
      keys += " [" + std::to_string(static_cast<int64_t>(s.min)) + ", " +
              std::to_string(static_cast<int64_t>(s.max)) + "]";
    }
  }
  cmd->add_option("--order-option", order_options,
                  "KEY=VALUE knob of --order roam (repeatable):" + order_keys)
      ->type_name("KEY=VALUE");
  cmd->add_option("--layout-option", layout_options,
                  "KEY=VALUE knob of --layout roam (repeatable):" + layout_keys)
      ->type_name("KEY=VALUE");
  cmd->add_option("--node-limit", node_limit,
                  "most storages per leaf subgraph of --layout roam, >= 2 (the paper's "
                  "node_limit; default 4096; same as --layout-option node_limit=N)");
}

/// Fills options.extra from the knobs; `orders` / `layouts`: the methods the verb will run
/// (a knob for a roam planner that none of them is, is a usage error rather than ignored).
void set_planner_knobs(const std::vector<std::string>& order_options,
                       const std::vector<std::string>& layout_options,
                       const std::optional<int64_t>& node_limit,
                       const std::vector<std::string>& orders, const std::vector<std::string>& layouts,
                       roam::PlanOptions& options) {
  auto runs_roam = [](const std::vector<std::string>& methods) {
    return methods.empty() || std::find(methods.begin(), methods.end(), "roam") != methods.end() ||
           std::find(methods.begin(), methods.end(), "auto") != methods.end();
  };
  if (!order_options.empty() && !runs_roam(orders)) {
    throw CLI::ValidationError("--order-option", "applies to the roam order only (--order roam or auto)");
  }
  if ((!layout_options.empty() || node_limit) && !runs_roam(layouts)) {
    throw CLI::ValidationError(node_limit ? "--node-limit" : "--layout-option",
                               "applies to the roam layout only (--layout roam or auto)");
  }
  try {
    for (const auto& [kind, list] : {std::pair{"order", &order_options}, {"layout", &layout_options}}) {
      for (const std::string& a : *list) {
        auto [key, value] = roam::parse_extra_option(a, kind);
        if (options.extra.contains(key)) {
          throw std::invalid_argument(std::string("--") + kind + "-option " + key + ": given twice");
        }
        options.extra[key] = value;
      }
    }
  } catch (const std::invalid_argument& e) {
    throw CLI::ValidationError(e.what());
  }
  if (node_limit) {
    if (options.extra.contains("node_limit")) {
      throw CLI::ValidationError("--node-limit", "given twice (also as --layout-option node_limit)");
    }
    const roam::ExtraOptionSpec& spec = roam::extra_option_spec("node_limit");
    if (static_cast<double>(*node_limit) < spec.min || static_cast<double>(*node_limit) > spec.max) {
      throw CLI::ValidationError("--node-limit", "must be an integer in [" +
                                                     std::to_string(static_cast<int64_t>(spec.min)) + ", " +
                                                     std::to_string(static_cast<int64_t>(spec.max)) + "]");
    }
    options.extra["node_limit"] = *node_limit;
  }
}

constexpr int kExitBudget = 3;  // a budget roam cannot meet (no plan written)


int cmd_plan(const std::string& graph_path, const std::string& out_path,
             roam::PlanRequest req, const std::optional<uint64_t>& budget) {
  if (!out_path.empty() && !ends_with(out_path, ".json") && !ends_with(out_path, ".json.gz")) {
    throw roam::InputError(out_path, "-o", "", "plan file name must end in .json or .json.gz");
  }
  check_method("--order", req.order, roam::order_methods());
  check_method("--layout", req.layout, roam::layout_methods());
  if (!out_path.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(graph_path, out_path, ec)) {
      throw roam::InputError(out_path, "-o", "", "is the graph file itself; choose another name");
    }
  }
  const roam::Graph g = load(graph_path);
  // --time-limit counts from start-up: reading the graph is spent, and validating the plan,
  // measuring the headline's references and writing the file come after planning. Those take
  // up to about as long as reading (200,000-op random DAGs: read 3.0 s, the rest 1.1 s; read
  // 1.7 s, the rest 1.5 s), so the planners end that much earlier.
  const double read_seconds = roam::cli::seconds_since_start();
  const double after_planning = 0.9 * read_seconds + 0.02;
  req.options.deadline =
      roam::cli::g_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(std::max(
                                   req.options.time_limit_seconds - after_planning, 0.0)));
  progress("planning (order " + req.order + ", layout " + req.layout + ")");
  roam::PlanResult r;
  if (budget) {
    try {
      r = roam::plan_with_budget(g, req, *budget);
    } catch (const roam::BudgetInfeasible& e) {
      std::cerr << "roam: " << e.what() << below_resident(g, *budget) << "\n";
      return kExitBudget;
    }
  } else {
    r = roam::make_plan(g, req);
  }
  progress("validating the plan");
  roam::ValidationReport rep;
  const nlohmann::json doc = checked_plan_json(g, r.plan, &rep);
  progress("writing");
  if (!out_path.empty()) roam::write_json_file(out_path, doc, 1);
  progress("headline");
  const roam::PlanStats& st = r.plan.stats;
  // A plan of version 2 only because it writes in place records the bound over all version-2
  // schedules as lower_bound_bytes; the bound over orders (no recomputation) is in its options.
  const uint64_t order_bound = order_lower_bound(r.plan);
  // The headline first: the plan against what the user runs today (include/roam/headline.h).
  roam::Headline h = roam::headline_reference(g, req.options.alignment);
  h.peak_bytes = st.resident_bytes + std::max(r.reserved_bytes, st.arena_bytes);
  h.lower_bound_bytes = st.resident_bytes + (st.recomputations == 0 ? order_bound : st.lower_bound_bytes);
  if (budget) {
    h.budget_bytes = *budget;
    h.recomputations = st.recomputations;
    if (st.compute_seconds > 0) h.recompute_overhead = st.recompute_seconds / st.compute_seconds;
  }
  std::cout << roam::headline_text(h) << "\n" << roam::headline_key() << "\n";
  if (const std::string at_peak = peak_line(rep, req.options.alignment); !at_peak.empty()) {
    std::cout << "at the peak    " << at_peak << "\n";
  }
  std::cout << "graph          " << g.name << " (" << g.ops.size() << " ops, " << g.storages.size()
            << " storages)\n"
            << "method         order " << r.plan.order_method << ", layout " << r.plan.layout_method
            << ", alignment " << req.options.alignment << " B\n"
            << "resident       " << mib(st.resident_bytes) << " MiB\n"
            << "Tp             " << mib(st.theoretical_peak_bytes) << " MiB\n"
            << "arena          " << mib(st.arena_bytes) << " MiB\n";
  if (!r.plan.inplace.empty()) {
    std::cout << "in place       " << r.plan.inplace.size() << " in-place write"
              << (r.plan.inplace.size() == 1 ? "" : "s")
              << " (an output written over an input that dies there, op field inplace; plan "
                 "version 2, plan field inplace)\n";
  } else if (roam::has_inplace(g)) {
    std::cout << "in place       none (the graph permits some, the plan's order allows none)\n";
  }
  if (r.reserved_bytes != st.arena_bytes) {
    std::cout << "reserved       " << mib(r.reserved_bytes)
              << " MiB (caching-allocator segments; held = resident + reserved = "
              << mib(st.resident_bytes + r.reserved_bytes) << " MiB)\n";
  }
  const auto& ostats = r.plan.options;
  if (ostats.contains("order_stats") && ostats["order_stats"].value("time_limit_hit", false)) {
    std::cout << "note           the time limit stopped a search: the order is valid but may not "
                 "be the best roam finds with more time (--time-limit)\n";
  }
  if (ostats.value("layout_time_limit_hit", false)) {
    std::cout << "note           the time limit stopped the layout search: the layout is valid "
                 "but may not be the best roam finds with more time (--time-limit)\n";
  }
  const bool recomputes = st.recomputations > 0;
  const uint64_t shown_bound = recomputes ? st.lower_bound_bytes : order_bound;
  std::cout << "peak           " << mib(st.peak_bytes) << " MiB (resident + arena)\n"
            << "Tp bound       " << mib(shown_bound)
            << (recomputes
                    ? " MiB (no schedule's Tp is lower, recomputing as much as it likes: a floor "
                      "for any budget, not for this plan's recomputations; "
                    : roam::has_inplace(g) ? " MiB (no order's Tp is lower, in-place writes included; "
                                           : " MiB (no order's Tp is lower; ")
            << "resident + this = the headline's lower bound; Tp / bound = "
            << (shown_bound ? fixed(static_cast<double>(st.theoretical_peak_bytes) /
                                        static_cast<double>(shown_bound), 4)
                            : std::string("n/a"))
            << ")\n";
  if (!recomputes && r.plan.version >= 2) {
    std::cout << "v2 bound       " << mib(st.lower_bound_bytes)
              << " MiB (the plan file's lower_bound_bytes: a version-2 plan's bound holds for every "
                 "schedule, recomputation allowed; the order bound above is "
                 "method.options.order_lower_bound_bytes)\n";
  }
  std::cout << "fragmentation  " << fixed(100.0 * st.fragmentation, 2) << " %\n"
            << "seconds        " << fixed(st.solve_seconds, 3) << "\n";
  if (budget) {
    std::cout << "budget         " << mib(*budget) << " MiB (peak <= budget: met)\n";
    if (recomputes) {
      std::cout << "recomputation  " << st.recomputations << " op runs, " << fixed(st.recompute_seconds, 6)
                << " s of " << fixed(st.compute_seconds, 6) << " s compute (overhead "
                << (st.compute_seconds > 0 ? fixed(100.0 * st.recompute_seconds / st.compute_seconds, 2) + " %"
                                           : std::string("n/a: the graph has no op costs"))
                << "; plan version 2)\n";
    } else if (r.plan.version >= 2) {
      std::cout << "recomputation  none needed (plan version 2 for its in-place writes)\n";
    } else {
      std::cout << "recomputation  none needed (plan version 1)\n";
    }
  }
  if (!out_path.empty()) std::cout << "plan written to " << out_path << "\n";
  return 0;
}

int cmd_validate(const std::string& graph_path, const std::string& plan_path) {
  const roam::Graph g = load(graph_path);
  const nlohmann::json doc = roam::read_json_file(plan_path);
  const roam::ValidationReport rep = roam::validate_plan(g, doc, plan_path);
  if (!rep.valid) {
    // A plan for another graph: one line, the rest would only repeat it.
    if (rep.problems.front().rfind("plan is for graph '", 0) == 0) {
      std::cout << "INVALID: " << plan_path << ": " << rep.problems.front()
                << " (nothing else checked: plan this graph with `roam plan`, or validate against "
                   "the graph the plan was made for)\n";
      return kExitInvalid;
    }
    std::cout << "INVALID: " << plan_path << "\n";
    for (const auto& p : rep.problems) std::cout << "  " << p << "\n";
    if (rep.problem_count > rep.problems.size()) {
      std::cout << "  ... and " << rep.problem_count - rep.problems.size() << " more problem(s)\n";
    }
    return kExitInvalid;
  }
  const roam::PlanStats& st = rep.recomputed;
  std::cout << "valid: " << plan_path << "\n"
            << "resident " << mib(st.resident_bytes) << " MiB, Tp " << mib(st.theoretical_peak_bytes)
            << " MiB, arena " << mib(st.arena_bytes) << " MiB, peak " << mib(st.peak_bytes)
            << " MiB (resident + arena), Tp lower bound " << mib(st.lower_bound_bytes)
            << " MiB (the arena part, as Tp), fragmentation "
            << fixed(100.0 * st.fragmentation, 2) << " %\n";
  if (!rep.inplace.empty()) {
    std::cout << "in place " << rep.inplace.size() << " write" << (rep.inplace.size() == 1 ? "" : "s")
              << " (plan field inplace), each the last read of the contents it overwrites at every "
                 "appearance of its op\n";
  }
  return 0;
}

#ifndef ROAM_VERSION
#define ROAM_VERSION "0.1.0"
#endif

/// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// The closest candidate to `word`, or "" when none is close (at most a third of the letters).
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

std::vector<std::string> option_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app->get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : o->get_snames()) names.push_back("-" + n);
  }
  return names;
}

/// One line for arguments CLI11 did not expect: the first unknown option (with the closest
/// option of the command, or the commands that take it) or the first unexpected argument.
std::string extras_message(const CLI::App& app, const std::vector<std::string>& extras) {
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  const CLI::App* cmd = chosen.empty() ? nullptr : chosen.front();
  const std::string who = cmd ? "roam " + cmd->get_name() : "roam";
  const std::string help = "`" + who + " --help`";
  for (const std::string& x : extras) {
    if (x.size() < 2 || x[0] != '-') continue;
    const std::string name = x.substr(0, x.find('='));
    const std::vector<std::string> names = option_names(cmd ? cmd : &app);
    std::string hint = closest(name, names);
    std::string msg = who + ": unknown option " + name;
    if (!hint.empty()) return msg + " (did you mean " + hint + "? " + help + " lists the options)";
    std::vector<std::string> takers;
    for (const CLI::App* sub : app.get_subcommands({})) {
      const auto n = option_names(sub);
      if (std::find(n.begin(), n.end(), name) != n.end()) takers.push_back(sub->get_name());
    }
    if (!takers.empty()) {
      std::string list;
      for (const std::string& t : takers) list += (list.empty() ? "roam " : ", roam ") + t;
      msg += " (an option of " + list + ")";
    }
    return msg + "; " + help + " lists the options";
  }
  if (extras.empty()) return who + ": bad arguments; " + help + " lists them";
  if (!cmd) {
    std::vector<std::string> verbs;
    for (const CLI::App* sub : app.get_subcommands({})) verbs.push_back(sub->get_name());
    const std::string hint = closest(extras.front(), verbs);
    return "roam: unknown command '" + extras.front() + "'" +
           (hint.empty() ? "" : " (did you mean " + hint + "?)") + "; the commands are " + join(verbs) +
           " (`roam --help`)";
  }
  return who + ": unexpected argument '" + extras.front() + "' (" + help + " lists what it takes)";
}

uint64_t check_alignment(uint64_t a) {
  if (!roam::is_plan_alignment(a)) {
    throw CLI::ValidationError("--alignment", "must be a power of two between 1 and 1048576 bytes");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "roam: memory planner for one training step (operator order + arena layout), after ROAM "
      "(arXiv 2310.19295).\n"
      "Sizes are in bytes in files and MiB (2^20 bytes) on screen; times in seconds.\n"
      "Exit status: 0 ok, 1 plan invalid (validate), 2 bad input or usage (`roam` alone prints "
      "this help and exits 2), 3 internal error or a budget roam cannot meet.\n"
      "plan and compare print a headline first: peak X MiB (resident + the plan's arena); program "
      "order on a CPU allocator Y MiB (resident + Tp of the graph's own op order: what eager "
      "PyTorch holds on a CPU); on PyTorch's CUDA caching allocator (simulated) W MiB (the "
      "segments PyTorch's caching allocator would hold for that order on a GPU); lower bound L "
      "MiB (resident + the fewest arena bytes any valid order needs); percentages: the peak "
      "against Y and W."};
  app.name("roam");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("roam ") + ROAM_VERSION);
  app.fallthrough();  // `roam plan -q ...` as well as `roam -q plan ...`
  app.add_flag("-q,--quiet", roam::cli::g_quiet, "no progress messages on stderr");

  std::string graph_path, plan_path, out_path;
  roam::PlanRequest req;
  const std::string order_help = "operator order: auto (= roam, never worse than a baseline), " +
                                 join(roam::order_methods());
  const std::string layout_help = "arena layout: auto (= roam, never worse than a baseline), " +
                                  join(roam::layout_methods());

  CLI::App* plan = app.add_subcommand(
      "plan",
      "Plan GRAPH (roam-graph v1, .json or .json.gz): choose an order and an offset for every "
      "storage, validate the plan, print the headline (peak; program order on a CPU allocator = "
      "resident + Tp of the program order, what eager PyTorch holds on a CPU; on PyTorch's CUDA "
      "caching allocator (simulated) = the segments it would hold on a GPU; lower bound: no "
      "order needs less; with --budget also the budget and the recompute overhead), then "
      "resident / Tp / arena / peak / lower bound (MiB), fragmentation (%) and seconds, and "
      "write the plan (roam-plan v1; v2 with recomputation or in-place writes) with -o. On a "
      "graph whose ops carry `inplace` permissions (a functional capture), every order method "
      "keeps the writes that program order allows and the plan uses every write its order "
      "allows (an output written over an input that dies there; plan field inplace, version 2); "
      "the output says how many.\n"
      "Exit 0 planned, 2 bad input (message names file, field, id; nothing written), 3 internal "
      "error or a --budget roam cannot meet (the message names the smallest budget it meets).");
  plan->add_option("GRAPH", graph_path, "graph file")->required();
  plan->add_option("-o,--output", out_path, "plan file to write (.json or .json.gz); written "
                                            "atomically, never when the plan is invalid");
  plan->add_option("--order", req.order, order_help)->capture_default_str();
  plan->add_option("--layout", req.layout, layout_help)->capture_default_str();
  plan->add_option("--alignment", req.options.alignment, "bytes every size and offset is rounded to "
                                                 "(power of two)")->capture_default_str();
  plan->add_option("--threads", req.options.threads,
                   "worker threads of the roam planners (the plan is the same for any count)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  plan->add_option("--time-limit", req.options.time_limit_seconds,
                   "wall-clock budget of the whole command, seconds, counted from start-up "
                   "(reading the graph, planning, validating and writing the plan). The order "
                   "search gets up to half of it; once it is spent roam returns the best baseline "
                   "order and layout it has (valid; the output notes that a search was cut). "
                   "Reading the graph itself is not interruptible")
      ->capture_default_str();
  std::vector<std::string> order_options, layout_options;
  std::optional<int64_t> node_limit;
  add_planner_knobs(plan, order_options, layout_options, node_limit);
  std::string budget_text;
  std::optional<uint64_t> budget;
  plan->add_option("--budget", budget_text,
                   "memory budget: a bound on the plan's peak (resident + arena), in bytes or with "
                   "a unit (KiB, MiB, GiB, TiB: powers of 1024; KB, MB, GB, TB: powers of 1000; "
                   "case-insensitive; e.g. 6GiB). Where the plan without recomputation "
                   "is above it, roam recomputes forward activations in the backward pass at the "
                   "least recompute seconds it finds (Rotor / Rockmate method; a version-2 plan). "
                   "Exit 3, with the smallest budget roam meets and a proven lower bound, when it "
                   "cannot be met; nothing is written then")
      ->type_name("SIZE");

  CLI::App* validate = app.add_subcommand(
      "validate",
      "Check PLAN against GRAPH: order respects every dependency, offsets aligned and no two "
      "live storages overlap, stats equal the recount; in version 2 also recomputations and "
      "in-place writes (plan field inplace: each pair one of its op's permissions, the output "
      "without an offset, and at every appearance the op the last reader of the contents it "
      "overwrites: a later read, or a graph output, of the old contents is named with the op "
      "that overwrote them). Exit 0 valid, 1 invalid (first problems listed), 2 unreadable.");
  validate->add_option("GRAPH", graph_path, "graph file")->required();
  validate->add_option("PLAN", plan_path, "plan file")->required();

  CLI::App* compare = app.add_subcommand(
      "compare",
      "Every order x layout on GRAPH. First the headline of the best plan (as `roam plan`: "
      "against the program order on a CPU allocator and on PyTorch's CUDA caching allocator, "
      "simulated, and the lower bound), then one row per distinct result (MiB, seconds; pairs "
      "with the same Tp, arena and held bytes collapse into one row that names them; --all for "
      "every pair), each row's held-bytes reduction against the pytorch row (program order + "
      "caching-allocator simulation). Every row's plan is validated.\nExit 0 ok, 2 bad input, "
      "3 internal error.");
  compare->add_option("GRAPH", graph_path, "graph file")->required();
  compare->add_option("--alignment", req.options.alignment, "bytes (power of two)")->capture_default_str();
  CompareRequest creq;
  compare->add_option("--orders", creq.orders, "order methods to compare (default: all)")
      ->delimiter(',');
  compare->add_option("--layouts", creq.layouts, "layout methods to compare (default: all)")
      ->delimiter(',');
  compare->add_option("--json", creq.json_path, "also write the rows (bytes, seconds) as JSON");
  compare->add_flag("--all", creq.all,
                    "print one row per order x layout pair (default: one row per distinct "
                    "result, sorted by held bytes, the pairs with the same result named after it)");
  compare->add_option("--threads", req.options.threads, "worker threads of the roam planners")
      ->check(CLI::Range(1, 256))->capture_default_str();
  compare->add_option("--time-limit", req.options.time_limit_seconds,
                      "wall-clock budget of each roam planner call, seconds")
      ->capture_default_str();
  add_planner_knobs(compare, order_options, layout_options, node_limit);
  compare->add_option("--budget", budget_text,
                      "also plan under this memory budget (bytes, or KiB/MiB/GiB or KB/MB/GB; see plan --budget) "
                      "and print that row: recomputations and their overhead, or the smallest "
                      "budget roam meets")
      ->type_name("SIZE");

  roam::cli::Verbs verbs = {
      {plan, [&] { return cmd_plan(graph_path, out_path, req, budget); }},
      {validate, [&] { return cmd_validate(graph_path, plan_path); }},
      {compare, [&] { return cmd_compare(graph_path, req.options, creq, budget); }}};
  auto registry = roam::cli::verb_registry();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [rank, adder] : registry) adder(app, verbs);

  if (argc <= 1) {  // `roam` alone: the help, exit 2 (a command is required)
    std::cout << app.help();
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
    check_alignment(req.options.alignment);
    if (!std::isfinite(req.options.time_limit_seconds) || req.options.time_limit_seconds <= 0 ||
        req.options.time_limit_seconds > 1e6) {
      throw CLI::ValidationError("--time-limit", "must be a positive number of seconds, at most 1e6");
    }
    if (plan->count("-o") > 0 && out_path.empty()) {
      throw CLI::ValidationError("-o", "needs a file name");
    }
    if (plan->count("--budget") > 0 || compare->count("--budget") > 0) {
      try {
        budget = roam::parse_byte_size(budget_text);
      } catch (const std::invalid_argument& e) {
        throw CLI::ValidationError("--budget", e.what());
      }
    }
    if (*plan) {
      set_planner_knobs(order_options, layout_options, node_limit, {req.order}, {req.layout},
                        req.options);
    } else if (*compare) {
      set_planner_knobs(order_options, layout_options, node_limit, creq.orders, creq.layouts,
                        req.options);
    }
  } catch (const CLI::ParseError& e) {
    const bool no_command = app.get_subcommands().empty() && !app.remaining().empty();
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr || no_command) {
      std::vector<std::string> extras;
      for (const CLI::App* sub : app.get_subcommands()) {
        for (const std::string& x : sub->remaining()) extras.push_back(x);
      }
      for (const std::string& x : app.remaining()) extras.push_back(x);
      std::cerr << "roam: error: " << extras_message(app, extras) << "\n";
      return kExitBadInput;
    }
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }

  try {
    for (const roam::cli::Verb& verb : verbs) {
      if (!*verb.command) continue;
      const int status = verb.run();
      std::cout.flush();
      if (!std::cout) {
        std::cerr << "roam: error: cannot write to standard output\n";
        return kExitBadInput;
      }
      return status;
    }
  } catch (const roam::InputError& e) {
    std::cerr << "roam: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    std::cerr << "roam: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    std::cerr << "roam: error: out of memory (the graph is too large for this machine)\n";
    return kExitInternal;
  } catch (const InternalError& e) {
    std::cerr << "roam: internal error (a bug, nothing written): " << e.what() << "\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "roam: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitBadInput;
}
