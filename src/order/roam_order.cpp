// ROAM operator ordering (arXiv 2310.19295, Sec. 4): see include/roam/roam_order.h for the
// method. The R model is built in roam_order_prep.cpp, the weight-update scheduler is
// roam_order_update.cpp, the segment solver roam_segment.cpp; this file cuts the R graph into
// blocks and their segment problems, solves a variant, assembles the full order and runs the
// portfolio of variants and baselines. Vocabulary: roam_order_internal.h.
#include "roam/roam_order.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <limits>
#include <thread>

#include "roam/analysis.h"
#include "roam/order.h"
#include "roam_order_internal.h"

namespace roam {

using detail::dag_key_points;
using detail::Group;
using detail::Kind;
using detail::placement;
using detail::placement_edges;
using detail::Prep;
using detail::prepare;
using detail::read_settings;
using detail::SegmentProblem;
using detail::SegmentResult;
using detail::SegmentSettings;
using detail::SegStorage;
using detail::Settings;
using detail::sort_unique;
using Clock = std::chrono::steady_clock;

namespace detail {

Settings read_settings(const PlanOptions& o, Clock::time_point start) {
  Settings s;
  const nlohmann::json& e = o.extra;
  auto get_bool = [&](const char* key, bool def) {
    return e.is_object() && e.contains(key) && e[key].is_boolean() ? e[key].get<bool>() : def;
  };
  auto get_int = [&](const char* key, int64_t def) {
    return e.is_object() && e.contains(key) && e[key].is_number() ? e[key].get<int64_t>() : def;
  };
  s.wus = get_bool("weight_update_scheduler", true);
  s.exact = get_bool("exact_segments", true);
  s.variants = get_bool("try_variants", true);
  s.shortcut = get_bool("baseline_shortcut", true);
  s.delay_radius = static_cast<int32_t>(std::max<int64_t>(0, get_int("delay_radius", 8)));
  if (e.is_object() && e.contains("alpha") && e["alpha"].is_number())
    s.alpha = e["alpha"].get<double>();
  s.threads = std::max(1, o.threads);
  s.seg.exact = s.exact;
  s.seg.exact_node_limit =
      static_cast<int32_t>(std::clamp<int64_t>(get_int("exact_node_limit", 192), 0, 256));
  s.seg.exact_state_limit = std::max<int64_t>(1, get_int("exact_state_limit", 200000));
  s.seg.local_search_swaps = std::max<int64_t>(0, get_int("local_search_swaps", 1000000));
  const double limit = o.time_limit_seconds > 0 ? o.time_limit_seconds : 1e9;
  s.seg.deadline = std::min(o.deadline, start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::min(limit, 1e9))));
  return s;
}

}  // namespace detail

