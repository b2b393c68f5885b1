// Exact rematerialization on tiny graphs: every schedule, the cheapest that fits (see
// remat_internal.h).
#include <algorithm>
#include <tuple>

#include "remat_internal.h"
#include "roam/analysis.h"
#include "roam/validate.h"

namespace roam::remat_internal {

namespace {

constexpr int64_t kMaxNodes = 3'000'000;  // search nodes; beyond it the search gives up

struct Found {
  double cost = 0;
  int32_t recomputations = 0;
  uint64_t tp = 0;
  std::vector<OpIdx> schedule;
  bool operator<(const Found& o) const {
    return std::tie(cost, recomputations, tp, schedule) <
           std::tie(o.cost, o.recomputations, o.tp, o.schedule);
  }
};

}  // namespace

std::optional<PlanResult> exhaustive_remat(const Graph& g, const PlanRequest& request,
                                           uint64_t budget_bytes, uint64_t lower_bound,
                                           bool* applicable, uint64_t* smallest_budget,
                                           const std::vector<InplacePair>& inplace) {
  const int32_t n = g.num_ops();
  int32_t recomputable = 0;
  for (const Op& op : g.ops) recomputable += op.recomputable ? 1 : 0;
  if (applicable) *applicable = false;
  if (n > kExhaustiveOps || recomputable > kExhaustiveRecomputable) return std::nullopt;
  const uint64_t alignment = request.options.alignment;
  const uint64_t cap = budget_bytes >= g.resident_bytes ? budget_bytes - g.resident_bytes : 0;
  // readers[v]: ops that read or bind an output of v (through aliases), for pruning useless
  // recomputations (one that nothing reads afterwards only costs).
  // A recomputation at the end that re-creates a graph output can pay off too (the output's old
  // instance dies early): `makes_output`.
  std::vector<std::vector<OpIdx>> readers(n);
  std::vector<char> makes_output(n, 0);
  for (OpIdx w = 0; w < n; ++w) {
    for (OpIdx u : g.preds[w]) readers[u].push_back(w);
  }
  for (const Storage& st : g.storages) {
    if (st.graph_output && st.workspace_of < 0) makes_output[st.producer] = 1;
  }
  std::vector<int32_t> runs(n, 0);
  std::vector<OpIdx> schedule;
  std::vector<Found> found;
  int64_t nodes = 0;
  bool gave_up = false;
  int32_t done = 0;  // ops that ran at least once
  auto evaluate = [&] {
    const InstanceGraph ig = instance_graph(g, schedule, inplace);
    if (ig.problem_count > 0) return;
    const uint64_t tp = theoretical_peak(ig.graph, ig.graph.program_order(), alignment);
    Found f;
    for (size_t k = 0; k < ig.op_of.size(); ++k) {
      if (ig.appearance[k] == 0) continue;
      ++f.recomputations;
      f.cost += g.ops[ig.op_of[k]].cost.value_or(0.0);
    }
    f.tp = tp;
    f.schedule = schedule;
    found.push_back(std::move(f));
  };
  auto dfs = [&](auto&& self) -> void {
    if (gave_up || ++nodes > kMaxNodes) {
      gave_up = true;
      return;
    }
    if (done == n) evaluate();  // and go on: recomputations may follow
    for (OpIdx v = 0; v < n; ++v) {
      if (runs[v] == 0) {
        bool ready = true;
        for (OpIdx u : g.preds[v]) ready = ready && runs[u] > 0;
        if (!ready) continue;
        ++done;
      } else if (runs[v] == 1 && g.ops[v].recomputable) {
        bool useful = makes_output[v];
        for (OpIdx w : readers[v]) useful = useful || runs[w] == 0 || (runs[w] == 1 && g.ops[w].recomputable);
        if (!useful) continue;
      } else {
        continue;
      }
      ++runs[v];
      schedule.push_back(v);
      self(self);
      schedule.pop_back();
      if (--runs[v] == 0) --done;
    }
  };
  dfs(dfs);
  if (gave_up) return std::nullopt;
  if (applicable) *applicable = true;
  std::sort(found.begin(), found.end());
  PlanRequest req = request;
  req.order = "program";
  auto arena_of = [&](const std::vector<OpIdx>& sched) {
    const InstanceGraph ig = instance_graph(g, sched, inplace);
    return make_plan_for_order(ig.graph, ig.graph.program_order(), 0.0, req, lower_bound).plan.stats.arena_bytes;
  };
  if (smallest_budget && !found.empty()) {  // the least peak among the least-Tp schedules
    uint64_t min_tp = found.front().tp;
    for (const Found& f : found) min_tp = std::min(min_tp, f.tp);
    uint64_t best = 0;
    int tried = 0;
    for (const Found& f : found) {
      if (f.tp != min_tp || tried++ >= 16) continue;
      const uint64_t peak = g.resident_bytes + arena_of(f.schedule);
      best = best == 0 ? peak : std::min(best, peak);
    }
    *smallest_budget = best;
  }
  // Below the resident bytes nothing fits; the smallest budget met is still named (above: it
  // was once skipped here, so the refusal named the plan without recomputation instead).
  if (budget_bytes < g.resident_bytes) return std::nullopt;
  for (const Found& f : found) {
    if (f.tp > cap) continue;
    if (f.recomputations == 0) {  // an order of g itself: version 1
      PlanResult r = make_plan_for_order(g, f.schedule, 0.0, req, lower_bound);
      if (r.plan.stats.peak_bytes <= budget_bytes) {
        r.plan.order_method = "exhaustive";
        return r;
      }
      // else as below, on the instance graph with the given writes: the layout the smallest
      // budget above was counted with, so a budget named there is met here
    }
    const InstanceGraph ig = instance_graph(g, f.schedule, inplace);
    PlanResult xr = make_plan_for_order(ig.graph, ig.graph.program_order(), 0.0, req, lower_bound);
    if (g.resident_bytes + xr.plan.stats.arena_bytes > budget_bytes) continue;
    Expanded e;
    e.op_of = ig.op_of;
    e.appearance = ig.appearance;
    e.tensor_of = ig.tensor_of;
    e.instance = ig.instance;
    e.graph = ig.graph;
    PlanResult r;
    // With in-place writes the plan's storages are those of g with the writes applied (plan.h).
    r.plan = inplace.empty() ? to_v2(g, e, xr.plan, lower_bound)
                             : to_v2(apply_inplace(g, inplace), e, xr.plan, lower_bound);
    r.plan.inplace = inplace;
    r.plan.order_method = "exhaustive";
    r.reserved_bytes = r.plan.stats.arena_bytes;
    return r;
  }
  return std::nullopt;
}

}  // namespace roam::remat_internal
