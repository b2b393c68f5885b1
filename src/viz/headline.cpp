// The headline of `roam plan` and `roam compare` (include/roam/headline.h).
#include "roam/headline.h"

#include <cstdio>

#include "roam/analysis.h"
#include "roam/inplace.h"
#include "roam/layout.h"

namespace roam {

namespace {
std::string mib(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}
}  // namespace

Headline headline_reference(const Graph& g_in, uint64_t alignment) {
  const Order program = g_in.program_order();
  // Program order with every in-place write it allows: where the graph's permissions are the
  // framework's in-place operators (a functional capture), what eager PyTorch holds.
  Graph applied;
  if (has_inplace(g_in)) applied = apply_inplace(g_in, inplace_valid_in(g_in, program));
  const Graph& g = has_inplace(g_in) ? applied : g_in;
  const Liveness live = compute_liveness(g, program);
  Headline h;
  h.cpu_program_bytes = g.resident_bytes + theoretical_peak(g, live, alignment);
  h.cuda_program_bytes = g.resident_bytes + layout_pytorch(g, live, alignment).reserved_bytes;
  return h;
}

std::string percent_change(uint64_t value, uint64_t reference) {
  if (reference == 0) return "n/a";
  const double p = 100.0 * (static_cast<double>(value) / static_cast<double>(reference) - 1.0);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%+.1f%%", p);
  std::string s = buf;
  if (s == "-0.0%") s = "+0.0%";
  return s;
}

std::string headline_text(const Headline& h) {
  std::string s = "peak " + mib(h.peak_bytes);
  if (h.budget_bytes) {
    s += " (budget " + mib(*h.budget_bytes);
    if (h.recomputations > 0 && h.recompute_overhead) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * *h.recompute_overhead);
      s += std::string(", recompute overhead ") + buf;
    } else if (h.recomputations > 0) {
      s += ", " + std::to_string(h.recomputations) + " recomputations, overhead unknown: no op costs";
    } else {
      s += ", no recomputation";
    }
    s += ")";
  }
  s += "; program order on a CPU allocator " + mib(h.cpu_program_bytes) + " (" +
       percent_change(h.peak_bytes, h.cpu_program_bytes) + ")";
  s += "; on PyTorch's CUDA caching allocator (simulated) " + mib(h.cuda_program_bytes) + " (" +
       percent_change(h.peak_bytes, h.cuda_program_bytes) + ")";
  s += "; lower bound " + mib(h.lower_bound_bytes);
  return s;
}

const char* headline_key() {
  return "(peak = resident + this plan's arena; CPU allocator = resident + Tp of the graph's own "
         "op order, what eager PyTorch holds on a CPU; CUDA caching allocator = resident + the "
         "segments PyTorch's allocator would hold for that order on a GPU; lower bound = no "
         "valid order needs less; under a budget, no schedule with recomputation needs less)";
}

}  // namespace roam