namespace {

// ---------------------------------------------------------------------------------------------
// Blocks (key points and segments) of the R graph plus artificial edges, and their problems.
// ---------------------------------------------------------------------------------------------
struct Blocks {
  std::vector<OpIdx> rorder;                  // R ops, topological, block by block
  std::vector<int32_t> block_of;              // per op
  std::vector<int32_t> begin;                 // per block: start in rorder (size B + 1)
  std::vector<char> is_key;                   // per block
  std::vector<std::vector<OpIdx>> art_preds;  // per op
  int32_t count() const { return static_cast<int32_t>(is_key.size()); }
};

Blocks make_blocks(const Graph& g, const Prep& p,
                   const std::vector<std::pair<OpIdx, OpIdx>>& edges) {
  (void)g;
  Blocks b;
  const int32_t n = p.n;
  b.art_preds.assign(n, {});
  std::vector<std::vector<OpIdx>> art_succs(n);
  for (auto [u, v] : edges) {
    b.art_preds[v].push_back(u);
    art_succs[u].push_back(v);
  }
  for (auto& v : b.art_preds) sort_unique(v);
  for (auto& v : art_succs) sort_unique(v);
  // Topological order of R (+ artificial edges), smallest program index first.
  const auto nr = static_cast<int32_t>(p.rops.size());
  std::vector<int32_t> ridx(n, -1);
  for (int32_t i = 0; i < nr; ++i) ridx[p.rops[i]] = i;
  std::vector<std::vector<int32_t>> lp(nr), ls(nr);
  for (int32_t i = 0; i < nr; ++i) {
    const OpIdx v = p.rops[i];
    for (OpIdx u : p.rpreds[v]) lp[i].push_back(ridx[u]);
    for (OpIdx u : b.art_preds[v]) lp[i].push_back(ridx[u]);
    sort_unique(lp[i]);
    for (int32_t j : lp[i]) ls[j].push_back(i);
  }
  std::vector<int64_t> rank(nr);
  std::iota(rank.begin(), rank.end(), 0);
  const std::vector<int32_t> topo = detail::priority_topological(lp, ls, rank);
  std::vector<int32_t> tpos(nr);
  for (int32_t i = 0; i < nr; ++i) tpos[topo[i]] = i;
  std::vector<std::vector<int32_t>> tp(nr), ts(nr);
  for (int32_t i = 0; i < nr; ++i) {
    for (int32_t j : lp[topo[i]]) {
      tp[i].push_back(tpos[j]);
      ts[tpos[j]].push_back(i);
    }
  }
  std::vector<char> key(nr, 0);
  for (int32_t i : dag_key_points(tp, ts)) key[i] = 1;
  b.block_of.assign(n, -1);
  for (int32_t i = 0; i < nr; ++i) {
    const OpIdx v = p.rops[topo[i]];
    b.rorder.push_back(v);
    if (key[i] || i == 0 || key[i - 1]) {
      b.begin.push_back(i);
      b.is_key.push_back(key[i]);
    }
    b.block_of[v] = static_cast<int32_t>(b.is_key.size()) - 1;
  }
  b.begin.push_back(nr);
  return b;
}

std::vector<SegmentProblem> make_problems(const Prep& p, const Blocks& b) {
  const int32_t B = b.count();
  std::vector<SegmentProblem> probs(B);
  std::vector<int32_t> local(p.n, -1);
  for (int32_t k = 0; k < B; ++k) {
    SegmentProblem& pr = probs[k];
    pr.k = b.begin[k + 1] - b.begin[k];
    pr.preds.assign(pr.k, {});
    pr.succs.assign(pr.k, {});
    for (int32_t i = 0; i < pr.k; ++i) local[b.rorder[b.begin[k] + i]] = i;
    for (int32_t i = 0; i < pr.k; ++i) {
      const OpIdx v = b.rorder[b.begin[k] + i];
      auto add = [&](OpIdx u) {
        if (b.block_of[u] == k) pr.preds[i].push_back(local[u]);
      };
      for (OpIdx u : p.rpreds[v]) add(u);
      for (OpIdx u : b.art_preds[v]) add(u);
      std::sort(pr.preds[i].begin(), pr.preds[i].end());
      pr.preds[i].erase(std::unique(pr.preds[i].begin(), pr.preds[i].end()), pr.preds[i].end());
      for (int32_t u : pr.preds[i]) pr.succs[u].push_back(i);
    }
  }
  // Storages: relevant to their birth block and to later blocks with a user; constant elsewhere.
  std::vector<int64_t> constant(static_cast<size_t>(B) + 1, 0);
  std::vector<int32_t> blocks;
  for (StorageIdx s = 0; s < static_cast<StorageIdx>(p.size.size()); ++s) {
    if (p.births[s].empty() || p.size[s] == 0) continue;
    int32_t bb = B;
    for (OpIdx v : p.births[s]) bb = std::min(bb, b.block_of[v]);
    int32_t lb = bb;
    blocks.assign(1, bb);
    for (OpIdx u : p.users[s]) {
      const int32_t ub = b.block_of[u];
      if (ub <= bb) continue;
      lb = std::max(lb, ub);
      blocks.push_back(ub);
    }
    if (p.escape[s]) lb = B;
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    const auto sz = static_cast<int64_t>(p.size[s]);
    if (bb + 1 <= lb - 1) {
      constant[bb + 1] += sz;
      constant[lb] -= sz;
    }
    for (int32_t k : blocks) {
      if (k > bb && k < lb) {
        constant[k] -= sz;
        constant[k + 1] += sz;
      }
      SegmentProblem& pr = probs[k];
      SegStorage st;
      st.size = p.size[s];
      st.pre = k > bb;
      st.escape = lb > k;
      for (OpIdx v : p.births[s]) {
        if (k == bb && b.block_of[v] == k) st.births.push_back(v);
      }
      for (OpIdx u : p.users[s]) {
        if (b.block_of[u] == k) st.users.push_back(u);
      }
      for (OpIdx u : p.direct[s]) {
        if (b.block_of[u] == k) st.direct.push_back(u);
      }
      pr.storages.push_back(std::move(st));
    }
  }
  // Convert global op ids of births / users into local indices.
  for (int32_t k = 0; k < B; ++k) {
    for (int32_t i = 0; i < probs[k].k; ++i) local[b.rorder[b.begin[k] + i]] = i;
    for (SegStorage& st : probs[k].storages) {
      for (auto& v : st.births) v = local[v];
      for (auto& v : st.users) v = local[v];
      for (auto& v : st.direct) v = local[v];
      std::sort(st.births.begin(), st.births.end());
      std::sort(st.users.begin(), st.users.end());
    }
  }
  int64_t running = 0;
  for (int32_t k = 0; k < B; ++k) {
    running += constant[k];
    probs[k].constant = static_cast<uint64_t>(running);
    probs[k].build_touch();
  }
  return probs;
}

// ---------------------------------------------------------------------------------------------
// Solving a variant and assembling the full order.
// ---------------------------------------------------------------------------------------------
struct VariantResult {
  Order order;
  uint64_t tp = 0;
  uint64_t predicted = 0;
  int32_t key_points = 0, segments = 0, max_segment = 0, exact_solved = 0;
  int64_t states = 0, swaps = 0;
  bool time_limit_hit = false;
  bool all_exact = true;
};

Order assemble(const Graph& g, const Prep& p, const std::vector<OpIdx>& rorder) {
  const int32_t n = p.n;
  // R ops, each followed by the memory-free ops anchored at it (program order).
  std::vector<int32_t> rpos(n, -1);
  for (size_t i = 0; i < rorder.size(); ++i) rpos[rorder[i]] = static_cast<int32_t>(i);
  std::vector<std::vector<OpIdx>> after(rorder.size());
  for (OpIdx x : p.memfree) {
    int32_t a = -1;
    for (OpIdx u : p.anchors[x]) a = std::max(a, rpos[u]);
    after[a].push_back(x);
  }
  std::vector<OpIdx> seq;
  seq.reserve(n);
  for (size_t i = 0; i < rorder.size(); ++i) {
    seq.push_back(rorder[i]);
    seq.insert(seq.end(), after[i].begin(), after[i].end());
  }
  // Pinned sources just before their first successor: key (position of the op the chain of
  // sources ends at, depth in the chain); a source goes right before its earliest successor.
  std::vector<int32_t> spos(n, -1), depth(n, 0);
  for (size_t i = 0; i < seq.size(); ++i) spos[seq[i]] = static_cast<int32_t>(i);
  auto earlier = [&](OpIdx a, OpIdx b) {
    return spos[a] != spos[b] ? spos[a] < spos[b] : depth[a] > depth[b];
  };
  for (auto it = p.sources.rbegin(); it != p.sources.rend(); ++it) {
    const OpIdx y = *it;
    OpIdx first = -1;
    for (OpIdx w : g.succs[y]) {
      if (first < 0 || earlier(w, first)) first = w;
    }
    spos[y] = spos[first];
    depth[y] = depth[first] + 1;
  }
  std::vector<std::vector<OpIdx>> before(seq.size());
  for (OpIdx y : p.sources) before[spos[y]].push_back(y);
  for (auto& list : before) {
    std::stable_sort(list.begin(), list.end(),
                     [&](OpIdx a, OpIdx b) { return depth[a] > depth[b]; });
  }
  Order order;
  order.reserve(n);
  order.insert(order.end(), p.iso_first.begin(), p.iso_first.end());
  for (size_t i = 0; i < seq.size(); ++i) {
    order.insert(order.end(), before[i].begin(), before[i].end());
    order.push_back(seq[i]);
  }
  order.insert(order.end(), p.iso_last.begin(), p.iso_last.end());
  return order;
}

VariantResult solve_variant(const Graph& g, const Prep& p, const Blocks& b,
                            const Settings& settings,
                            const std::vector<std::vector<int32_t>>& baseline_pos,
                            uint64_t alignment, bool exact_only, uint64_t global_lower_bound) {
  VariantResult r;
  std::vector<SegmentProblem> probs = make_problems(p, b);
  const int32_t B = b.count();
  uint64_t target = global_lower_bound;  // no segment needs to go below it
  for (int32_t k = 0; k < B; ++k) {
    target = std::max(target, detail::segment_lower_bound(probs[k]));
    if (b.is_key[k])
      ++r.key_points;
    else {
      ++r.segments;
      r.max_segment = std::max(r.max_segment, probs[k].k);
    }
  }
  std::vector<SegmentResult> results(B);
  std::vector<int32_t> work;
  for (int32_t k = 0; k < B; ++k) {
    if (probs[k].k == 1) {
      results[k].order = {0};
      results[k].peak = detail::segment_peak(probs[k], results[k].order);
      results[k].exact_finished = true;
    } else {
      work.push_back(k);
    }
  }
  std::stable_sort(work.begin(), work.end(),
                   [&](int32_t x, int32_t y) { return probs[x].k > probs[y].k; });
  // Budgets per segment, fixed before solving (deterministic): the per-segment limits, capped
  // so that a variant spends at most kTotalStates states and kTotalSwaps swaps per local search
  // (a segment runs two: single ops, then single ops and blocks) in all (states
  // shared evenly, swaps in proportion to segment size).
  constexpr int64_t kTotalStates = 2000000, kTotalSwaps = 4000000;
  int64_t total_ops = 0;
  for (int32_t k : work) total_ops += probs[k].k;
  const int64_t states_each =
      std::min(settings.seg.exact_state_limit,
               std::max<int64_t>(
                   10000, kTotalStates / std::max<int64_t>(1, static_cast<int64_t>(work.size()))));
  auto solve = [&](int32_t k) {
    const SegmentProblem& pr = probs[k];
    SegmentSettings seg = settings.seg;
    seg.exact_state_limit = states_each;
    seg.local_search_swaps =
        exact_only ? 0
                   : std::min(settings.seg.local_search_swaps,
                              std::max<int64_t>(
                                  10000, kTotalSwaps * pr.k / std::max<int64_t>(1, total_ops)));
    std::vector<std::vector<int32_t>> hints;
    std::vector<int64_t> rank(pr.k);
    for (const auto& pos : baseline_pos) {
      for (int32_t i = 0; i < pr.k; ++i) rank[i] = pos[b.rorder[b.begin[k] + i]];
      hints.push_back(detail::priority_topological(pr.preds, pr.succs, rank));
    }
    results[k] = detail::solve_segment(pr, hints, seg, target);
  };
  const int threads = std::min<int>(settings.threads, static_cast<int>(work.size()));
  if (threads <= 1) {
    for (int32_t k : work) solve(k);
  } else {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    std::vector<std::exception_ptr> failed(threads);  // rethrown after the join
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t]() {
        try {
          for (size_t i = next++; i < work.size(); i = next++) solve(work[i]);
        } catch (...) {
          failed[t] = std::current_exception();
          next = work.size();  // the others stop too
        }
      });
    }
    for (auto& th : pool) th.join();
    for (const auto& e : failed) {
      if (e) std::rethrow_exception(e);
    }
  }
  std::vector<OpIdx> rorder;
  rorder.reserve(b.rorder.size());
  for (int32_t k = 0; k < B; ++k) {
    const SegmentResult& sr = results[k];
    for (int32_t i : sr.order) rorder.push_back(b.rorder[b.begin[k] + i]);
    r.predicted = std::max(r.predicted, sr.peak);
    r.states += sr.states;
    r.swaps += sr.swaps;
    r.time_limit_hit = r.time_limit_hit || sr.time_limit_hit;
    if (probs[k].k > 1) {
      if (sr.exact_finished)
        ++r.exact_solved;
      else
        r.all_exact = false;
    }
  }
  r.order = assemble(g, p, rorder);
  r.tp = theoretical_peak(g, r.order, alignment);
  return r;
}
}  // namespace

