// Rematerialization of a training graph under a memory budget: see include/roam/remat.h.
#include "roam/remat.h"

#include <algorithm>
#include <optional>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

#include "roam/analysis.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/validate.h"
#include "remat_internal.h"

namespace roam {

using remat_internal::Expanded;
using remat_internal::expand;
using remat_internal::Structure;
using remat_internal::analyse;
using remat_internal::to_v2;
using remat_internal::SpanOption;
using remat_internal::choose_spans;

namespace {

std::string mib_text(uint64_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << static_cast<double>(bytes) / 1048576.0 << " MiB";
  return os.str();
}


// A chain unit or segment: forward positions [begin, end); `boundary` the storage that alone
// carries the forward pass across its end (-1 when none or at the last one).
struct Span {
  int32_t begin = 0, end = 0;
  StorageIdx boundary = -1;
  uint64_t bytes = 0;   // droppable bytes (estimate, for the drop order)
  double cost = 0;      // recompute seconds (estimate, for the drop order)
};

// Units: the forward is cut after position i when at most one storage produced at or before i
// is read by a forward op after i.
std::vector<Span> find_units(const Graph& g, const Structure& st) {
  const auto m = static_cast<int32_t>(st.forward.size());
  std::vector<int64_t> count(m + 1, 0), idsum(m + 1, 0);
  for (StorageIdx s = 0; s < g.num_tensor_storages; ++s) {
    const int32_t p = st.pos[g.storages[s].producer];
    if (p < 0) continue;
    int32_t last = p;
    for (OpIdx u : g.storages[s].users) last = std::max(last, st.pos[u]);
    if (last > p) {
      count[p] += 1;
      count[last] -= 1;
      idsum[p] += s;
      idsum[last] -= s;
    }
  }
  std::vector<Span> units;
  int64_t c = 0, ids = 0;
  int32_t begin = 0;
  for (int32_t i = 0; i < m; ++i) {
    c += count[i];
    ids += idsum[i];
    if (i == m - 1 || c <= 1) {
      Span u;
      u.begin = begin;
      u.end = i + 1;
      u.boundary = (i < m - 1 && c == 1) ? static_cast<StorageIdx>(ids) : -1;
      units.push_back(u);
      begin = i + 1;
    }
  }
  return units;
}

// Estimated droppable bytes and recompute seconds of a span, its boundary kept.
void estimate(const Graph& g, const Structure& st, uint64_t alignment, Span& s) {
  s.bytes = 0;
  s.cost = 0;
  const OpIdx keep = s.boundary >= 0 ? g.storages[s.boundary].producer : -1;
  for (int32_t i = s.begin; i < s.end; ++i) {
    const OpIdx v = st.forward[i];
    if (!st.cloneable[v] || v == keep || !st.backward_read[v]) continue;
    s.cost += g.ops[v].cost.value_or(0.0);
    for (StorageIdx x : g.op_storages[v]) {
      if (g.storages[x].producer == v && g.storages[x].workspace_of < 0) {
        s.bytes += align_up(g.storages[x].size, alignment);
      }
    }
  }
}

// Probes of the roam layout's second leaf pass when an expanded graph is planned fully.
constexpr int kFullPlanSecondPassProbes = 4;

struct Candidate {
  std::vector<OpIdx> clones;  // ops recomputed once, program order
  double cost = 0;            // exact recompute seconds
};

// The ops recomputed when `dropped` segments are dropped: the cloneable ops of those segments
// (their boundary producers excepted) whose outputs the backward reads, and the ones those
// read inside the dropped set.
Candidate make_candidate(const Graph& g, const Structure& st, const std::vector<Span>& segments,
                         const std::vector<int32_t>& dropped, const std::vector<double>& ratio,
                         double max_ratio) {
  std::vector<char> in_set(g.ops.size(), 0), needed(g.ops.size(), 0);
  std::vector<OpIdx> set;
  for (int32_t j : dropped) {
    const Span& s = segments[j];
    const OpIdx keep = s.boundary >= 0 ? g.storages[s.boundary].producer : -1;
    for (int32_t i = s.begin; i < s.end; ++i) {
      const OpIdx v = st.forward[i];
      if (st.cloneable[v] && v != keep && ratio[v] <= max_ratio) {
        in_set[v] = 1;
        set.push_back(v);
      }
    }
  }
  std::sort(set.begin(), set.end());
  // An op whose recomputation needs others recomputed with it (Structure::clone_with: an
  // in-place write) stays out unless they are in: program order, so that it cascades.
  for (OpIdx v : set) {
    if (!st.closed(v, in_set)) in_set[v] = 0;
  }
  set.erase(std::remove_if(set.begin(), set.end(), [&](OpIdx v) { return !in_set[v]; }), set.end());
  for (auto it = set.rbegin(); it != set.rend(); ++it) {
    const OpIdx v = *it;
    if (!needed[v] && !st.backward_read[v]) continue;
    needed[v] = 1;
    for (TensorIdx t : g.ops[v].inputs) {
      const OpIdx p = g.tensors[st.nearest[t]].producer;
      if (p >= 0 && in_set[p]) needed[p] = 1;
    }
    for (TensorIdx t : g.ops[v].outputs) {
      if (g.tensors[t].alias_of < 0) continue;
      const OpIdx p = g.tensors[st.nearest[g.tensors[t].alias_of]].producer;
      if (p >= 0 && in_set[p]) needed[p] = 1;
    }
  }
  Candidate c;
  for (OpIdx v : set) {
    if (!needed[v]) continue;
    c.clones.push_back(v);
    c.cost += g.ops[v].cost.value_or(0.0);
  }
  return c;
}

// ROAM_REMAT_TIMERS=1: where the time went, one line on stderr (diagnostics; no effect on plans).
void report_timers(const RematStats& s) {
  const char* env = std::getenv("ROAM_REMAT_TIMERS");
  if (!env || !*env || *env == '0') return;
  std::fprintf(stderr,
               "remat: units %zu candidates %zu evaluated %zu deferred %zu resolved %zu full %zu "
               "bound_skips %zu | base %.2f s "
               "candidates %.2f s expand %.2f s quick %.2f s bounds %.2f s full %.2f s total %.2f s\n",
               s.units, s.candidates, s.evaluated, s.deferred, s.resolved, s.full_plans,
               s.bound_skips, s.base_seconds,
               s.candidate_seconds, s.expand_seconds, s.quick_seconds, s.bound_seconds,
               s.full_seconds, s.seconds);
}

}  // namespace


BudgetInfeasible::BudgetInfeasible(uint64_t budget_bytes, uint64_t smallest, uint64_t bound,
                                   bool cut_by_time)
    : std::runtime_error([&] {
        std::ostringstream os;
        os << "budget " << budget_bytes << " B (" << mib_text(budget_bytes) << ") cannot be met";
        os << (cut_by_time ? " within the time limit (the search was cut short; a longer "
                             "--time-limit may meet it): "
                           : ": ");
        if (smallest > 0) {
          os << "the smallest budget roam meets " << (cut_by_time ? "within the time limit " : "")
             << "is " << smallest << " B (" << mib_text(smallest) << ")";
        } else {
          os << "no schedule could be planned" << (cut_by_time ? " within the time limit" : "");
        }
        os << "; no schedule, recomputation included, fits below " << bound << " B ("
           << mib_text(bound) << ", proven)";
        if (smallest > 0 && bound > 0 && smallest >= bound) {
          os.setf(std::ios::fixed);
          os.precision(1);
          os << "; the smallest budget met is "
             << 100.0 * static_cast<double>(smallest - bound) / static_cast<double>(bound)
             << "% above it";
        }
        return os.str();
      }()),
      budget(budget_bytes), smallest_budget(smallest), lower_bound(bound),
      time_limited(cut_by_time) {}

PlanResult plan_with_budget(const Graph& g, const PlanRequest& request, uint64_t budget_bytes,
                            RematStats* stats_out) {
  return remat_internal::plan_with_budget(g, request, budget_bytes, stats_out, true);
}

namespace {

// The method of remat.h on the planning graph `g`, for the graph `orig` the plan is for: `g` is
// `orig` itself, or its forced graph (roam/inplace.h) whose in-place writes `forced` are aliases
// there. What is proven or planned without recomputation is done on `orig` (its lower bounds
// with in-place writes allowed, make_plan of it); the candidates, their expanded graphs and
// plans on `g`, their plans carrying `forced` (the storages of `g` are those of orig with those
// writes applied).
PlanResult plan_core(const Graph& g, const Graph& orig, const std::vector<InplacePair>& forced,
                     const PlanRequest& request, uint64_t budget_bytes, RematStats* stats_out,
                     bool defer_layouts) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  // The whole call ends by `deadline`: the earlier of the caller's (the CLI's --time-limit from
  // start-up) and start + time_limit_seconds. `time_cut`: a step was skipped for it.
  const double limit = std::min(request.options.time_limit_seconds > 0
                                    ? request.options.time_limit_seconds : 1e9, 1e9);
  const Clock::time_point deadline = std::min(
      request.options.deadline,
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit)));
  auto seconds_left = [&] { return std::chrono::duration<double>(deadline - Clock::now()).count(); };
  bool time_cut = false;
  auto out_of_time = [&] {
    if (Clock::now() >= deadline) time_cut = true;
    return time_cut;
  };
  RematStats stats;
  const uint64_t alignment = request.options.alignment;
  // The plan without recomputation (at most a quarter of the time): the answer when it meets
  // the budget. Below resident + the proven lower bound of g (no order of g fits below it) it
  // cannot, so it is planned only when the smallest budget met must be named and no schedule
  // tried was lower than g's quick plan (lescea order, best of llfb and best_fit).
  const uint64_t bound = g.resident_bytes + recompute_lower_bound(orig, alignment);
  const uint64_t rlb = bound - g.resident_bytes;
  const Clock::time_point base_deadline = std::min(deadline, start + (deadline - start) / 4);
  std::optional<PlanResult> base;
  auto plan_base = [&]() -> const PlanResult& {
    if (!base) {
      PlanRequest base_request = request;
      base_request.options.deadline = base_deadline;
      base_request.options.time_limit_seconds = std::max(limit / 4, 1e-3);
      base = make_plan(orig, base_request);
      base->plan.options["budget_bytes"] = budget_bytes;
    }
    return *base;
  };
  uint64_t base_peak = 0;
  uint64_t norecompute_bound = 0;  // resident + g's proven lower bound
  {
    // The quick plan of orig as make_plan's baseline pair would make it: the lescea order of
    // the planning graph with the in-place writes it allows.
    Order order = order_lescea(g, alignment);
    Graph applied;
    if (has_inplace(orig)) applied = apply_inplace(orig, inplace_valid_in(orig, order));
    const Graph& quick_graph = has_inplace(orig) ? applied : g;
    const Liveness live = compute_liveness(quick_graph, order);
    base_peak = g.resident_bytes +
                std::min(layout_llfb(quick_graph, live, alignment, base_deadline).reserved_bytes,
                         layout_best_fit(quick_graph, live, alignment, base_deadline).reserved_bytes);
    norecompute_bound =
        g.resident_bytes + lower_bound(orig, alignment, &order, base_deadline);
    if (budget_bytes >= norecompute_bound || g.num_ops() <= remat_internal::kExhaustiveOps) {
      base_peak = plan_base().plan.stats.peak_bytes;
      if (base_peak <= budget_bytes) {
        stats.seconds = elapsed();
        if (stats_out) *stats_out = stats;
        return *base;
      }
    }
  }

  stats.base_seconds = elapsed();
  // Tiny graphs: every schedule (exact).
  bool exhaustive = false;
  uint64_t exhaustive_smallest = 0;
  if (auto r = remat_internal::exhaustive_remat(orig, request, budget_bytes, rlb, &exhaustive,
                                                &exhaustive_smallest, forced)) {
    r->plan.options["budget_bytes"] = budget_bytes;
    r->plan.options["remat"] = {{"method", "exhaustive"}};
    r->plan.stats.solve_seconds = elapsed();
    stats.seconds = elapsed();
    if (stats_out) *stats_out = stats;
    return *r;
  }
  if (exhaustive) {
    stats.seconds = elapsed();
    if (stats_out) *stats_out = stats;
    throw BudgetInfeasible(budget_bytes,
                           std::min(base_peak,
                                    exhaustive_smallest ? exhaustive_smallest : UINT64_MAX),
                           bound, false);
  }

  const Structure st = analyse(g, forced);
  const std::vector<Span> units = find_units(g, st);
  stats.units = units.size();
  // Segmentations into about 1, 2, 4, ... segments of equal droppable bytes, and the prefixes of
  // each one's drop order.
  std::vector<Span> unit_est = units;
  uint64_t total = 0;
  for (Span& u : unit_est) {
    estimate(g, st, alignment, u);
    total += u.bytes;
  }
  // Recompute seconds per byte of each cloneable op's outputs; the cheap-ops options (Rockmate:
  // keep the costly ops' outputs, recompute the cheap ones) drop only ops at or below a
  // quantile of it.
  std::vector<double> ratio(g.ops.size(), 0.0), ratios;
  for (OpIdx v : st.forward) {
    if (!st.cloneable[v]) continue;
    uint64_t bytes = 0;
    for (StorageIdx x : g.op_storages[v]) {
      if (g.storages[x].producer == v && g.storages[x].workspace_of < 0) bytes += g.storages[x].size;
    }
    ratio[v] = g.ops[v].cost.value_or(0.0) / static_cast<double>(bytes + 1);
    if (st.backward_read[v]) ratios.push_back(ratio[v]);
  }
  std::sort(ratios.begin(), ratios.end());
  std::vector<double> thresholds = {std::numeric_limits<double>::infinity()};
  for (double q : {0.75, 0.5, 0.25}) {
    if (ratios.empty()) break;
    const double t = ratios[static_cast<size_t>(q * static_cast<double>(ratios.size() - 1))];
    if (t < thresholds.back()) thresholds.push_back(t);
  }
  std::vector<Candidate> candidates;
  std::set<std::vector<OpIdx>> seen;
  for (double max_ratio : thresholds)
  for (size_t k = 1; k <= 128 && total > 0 && !out_of_time(); k *= 2) {
    std::vector<Span> segs;
    uint64_t acc = 0;
    Span cur;
    cur.begin = unit_est.front().begin;
    for (size_t i = 0; i < unit_est.size(); ++i) {
      acc += unit_est[i].bytes;
      const bool close = i + 1 == unit_est.size() ||
                         (unit_est[i].boundary >= 0 &&
                          static_cast<double>(acc) >= static_cast<double>(total) *
                                                          static_cast<double>(segs.size() + 1) /
                                                          static_cast<double>(k));
      if (!close) continue;
      cur.end = unit_est[i].end;
      cur.boundary = unit_est[i].boundary;
      estimate(g, st, alignment, cur);
      segs.push_back(cur);
      cur = Span{};
      cur.begin = unit_est[i].end;
    }
    std::vector<int32_t> drop_order(segs.size());
    for (size_t j = 0; j < segs.size(); ++j) drop_order[j] = static_cast<int32_t>(j);
    const auto last = static_cast<int32_t>(segs.size()) - 1;
    std::stable_sort(drop_order.begin(), drop_order.end(), [&](int32_t a, int32_t b) {
      if ((a == last) != (b == last)) return b == last;
      // bytes / cost, descending, without dividing (cost may be 0)
      return static_cast<double>(segs[a].bytes) * segs[b].cost >
             static_cast<double>(segs[b].bytes) * segs[a].cost;
    });
    std::vector<int32_t> dropped;
    for (int32_t j : drop_order) {
      if (segs[j].bytes == 0) continue;
      dropped.push_back(j);
      Candidate c = make_candidate(g, st, segs, dropped, ratio, max_ratio);
      if (c.clones.empty() || !seen.insert(c.clones).second) continue;
      candidates.push_back(std::move(c));
    }
    if (k >= units.size()) break;
  }
  // Options per span of up to kMaxSpan units (keep a unit; drop a span's ops at or below each
  // cost-per-byte threshold, its inner boundaries included) and the chain DP at a ladder of model
  // budgets: each answer is a candidate too.
  {
    constexpr size_t kMaxSpan = 12;
    constexpr size_t kStairOps = 96;
    // full[j]: unit j's activation bytes (held for the backward pass without recomputation);
    // an option's `dropped` is full minus what it still holds, counted exactly
    // (span_kept_bytes: inputs its recomputations read count as held).
    std::vector<char> no_clones(g.ops.size(), 0), cloned(g.ops.size(), 0);
    std::vector<uint64_t> full(units.size(), 0);
    for (size_t j = 0; j < units.size(); ++j) {
      full[j] = remat_internal::span_kept_bytes(g, st, units[j].begin, units[j].end, no_clones,
                                                alignment);
    }
    std::vector<std::vector<SpanOption>> options(units.size()), legacy(units.size());
    for (size_t i = 0; i < units.size(); ++i) {
      SpanOption keep;
      keep.full = full[i];
      options[i].push_back(keep);
      legacy[i].push_back(keep);
      if (out_of_time()) continue;  // every unit keeps its "keep" option; no more candidates
      uint64_t span_full = 0;
      for (size_t len = 1; len <= kMaxSpan && i + len <= units.size(); ++len) {
        span_full += full[i + len - 1];
        Span seg;
        seg.begin = units[i].begin;
        seg.end = units[i + len - 1].end;
        seg.boundary = units[i + len - 1].boundary;
        // The span's own staircase (greedy, exact bytes): Rockmate's "keep the costly ops,
        // recompute the cheap ones" at every step between recomputing all and nothing, while
        // the span has at most kStairOps cloneable ops.
        const OpIdx boundary_producer = seg.boundary >= 0 ? g.storages[seg.boundary].producer : -1;
        for (remat_internal::StairPoint& pt : remat_internal::span_staircase(
                 g, st, seg.begin, seg.end, boundary_producer, alignment, kStairOps)) {
          if (pt.clones.empty() || pt.kept >= span_full) continue;
          SpanOption o;
          o.length = static_cast<int32_t>(len);
          o.full = span_full;
          o.cost = pt.cost;
          o.dropped = span_full - pt.kept;
          o.clones = std::move(pt.clones);
          options[i].push_back(std::move(o));
        }
        std::set<std::vector<OpIdx>> distinct;
        for (double max_ratio : thresholds) {
          Candidate c = make_candidate(g, st, {seg}, {0}, ratio, max_ratio);
          if (c.clones.empty() || !distinct.insert(c.clones).second) continue;
          SpanOption o;
          o.length = static_cast<int32_t>(len);
          o.full = span_full;
          o.cost = c.cost;
          // The estimate of the first version (every recomputed op's outputs count as
          // dropped, what its recomputations read not as held) in a second option set: its
          // ladder adds candidates the exact count would not reach.
          SpanOption estimated = o;
          for (OpIdx v : c.clones) {
            for (StorageIdx x : g.op_storages[v]) {
              if (g.storages[x].producer == v && g.storages[x].workspace_of < 0) {
                estimated.dropped += align_up(g.storages[x].size, alignment);
              }
            }
          }
          estimated.clones = c.clones;
          legacy[i].push_back(std::move(estimated));
          for (OpIdx v : c.clones) cloned[v] = 1;
          uint64_t kept = 0;
          for (size_t j = i; j < i + len; ++j) {
            kept += remat_internal::span_kept_bytes(g, st, units[j].begin, units[j].end, cloned,
                                                    alignment);
          }
          for (OpIdx v : c.clones) cloned[v] = 0;
          if (kept >= span_full) continue;  // holds as much as keeping the span
          o.dropped = span_full - kept;
          o.clones = std::move(c.clones);
          options[i].push_back(std::move(o));
        }
      }
    }
    // Per option set, the model's range: the lowest model budget any choice meets (by
    // bisection on a feasibility pass that keeps the least bytes kept per unit boundary) to no
    // recomputation at all; the chain DP at kLadder + 1 model budgets over it.
    auto feasible = [&](const std::vector<std::vector<SpanOption>>& opts, uint64_t model_budget) {
      std::vector<uint64_t> least(opts.size() + 1, std::numeric_limits<uint64_t>::max());
      least[0] = 0;
      for (size_t i = 0; i < opts.size(); ++i) {
        if (least[i] == std::numeric_limits<uint64_t>::max()) continue;
        for (const SpanOption& o : opts[i]) {
          if (least[i] + o.full > model_budget) continue;
          uint64_t& next = least[i + static_cast<size_t>(o.length)];
          next = std::min(next, least[i] + o.full - std::min(o.full, o.dropped));
        }
      }
      return least.back() != std::numeric_limits<uint64_t>::max();
    };
    uint64_t hi = 0;
    for (uint64_t f : full) hi += f;
    constexpr int kLadder = 48;
    for (const auto* opts : {&options, &legacy}) {
      uint64_t lo = 0, top = hi;
      while (lo < top && top - lo > hi / 1024) {  // to 0.1% of the range
        const uint64_t mid = lo + (top - lo) / 2;
        if (!feasible(*opts, mid)) lo = mid + 1; else top = mid;
      }
      for (int i = 0; i <= kLadder && hi > lo; ++i) {
        if (out_of_time()) break;
        const uint64_t m = lo + static_cast<uint64_t>(static_cast<double>(hi - lo) * i / kLadder);
        const std::vector<const SpanOption*> chosen = choose_spans(*opts, m);
        if (chosen.empty()) continue;
        Candidate c;
        for (const SpanOption* o : chosen) {
          c.clones.insert(c.clones.end(), o->clones.begin(), o->clones.end());
          c.cost += o->cost;
        }
        std::sort(c.clones.begin(), c.clones.end());
        if (c.clones.empty() || !seen.insert(c.clones).second) continue;
        candidates.push_back(std::move(c));
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    return a.clones.size() < b.clones.size();
  });
  stats.candidates = candidates.size();
  stats.candidate_seconds = elapsed();

  uint64_t smallest = base_peak;
  const uint64_t lb = rlb;
  // Plans an expanded candidate properly (roam's order and layout), keeping the quick plan when
  // that is lower.
  auto plan_fully = [&](const Expanded& e, const Order& order, const std::vector<uint64_t>& offsets) {
    Plan quick;
    quick.graph = g.name;
    quick.alignment = alignment;
    quick.order = order;
    quick.offsets = offsets;
    quick.order_method = "lescea";
    quick.layout_method = "best of llfb, best_fit";
    quick.stats = compute_stats(e.graph, order, offsets, alignment, lb, 0.0);
    // roam's planners on the expanded graph, bounded by work: the layout's second leaf pass
    // (which seldom reaches Tp on a recomputing graph and would otherwise search until the
    // clock stops it) gets a few probes; the clock (the deadline) is only a safety net.
    PlanRequest req = request;
    req.options.deadline = deadline;
    req.options.time_limit_seconds = std::max(seconds_left(), 1e-3);
    if (!req.options.extra.contains("second_pass_probes")) {
      req.options.extra["second_pass_probes"] = kFullPlanSecondPassProbes;
    }
    const auto full_start = Clock::now();
    PlanResult full = make_plan(e.graph, req, lb);
    ++stats.full_plans;
    stats.full_seconds += std::chrono::duration<double>(Clock::now() - full_start).count();
    const Plan& best = full.plan.stats.peak_bytes <= quick.stats.peak_bytes ? full.plan : quick;
    return to_v2(g, e, best, lb);
  };
  auto timed_expand = [&](const std::vector<OpIdx>& clones, bool names) {
    const auto t = Clock::now();
    Expanded e = expand(g, st, clones, names);
    stats.expand_seconds += std::chrono::duration<double>(Clock::now() - t).count();
    return e;
  };
  auto timed_quick_order = [&](const Expanded& e) {
    const auto t = Clock::now();
    Order order = remat_internal::quick_order(e, alignment);
    stats.quick_seconds += std::chrono::duration<double>(Clock::now() - t).count();
    return order;
  };
  auto timed_quick_layout = [&](const Expanded& e, const Order& order,
                                std::vector<uint64_t>& offsets) {
    const auto t = Clock::now();
    const uint64_t peak =
        g.resident_bytes + remat_internal::quick_layout(e, alignment, order, offsets, deadline);
    stats.quick_seconds += std::chrono::duration<double>(Clock::now() - t).count();
    return peak;
  };
  // min_live_at_op at the first of the ops with the most bytes live in `order`: a proven lower
  // bound on the Tp of any order of e (and so on its quick and full plans' arenas).
  auto busiest_cut = [&](const Expanded& e, const Order& order) -> uint64_t {
    const auto t = Clock::now();
    uint64_t cut = 0;
    const std::vector<uint64_t> live = live_bytes_at_ops(e.graph, order, alignment);
    const auto top = std::max_element(live.begin(), live.end());  // first of the largest
    if (top != live.end()) {
      cut = min_live_at_op(e.graph, static_cast<OpIdx>(top - live.begin()), alignment);
    }
    stats.bound_seconds += std::chrono::duration<double>(Clock::now() - t).count();
    return cut;
  };
  auto result = [&](Plan plan) {
    PlanResult r;
    r.plan = std::move(plan);
    r.plan.inplace = forced;  // a plan of g: of orig with the forced writes
    r.plan.options["budget_bytes"] = budget_bytes;
    stats.time_limited = time_cut;
    r.plan.options["remat"] = {{"units", stats.units},
                               {"candidates", stats.candidates},
                               {"evaluated", stats.evaluated},
                               {"full_plans", stats.full_plans},
                               {"bound_skips", stats.bound_skips},
                               {"time_limited", stats.time_limited}};
    r.plan.stats.solve_seconds = elapsed();
    r.reserved_bytes = r.plan.stats.arena_bytes;
    stats.seconds = elapsed();
    report_timers(stats);
    if (stats_out) *stats_out = stats;
    return r;
  };
  // Whether one exact cut already proves an expanded graph's Tp above `arena` bytes: the least
  // bytes any order holds at the step of each of the kPeakCuts ops with the most bytes live in
  // the quick plan's order (min_live_at_op; on efficientnet_b0 b1 the first one decides every
  // near miss the full lower bound rejects, in ~0.3 ms instead of ~33 ms). A proof, so
  // skipping the full plan then changes no result.
  auto cut_exceeds = [&](const Expanded& e, const Order& order, uint64_t arena) {
    constexpr size_t kPeakCuts = 4;
    const std::vector<uint64_t> live = live_bytes_at_ops(e.graph, order, alignment);
    std::vector<OpIdx> ops(live.size());
    for (size_t k = 0; k < ops.size(); ++k) ops[k] = static_cast<OpIdx>(k);
    const size_t n = std::min(kPeakCuts, ops.size());
    std::partial_sort(ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(n), ops.end(),
                      [&](OpIdx a, OpIdx b) { return live[a] != live[b] ? live[a] > live[b] : a < b; });
    for (size_t k = 0; k < n; ++k) {
      if (live[ops[k]] <= arena) break;  // min_live <= live: cannot exceed
      if (min_live_at_op(e.graph, ops[k], alignment) > arena) return true;
    }
    return false;
  };
  // Candidates whose quick plan misses the budget by a little: roam's own order and layout
  // often land lower (up to ~15% on small chains), so they get a full plan after the loop.
  struct Near {
    size_t index;
    uint64_t quick_peak;
  };
  std::vector<Near> near;
  size_t near_tried = 0;
  std::vector<uint64_t> quick(candidates.size(), 0);      // quick peak, 0: not evaluated
  std::vector<char> planned_fully(candidates.size(), 0);
  std::vector<uint64_t> cut_bound(candidates.size(), 0);  // a proven bound on the Tp of each
  // Candidates whose cut bound alone rules them out at this budget: expanded and ordered, their
  // layouts (quick[i]) not made (main loop below).
  std::vector<char> deferred(candidates.size(), 0);
  // The least budget at which a candidate of quick peak `peak` counts as near (the test below).
  const uint64_t resident = g.resident_bytes;
  auto is_near = [&](uint64_t peak, uint64_t budget) {
    return static_cast<double>(peak - resident) <=
           1.25 * static_cast<double>(budget - std::min(budget, resident));
  };
  auto near_from = [&](uint64_t peak) {
    uint64_t b = resident + static_cast<uint64_t>(static_cast<double>(peak - resident) / 1.25);
    while (b > resident && is_near(peak, b - 1)) --b;
    while (!is_near(peak, b)) ++b;
    return b;
  };
  // The near misses not yet planned fully, in order, while time is left: the first whose full
  // plan fits; each one's real peak counts for `smallest`.
  auto first_near_that_fits = [&]() -> std::optional<Plan> {
    for (; near_tried < near.size(); ++near_tried) {
      if (out_of_time()) break;
      const Expanded e = timed_expand(candidates[near[near_tried].index].clones, true);
      const Order order = timed_quick_order(e);
      std::vector<uint64_t> offsets;
      timed_quick_layout(e, order, offsets);
      Plan plan = plan_fully(e, order, offsets);
      planned_fully[near[near_tried].index] = 1;
      smallest = std::min(smallest, plan.stats.peak_bytes);
      if (plan.stats.peak_bytes <= budget_bytes) return plan;
    }
    return std::nullopt;
  };
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (out_of_time()) break;
    Expanded e;
    try {
      e = timed_expand(c.clones, false);
    } catch (const InputError&) {
      continue;  // the recomputation's edges contradict the graph's order: not a schedule
    }
    ++stats.evaluated;
    const Order order = timed_quick_order(e);
    // The exact cut at the quick order's busiest op: a proven bound on any plan of the
    // candidate (its quick plan included).
    cut_bound[i] = busiest_cut(e, order);
    if (defer_layouts && resident + cut_bound[i] > budget_bytes) {
      // No plan of it fits (the cut_exceeds test below would reject it as a near miss too): its
      // layouts wait until a refusal needs its quick peak (the smallest budget met, below).
      deferred[i] = 1;
      ++stats.deferred;
      continue;
    }
    std::vector<uint64_t> offsets;
    const uint64_t peak = timed_quick_layout(e, order, offsets);
    quick[i] = peak;
    smallest = std::min(smallest, peak);
    if (peak > budget_bytes) {
      // Near: the arena within 25% above the budget's arena part (resident excluded), and
      // resident + the schedule's proven lower bound within the budget (no plan of it fits
      // below that; the bound is within ~1% of the full plan's arena on the benchmark graphs
      // and takes a small fraction of its time).
      if (is_near(peak, budget_bytes)) {
        const auto t = Clock::now();
        const bool fits =
            !cut_exceeds(e, order, budget_bytes - std::min(budget_bytes, g.resident_bytes)) &&
            g.resident_bytes + lower_bound(e.graph, alignment, &order, deadline) <= budget_bytes;
        stats.bound_seconds += std::chrono::duration<double>(Clock::now() - t).count();
        if (fits) {
          near.push_back({i, peak});
        } else {
          ++stats.bound_skips;
        }
      }
      continue;
    }
    // The first candidate (least recompute seconds) whose quick plan fits; the cheaper near
    // misses get their full plan first, so that the recompute seconds never rise with the budget.
    if (std::optional<Plan> cheaper = first_near_that_fits()) return result(std::move(*cheaper));
    return result(plan_fully(timed_expand(c.clones, true), order, offsets));
  }
  // No quick plan fits: the near misses, least recompute seconds first, planned fully.
  if (std::optional<Plan> plan = first_near_that_fits()) return result(std::move(*plan));
  // The smallest budget met, by the same procedure a feasible call follows: a budget B is met
  // when some candidate's quick peak is at most B, or when one is near at B (quick arena within
  // 25% above B's arena part) and its full plan's peak is at most B. So each candidate not yet
  // planned fully whose near-from budget is below the smallest so far gets its full plan
  // (lowest quick peak first), unless one exact cut or its proven lower bound shows that the
  // plan cannot go below the smallest so far; it then offers max(full peak, near-from budget).
  // Without this the answer came from quick peaks alone, above budgets a full plan meets
  // (vit_b_16-b1: 1078.8 MiB named, 1073.7 MiB met).
  {
    // The quick peaks of the deferred candidates that could still lower it (resident + cut
    // bound below the smallest so far; the cut bound bounds the quick peak and every full plan),
    // least cut first. Those left keep quick[i] = 0: neither their quick peak nor (below) a
    // full plan of theirs can go below the smallest, so the answer is the one every quick peak
    // gives.
    std::vector<size_t> pending;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (deferred[i]) pending.push_back(i);
    }
    std::stable_sort(pending.begin(), pending.end(),
                     [&](size_t a, size_t b) { return cut_bound[a] < cut_bound[b]; });
    for (size_t i : pending) {
      if (resident + cut_bound[i] >= smallest || out_of_time()) break;
      const Expanded e = timed_expand(candidates[i].clones, false);
      const Order order = timed_quick_order(e);
      std::vector<uint64_t> offsets;
      quick[i] = timed_quick_layout(e, order, offsets);
      deferred[i] = 0;
      ++stats.resolved;
      smallest = std::min(smallest, quick[i]);
    }
    std::vector<size_t> by_peak;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (quick[i] > 0 && !planned_fully[i]) by_peak.push_back(i);
    }
    std::stable_sort(by_peak.begin(), by_peak.end(),
                     [&](size_t a, size_t b) { return quick[a] < quick[b]; });
    for (size_t i : by_peak) {
      if (out_of_time()) break;
      const uint64_t from = near_from(quick[i]);
      if (from >= smallest || resident + cut_bound[i] >= smallest) continue;
      const Expanded e = timed_expand(candidates[i].clones, false);
      const Order order = timed_quick_order(e);
      const uint64_t below = smallest - 1 - std::min(smallest - 1, resident);  // arena to beat
      const auto t = Clock::now();
      const bool hopeless = cut_exceeds(e, order, below) ||
                            lower_bound(e.graph, alignment, &order, deadline) > below;
      stats.bound_seconds += std::chrono::duration<double>(Clock::now() - t).count();
      if (hopeless) {
        ++stats.bound_skips;
        continue;
      }
      const Expanded named = timed_expand(candidates[i].clones, true);
      std::vector<uint64_t> offsets;
      timed_quick_layout(named, order, offsets);
      const Plan plan = plan_fully(named, order, offsets);
      planned_fully[i] = 1;
      smallest = std::min(smallest, std::max(plan.stats.peak_bytes, from));
    }
  }
  // A budget at or above g's proven bound gets the plan without recomputation (which may be
  // below its quick plan and below every candidate's peak).
  // `smallest` began as the quick plan's peak (lescea order), which the request's own order
  // may not reach (--order program): where no candidate went below it, the plan without
  // recomputation for the requested order is what a budget there gets, so it is named.
  if (!base && (norecompute_bound < smallest || smallest == base_peak) && !out_of_time()) {
    const uint64_t planned = plan_base().plan.stats.peak_bytes;
    smallest = smallest == base_peak ? planned : std::min(smallest, planned);
  }
  stats.seconds = elapsed();
  stats.time_limited = time_cut;
  report_timers(stats);
  if (stats_out) *stats_out = stats;
  throw BudgetInfeasible(budget_bytes, smallest, bound, time_cut);
}

}  // namespace

