// The chain dynamic program of the graph remat (remat.h step 2a): see remat_internal.h.
#include <algorithm>
#include <limits>

#include "remat_internal.h"

namespace roam::remat_internal {

std::vector<const SpanOption*> choose_spans(const std::vector<std::vector<SpanOption>>& options,
                                            uint64_t model_budget) {
  struct State {
    uint64_t kept;
    double cost;
    int32_t from;     // unit boundary of the previous state
    int32_t parent;   // its index in fronts[from]
    const SpanOption* option;
  };
  const size_t m = options.size();
  // States reaching a boundary go to one of kBuckets buckets of bytes kept (the least seconds
  // per bucket, ties: the least bytes), so that a boundary's Pareto front costs a pass over its
  // buckets instead of a sort of every state; then thinned to kMaxFront states evenly (keeping
  // both ends).
  constexpr size_t kBuckets = 2048;
  constexpr size_t kMaxFront = 256;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<State>> buckets(m + 1), fronts(m + 1);
  auto push = [&](size_t at, const State& s) {
    auto& b = buckets[at];
    if (b.empty()) b.assign(kBuckets, State{0, inf, -1, -1, nullptr});
    // floor(kept * kBuckets / (model_budget + 1)), kept <= model_budget: in integers below
    // 2^52 bytes (the long double quotient rounds to the same floor there, its error being far
    // below 1 / (model_budget + 1)), in long double above.
    const auto k = model_budget < (uint64_t{1} << 52)
                       ? static_cast<size_t>(s.kept * kBuckets / (model_budget + 1))
                       : static_cast<size_t>(static_cast<long double>(s.kept) * kBuckets /
                                             (static_cast<long double>(model_budget) + 1));
    State& cur = b[std::min(k, kBuckets - 1)];
    if (s.cost < cur.cost || (s.cost == cur.cost && s.kept < cur.kept)) cur = s;
  };
  push(0, {0, 0.0, -1, -1, nullptr});
  for (size_t i = 0; i <= m; ++i) {
    std::vector<State> pareto;  // kept increasing, cost strictly decreasing
    for (const State& st : buckets[i]) {
      if (st.cost == inf) continue;
      if (pareto.empty() || st.cost < pareto.back().cost) pareto.push_back(st);
    }
    std::vector<State>().swap(buckets[i]);
    if (pareto.size() > kMaxFront) {
      std::vector<State> thin;
      for (size_t k = 0; k < kMaxFront; ++k) thin.push_back(pareto[k * (pareto.size() - 1) / (kMaxFront - 1)]);
      pareto = std::move(thin);
    }
    fronts[i] = std::move(pareto);
    const auto& f = fronts[i];
    if (i == m) break;
    for (size_t k = 0; k < f.size(); ++k) {
      for (const SpanOption& o : options[i]) {
        if (f[k].kept + o.full > model_budget) continue;
        push(i + static_cast<size_t>(o.length),
             {f[k].kept + o.full - std::min(o.full, o.dropped), f[k].cost + o.cost,
              static_cast<int32_t>(i), static_cast<int32_t>(k), &o});
      }
    }
  }
  if (fronts[m].empty()) return {};
  size_t best = 0;
  for (size_t k = 1; k < fronts[m].size(); ++k) {
    if (fronts[m][k].cost < fronts[m][best].cost) best = k;
  }
  std::vector<const SpanOption*> chosen;
  int32_t i = static_cast<int32_t>(m), k = static_cast<int32_t>(best);
  while (i > 0) {
    const State& st = fronts[i][k];
    chosen.push_back(st.option);
    i = st.from;
    k = st.parent;
  }
  std::reverse(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace roam::remat_internal
