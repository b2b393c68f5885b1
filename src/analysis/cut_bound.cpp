// The cut lower bound on Tp: for each op v, the fewest bytes that any valid order holds at v's
// step, as a minimum s-t cut; the bound is the maximum over v. See include/roam/analysis.h.

// Boost.Graph's edge iterators trip GCC 12's -Wmaybe-uninitialized (false positive on
// boost::optional inside adj_list_edge_iterator) where they are instantiated, i.e. in this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <chrono>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "bound_internal.h"
#include "roam/analysis.h"
#include "roam/inplace.h"
#include "roam/order.h"

namespace roam {
namespace {

// A flow network rebuilt for every op whose cut is computed (Boost.Graph's Boykov-Kolmogorov
// max flow needs a reverse edge for every edge).
using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS,
    boost::property<boost::vertex_color_t, boost::default_color_type,
                    boost::property<boost::vertex_distance_t, int64_t,
                                    boost::property<boost::vertex_predecessor_t, Traits::edge_descriptor>>>,
    boost::property<boost::edge_capacity_t, int64_t,
                    boost::property<boost::edge_residual_capacity_t, int64_t,
                                    boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;

// Capacities above this are "infinite"; a cut whose finite part could reach it is not computed
// (the must-live bytes are returned instead, still a valid bound).
constexpr int64_t kInfinite = int64_t{1} << 62;

constexpr uint64_t kUnknown = ~uint64_t{0};
// Pair refinement budget: the first kPairOps argmax ops (by index), each with its kPairPartners
// heaviest neighbours, at most kPairBudget pairs (4 cuts each) in all.
constexpr int32_t kPairOps = 8;
constexpr size_t kPairPartners = 24;
constexpr int64_t kPairBudget = 96;
// Single-cut budget: about kCutWork / (ops + edges) ops considered, at least kMinCuts (a cut
// costs a few times ops + edges; a 5,000-op random DAG gets 28 cuts, about 6 ms each).
constexpr double kCutWork = 5e5;
constexpr double kMinCuts = 2;
// Must-live work budget: bitset words (E + sum of users) / 64 per op computed (about 0.5 s);
// a 200,000-op graph gets its ~13,000 ops with the most bytes live in known orders.
constexpr double kMustWork = 2.5e8;

class CutBound {
 public:
  /// `savings` (per op, or empty): the in-place savings subtracted from every min_live at that
  /// op (InplaceBoundTerms; `g` then carries the bound sizes).
  CutBound(const Graph& g, uint64_t alignment, const std::vector<uint64_t>* savings = nullptr)
      : g_(g), alignment_(alignment), savings_(savings), cls_(g.num_ops(), kIncomparable),
        node_(g.num_ops(), -1) {}

  /// Neither of v and w reaches the other.
  bool incomparable(OpIdx v, OpIdx w) {
    classify(v, -1, -1);
    return cls_[w] == kIncomparable;
  }

