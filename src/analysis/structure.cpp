// asap/alap, key points, storage kinds and the lower bound on Tp (DESIGN.md "Analysis";
// key points are ROAM's memory-insensitive operators, arXiv 2310.19295 Sec. 4.1).
//
// Every graph that parse_graph accepts lists its ops in a topological order (the program
// order), so "op index" doubles as a topological position throughout this file.
#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>

#include "bound_internal.h"
#include "roam/analysis.h"
#include "roam/inplace.h"

namespace roam {

namespace {

// Reflexive reachability as one bitset row per op (n * n bits).
class Reachability {
 public:
  Reachability(const Graph& g, bool ancestors) : n_(g.num_ops()), words_((n_ + 63) / 64) {
    bits_.assign(static_cast<size_t>(n_) * words_, 0);
    if (ancestors) {
      for (OpIdx v = 0; v < n_; ++v) fill(v, g.preds[v]);
    } else {
      for (OpIdx v = n_ - 1; v >= 0; --v) fill(v, g.succs[v]);
    }
  }
  const uint64_t* row(OpIdx v) const { return bits_.data() + static_cast<size_t>(v) * words_; }
  int32_t count(OpIdx v) const {  // excluding v itself
    int32_t c = 0;
    const uint64_t* r = row(v);
    for (int32_t w = 0; w < words_; ++w) c += std::popcount(r[w]);
    return c - 1;
  }
  int32_t words() const { return words_; }

 private:
  void fill(OpIdx v, const std::vector<OpIdx>& from) {
    uint64_t* r = bits_.data() + static_cast<size_t>(v) * words_;
    r[v / 64] |= uint64_t{1} << (v % 64);
    for (OpIdx u : from) {
      const uint64_t* q = row(u);
      for (int32_t w = 0; w < words_; ++w) r[w] |= q[w];
    }
  }
  int32_t n_, words_;
  std::vector<uint64_t> bits_;
};

}  // namespace

AsapAlap asap_alap(const Graph& g) {
  const int32_t n = g.num_ops();
  AsapAlap r;
  r.asap.resize(n);
  r.alap.resize(n);
  {
    Reachability anc(g, true);
    for (OpIdx v = 0; v < n; ++v) r.asap[v] = anc.count(v);
  }
  Reachability desc(g, false);
  for (OpIdx v = 0; v < n; ++v) r.alap[v] = n - 1 - desc.count(v);
  return r;
}

std::vector<OpIdx> key_points(const Graph& g) {
  const int32_t n = g.num_ops();
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  // prefix_ok[i]: every op before position i has a successor at a position <= i.
  // suffix_ok[i]: every op after position i has a predecessor at a position >= i.
  std::vector<char> prefix_ok(n), suffix_ok(n);
  int32_t max_min_succ = -1;  // max over ops before i of (position of their first successor)
  for (OpIdx i = 0; i < n; ++i) {
    prefix_ok[i] = max_min_succ <= i;
    int32_t first_succ = kNone;
    for (OpIdx s : g.succs[i]) first_succ = std::min(first_succ, s);
    max_min_succ = std::max(max_min_succ, first_succ);
  }
  int32_t min_max_pred = kNone;  // min over ops after i of (position of their last predecessor)
  for (OpIdx i = n - 1; i >= 0; --i) {
    suffix_ok[i] = min_max_pred >= i;
    int32_t last_pred = -1;
    for (OpIdx p : g.preds[i]) last_pred = std::max(last_pred, p);
    min_max_pred = std::min(min_max_pred, last_pred);
  }
  std::vector<OpIdx> keys;
  for (OpIdx i = 0; i < n; ++i) {
    if (prefix_ok[i] && suffix_ok[i]) keys.push_back(i);
  }
  return keys;
}

std::vector<OpIdx> key_points_quadratic(const Graph& g) {
  const AsapAlap a = asap_alap(g);
  std::vector<OpIdx> keys;
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    if (a.asap[v] == a.alap[v]) keys.push_back(v);
  }
  std::sort(keys.begin(), keys.end(), [&](OpIdx x, OpIdx y) { return a.asap[x] < a.asap[y]; });
  return keys;
}

std::vector<StorageKind> storage_kinds(const Graph& g) {
  // users are sorted by program position, which is topological: users.back() is the last use.
  std::vector<StorageKind> kinds(g.storages.size(), StorageKind::kTemporary);
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    const Storage& st = g.storages[s];
    if (g.ops[st.producer].phase == Phase::kForward && g.ops[st.users.back()].phase == Phase::kBackward) {
      kinds[s] = StorageKind::kActivation;
    }
  }
  return kinds;
}

std::vector<uint64_t> lower_bound_per_op(const Graph& g, uint64_t alignment) {
  std::vector<OpIdx> all(g.num_ops());
  for (OpIdx v = 0; v < g.num_ops(); ++v) all[v] = v;
  return lower_bound_per_op(g, alignment, all);
}