nlohmann::json RoamOrderStats::to_json() const {
  nlohmann::json j = {{"winner", winner},
                      {"tp", tp},
                      {"lower_bound", lower_bound},
                      {"baselines", baselines},
                      {"variants", variants},
                      {"pinned_sources", pinned_sources},
                      {"groups", groups},
                      {"key_points", key_points},
                      {"segments", segments},
                      {"max_segment_ops", max_segment_ops},
                      {"exact_solved", exact_solved},
                      {"states", states},
                      {"swaps", swaps},
                      {"time_limit_hit", time_limit_hit},
                      {"seconds", seconds}};
  if (!warning.empty()) j["warning"] = warning;
  return j;
}

RoamStructure roam_structure(const Graph& g, const PlanOptions& options, GroupPlacement mode) {
  const Settings settings = read_settings(options, Clock::now());
  const Prep p = prepare(g, settings, options.alignment);
  RoamStructure rs;
  rs.pinned_sources = p.sources;
  rs.isolated_first = p.iso_first;
  rs.isolated_last = p.iso_last;
  rs.core_key_points = p.core_keys;
  rs.alpha = p.alpha;
  const std::vector<int32_t> gap = placement(p, mode, settings);
  for (size_t i = 0; i < p.groups.size(); ++i) {
    const Group& gr = p.groups[i];
    rs.groups.push_back({gr.all, gr.e, gr.l, gap[i], gr.G, gr.X, gr.part});
  }
  const Blocks b = make_blocks(g, p, placement_edges(p, gap, settings.wus));
  for (int32_t k = 0; k < b.count(); ++k) {
    std::vector<OpIdx> ops(b.rorder.begin() + b.begin[k], b.rorder.begin() + b.begin[k + 1]);
    if (b.is_key[k])
      rs.key_points.push_back(ops.front());
    else
      rs.segments.push_back(std::move(ops));
  }
  return rs;
}

