// How a CLI verb plugs into `roam`: each verb file (src/cli/cmd_*.cpp) defines one
// `void add_<verb>_verb(CLI::App& app, Verbs& verbs)` that adds its subcommand and registers the
// function to run when it is chosen; main.cpp calls every add_*_verb once.
//
// A verb's run function returns the exit status and throws roam::InputError for bad input
// (main prints it and exits 2) or roam::cli::InternalError for a bug (exit 3).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace roam::cli {

constexpr int kExitInvalid = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitInternal = 3;

struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Verb {
  CLI::App* command;
  std::function<int()> run;
};
using Verbs = std::vector<Verb>;

/// Progress line on stderr, only when stderr is a terminal and --quiet was not given.
void progress(const std::string& message);

/// A CLI11 check for a --time-limit: a finite number of seconds in [lo, hi] (CLI::Range lets
/// NaN through).
inline CLI::Validator finite_seconds(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) return "must be a number of seconds, got '" + text + "'";
        } catch (const std::exception&) {
          return "must be a number of seconds, got '" + text + "'";
        }
        if (!std::isfinite(v) || v < lo || v > hi) {
          return "must be a finite number of seconds in [" + CLI::detail::to_string(lo) + ", " +
                 CLI::detail::to_string(hi) + "], got '" + text + "'";
        }
        return "";
      },
      "SECONDS");
}

/// When the process started (what --time-limit counts from), and the seconds since.
extern const std::chrono::steady_clock::time_point g_start;
/// Wall-clock seconds since the process started (what --time-limit counts from).
double seconds_since_start();

}  // namespace roam::cli

namespace roam::cli {

/// Adds a verb's subcommand to the app and appends its Verb.
using VerbAdder = void (*)(CLI::App& app, Verbs& verbs);

/// Called from a static initializer in each cmd_*.cpp:
///   static const bool kRegistered = roam::cli::register_verb(40, &add_layout_verb);
/// `rank` orders the verbs in `roam --help`. Returns true.
bool register_verb(int rank, VerbAdder adder);

}  // namespace roam::cli