InplaceBoundTerms inplace_bound_terms(const Graph& g, uint64_t alignment) {
  InplaceBoundTerms r;
  const std::vector<InplacePair> pairs = inplace_permissions(g);
  if (pairs.empty()) return r;
  // bound[s]: the fewest aligned bytes the contents of storage s occupy in any valid plan: its
  // own size, or, written over an input, no more than that input's bound (the instance it is
  // bound to has the input storage's size; an absent input storage, a root of size 0, has 0).
  // A permission's input is produced before its op, so one pass in op order settles it.
  std::vector<uint64_t> bound(g.storages.size());
  for (StorageIdx s = 0; s < g.num_storages(); ++s) bound[s] = align_up(g.storages[s].size, alignment);
  bool reduced = false;
  for (const InplacePair& p : pairs) {
    const StorageIdx t = g.storage_of[p.output], s = g.storage_of[p.input];
    const uint64_t b = s < 0 ? 0 : bound[s];
    if (b < bound[t]) {
      bound[t] = b;
      reduced = true;
    }
  }
  // savings[v] <= min(sum of the bounds of v's outputs with a permission, sum over the distinct
  // input storages of the largest bound of an output paired with it): each write saves its
  // output's bytes (the output's storage disappears into the input's instance), each output is
  // written over one input and each input storage takes at most one output.
  r.savings.assign(g.ops.size(), 0);
  std::vector<std::pair<TensorIdx, uint64_t>> outs;        // (output, bound), distinct outputs
  std::vector<std::pair<StorageIdx, uint64_t>> ins;        // (input storage, largest bound)
  for (size_t k = 0; k < pairs.size();) {
    const OpIdx v = pairs[k].op;
    outs.clear();
    ins.clear();
    for (; k < pairs.size() && pairs[k].op == v; ++k) {
      const uint64_t b = bound[g.storage_of[pairs[k].output]];
      auto o = std::find_if(outs.begin(), outs.end(), [&](const auto& x) { return x.first == pairs[k].output; });
      if (o == outs.end()) outs.push_back({pairs[k].output, b});
      const StorageIdx s = g.storage_of[pairs[k].input];
      auto i = std::find_if(ins.begin(), ins.end(), [&](const auto& x) { return x.first == s; });
      if (i == ins.end()) {
        ins.push_back({s, b});
      } else {
        i->second = std::max(i->second, b);
      }
    }
    uint64_t by_out = 0, by_in = 0;
    for (const auto& o : outs) by_out += o.second;
    for (const auto& i : ins) by_in += i.second;
    r.savings[v] = std::min(by_out, by_in);
  }
  if (reduced) r.storage_bytes = std::move(bound);
  return r;
}

namespace analysis_internal {

void make_bound_graph(const Graph& g, uint64_t alignment, BoundGraph& out) {
  out.terms = inplace_bound_terms(g, alignment);
  out.graph = &g;
  if (out.terms.storage_bytes.empty()) return;
  out.reduced = g;
  for (StorageIdx s = 0; s < out.reduced.num_storages(); ++s) {
    out.reduced.storages[s].size = out.terms.storage_bytes[s];
  }
  out.graph = &out.reduced;
}

}  // namespace analysis_internal

std::vector<uint64_t> lower_bound_per_op(const Graph& g, uint64_t alignment,
                                         const std::vector<OpIdx>& ops) {
  return lower_bound_per_op(g, alignment, ops, std::vector<char>(g.storages.size(), 1));
}

std::vector<uint64_t> lower_bound_per_op(const Graph& g, uint64_t alignment,
                                         const std::vector<OpIdx>& ops,
                                         const std::vector<char>& crossing) {
  if (crossing.size() != g.storages.size()) {
    throw std::invalid_argument("lower_bound_per_op: crossing needs one entry per storage");
  }
  analysis_internal::BoundGraph b;
  analysis_internal::make_bound_graph(g, alignment, b);
  std::vector<uint64_t> must = analysis_internal::must_live_plain(*b.graph, alignment, ops, &crossing);
  // An op's own in-place writes share bytes at its step (at most saving(v), all counted among
  // its own storages); nothing else that must be live at v shares bytes with anything: a storage
  // S that crosses v (born by an ancestor of v, used by a descendant) is read after v, so the op
  // that writes over S, reading it before v, is not S's last user and S stays distinct bytes;
  // the output written over S is born at that op and cannot be live at v together with S
  // unless that op is v.
  if (!b.terms.savings.empty()) {
    for (OpIdx v = 0; v < g.num_ops(); ++v) must[v] -= std::min(must[v], b.saving(v));
  }
  return must;
}