namespace {

// remat.h's method with `g`'s own costs ranking the candidates (the in-place permissions
// handled as remat_internal::plan_with_budget says).
PlanResult plan_ranked(const Graph& g, const PlanRequest& request, uint64_t budget_bytes,
                       RematStats* stats_out, bool defer_layouts) {
  if (!has_inplace(g)) return plan_core(g, g, {}, request, budget_bytes, stats_out, defer_layouts);
  // With permissions: the candidates recompute on the forced graph, whose in-place writes are
  // aliases (a recomputed write binds to the recomputed input instance; Structure::clone_with
  // keeps its input's producers recomputed with it). The plan is checked against g before it is
  // returned; should it fail (a bug), the graph is planned again without its permissions: no
  // invalid plan leaves here.
  const ForcedGraph f = force_inplace(g);
  PlanResult r = plan_core(f.graph, g, f.pairs, request, budget_bytes, stats_out, defer_layouts);
  const std::optional<uint64_t> proven =
      r.plan.version == 1 ? std::optional<uint64_t>(r.plan.stats.lower_bound_bytes) : std::nullopt;
  const ValidationReport rep = validate_plan(g, plan_to_json(g, r.plan), "(budget plan)", proven);
  if (rep.valid) return r;
  const std::string why = rep.problems.empty() ? std::string("?") : rep.problems.front();
  const Graph plain = without_inplace(g);
  PlanResult fallback = plan_core(plain, plain, {}, request, budget_bytes, stats_out, defer_layouts);
  fallback.plan.options["inplace_fallback"] = "the plan with in-place writes failed validation (" +
                                              why + "); planned without them";
  return fallback;
}

// The recompute seconds of a plan of g (plan version 2 stats) counted with g's costs.
void restate_costs(const Graph& g, Plan& plan) {
  plan.stats.compute_seconds = 0;
  for (const Op& op : g.ops) plan.stats.compute_seconds += op.cost.value_or(0.0);
  plan.stats.recompute_seconds = 0;
  std::vector<char> ran(g.ops.size(), 0);
  for (OpIdx v : plan.order) {
    if (ran[v]) plan.stats.recompute_seconds += g.ops[v].cost.value_or(0.0);
    ran[v] = 1;
  }
}

}  // namespace