  /// min over valid orders of the bytes live at v's step; with `before` (an op incomparable to
  /// v) only over the orders that run it by v's step, with `after` only over those that run it
  /// later. With `near`, also lists the ops incomparable to v that make or use a storage whose
  /// liveness at v the cut decides (the candidates for pair_bound), heaviest first.
  uint64_t min_live(OpIdx v, OpIdx before = -1, OpIdx after = -1, std::vector<OpIdx>* near = nullptr) {
    classify(v, before, after);
    std::vector<std::pair<uint64_t, OpIdx>> weight;  // (bytes it decides, op) when `near`
    FlowGraph net(2);  // 0 = source (ops run by v's step), 1 = sink (ops run after it)
    auto cap = boost::get(boost::edge_capacity, net);
    auto rev = boost::get(boost::edge_reverse, net);
    auto add = [&](int64_t a, int64_t b, int64_t c) {
      const auto e = boost::add_edge(a, b, net).first;
      const auto r = boost::add_edge(b, a, net).first;
      cap[e] = c;
      cap[r] = 0;
      rev[e] = r;
      rev[r] = e;
    };
    auto node_of = [&](OpIdx x) -> int64_t {
      if (cls_[x] == kBefore) return 0;
      if (cls_[x] == kAfter) return 1;
      if (node_[x] < 0) node_[x] = static_cast<int32_t>(boost::add_vertex(net));
      return node_[x];
    };

    uint64_t sure = 0;      // live at v in every order
    uint64_t variable = 0;  // sum of the sizes that go into the network
    std::vector<int64_t> heads;
    for (const Storage& st : g_.storages) {
      const uint64_t size = align_up(st.size, alignment_);
      if (size == 0 || cls_[st.producer] == kAfter) continue;
      if (std::binary_search(st.users.begin(), st.users.end(), v)) {
        sure += size;
        continue;
      }
      heads.clear();
      bool to_sink = st.graph_output;
      for (OpIdx u : st.users) {
        if (u == st.producer || cls_[u] == kBefore) continue;  // run by v's step in every order
        if (cls_[u] == kAfter) {
          to_sink = true;
        } else {
          heads.push_back(node_of(u));
        }
      }
      if (cls_[st.producer] == kBefore && to_sink) {
        sure += size;
        continue;
      }
      if (to_sink) heads.push_back(1);
      if (heads.empty()) continue;  // every use is done by v's step: never live at v
      variable += size;
      if (near != nullptr) {
        if (cls_[st.producer] == kIncomparable) weight.push_back({size, st.producer});
        for (OpIdx u : st.users) {
          if (u != st.producer && cls_[u] == kIncomparable) weight.push_back({size, u});
        }
      }
      // Cut cost `size` when the producer runs by v's step and some user after it.
      const int64_t tail = node_of(st.producer);
      if (heads.size() == 1) {
        add(tail, heads[0], static_cast<int64_t>(size));
      } else {
        const auto hub = static_cast<int64_t>(boost::add_vertex(net));
        add(tail, hub, static_cast<int64_t>(size));
        for (int64_t h : heads) add(hub, h, kInfinite);
      }
    }
    uint64_t result = sure;
    if (variable > 0 && variable < static_cast<uint64_t>(kInfinite)) {
      // An op of the cut's source side needs its predecessors there too (a prefix of an order).
      for (OpIdx x : incomparable_) {
        for (OpIdx p : g_.preds[x]) {
          if (cls_[p] == kIncomparable) add(node_of(x), node_of(p), kInfinite);
        }
      }
      result += static_cast<uint64_t>(boost::boykov_kolmogorov_max_flow(net, 0, 1));
    }
    for (OpIdx x : incomparable_) node_[x] = -1;
    // v's own in-place writes (counted in `sure`: v's own storages) share bytes at its step.
    if (savings_ != nullptr && !savings_->empty()) result -= std::min(result, (*savings_)[v]);
    if (near != nullptr) {
      // Sum per op, heaviest first (ties: op index): deterministic.
      std::sort(weight.begin(), weight.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      std::vector<std::pair<uint64_t, OpIdx>> total;
      for (const auto& [w, x] : weight) {
        if (!total.empty() && total.back().second == x) {
          total.back().first += w;
        } else {
          total.push_back({w, x});
        }
      }
      std::sort(total.begin(), total.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      near->clear();
      for (const auto& t : total) near->push_back(t.second);
    }
    return result;
  }

  /// The pair bound of two incomparable ops v and w: every order runs v before w or w before v,
  /// so Tp >= min(max(live at v with w after, live at w with v before),
  ///              max(live at v with w before, live at w with v after)).
  /// `floor`: a value the caller already has; the result is exact when above it, else <= floor.
  uint64_t pair_bound(OpIdx v, OpIdx w, uint64_t floor) {
    const uint64_t a = min_live(v, -1, w);
    const uint64_t b = a > floor ? 0 : min_live(w, v, -1);
    if (std::max(a, b) <= floor) return floor;  // v before w can stay at the floor
    const uint64_t c = min_live(v, w, -1);
    const uint64_t d = c > floor ? 0 : min_live(w, -1, v);
    return std::min(std::max(a, b), std::max(c, d));
  }

 private:
  enum Class : uint8_t { kIncomparable, kBefore, kAfter };

  // Ancestors of v and v itself: kBefore; descendants: kAfter; then `before` and its
  // ancestors kBefore, `after` and its descendants kAfter (when >= 0); the rest: incomparable_.
  void classify(OpIdx v, OpIdx before, OpIdx after) {
    std::fill(cls_.begin(), cls_.end(), kIncomparable);
    // Marks `from` and everything reachable from it along `edges` (preds or succs) as `mark`.
    auto reach = [&](OpIdx from, const std::vector<std::vector<OpIdx>>& edges, Class mark) {
      cls_[from] = mark;
      std::vector<OpIdx> stack{from};
      while (!stack.empty()) {
        const OpIdx x = stack.back();
        stack.pop_back();
        for (OpIdx y : edges[x]) {
          if (cls_[y] == kIncomparable) {
            cls_[y] = mark;
            stack.push_back(y);
          }
        }
      }
    };
    reach(v, g_.preds, kBefore);
    cls_[v] = kIncomparable;  // so that its descendants are marked from it
    reach(v, g_.succs, kAfter);
    cls_[v] = kBefore;
    if (before >= 0) reach(before, g_.preds, kBefore);
    if (after >= 0) reach(after, g_.succs, kAfter);
    incomparable_.clear();
    for (OpIdx x = 0; x < g_.num_ops(); ++x) {
      if (cls_[x] == kIncomparable) incomparable_.push_back(x);
    }
  }

  const Graph& g_;
  uint64_t alignment_;
  const std::vector<uint64_t>* savings_;
  std::vector<uint8_t> cls_;
  std::vector<int32_t> node_;
  std::vector<OpIdx> incomparable_;
};

}  // namespace

uint64_t min_live_at_op(const Graph& g, OpIdx v, uint64_t alignment, OpIdx run_before,
                        OpIdx run_after) {
  const int32_t n = g.num_ops();
  if (v < 0 || v >= n || run_before < -1 || run_before >= n || run_after < -1 || run_after >= n ||
      (run_before >= 0 && run_before == run_after)) {
    throw std::invalid_argument("min_live_at_op: op index out of range");
  }
  analysis_internal::BoundGraph b;
  analysis_internal::make_bound_graph(g, alignment, b);
  CutBound cut(*b.graph, alignment, &b.terms.savings);
  for (OpIdx w : {run_before, run_after}) {
    if (w >= 0 && !cut.incomparable(v, w)) {
      throw std::invalid_argument("min_live_at_op: op " + g.ops[w].id + " is not incomparable to op " +
                                  g.ops[v].id);
    }
  }
  return cut.min_live(v, run_before, run_after);
}

uint64_t lower_bound(const Graph& g, uint64_t alignment, const Order* hint) {
  return lower_bound(g, alignment, hint, std::chrono::steady_clock::time_point::max());
}

namespace {

// Live bytes at every step of `order` with the in-place writes it allows (inplace_valid_in), as
// apply_inplace's graph has them, without building that graph: a written output's storage joins
// the storage it is written over (the writes roam uses join storages of one size), the joined
// storage live from its first member's birth to its members' last use (the end when one is a
// graph output).
std::vector<uint64_t> live_per_step_with_inplace(const Graph& g, const Order& order, uint64_t alignment) {
  const std::vector<InplacePair> pairs = inplace_valid_in(g, order);
  if (pairs.empty()) return live_bytes_per_step(g, compute_liveness(g, order), alignment);
  const Liveness live = compute_liveness(g, order);
  std::vector<StorageIdx> head(g.storages.size());
  for (StorageIdx s = 0; s < g.num_storages(); ++s) head[s] = s;
  for (const InplacePair& p : pairs) {  // op order: a write's input storage has its head already
    head[g.storage_of[p.output]] = head[g.storage_of[p.input]];
  }
  // Each in-place group is one storage from its head's first step to its members' last; the
  // other members are not counted (last -1).
  Liveness merged{std::vector<int32_t>(g.storages.size(), std::numeric_limits<int32_t>::max()),
                  std::vector<int32_t>(g.storages.size(), -1)};
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    merged.first[head[s]] = std::min(merged.first[head[s]], live.first[s]);
    merged.last[head[s]] = std::max(merged.last[head[s]], live.last[s]);
  }
  return live_bytes_per_step(g, merged, alignment);
}

// The same per op (indexed by op): an upper bound on every in-place term at that op (what the
// order holds there).
std::vector<uint64_t> live_with_inplace(const Graph& g, const Order& order, uint64_t alignment) {
  if (!has_inplace(g)) return live_bytes_at_ops(g, order, alignment);
  const std::vector<uint64_t> per_step = live_per_step_with_inplace(g, order, alignment);
  std::vector<uint64_t> per_op(per_step.size());
  for (size_t t = 0; t < order.size(); ++t) per_op[order[t]] = per_step[t];
  return per_op;
}

}  // namespace

uint64_t inplace_peak(const Graph& g, const Order& order, uint64_t alignment) {
  if (!has_inplace(g)) return theoretical_peak(g, order, alignment);
  const std::vector<uint64_t> bytes = live_per_step_with_inplace(g, order, alignment);
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

uint64_t lower_bound(const Graph& g_in, uint64_t alignment, const Order* hint,
                     std::chrono::steady_clock::time_point deadline, bool* stopped) {
  if (stopped != nullptr) *stopped = false;
  // With permissions, every term below is the in-place one: cuts and must-live bytes on the
  // bound sizes less each op's savings; live bytes of known orders with their in-place writes.
  analysis_internal::BoundGraph bg;
  analysis_internal::make_bound_graph(g_in, alignment, bg);
  const Graph& g = *bg.graph;
  const int32_t n = g.num_ops();
  if (n == 0) return 0;
  auto out_of_time = [&] {
    if (std::chrono::steady_clock::now() < deadline) return false;
    if (stopped != nullptr) *stopped = true;
    return true;
  };
  if (out_of_time()) {  // every op's own storages only: O(E)
    const auto own = lower_bound_per_op(g_in, alignment, {});
    return *std::max_element(own.begin(), own.end());
  }
  // ub0[v]: bytes live at v's step in the program or the lescea order (an upper bound on
  // min_live(v) that does not depend on `hint`); ub[v]: the same with `hint` too; known_tp:
  // the smallest Tp of those orders.
  std::vector<uint64_t> ub0 = live_with_inplace(g_in, g.program_order(), alignment);
  uint64_t known_tp = *std::max_element(ub0.begin(), ub0.end());
  {
    const auto h = live_with_inplace(g_in, order_lescea(g_in, alignment), alignment);
    known_tp = std::min(known_tp, *std::max_element(h.begin(), h.end()));
    for (OpIdx v = 0; v < n; ++v) ub0[v] = std::min(ub0[v], h[v]);
  }
  // Must-live bytes for every op when that costs at most kMustWork bitset words; otherwise for
  // the ops with the most bytes live in those orders (must <= ub0: the others can only matter
  // where ub0 is large), the rest counting their own storages.
  size_t edges = 0, uses = 0;
  for (const auto& p : g.preds) edges += p.size();
  for (const Storage& st : g.storages) uses += st.users.size();
  std::vector<OpIdx> columns(n);
  for (OpIdx v = 0; v < n; ++v) columns[v] = v;
  const double per_column = static_cast<double>(edges + uses + 1) / 64.0;
  const auto most_columns = static_cast<size_t>(std::max(64.0, kMustWork / per_column));
  if (out_of_time()) {
    columns.clear();  // own storages only: O(E)
  } else if (columns.size() > most_columns) {
    std::stable_sort(columns.begin(), columns.end(), [&](OpIdx a, OpIdx b) { return ub0[a] > ub0[b]; });
    columns.resize(most_columns);
  }
  const auto must = lower_bound_per_op(g_in, alignment, columns);
  uint64_t best = *std::max_element(must.begin(), must.end());
  if (known_tp <= best) return best;  // the program or the lescea order is optimal
  std::vector<uint64_t> ub = ub0;
  if (hint != nullptr) {
    const auto h = live_with_inplace(g_in, *hint, alignment);
    known_tp = std::min(known_tp, *std::max_element(h.begin(), h.end()));
    for (OpIdx v = 0; v < n; ++v) ub[v] = std::min(ub[v], h[v]);
  }
  if (known_tp <= best) return best;
  // Single cuts, most promising first (by ub0), at most `budget` ops considered: the ops
  // considered, and so the result, do not depend on `hint`; the hint only lets a cut be
  // skipped where it cannot raise the maximum (min_live(v) <= ub[v] <= best).
  const auto budget = static_cast<int64_t>(std::min<double>(
      std::max<double>(kCutWork / static_cast<double>(n + edges + 1), kMinCuts), n));
  std::vector<OpIdx> order;
  for (OpIdx v = 0; v < n; ++v) {
    if (ub0[v] > best && ub0[v] > must[v]) order.push_back(v);
  }
  std::sort(order.begin(), order.end(), [&](OpIdx a, OpIdx b) { return ub0[a] != ub0[b] ? ub0[a] > ub0[b] : a < b; });
  CutBound cut(g, alignment, &bg.terms.savings);
  std::vector<uint64_t> exact(n, kUnknown);  // min_live where computed
  std::vector<char> considered(n, 0);
  int64_t used = 0;
  for (OpIdx v : order) {
    if (ub0[v] <= best || used == budget || out_of_time()) break;
    ++used;
    considered[v] = 1;
    if (ub[v] <= best) continue;
    exact[v] = cut.min_live(v);
    best = std::max(best, exact[v]);
  }
  // Pair refinement, only where no known order reaches the bound (otherwise it is optimal and
  // no bound can exceed it), on the first kPairOps ops (by index) whose min_live is the bound,
  // among the ops considered and those whose must-live bytes are the bound.
  if (known_tp <= best) return best;
  const uint64_t single = best;
  int32_t refined = 0;
  int64_t pairs = 0;
  const int64_t pair_budget = std::min<int64_t>(kPairBudget, budget);
  for (OpIdx v = 0; v < n && refined < kPairOps && pairs < pair_budget; ++v) {
    if (must[v] == single) {
      exact[v] = single;
    } else if (!considered[v] || ub[v] < single) {
      continue;  // not considered, or min_live(v) <= ub[v] < single
    } else if (exact[v] == kUnknown) {
      if (out_of_time()) break;
      exact[v] = cut.min_live(v);
    }
    if (exact[v] != single) continue;
    if (out_of_time()) break;
    ++refined;
    std::vector<OpIdx> near;
    cut.min_live(v, -1, -1, &near);
    for (size_t k = 0; k < near.size() && k < kPairPartners && pairs < pair_budget; ++k, ++pairs) {
      if (out_of_time()) break;
      best = std::max(best, cut.pair_bound(v, near[k], best));
    }
  }
  return best;
}

std::vector<uint64_t> live_bytes_at_ops(const Graph& g, const Order& order, uint64_t alignment) {
  const auto per_step = live_bytes_per_step(g, compute_liveness(g, order), alignment);
  std::vector<uint64_t> per_op(per_step.size());
  for (size_t t = 0; t < order.size(); ++t) per_op[order[t]] = per_step[t];
  return per_op;
}

}  // namespace roam