std::vector<uint64_t> analysis_internal::must_live_plain(const Graph& g, uint64_t alignment,
                                                         const std::vector<OpIdx>& ops,
                                                         const std::vector<char>* crossing) {
  // Storage s (producer p, users U) is live at op v in every order iff p <= v <= some u in U in
  // the partial order (or p <= v when s is a graph output). The listed ops (the columns) are
  // processed in blocks of up to kBlock, in program position: per block, a bitset row per op x
  // of the block ops x reaches and of those that reach x. Time O((E + sum of users) * |ops| / 64),
  // memory O(V * block / 8) with the block narrowed so that it stays under kRowBytes.
  constexpr int32_t kMaxBlock = 8192;
  constexpr size_t kRowBytes = size_t{64} << 20;  // both bitset tables together
  const int32_t n = g.num_ops();
  // Ops not listed: their own storages (live at their step in every order).
  std::vector<uint64_t> must_live(n, 0);
  for (OpIdx v = 0; v < n; ++v) {
    for (StorageIdx s : g.op_storages[v]) must_live[v] += align_up(g.storages[s].size, alignment);
  }
  std::vector<OpIdx> cols = ops;
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  for (OpIdx v : cols) {
    must_live[v] = 0;
    if (!crossing) continue;
    // A storage not counted where it crosses still counts at its own ops (the sweep below
    // skips it).
    for (StorageIdx s : g.op_storages[v]) {
      if (!(*crossing)[s]) must_live[v] += align_up(g.storages[s].size, alignment);
    }
  }
  int32_t block = kMaxBlock;
  while (block > 64 && static_cast<size_t>(n) * 2 * (static_cast<size_t>(block) / 8) > kRowBytes) block /= 2;
  std::vector<int32_t> bit(n, -1);  // column position within the current block
  std::vector<uint64_t> desc_in_block, anc_in_block;  // per op x: block ops that x reaches /
                                                       // that reach x (reflexive)
  std::vector<uint64_t> span;
  for (size_t c0 = 0; c0 < cols.size(); c0 += static_cast<size_t>(block)) {
    const size_t c1 = std::min(cols.size(), c0 + static_cast<size_t>(block));
    const OpIdx b0 = cols[c0], b1 = cols[c1 - 1] + 1;  // ops of the block lie in [b0, b1)
    const int32_t words = static_cast<int32_t>((c1 - c0 + 63) / 64);
    for (size_t c = c0; c < c1; ++c) bit[cols[c]] = static_cast<int32_t>(c - c0);
    // x reaches a block op only if x < b1; a block op reaches x only if x >= b0.
    desc_in_block.assign(static_cast<size_t>(b1) * words, 0);
    anc_in_block.assign(static_cast<size_t>(n - b0) * words, 0);
    span.assign(words, 0);
    auto desc_row = [&](OpIdx x) { return desc_in_block.data() + static_cast<size_t>(x) * words; };
    auto anc_row = [&](OpIdx x) { return anc_in_block.data() + static_cast<size_t>(x - b0) * words; };
    for (OpIdx x = b1 - 1; x >= 0; --x) {
      uint64_t* r = desc_row(x);
      if (bit[x] >= 0) r[bit[x] / 64] |= uint64_t{1} << (bit[x] % 64);
      for (OpIdx y : g.succs[x]) {
        if (y >= b1) continue;
        const uint64_t* q = desc_row(y);
        for (int32_t w = 0; w < words; ++w) r[w] |= q[w];
      }
    }
    for (OpIdx x = b0; x < n; ++x) {
      uint64_t* r = anc_row(x);
      if (bit[x] >= 0) r[bit[x] / 64] |= uint64_t{1} << (bit[x] % 64);
      for (OpIdx y : g.preds[x]) {
        if (y < b0) continue;
        const uint64_t* q = anc_row(y);
        for (int32_t w = 0; w < words; ++w) r[w] |= q[w];
      }
    }
    for (StorageIdx si = 0; si < g.num_storages(); ++si) {
      if (crossing && !(*crossing)[si]) continue;
      const Storage& st = g.storages[si];
      const OpIdx hi = st.graph_output ? n - 1 : st.users.back();
      if (st.producer >= b1 || hi < b0) continue;  // no op of this block lies between them
      const uint64_t size = align_up(st.size, alignment);
      const uint64_t* d = desc_row(st.producer);
      if (st.graph_output) {
        for (int32_t w = 0; w < words; ++w) span[w] = d[w];
      } else {
        std::fill(span.begin(), span.end(), 0);
        for (OpIdx u : st.users) {
          if (u < b0) continue;
          const uint64_t* a = anc_row(u);
          for (int32_t w = 0; w < words; ++w) span[w] |= a[w];
        }
        for (int32_t w = 0; w < words; ++w) span[w] &= d[w];
      }
      for (int32_t w = 0; w < words; ++w) {
        for (uint64_t bits = span[w]; bits != 0; bits &= bits - 1) {
          must_live[cols[c0 + static_cast<size_t>(w) * 64 + std::countr_zero(bits)]] += size;
        }
      }
    }
    for (size_t c = c0; c < c1; ++c) bit[cols[c]] = -1;
  }
  return must_live;
}

}  // namespace roam