// Feasibility by bytes alone (remat.h, "Costs"): the candidates are first made and tried with
// no op costing anything (kFeasibilityCost), which decides whether the budget is met and, when it
// is not, the smallest budget named; a budget met that way is planned again with g's own costs
// ranking the candidates, and the plan of the two with the fewer recompute seconds by g's costs
// is returned (the cost-free one on ties). So costs choose among schedules but never decide
// whether one exists. The second search gets what is left of the time limit.
PlanResult remat_internal::plan_with_budget(const Graph& g, const PlanRequest& request,
                                            uint64_t budget_bytes, RematStats* stats_out,
                                            bool defer_layouts) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  PlanRequest req = request;
  const double limit = std::min(request.options.time_limit_seconds > 0
                                    ? request.options.time_limit_seconds : 1e9, 1e9);
  req.options.deadline = std::min(
      request.options.deadline,
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit)));
  Graph free = g;
  bool costed = false;
  for (Op& op : free.ops) {
    costed = costed || op.cost.value_or(0.0) != 0.0;
    op.cost = kFeasibilityCost;
  }
  RematStats first;
  std::optional<PlanResult> met;
  try {
    met = plan_ranked(free, req, budget_bytes, &first, defer_layouts);
  } catch (const BudgetInfeasible&) {
    if (stats_out) *stats_out = first;
    throw;
  }
  if (stats_out) *stats_out = first;
  PlanResult& by_bytes = *met;
  restate_costs(g, by_bytes.plan);
  by_bytes.plan.options["remat_ranked_by"] = "bytes alone";
  if (by_bytes.plan.stats.recomputations == 0 || !costed || Clock::now() >= req.options.deadline) {
    return by_bytes;
  }
  req.options.time_limit_seconds =
      std::max(std::chrono::duration<double>(req.options.deadline - Clock::now()).count(), 1e-3);
  RematStats second;
  try {
    PlanResult by_cost = plan_ranked(g, req, budget_bytes, &second, defer_layouts);
    if (by_cost.plan.stats.recompute_seconds < by_bytes.plan.stats.recompute_seconds) {
      by_cost.plan.options["remat_ranked_by"] = "graph costs";
      by_cost.plan.stats.solve_seconds =
          std::chrono::duration<double>(Clock::now() - start).count();
      if (stats_out) {
        second.time_limited = second.time_limited || first.time_limited;
        second.seconds = by_cost.plan.stats.solve_seconds;
        *stats_out = second;
      }
      return by_cost;
    }
  } catch (const BudgetInfeasible&) {
    // The graph's costs led to no schedule within the budget: the cost-free plan stands.
  }
  by_bytes.plan.stats.solve_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (stats_out) stats_out->seconds = by_bytes.plan.stats.solve_seconds;
  return by_bytes;
}

}  // namespace roam
