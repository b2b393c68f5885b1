// One planning request: order, then layout, then stats.
#include <algorithm>
#include <chrono>
#include <memory>

#include "roam/analysis.h"
#include "roam/inplace.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/roam_order.h"
#include "roam/validate.h"

namespace roam {

namespace {

Order choose_order(const Graph& g, const std::string& method, const PlanOptions& options,
                   std::string& chosen, nlohmann::json& order_stats) {
  const uint64_t alignment = options.alignment;
  const auto& methods = order_methods();
  const bool has_roam = std::find(methods.begin(), methods.end(), "roam") != methods.end();
  if (method != "auto" || has_roam) {  // roam is never worse than any baseline order
    chosen = method == "auto" ? "roam" : method;
    if (chosen == "roam") {
      RoamOrderStats stats;
      Order o = order_roam(g, options, &stats);
      order_stats = stats.to_json();
      return o;
    }
    return make_order(g, chosen, options);
  }
  Order best;
  uint64_t best_tp = 0;
  bool have = false;
  for (const std::string& m : order_methods()) {
    Order o = make_order(g, m, options);
    const uint64_t tp = theoretical_peak(g, o, alignment);
    if (!have || tp < best_tp) {
      best = std::move(o);
      best_tp = tp;
      chosen = m;
      have = true;
    }
  }
  return best;
}

Layout choose_layout(const Graph& g, const Liveness& live, const std::string& method,
                     const PlanOptions& options, std::string& chosen) {
  const auto& methods = layout_methods();
  const bool has_roam = std::find(methods.begin(), methods.end(), "roam") != methods.end();
  if (method != "auto" || has_roam) {  // roam is never worse than any baseline layout
    chosen = method == "auto" ? "roam" : method;
    return make_layout(g, live, chosen, options);
  }
  Layout best;
  bool have = false;
  for (const std::string& m : layout_methods()) {
    if (m == "pytorch") continue;  // a simulation of what PyTorch does, not a planner
    Layout l = make_layout(g, live, m, options);
    if (!have || l.reserved_bytes < best.reserved_bytes) {
      best = std::move(l);
      chosen = m;
      have = true;
    }
  }
  return best;
}

// A plan that writes in place is version 2 (GRAPH_FORMAT.md): its lower_bound_bytes is the bound
// over every version-2 schedule (recomputation allowed), the stronger bound over the orders of
// g goes to method.options.order_lower_bound_bytes. `order_bound`: the proven bound over orders
// (lower_bound); recompute_lower_bound bounds the orders too, so the larger of the two is kept.
// `rlb`: recompute_lower_bound(g, p.alignment).
void set_inplace_bounds(const Graph& g, Plan& p, uint64_t order_bound, uint64_t rlb) {
  if (p.inplace.empty()) {
    p.options.erase("order_lower_bound_bytes");
    return;
  }
  p.version = 2;
  p.stats.lower_bound_bytes = rlb;
  p.options["order_lower_bound_bytes"] = std::max(order_bound, rlb);
  p.stats.compute_seconds = 0;
  for (const Op& op : g.ops) p.stats.compute_seconds += op.cost.value_or(0.0);
  p.stats.recompute_seconds = 0;
  p.stats.recomputations = 0;
}

// What the plans of one order share where g has permissions: the writes the order allows and
// the graph with them applied (for each of the order's layouts). The forced graph has the
// storages of g with its writes applied (its `after` edges do not change them): an order that
// allows just those writes, as most do, is laid out on it without another copy of g; an order
// with the writes of the previous one reuses its graph.
struct Applied {
  std::vector<InplacePair> pairs;
  std::shared_ptr<const Graph> owned;
  const Graph* graph = nullptr;  // apply_inplace(g, pairs) when pairs is not empty
};
Applied applied_for(const Graph& g, const Order& order, const ForcedGraph* forced = nullptr,
                    const Applied* previous = nullptr) {
  Applied a;
  if (has_inplace(g)) a.pairs = inplace_valid_in(g, order);
  if (a.pairs.empty()) return a;
  if (forced != nullptr && a.pairs == forced->pairs) {
    a.graph = &forced->graph;
  } else if (previous != nullptr && previous->graph != nullptr && previous->pairs == a.pairs) {
    a.owned = previous->owned;
    a.graph = previous->graph;
  } else {
    a.owned = std::make_shared<const Graph>(apply_inplace(g, a.pairs));
    a.graph = a.owned.get();
  }
  return a;
}

// make_plan_for_order with the writes of the order (`applied`) and recompute_lower_bound(g)
// (`rlb`, used only where the plan writes in place) already computed.
PlanResult plan_for_order(const Graph& g, const Applied& applied, Order order, double order_seconds,
                          const PlanRequest& req, uint64_t lower_bound_bytes, uint64_t rlb) {
  const auto start = std::chrono::steady_clock::now();
  PlanResult r;
  Plan& p = r.plan;
  p.graph = g.name;
  p.alignment = req.options.alignment;
  p.order = std::move(order);
  p.order_method = req.order;
  // Every in-place write the order allows (the best choice for a fixed order, roam/inplace.h);
  // the layout places the storages of the graph with those writes applied.
  p.inplace = applied.pairs;
  const Graph& lg = p.inplace.empty() ? g : *applied.graph;
  const Liveness live = compute_liveness(lg, p.order);
  Layout layout = choose_layout(lg, live, req.layout, req.options, p.layout_method);
  if (p.layout_method != "pytorch") {  // (the simulation keeps the caching allocator's offsets)
    place_workspaces_beside_outputs(lg, live, layout.offsets, req.options.alignment,
                                    req.options.deadline);
  }
  p.offsets = std::move(layout.offsets);
  r.reserved_bytes = layout.reserved_bytes;
  const double seconds =
      order_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  p.stats = compute_stats(lg, p.order, p.offsets, req.options.alignment, lower_bound_bytes, seconds);
  if (!req.options.extra.empty()) p.options["extra"] = req.options.extra;
  set_inplace_bounds(g, p, lower_bound_bytes, rlb);
  return r;
}

}  // namespace

PlanResult make_plan(const Graph& g, const PlanRequest& req) {
  return make_plan(g, req, std::nullopt);
}

PlanResult make_plan(const Graph& g, const PlanRequest& req, std::optional<uint64_t> lower_bound_bytes) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // The whole request ends by `end`. The order may use up to half of the time, the layout what
  // is left but a tenth (kept for the baseline pairs); a planner that is done early leaves its
  // time to the next.
  const double limit = std::min(req.options.time_limit_seconds > 0 ? req.options.time_limit_seconds : 1e9, 1e9);
  const Clock::time_point end =
      std::min(req.options.deadline,
               start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit)));
  auto seconds_left = [&] { return std::chrono::duration<double>(end - Clock::now()).count(); };
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  PlanRequest for_order = req;
  for_order.options.deadline = start + (end - start) / 2;
  for_order.options.time_limit_seconds = std::max(seconds_left() / 2, 1e-3);
  std::string order_method;
  nlohmann::json order_stats;
  // With permissions every order method runs on the forced graph (plan.h, roam/inplace.h): its
  // orders are orders of g in which the writes of program order stay valid.
  std::optional<ForcedGraph> forced;
  if (has_inplace(g)) forced = force_inplace(g);
  const Graph& og = forced ? forced->graph : g;
  if (forced) for_order.options.lower_bound_graph = &g;  // the roam order's bound is g's then
  Order order = choose_order(og, req.order, for_order.options, order_method, order_stats);
  const double order_seconds = elapsed();
  PlanRequest with_order = req;
  with_order.order = order_method;
  const bool pairs_wanted = req.order == "auto" && req.layout == "auto";
  with_order.options.deadline = pairs_wanted ? end - (end - Clock::now()) / 10 : end;
  with_order.options.time_limit_seconds =
      std::max(std::chrono::duration<double>(with_order.options.deadline - Clock::now()).count(), 1e-3);
  // The roam order computed the bound already; otherwise the order is the hint that lets the
  // cut bound skip most ops (the value is the same either way, unless the time runs out first:
  // then a smaller bound, still valid).
  // (On the forced graph the roam order computed g's bound, in-place writes allowed:
  // lower_bound_graph above.)
  const uint64_t lb = lower_bound_bytes ? *lower_bound_bytes
                      : order_stats.contains("lower_bound")
                          ? order_stats["lower_bound"].get<uint64_t>()
                          : lower_bound(g, req.options.alignment, &order, with_order.options.deadline);
  const uint64_t rlb = forced ? recompute_lower_bound(g, req.options.alignment) : 0;
  const Applied first = applied_for(g, order, forced ? &*forced : nullptr);
  PlanResult r = plan_for_order(g, first, std::move(order), order_seconds, with_order, lb, rlb);
  if (!order_stats.is_null()) r.plan.options["order_stats"] = std::move(order_stats);
  // The order's own stats (its bound, its Tp) are those of the forced graph it ordered.
  if (forced) r.plan.options["order_graph_forced_writes"] = forced->pairs.size();
  // A layout search that ran to its deadline was cut by the time limit (the searches return at
  // most a few hundred nodes after it): the plan says so, and the CLI prints it.
  if (Clock::now() >= with_order.options.deadline) r.plan.options["layout_time_limit_hit"] = true;
  if (pairs_wanted) {
    // The whole-plan invariant: never worse than a baseline (order, layout) pair. The baseline
    // orders each get the baseline layouts (pytorch excepted: a simulation, not a planner);
    // a pair with a smaller arena replaces the plan. A pair starts only when the time left
    // holds the longest one so far (the first: when any time is left); the pairs not run are
    // listed as skipped.
    nlohmann::json pairs = nlohmann::json::object();
    nlohmann::json skipped = nlohmann::json::array();
    double longest = 0;
    for (const std::string& om : order_methods()) {
      if (om == "roam") continue;
      if (seconds_left() <= longest) {
        for (const std::string& lm : layout_methods()) {
          if (lm != "roam" && lm != "pytorch") skipped.push_back(om + "+" + lm);
        }
        continue;
      }
      const auto order_start = Clock::now();
      Order o = make_order(og, om, req.options);
      const Applied writes = applied_for(g, o, forced ? &*forced : nullptr, &first);
      const double os = std::chrono::duration<double>(Clock::now() - order_start).count();
      for (const std::string& lm : layout_methods()) {
        if (lm == "roam" || lm == "pytorch") continue;
        if (seconds_left() <= longest) {
          skipped.push_back(om + "+" + lm);
          continue;
        }
        const auto pair_start = Clock::now();
        PlanOptions pair_options = req.options;
        pair_options.deadline = end;  // past it the rest go on a skyline: not the baseline's
        PlanResult b = plan_for_order(g, writes, o, os, {om, lm, pair_options}, lb, rlb);
        longest = std::max(longest, std::chrono::duration<double>(Clock::now() - pair_start).count());
        if (Clock::now() >= end) {  // cut by the time limit: not a baseline pair's arena
          skipped.push_back(om + "+" + lm);
          continue;
        }
        pairs[om + "+" + lm] = b.plan.stats.arena_bytes;
        if (b.plan.stats.arena_bytes < r.plan.stats.arena_bytes) {
          b.plan.options = r.plan.options;
          set_inplace_bounds(g, b.plan, lb, rlb);
          r = std::move(b);
        }
      }
    }
    r.plan.options["baseline_pairs"] = std::move(pairs);
    if (!skipped.empty()) r.plan.options["baseline_pairs_skipped"] = std::move(skipped);
    r.plan.stats.solve_seconds = elapsed();
  }
  if (req.order == "auto" || req.layout == "auto") {
    r.plan.options["requested"] = {{"order", req.order}, {"layout", req.layout}};
  }
  return r;
}

PlanResult make_plan_for_order(const Graph& g, Order order, double order_seconds,
                               const PlanRequest& req, uint64_t lower_bound_bytes) {
  const Applied applied = applied_for(g, order);
  const uint64_t rlb = applied.pairs.empty() ? 0 : recompute_lower_bound(g, req.options.alignment);
  return plan_for_order(g, applied, std::move(order), order_seconds, req, lower_bound_bytes, rlb);
}

}  // namespace roam
