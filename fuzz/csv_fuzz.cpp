// Fuzz target: the MiniMalloc CSV reader (include/roam/csv_layout.h) and, on small problems, the
// allocation solvers behind `roam layout --csv`.
//
// Input: CSV text. Bad input must be refused with roam::InputError (one line). A problem that
// reads must write back (layout_csv_text) to text that reads as the same problem; on at most 24
// buffers, best fit and minimize_allocation (small node limits) must give offsets that pass
// check_allocation and an independent pairwise check, with a height at least the live-size
// lower bound. Any other exception, a sanitizer report or a bad layout is a finding (abort).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "oracle.h"
#include "roam/csv_layout.h"
#include "roam/roam_layout.h"

namespace {

void check_offsets(const std::vector<roam::AllocBuffer>& b, const std::vector<uint64_t>& off,
                   uint64_t height, const std::string& what) {
  if (off.size() != b.size()) roamfuzz::finding(what + ": wrong number of offsets");
  uint64_t top = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (off[i] % b[i].alignment != 0) roamfuzz::finding(what + ": misaligned offset");
    top = std::max(top, off[i] + b[i].size);
    for (size_t j = 0; j < i; ++j) {
      const bool live = b[i].lower < b[j].upper && b[j].lower < b[i].upper;
      const bool overlap = b[i].size > 0 && b[j].size > 0 && off[i] < off[j] + b[j].size &&
                           off[j] < off[i] + b[i].size;
      if (live && overlap) roamfuzz::finding(what + ": buffers overlap");
    }
  }
  if (top > height) roamfuzz::finding(what + ": height below the top of a buffer");
  const std::string problem = roam::check_allocation(b, off, height);
  if (!problem.empty()) roamfuzz::finding(what + ": check_allocation: " + problem);
  if (height < roam::live_size_lower_bound(b)) roamfuzz::finding(what + ": height below the lower bound");
}

void run(const std::string& text) {
  roam::CsvLayoutProblem p;
  try {
    p = roam::parse_layout_csv(text, "fuzz.csv");
  } catch (const roam::InputError& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) roamfuzz::finding("multi-line message: " + what);
    return;
  }
  // Write back and read again: the same problem.
  std::vector<uint64_t> zeros(p.buffers.size(), 0);
  const roam::CsvLayoutProblem q = roam::parse_layout_csv(roam::layout_csv_text(p, zeros), "again.csv");
  if (q.ids != p.ids || q.buffers.size() != p.buffers.size()) roamfuzz::finding("CSV round trip differs");
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const auto& a = p.buffers[i];
    const auto& b = q.buffers[i];
    if (a.lower != b.lower || a.upper != b.upper || a.size != b.size || a.alignment != b.alignment) {
      roamfuzz::finding("CSV round trip changes buffer " + p.ids[i]);
    }
  }
  if (p.buffers.size() > 24) return;
  const std::vector<uint64_t> bf = roam::best_fit_allocation(p.buffers);
  uint64_t bf_height = 0;
  for (size_t i = 0; i < bf.size(); ++i) bf_height = std::max(bf_height, bf[i] + p.buffers[i].size);
  check_offsets(p.buffers, bf, bf_height, "best fit");
  roam::AllocSolveOptions opt;
  opt.node_limit = 2000;
  opt.time_limit_seconds = 0.5;
  opt.heuristics = 2;
  const roam::AllocMinimizeResult r = roam::minimize_allocation(p.buffers, opt);
  check_offsets(p.buffers, r.offsets, r.height, "minimize");
  if (r.height > bf_height) roamfuzz::finding("minimize is worse than best fit");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 14)) return 0;
  try {
    run(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const std::exception& e) {
    roamfuzz::finding(std::string("unexpected exception: ") + e.what());
  }
  return 0;
}
