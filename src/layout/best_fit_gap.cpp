// Best-fit gap placement shared by the llfb and greedy_by_size baselines (best_fit_gap.h).
#include "best_fit_gap.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace roam::layout_internal {

void check_layout_inputs(const Graph& g, const Liveness& live, uint64_t alignment,
                         const char* method) {
  const std::string who = std::string("layout '") + method + "': ";
  if (alignment == 0) throw std::invalid_argument(who + "alignment must be at least 1");
  const size_t n = g.storages.size();
  if (live.first.size() != n || live.last.size() != n) {
    throw std::invalid_argument(who + "liveness has " + std::to_string(live.first.size()) + "/" +
                                std::to_string(live.last.size()) +
                                " intervals, graph has " + std::to_string(n) + " storages");
  }
  for (size_t s = 0; s < n; ++s) {
    if (live.first[s] < 0 || live.first[s] > live.last[s]) {
      throw std::invalid_argument(who + "storage " + std::to_string(s) + " has live interval [" +
                                  std::to_string(live.first[s]) + ", " +
                                  std::to_string(live.last[s]) + "]");
    }
  }
}

namespace {

// A placed storage: byte range [offset, end) and live interval [first, last].
struct Placed {
  uint64_t offset;
  uint64_t end;
  int32_t first;
  int32_t last;
};

}  // namespace

Layout place_best_fit_gap(const Graph& g, const Liveness& live, uint64_t alignment,
                          const std::vector<StorageIdx>& sequence) {
  const size_t n = g.storages.size();
  if (sequence.size() != n) {
    throw std::invalid_argument("place_best_fit_gap: sequence has " +
                                std::to_string(sequence.size()) + " storages, graph has " +
                                std::to_string(n));
  }
  Layout out;
  out.offsets.assign(n, 0);
  std::vector<bool> seen(n, false);
  // Every placed storage, sorted by offset: one linear pass finds the conflicting ones in offset
  // order, so the gaps come out directly (no per-storage sort).
  std::vector<Placed> placed;
  placed.reserve(n);
  uint64_t arena = 0;
  for (StorageIdx s : sequence) {
    if (s < 0 || static_cast<size_t>(s) >= n || seen[s]) {
      throw std::invalid_argument("place_best_fit_gap: sequence is not a permutation of the "
                                  "storages (entry " + std::to_string(s) + ")");
    }
    seen[s] = true;
    const uint64_t size = align_up(g.storages[s].size, alignment);
    const int32_t first = live.first[s];
    const int32_t last = live.last[s];

    // `cursor` is the largest end among the conflicting storages seen so far; a conflicting
    // storage starting above it leaves the gap [cursor, its offset).
    uint64_t cursor = 0;
    uint64_t best_gap = std::numeric_limits<uint64_t>::max();
    uint64_t best_offset = 0;
    bool found = false;
    for (const Placed& p : placed) {
      if (p.last < first || p.first > last) continue;  // live intervals disjoint: no conflict
      if (p.offset > cursor) {
        const uint64_t gap = p.offset - cursor;
        if (gap >= size && gap < best_gap) {  // strict: ties keep the lower offset
          best_gap = gap;
          best_offset = cursor;
          found = true;
          if (gap == size) break;  // an exact fit cannot be beaten
        }
      }
      cursor = std::max(cursor, p.end);
    }
    const uint64_t offset = found ? best_offset : cursor;
    out.offsets[s] = offset;
    arena = std::max(arena, offset + size);
    const Placed entry{offset, offset + size, first, last};
    auto pos = std::upper_bound(placed.begin(), placed.end(), offset,
                                [](uint64_t o, const Placed& p) { return o < p.offset; });
    placed.insert(pos, entry);
  }
  out.reserved_bytes = arena;
  return out;
}

}  // namespace roam::layout_internal
