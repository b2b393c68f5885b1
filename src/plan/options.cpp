// The table of roam planner knobs (PlanOptions::extra) and the KEY=VALUE parser of the CLI.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "roam/options.h"

#include <algorithm>
#include <cctype>

namespace roam {

const std::vector<ExtraOptionSpec>& extra_option_specs() {
  static const std::vector<ExtraOptionSpec> specs = {
      {"weight_update_scheduler", "order", "bool", 0, 1,
       "false: every update at its latest gap (where the program runs it)"},
      {"exact_segments", "order", "bool", 0, 1, "false: no exact search inside segments"},
      {"try_variants", "order", "bool", 0, 1, "false: only the scheduled update placement"},
      {"baseline_shortcut", "order", "bool", 0, 1,
       "false: search even when a baseline already reaches the lower bound"},
      {"delay_radius", "order", "int", 0, 1e6, "gaps after the earliest one an update may try"},
      {"alpha", "order", "number", 0, 1e6, "optimizer factor (default from meta.optimizer)"},
      {"exact_node_limit", "order", "int", 1, 256, "largest segment (ops) searched exactly"},
      {"exact_state_limit", "order", "int", 0, 1e12, "exact-search states per segment"},
      {"local_search_swaps", "order", "int", 0, 1e12, "local-search swaps per variant"},
      {"return_variant", "order", "string", 0, 0,
       "diagnostics: return this roam candidate as is (roam-scheduled, roam-scheduled-r0, "
       "roam-scheduled-r2, roam-earliest, roam-latest, roam-free; when it was not run, the "
       "usual result)"},
      {"node_limit", "layout", "int", 2, 1e9, "most storages per leaf subgraph"},
      {"search_node_limit", "layout", "int", 1, 1e12,
       "search nodes per probe of the exact layout solver"},
      {"second_pass_probes", "layout", "int", 0, 1e6,
       "probes of the second leaf pass where the time sweep stops above Tp (0: none; default "
       "20)"},
  };
  return specs;
}

const ExtraOptionSpec& extra_option_spec(const std::string& key) {
  for (const ExtraOptionSpec& s : extra_option_specs()) {
    if (key == s.key) return s;
  }
  throw std::invalid_argument("unknown planner option '" + key + "'");
}

std::pair<std::string, nlohmann::json> parse_extra_option(const std::string& assignment,
                                                          const std::string& kind) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw std::invalid_argument("--" + kind + "-option '" + assignment + "': expected KEY=VALUE");
  }
  const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  const ExtraOptionSpec* spec = nullptr;
  std::string valid;
  for (const ExtraOptionSpec& s : extra_option_specs()) {
    if (kind != s.kind) continue;
    valid += (valid.empty() ? "" : ", ") + std::string(s.key);
    if (key == s.key) spec = &s;
  }
  const std::string where = "--" + kind + "-option " + key;
  if (spec == nullptr) throw std::invalid_argument(where + ": unknown key (valid: " + valid + ")");
  const std::string type = spec->type;
  if (type == "bool") {
    if (value == "true") return {key, true};
    if (value == "false") return {key, false};
    throw std::invalid_argument(where + ": expected true or false, got '" + value + "'");
  }
  if (type == "string") {
    // The only string knob names a roam order candidate (include/roam/roam_order.h).
    static const std::vector<std::string> variants = {"roam-scheduled", "roam-scheduled-r0",
                                                      "roam-scheduled-r2", "roam-earliest",
                                                      "roam-latest", "roam-free"};
    if (std::find(variants.begin(), variants.end(), value) == variants.end()) {
      std::string list;
      for (const auto& v : variants) list += (list.empty() ? "" : ", ") + v;
      throw std::invalid_argument(where + ": '" + value + "' is not a candidate (" + list + ")");
    }
    return {key, value};
  }
  auto out_of_range = [&] {
    return std::invalid_argument(where + ": " + value + " is outside [" +
                                 std::to_string(static_cast<int64_t>(spec->min)) + ", " +
                                 std::to_string(static_cast<int64_t>(spec->max)) + "]");
  };
  if (type == "int") {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || end != value.data() + value.size()) {
      throw std::invalid_argument(where + ": expected an integer, got '" + value + "'");
    }
    if (static_cast<double>(v) < spec->min || static_cast<double>(v) > spec->max) throw out_of_range();
    return {key, v};
  }
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v)) {
    throw std::invalid_argument(where + ": expected a number, got '" + value + "'");
  }
  if (v < spec->min || v > spec->max) throw out_of_range();
  return {key, v};
}

uint64_t parse_byte_size(const std::string& text) {
  // The grammar of roam.parse_size (python/roam/executor/planning.py), so that a size means the same
  // on the command line and in Python: [spaces] digits [. digits] [spaces] [unit] [spaces].
  auto fail = [&]() -> uint64_t {
    throw std::invalid_argument("'" + text +
                                "' is not a size in bytes (an integer, or a number with B, KiB, "
                                "MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of "
                                "1000), e.g. 6GiB), at most 2^62 bytes");
  };
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  size_t i = 0;
  while (i < text.size() && space(text[i])) ++i;
  const size_t begin = i;
  while (i < text.size() && digit(text[i])) ++i;
  if (i == begin) return fail();
  const size_t int_end = i;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && digit(text[i])) ++i;
  }
  const std::string number = text.substr(begin, i - begin);
  while (i < text.size() && space(text[i])) ++i;
  std::string unit;
  while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) {
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    ++i;
  }
  while (i < text.size() && space(text[i])) ++i;
  if (i != text.size()) return fail();
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},          {"b", 1.0},           {"kib", 1024.0},  {"mib", 1048576.0},
      {"gib", 1073741824.0}, {"tib", 1099511627776.0}, {"kb", 1e3}, {"mb", 1e6},
      {"gb", 1e9},        {"tb", 1e12}};
  double scale = 0;
  for (const auto& [name, value] : kUnits) {
    if (unit == name) scale = value;
  }
  if (scale == 0) return fail();
  constexpr double kMax = 4611686018427387904.0;  // 2^62
  if (scale == 1.0 && int_end - begin == number.size()) {  // whole bytes: exact
    if (number.size() > 19) return fail();
    const uint64_t v = std::stoull(number);
    if (v > (uint64_t{1} << 62)) return fail();
    return v;
  }
  const double v = std::stod(number) * scale;
  if (!(v <= kMax)) return fail();
  return static_cast<uint64_t>(v);
}

}  // namespace roam
