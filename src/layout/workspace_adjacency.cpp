// Moving each op's workspace block next to one of its output slots where the bytes there are
// free at the op's step (roam/layout.h, place_workspaces_beside_outputs).
#include <algorithm>
#include <chrono>
#include <set>

#include "roam/layout.h"

namespace roam {

uint64_t place_workspaces_beside_outputs(const Graph& g, const Liveness& live,
                                         std::vector<uint64_t>& offsets, uint64_t alignment,
                                         std::chrono::steady_clock::time_point deadline) {
  const int32_t n = g.num_ops();
  if (g.num_storages() == g.num_tensor_storages) return 0;  // no workspace
  const uint64_t arena = arena_bytes(g, offsets, alignment);
  std::vector<uint64_t> size(g.storages.size());
  for (StorageIdx s = 0; s < g.num_storages(); ++s) size[s] = align_up(g.storages[s].size, alignment);
  std::vector<std::vector<StorageIdx>> born(n), dies(n);
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    if (size[s] == 0) continue;
    born[live.first[s]].push_back(s);
    dies[live.last[s]].push_back(s);
  }
  // The root output storages of each op (the slots its scratch may sit beside), largest first.
  std::vector<std::vector<StorageIdx>> outs(n);
  for (StorageIdx s = 0; s < g.num_tensor_storages; ++s) {
    if (size[s] > 0) outs[g.storages[s].producer].push_back(s);
  }
  for (auto& o : outs) {
    std::stable_sort(o.begin(), o.end(), [&](StorageIdx a, StorageIdx b) { return size[a] > size[b]; });
  }
  // Sweep the steps with the live storages ordered by offset: at op v's step, a candidate range
  // for v's workspace is free when neither neighbour (by offset) of it overlaps it.
  std::set<std::pair<uint64_t, StorageIdx>> active;
  uint64_t moved = 0;
  int32_t checked = 0;
  for (int32_t t = 0; t < n; ++t) {
    for (StorageIdx s : born[t]) active.insert({offsets[s], s});
    if (++checked % 256 == 0 && std::chrono::steady_clock::now() >= deadline) break;
    for (StorageIdx w : born[t]) {
      if (g.storages[w].workspace_of < 0) continue;
      const OpIdx v = g.storages[w].workspace_of;
      const uint64_t ws = size[w];
      auto adjacent = [&](uint64_t at) {
        for (StorageIdx o : outs[v]) {
          if (at == offsets[o] + size[o] || at + ws == offsets[o]) return true;
        }
        return false;
      };
      if (adjacent(offsets[w])) continue;
      active.erase({offsets[w], w});
      auto free_at = [&](uint64_t at) {
        if (at + ws > arena) return false;
        auto it = active.lower_bound({at, -1});
        if (it != active.end() && it->first < at + ws) return false;
        if (it != active.begin()) {
          auto prev = std::prev(it);
          if (prev->first + size[prev->second] > at) return false;
        }
        return true;
      };
      for (StorageIdx o : outs[v]) {
        bool done = false;
        for (uint64_t at : {offsets[o] + size[o], offsets[o] >= ws ? offsets[o] - ws : ~uint64_t{0}}) {
          if (at != ~uint64_t{0} && free_at(at)) {
            offsets[w] = at;
            ++moved;
            done = true;
            break;
          }
        }
        if (done) break;
      }
      active.insert({offsets[w], w});
    }
    for (StorageIdx s : dies[t]) active.erase({offsets[s], s});
  }
  return moved;
}

}  // namespace roam
