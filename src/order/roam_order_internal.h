// Internal to src/order: what the stages of the ROAM order (arXiv 2310.19295, Sec. 4; steps of
// include/roam/roam_order.h) share. roam_order_prep.cpp builds the R model and the update groups
// (steps 1-2's input), roam_order_update.cpp places the groups in gaps (step 2, the weight-update
// scheduler), roam_order.cpp cuts blocks, solves segments and assembles the order (steps 3-4).
//
// Vocabulary used below:
//  - R ("reduced") ops: the ops the segment search orders. Every other op is pinned (see
//    roam_order.h, step 1): sources (and chains hanging from them) run just before their first
//    successor; memory-free ops right after their last predecessor (their "anchors", the R ops
//    they end up after); isolated ops first or last. In the R model a memory-free op's uses
//    count as uses by its anchors, and a source's storages are born by whichever R op of its
//    frontier (the first R ops on its paths through sources) runs first.
//  - Units: update groups, or the head and tail of a split group (step 2).
//  - Core: R ops outside units. Gaps: between consecutive key points of the core.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "roam/graph.h"
#include "roam/options.h"
#include "roam/roam_order.h"
#include "roam_segment.h"

namespace roam::detail {

enum class Kind : uint8_t { kReduced, kSource, kMemfree, kIsoFirst, kIsoLast };

struct Settings {
  bool wus = true;
  bool exact = true;
  bool variants = true;
  bool shortcut = true;  // return a baseline at once when it reaches the lower bound
  int32_t delay_radius = 8;
  double alpha = -1;  // < 0: from meta.optimizer
  int threads = 1;
  SegmentSettings seg;
};


// Settings from PlanOptions::extra (defaults where a key is absent or of another type); the
// segment deadline is the earlier of options.deadline and start + options.time_limit_seconds.
Settings read_settings(const PlanOptions& o, std::chrono::steady_clock::time_point start);

inline void sort_unique(std::vector<OpIdx>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

/// Key points of a DAG whose nodes 0..n-1 are numbered in a topological order.
std::vector<int32_t> dag_key_points(const std::vector<std::vector<int32_t>>& preds,
                                    const std::vector<std::vector<int32_t>>& succs);

struct Group {                 // one schedulable unit of an update group
  int32_t component = 0;       // the update group (connected component) it belongs to
  int32_t part = 0;            // 0 whole group, 1 head (consumes the gradients), 2 tail
  int32_t sibling = -1;        // the other part of the same group, -1 when whole
  std::vector<OpIdx> rops;     // R ops, program order
  std::vector<OpIdx> all;      // R ops and pinned memory-free members, program order
  std::vector<OpIdx> entries;  // R ops without a predecessor in the unit
  std::vector<OpIdx> exits;    // R ops without a successor in the unit
  int32_t e = 0, l = 0;        // gap window (a tail also waits for its head)
  uint64_t G = 0, X = 0;       // held bytes, transient peak (G included)
  bool births = false;         // some op of the unit makes a storage (in the R model)
  uint64_t from_head = 0;      // tail: bytes made by the head that it reads (held between)
  std::vector<std::pair<StorageIdx, int32_t>> external;  // (storage, core position of its end)
};

struct Prep {
  int32_t n = 0;
  std::vector<Kind> kind;
  std::vector<std::vector<OpIdx>> anchors;         // memory-free pinned ops: R anchors
  std::vector<std::vector<OpIdx>> rpreds, rsuccs;  // R ops: R dependencies
  std::vector<OpIdx> rops;                         // R ops, program order
  std::vector<OpIdx> sources, memfree, iso_first, iso_last;
  std::vector<uint64_t> size;                     // per storage, aligned
  std::vector<std::vector<OpIdx>> births, users;  // per storage, R ops; births empty: excluded
  std::vector<std::vector<OpIdx>> direct;         // per storage: R ops listing it (after birth)
  std::vector<char> escape;                       // per storage: graph output
  std::vector<std::vector<StorageIdx>> op_touch;  // per R op: storages it births or uses
  // groups and core
  std::vector<int32_t> group_of;  // per op, -1 when none
  std::vector<Group> groups;
  std::vector<OpIdx> core_ops;    // program order
  std::vector<int32_t> core_pos;  // per op, -1 when not core
  std::vector<OpIdx> core_keys;
  std::vector<int32_t> key_index, gap_of;  // per core op
  int32_t m = 0;
  double alpha = 0;
};


// Steps 1 and 2's input (roam_order_prep.cpp): pinning, the R model, update groups and their
// windows, the core and its key points. Sizes are aligned to `alignment` bytes.
Prep prepare(const Graph& g, const Settings& settings, uint64_t alignment);

// The weight-update scheduler (roam_order_update.cpp): a gap per group, from its window.
std::vector<int32_t> schedule_groups(const Prep& p, const Settings& settings);

// Artificial edges that put every group in its gap; groups sharing a gap without core ops are
// chained (by X - G when `by_extra`, else in program order).
std::vector<std::pair<OpIdx, OpIdx>> placement_edges(const Prep& p, const std::vector<int32_t>& gap,
                                                     bool by_extra);

// A gap per group: the earliest or latest of its window, or the scheduler's choice.
std::vector<int32_t> placement(const Prep& p, GroupPlacement mode, const Settings& settings);

}  // namespace roam::detail
