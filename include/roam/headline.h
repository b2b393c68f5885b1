// The headline of `roam plan` and `roam compare`: one line that says how much memory a plan
// saves against what the user runs today, on a CPU and on a CUDA device.
//
//   peak X MiB; program order on a CPU allocator Y MiB (-Z%); on PyTorch's CUDA caching
//   allocator (simulated) W MiB (-V%); lower bound L MiB
//
// (one line on screen). Every figure includes the resident bytes (parameters, buffers,
// optimizer state, the batch), so that they compare with what a process holds:
//   X  the plan's held bytes: resident + arena (resident + reserved segments for the pytorch
//      layout); with a budget "peak X MiB (budget B MiB, recompute overhead R%)", R = recompute
//      seconds / compute seconds of the graph's op costs;
//   Y  resident + Tp of the program order: an exact-fit CPU allocator running the ops in the
//      graph's order holds exactly the live bytes, so this is what eager PyTorch on a CPU holds
//      (its workspaces aside, unless the graph records them);
//   W  resident + the segments that the simulation of PyTorch's CUDA caching allocator reserves
//      on the program order (held bytes, fragmentation included);
//   L  resident + the plan's lower bound on Tp (no valid order, or with recomputation no valid
//      schedule, holds fewer bytes).
// Z and V are the reductions 100 * (1 - X / Y) and 100 * (1 - X / W), one decimal; a plan above
// the reference shows "+".
// The same format, for reuse in Python (the executor's report): python/roam/headline.py.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "roam/graph.h"

namespace roam {

struct Headline {
  uint64_t peak_bytes = 0;            // X
  uint64_t cpu_program_bytes = 0;     // Y
  uint64_t cuda_program_bytes = 0;    // W
  uint64_t lower_bound_bytes = 0;     // L (resident included)
  std::optional<uint64_t> budget_bytes;       // plan --budget
  uint64_t recomputations = 0;                // op runs that are recomputations
  std::optional<double> recompute_overhead;   // recompute seconds / compute seconds (known costs)
};

/// Y and W of `g` at `alignment` (the other fields 0): Tp of g.program_order() and the
/// pytorch caching-allocator simulation's reserved bytes on it, each plus g.resident_bytes,
/// with every in-place write program order allows (roam/inplace.h: the writes eager PyTorch
/// makes where the permissions come from its in-place operators).
Headline headline_reference(const Graph& g, uint64_t alignment);

/// The one-line headline (no trailing newline).
std::string headline_text(const Headline& h);

/// One line (no trailing newline) saying what each figure of the headline is.
const char* headline_key();

/// "-12.3%" / "+4.0%": the change of `value` against `reference` (100 * (value / ref - 1)).
std::string percent_change(uint64_t value, uint64_t reference);

}  // namespace roam