namespace {
struct TimeUp {};  // the deadline passed before the roam candidates could start
}  // namespace

Order order_roam(const Graph& g, const PlanOptions& options, RoamOrderStats* stats_out) {
  const auto start = Clock::now();
  const uint64_t alignment = options.alignment;
  const Settings settings = read_settings(options, start);
  RoamOrderStats stats;

  // Baselines: the invariant's reference and the segment portfolio's hints.
  std::vector<std::pair<std::string, Order>> baselines;
  baselines.push_back({"program", order_program(g)});
  baselines.push_back({"lescea", order_lescea(g, alignment)});
  baselines.push_back({"lpmf", order_lpmf(g, alignment)});
  baselines.push_back({"bfs", order_bfs(g)});
  baselines.push_back({"dfs", order_dfs(g, alignment)});
  std::vector<std::vector<int32_t>> baseline_pos;
  size_t best_baseline = 0;
  const auto baselines_time = Clock::now() - start;
  for (size_t i = 0; i < baselines.size(); ++i) {
    const uint64_t tp = theoretical_peak(g, baselines[i].second, alignment);
    stats.baselines[baselines[i].first] = tp;
    baseline_pos.push_back(steps_of(g, baselines[i].second));
    if (tp < stats.baselines[baselines[best_baseline].first].get<uint64_t>()) best_baseline = i;
  }
  // The cut lower bound: the searches stop where they reach it, and a baseline that reaches it
  // is optimal already (unless a roam candidate is asked for by name).
  // It gets at most 30% of the time left: a bound stopped early is smaller, still valid.
  bool bound_stopped = false;
  // (On options.lower_bound_graph where given: a graph whose orders include g's, e.g. the graph a
  // forced graph was made from; a bound on it bounds every order of g.)
  stats.lower_bound = lower_bound(options.lower_bound_graph != nullptr ? *options.lower_bound_graph : g,
                                  alignment, &baselines[best_baseline].second,
                                  start + (settings.seg.deadline - start) * 3 / 10, &bound_stopped);
  stats.time_limit_hit = bound_stopped;
  const bool wants_variant = options.extra.is_object() && options.extra.contains("return_variant");
  if (settings.shortcut && !wants_variant &&
      stats.baselines[baselines[best_baseline].first].get<uint64_t>() <= stats.lower_bound) {
    stats.winner = baselines[best_baseline].first;
    stats.tp = stats.baselines[stats.winner].get<uint64_t>();
    stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    Order result = baselines[best_baseline].second;
    if (stats_out) *stats_out = std::move(stats);
    return result;
  }

  struct Candidate {
    std::string name;
    VariantResult r;
  };
  std::vector<Candidate> cands;
  // An internal invariant that fails (a bug) costs the roam candidates, never the plan: warn and
  // go on with the best baseline order.
  auto warn = [&](const std::string& what) {
    if (!stats.warning.empty()) stats.warning += "; ";
    stats.warning += what;
    std::cerr << "roam: warning: internal error in the roam order (a bug; the best baseline "
                 "order is used instead): "
              << what << "\n";
  };
  try {
    // No time for one candidate (it replays about twice the work of the five baselines: the
    // baselines as hints and four list schedules per segment): the best baseline (below).
    if (Clock::now() + 2 * baselines_time > settings.seg.deadline) throw TimeUp{};
    const Prep p = prepare(g, settings, alignment);
    stats.pinned_sources = static_cast<int32_t>(p.sources.size());
    stats.groups = static_cast<int32_t>(p.groups.size());
    std::vector<std::vector<int32_t>> placed;  // placements already solved (skip repeats)
    auto run = [&](const std::string& name, GroupPlacement mode, bool by_extra,
                   const Settings& with) {
      if (!cands.empty() && Clock::now() > settings.seg.deadline) {  // the first one always runs
        stats.time_limit_hit = true;
        return;
      }
      const std::vector<int32_t> gap = placement(p, mode, with);
      if (std::find(placed.begin(), placed.end(), gap) != placed.end()) return;
      placed.push_back(gap);
      const Blocks b = make_blocks(g, p, placement_edges(p, gap, by_extra));
      cands.push_back({name, solve_variant(g, p, b, settings, baseline_pos, alignment, false, stats.lower_bound)});
    };
    if (settings.wus) {
      run("roam-scheduled", GroupPlacement::kScheduled, true, settings);
      if (settings.variants && !p.groups.empty()) {
        // The scheduler with shorter delay radii: fewer delays can leave a quieter gap for the
        // updates whose estimate was off (ViT-B/16 b1: radius 0 or 2 gives 137.36 MiB, 8 gives
        // 137.95).
        for (const int32_t r : {0, 2}) {
          if (r >= settings.delay_radius) continue;
          Settings shorter = settings;
          shorter.delay_radius = r;
          run("roam-scheduled-r" + std::to_string(r), GroupPlacement::kScheduled, true, shorter);
        }
        run("roam-earliest", GroupPlacement::kEarliest, true, settings);
        run("roam-latest", GroupPlacement::kLatest, true, settings);
      }
    } else {
      run("roam-latest", GroupPlacement::kLatest, false, settings);
    }
    if (settings.exact && !p.groups.empty() && Clock::now() <= settings.seg.deadline) {
      // No artificial edges: exact when every segment is small enough for the exact search.
      const Blocks b = make_blocks(g, p, {});
      bool small = true;
      for (int32_t k = 0; k < b.count(); ++k) {
        small = small && b.begin[k + 1] - b.begin[k] <= settings.seg.exact_node_limit;
      }
      if (small)
        cands.push_back(
            {"roam-free", solve_variant(g, p, b, settings, baseline_pos, alignment, true, stats.lower_bound)});
    }
  } catch (const detail::InternalError& e) {
    cands.clear();
    warn(e.what());
  } catch (const TimeUp&) {
    stats.time_limit_hit = true;
  }
  for (auto it = cands.begin(); it != cands.end();) {
    if (is_topological(g, it->r.order)) {
      ++it;
    } else {
      warn("candidate " + it->name + " is not a valid order");
      it = cands.erase(it);
    }
  }

  size_t best = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    const VariantResult& r = cands[i].r;
    stats.variants[cands[i].name] = {{"tp", r.tp},
                                     {"predicted_tp", r.predicted},
                                     {"key_points", r.key_points},
                                     {"segments", r.segments},
                                     {"max_segment_ops", r.max_segment},
                                     {"exact_solved", r.exact_solved},
                                     {"all_exact", r.all_exact}};
    stats.states += r.states;
    stats.swaps += r.swaps;
    stats.time_limit_hit = stats.time_limit_hit || r.time_limit_hit;
    if (r.tp < cands[best].r.tp) best = i;
  }
  Order result;
  stats.tp = std::numeric_limits<uint64_t>::max();
  if (!cands.empty()) {
    const VariantResult& main = cands.front().r;
    stats.key_points = main.key_points;
    stats.segments = main.segments;
    stats.max_segment_ops = main.max_segment;
    stats.exact_solved = main.exact_solved;
    result = cands[best].r.order;
    stats.winner = cands[best].name;
    stats.tp = cands[best].r.tp;
  }
  // Diagnostics: extra {"return_variant": name} returns that roam candidate as is.
  const nlohmann::json& extra = options.extra;
  if (extra.is_object() && extra.contains("return_variant") &&
      extra["return_variant"].is_string()) {
    for (const Candidate& c : cands) {
      if (c.name == extra["return_variant"].get<std::string>()) {
        stats.winner = c.name;
        stats.tp = c.r.tp;
        stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (stats_out) *stats_out = std::move(stats);
        return c.r.order;
      }
    }
  }
  for (const auto& [name, o] : baselines) {
    const uint64_t tp = stats.baselines[name].get<uint64_t>();
    if (tp < stats.tp) {
      if (!is_topological(g, o)) {
        warn("baseline " + name + " is not a valid order");
        continue;
      }
      stats.tp = tp;
      stats.winner = name;
      result = o;
    }
  }
  if (result.empty() && g.num_ops() > 0) {  // every candidate failed: the file's order is valid
    result = g.program_order();
    stats.winner = "program";
    stats.tp = theoretical_peak(g, result, alignment);
  }
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (stats_out) *stats_out = std::move(stats);
  return result;
}

}  // namespace roam
