// Hand-made fixture graphs (tests/fixtures/*.json) with every value worked out by hand in the
// comments: liveness, Tp of program order (and of another order), the lower bound, asap/alap,
// key points, activations vs temporaries, and the `llfb` and `pytorch` layouts.
//
// Conventions of the comments: op k runs at step k; [f,l] is an inclusive live interval;
// "bytes" lists the live bytes per step; sizes at alignment 1 unless stated.
// PyTorch caching allocator: requests round up to 512 B; <= 1 MiB from 2 MiB segments (small
// pool), larger from 20 MiB segments (< 10 MiB) or their own 2 MiB-rounded segment; best fit
// (smallest free block that fits, lowest address among equals); the allocation keeps the low
// end of a split block; frees coalesce with free neighbours; segments laid end to end in
// creation order. At a step, the step's new storages are allocated, then the storages whose
// last step it is are freed.
#include <gtest/gtest.h>

#include <map>

#include "testing.h"

namespace {

using roam::Graph;
using roam::Order;
using roam::StorageKind;
using roamtest::BruteModel;
using Intervals = std::map<std::string, std::pair<int, int>>;
using Offsets = std::map<std::string, uint64_t>;

constexpr uint64_t kMiB = 1048576;

Intervals intervals(const Graph& g, const roam::Liveness& live) {
  Intervals out;
  for (roam::StorageIdx s = 0; s < g.num_storages(); ++s) {
    out[g.tensors[g.storages[s].root].id] = {live.first[s], live.last[s]};
  }
  return out;
}

Offsets offsets_by_id(const Graph& g, const std::vector<uint64_t>& offsets) {
  Offsets out;
  for (roam::StorageIdx s = 0; s < g.num_storages(); ++s) {
    out[g.tensors[g.storages[s].root].id] = offsets[s];
  }
  return out;
}

Order order_of(const Graph& g, const std::vector<std::string>& ids) {
  Order o;
  for (const auto& id : ids) o.push_back(g.op_index.at(id));
  return o;
}

std::vector<std::string> ids_of(const Graph& g, const std::vector<roam::OpIdx>& ops) {
  std::vector<std::string> out;
  for (auto v : ops) out.push_back(g.ops[v].id);
  return out;
}

std::map<std::string, StorageKind> kinds_by_id(const Graph& g) {
  const auto kinds = roam::storage_kinds(g);
  std::map<std::string, StorageKind> out;
  for (roam::StorageIdx s = 0; s < g.num_storages(); ++s) {
    out[g.tensors[g.storages[s].root].id] = kinds[s];
  }
  return out;
}

// Minimum Tp over every topological order, by explicit enumeration (brute force, independent).
uint64_t min_tp_all_orders(const Graph& g, uint64_t alignment) {
  const BruteModel m = roamtest::brute_model(g);
  uint64_t best = UINT64_MAX;
  roamtest::for_each_topo_order(m, [&](const std::vector<int>& o) {
    best = std::min(best, roamtest::brute_tp(m, o, alignment));
  });
  return best;
}

int count_topo_orders(const Graph& g) {
  const BruteModel m = roamtest::brute_model(g);
  int count = 0;
  roamtest::for_each_topo_order(m, [&](const std::vector<int>&) { ++count; });
  return count;
}

struct LayoutExpect {
  Offsets offsets;
  uint64_t arena;
  uint64_t reserved;
};

void expect_layout(const Graph& g, const Order& order, const std::string& method,
                   uint64_t alignment, const LayoutExpect& e) {
  SCOPED_TRACE(g.name + " " + method + " alignment " + std::to_string(alignment));
  const auto live = roam::compute_liveness(g, order);
  const roam::Layout l = roam::make_layout(g, live, method, alignment);
  EXPECT_EQ(offsets_by_id(g, l.offsets), e.offsets);
  EXPECT_EQ(roam::arena_bytes(g, l.offsets, alignment), e.arena);
  EXPECT_EQ(l.reserved_bytes, e.reserved);
  const BruteModel m = roamtest::brute_model(g);
  EXPECT_EQ(roamtest::brute_layout_problem(m, order, l.offsets, alignment), "");
}

// ------------------------------------------------------------------------------------------
// chain.json: n0 fwd x,w -> a(100); n1 fwd a -> b(200); n2 bwd b -> gb(300);
//             n3 bwd gb,a -> ga(50); outputs [ga]; resident x(1000, input) + w(24, param).
// Only one order (each op depends on the previous one).
//   a  [0,3] (users n0,n1,n3)   b [1,2]   gb [2,3]   ga [3,3] (graph output, last step 3)
//   bytes: t0 a=100; t1 a+b=300; t2 a+b+gb=600; t3 a+gb+ga=450  -> Tp = 600
//   lower bound per op = live bytes (one order) = [100, 300, 600, 450] -> 600
//   asap = alap = [0,1,2,3]; key points = all.
//   kinds: a (fwd, read by bwd n3) and b (fwd, read by bwd n2) are activations; gb, ga temporaries.
// llfb: lifetimes a 3, b 1, gb 1, ga 0 -> a, then gb (300 > 200), b, ga.
//   a -> 0; gb conflicts a -> top 100; b conflicts a, gb -> top 400; ga conflicts a, gb (not b)
//   -> no gap below 400 -> 400. arena = 600 = Tp.
// pytorch: every request rounds to 512; one 2 MiB segment.
//   t0 a -> [0,512); t1 b -> [512,1024); t2 gb -> [1024,1536), then b freed -> free [512,1024);
//   t3 ga: best fit is the 512 hole (not the big tail) -> 512.
//   arena = max(0+100, 512+200, 1024+300, 512+50) = 1324; reserved = 2 MiB.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, Chain) {
  const Graph g = roamtest::load_fixture("chain.json");
  EXPECT_EQ(g.name, "chain");
  EXPECT_EQ(g.resident_bytes, 1024u);
  ASSERT_EQ(g.num_storages(), 4);
  const Order prog = g.program_order();
  const auto live = roam::compute_liveness(g, prog);
  EXPECT_EQ(intervals(g, live),
            (Intervals{{"a", {0, 3}}, {"b", {1, 2}}, {"gb", {2, 3}}, {"ga", {3, 3}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, live, 1), (std::vector<uint64_t>{100, 300, 600, 450}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 1), 600u);
  EXPECT_EQ(roam::lower_bound_per_op(g, 1), (std::vector<uint64_t>{100, 300, 600, 450}));
  EXPECT_EQ(roam::lower_bound(g, 1), 600u);
  EXPECT_EQ(count_topo_orders(g), 1);
  const auto aa = roam::asap_alap(g);
  EXPECT_EQ(aa.asap, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(aa.alap, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(ids_of(g, roam::key_points(g)), (std::vector<std::string>{"n0", "n1", "n2", "n3"}));
  EXPECT_EQ(roam::key_points_quadratic(g), roam::key_points(g));
  EXPECT_EQ(kinds_by_id(g), (std::map<std::string, StorageKind>{{"a", StorageKind::kActivation},
                                                                 {"b", StorageKind::kActivation},
                                                                 {"gb", StorageKind::kTemporary},
                                                                 {"ga", StorageKind::kTemporary}}));
  EXPECT_EQ(roam::order_lescea(g, 1), prog);
  expect_layout(g, prog, "llfb", 1, {{{"a", 0}, {"gb", 100}, {"b", 400}, {"ga", 400}}, 600, 600});
  expect_layout(g, prog, "pytorch", 1,
                {{{"a", 0}, {"b", 512}, {"gb", 1024}, {"ga", 512}}, 1324, 2 * kMiB});
}

// ------------------------------------------------------------------------------------------
// diamond.json: n0 x -> a(100); n1 a -> b(400); n2 a -> c(300); n3 b,c -> d(50); outputs [d].
// Program order n0 n1 n2 n3:
//   a [0,2]  b [1,3]  c [2,3]  d [3,3];  bytes 100, 500, 800, 750 -> Tp 800
// Order n0 n2 n1 n3:
//   a [0,2]  c [1,3]  b [2,3]  d [3,3];  bytes 100, 400, 800, 750 -> Tp 800 (a lives until both
//   branches have read it, so a+b+c = 800 is unavoidable: best Tp = 800).
// Lower bound per op: n0 {a}=100; n1 {a,b}=500 (c is not produced by an ancestor of n1);
//   n2 {a,c}=400; n3 {b,c,d}=750 -> 750 < 800 (the bound is not tight here).
// asap = [0,1,1,3], alap = [0,2,2,3]; key points n0, n3. All storages temporaries (forward only).
// LESCEA: n0 (grow to 100); ready n1 (+400 -> 500) / n2 (+300 -> 400): neither keeps the peak,
//   smallest new peak n2; then n1 (800, frees a -> 700); n3: 750 <= 800 keeps -> n0 n2 n1 n3.
// llfb: lifetimes a 2, b 2, c 1, d 0; a/b tie, b larger -> b, a, c, d.
//   b -> 0; a -> 400; c conflicts b, a -> 500; d conflicts b [0,400), c [500,800) (a ended at
//   step 2) -> gap [400,500) fits 50 -> 400. arena 800.
// pytorch: t0 a 0; t1 b 512; t2 c 1024, free a -> hole [0,512); t3 d -> 0.
//   arena max(100, 912, 1324, 50) = 1324.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, Diamond) {
  const Graph g = roamtest::load_fixture("diamond.json");
  const Order prog = g.program_order();
  EXPECT_EQ(intervals(g, roam::compute_liveness(g, prog)),
            (Intervals{{"a", {0, 2}}, {"b", {1, 3}}, {"c", {2, 3}}, {"d", {3, 3}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, roam::compute_liveness(g, prog), 1),
            (std::vector<uint64_t>{100, 500, 800, 750}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 1), 800u);
  const Order other = order_of(g, {"n0", "n2", "n1", "n3"});
  ASSERT_TRUE(roam::is_topological(g, other));
  EXPECT_EQ(intervals(g, roam::compute_liveness(g, other)),
            (Intervals{{"a", {0, 2}}, {"c", {1, 3}}, {"b", {2, 3}}, {"d", {3, 3}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, roam::compute_liveness(g, other), 1),
            (std::vector<uint64_t>{100, 400, 800, 750}));
  EXPECT_EQ(count_topo_orders(g), 2);
  EXPECT_EQ(min_tp_all_orders(g, 1), 800u);
  EXPECT_EQ(roam::lower_bound_per_op(g, 1), (std::vector<uint64_t>{100, 500, 400, 750}));
  EXPECT_EQ(roam::lower_bound(g, 1), 750u);
  const auto aa = roam::asap_alap(g);
  EXPECT_EQ(aa.asap, (std::vector<int32_t>{0, 1, 1, 3}));
  EXPECT_EQ(aa.alap, (std::vector<int32_t>{0, 2, 2, 3}));
  EXPECT_EQ(ids_of(g, roam::key_points(g)), (std::vector<std::string>{"n0", "n3"}));
  EXPECT_EQ(roam::key_points_quadratic(g), roam::key_points(g));
  for (auto k : roam::storage_kinds(g)) EXPECT_EQ(k, StorageKind::kTemporary);
  EXPECT_EQ(ids_of(g, roam::order_lescea(g, 1)),
            (std::vector<std::string>{"n0", "n2", "n1", "n3"}));
  expect_layout(g, prog, "llfb", 1, {{{"b", 0}, {"a", 400}, {"c", 500}, {"d", 400}}, 800, 800});
  expect_layout(g, prog, "pytorch", 1,
                {{{"a", 0}, {"b", 512}, {"c", 1024}, {"d", 0}}, 1324, 2 * kMiB});
}

// ------------------------------------------------------------------------------------------
// two_branches.json (file order interleaves the branches):
//   n0 x -> a1(1000); n1 x -> b1(500); n2 a1 -> a2(10); n3 b1 -> b2(10); n4 a2,b2 -> o(1);
//   outputs [o].
// Program order: a1 [0,2] b1 [1,3] a2 [2,4] b2 [3,4] o [4,4]
//   bytes 1000, 1500, 1510, 520, 21 -> Tp 1510.
// Best order n0 n2 n1 n3 n4 (finish the big branch first):
//   a1 [0,1] a2 [1,4] b1 [2,3] b2 [3,4] o [4,4]; bytes 1000, 1010, 510, 520, 21 -> Tp 1010.
// Lower bound per op: n0 {a1}=1000; n1 {b1}=500; n2 {a1,a2}=1010; n3 {b1,b2}=510;
//   n4 {a2,b2,o}=21 -> 1010: strictly below program Tp, equal to the best Tp.
// LESCEA: n0 (+1000) / n1 (+500): none keeps peak 0 -> n1 (500); then n0 (1500) / n3 (510) ->
//   n3, frees b1 -> live 10; n0 -> 1010; n2 -> 1020 (b2 still live), frees a1; n4 -> 21 keeps.
//   Order n1 n3 n0 n2 n4: bytes 500, 510, 1010, 1020, 21 -> Tp 1020.
// asap = [0,0,1,1,4], alap = [2,2,3,3,4] (n0's descendants n2, n4); key points: n4.
// llfb (program): lifetimes a1 2, b1 2, a2 2, b2 1, o 0; ties by size -> a1, b1, a2, b2, o.
//   a1 0; b1 1000; a2 1500; b2 conflicts b1 [1000,1500), a2 [1500,1510) -> gap [0,1000) -> 0;
//   o conflicts b2 [0,10), a2 [1500,1510) -> gap [10,1500) -> 10. arena 1510.
// llfb (best order): lifetimes a2 3, then a1 1, b1 1, b2 1 (by size), o 0.
//   a2 0; a1 10; b1 (conflicts a2 only) 10; b2 conflicts a2, b1 -> 510;
//   o conflicts a2 [0,10), b2 [510,520) -> gap [10,510) -> 10. arena 1010.
// pytorch (program): a1 1000 -> 1024 B, others 512 B.
//   t0 a1 [0,1024); t1 b1 1024; t2 a2 1536, free a1 -> hole [0,1024);
//   t3 b2: best fit the 1024 hole, split -> 0 (rest [512,1024)), free b1 -> coalesces with
//   the rest into [512,1536); t4 o -> 512. arena max(1000, 1524, 1546, 10, 513) = 1546.
// Alignment 64: a1 1024, b1 512, a2 = b2 = o = 64.
//   program bytes 1024, 1536, 1600, 640, 192 -> Tp 1600; best order bytes 1024, 1088, 576, 640,
//   192 -> 1088; bound per op [1024, 512, 1088, 576, 192] -> 1088; LESCEA picks the same order
//   as at alignment 1 -> bytes 512, 576, 1088, 1152, 192 -> 1152.
//   llfb program: a1 0, b1 1024, a2 1536, b2 0, o 64 -> arena 1600.
//   pytorch: same offsets as at alignment 1 (all multiples of 512); arena max(1024, 1536, 1600,
//   64, 576) = 1600.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, TwoBranches) {
  const Graph g = roamtest::load_fixture("two_branches.json");
  const Order prog = g.program_order();
  const Order best = order_of(g, {"n0", "n2", "n1", "n3", "n4"});
  ASSERT_TRUE(roam::is_topological(g, best));
  EXPECT_EQ(intervals(g, roam::compute_liveness(g, prog)),
            (Intervals{{"a1", {0, 2}}, {"b1", {1, 3}}, {"a2", {2, 4}}, {"b2", {3, 4}}, {"o", {4, 4}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, roam::compute_liveness(g, prog), 1),
            (std::vector<uint64_t>{1000, 1500, 1510, 520, 21}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 1), 1510u);
  EXPECT_EQ(intervals(g, roam::compute_liveness(g, best)),
            (Intervals{{"a1", {0, 1}}, {"a2", {1, 4}}, {"b1", {2, 3}}, {"b2", {3, 4}}, {"o", {4, 4}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, roam::compute_liveness(g, best), 1),
            (std::vector<uint64_t>{1000, 1010, 510, 520, 21}));
  EXPECT_EQ(roam::theoretical_peak(g, best, 1), 1010u);
  EXPECT_EQ(roam::lower_bound_per_op(g, 1), (std::vector<uint64_t>{1000, 500, 1010, 510, 21}));
  EXPECT_EQ(roam::lower_bound(g, 1), 1010u);
  EXPECT_LT(roam::lower_bound(g, 1), roam::theoretical_peak(g, prog, 1));
  EXPECT_EQ(min_tp_all_orders(g, 1), 1010u);  // the bound is attained
  const Order lescea = roam::order_lescea(g, 1);
  EXPECT_EQ(ids_of(g, lescea), (std::vector<std::string>{"n1", "n3", "n0", "n2", "n4"}));
  EXPECT_EQ(roam::live_bytes_per_step(g, roam::compute_liveness(g, lescea), 1),
            (std::vector<uint64_t>{500, 510, 1010, 1020, 21}));
  EXPECT_EQ(roam::theoretical_peak(g, lescea, 1), 1020u);
  const auto aa = roam::asap_alap(g);
  EXPECT_EQ(aa.asap, (std::vector<int32_t>{0, 0, 1, 1, 4}));
  EXPECT_EQ(aa.alap, (std::vector<int32_t>{2, 2, 3, 3, 4}));
  EXPECT_EQ(ids_of(g, roam::key_points(g)), (std::vector<std::string>{"n4"}));
  EXPECT_EQ(roam::key_points_quadratic(g), roam::key_points(g));
  expect_layout(g, prog, "llfb", 1,
                {{{"a1", 0}, {"b1", 1000}, {"a2", 1500}, {"b2", 0}, {"o", 10}}, 1510, 1510});
  expect_layout(g, best, "llfb", 1,
                {{{"a2", 0}, {"a1", 10}, {"b1", 10}, {"b2", 510}, {"o", 10}}, 1010, 1010});
  expect_layout(g, prog, "pytorch", 1,
                {{{"a1", 0}, {"b1", 1024}, {"a2", 1536}, {"b2", 0}, {"o", 512}}, 1546, 2 * kMiB});

  // Alignment 64.
  EXPECT_EQ(roam::live_bytes_per_step(g, roam::compute_liveness(g, prog), 64),
            (std::vector<uint64_t>{1024, 1536, 1600, 640, 192}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 64), 1600u);
  EXPECT_EQ(roam::theoretical_peak(g, best, 64), 1088u);
  EXPECT_EQ(roam::lower_bound_per_op(g, 64), (std::vector<uint64_t>{1024, 512, 1088, 576, 192}));
  EXPECT_EQ(roam::lower_bound(g, 64), 1088u);
  EXPECT_EQ(min_tp_all_orders(g, 64), 1088u);
  EXPECT_EQ(roam::order_lescea(g, 64), lescea);
  EXPECT_EQ(roam::theoretical_peak(g, lescea, 64), 1152u);
  expect_layout(g, prog, "llfb", 64,
                {{{"a1", 0}, {"b1", 1024}, {"a2", 1536}, {"b2", 0}, {"o", 64}}, 1600, 1600});
  expect_layout(g, prog, "pytorch", 64,
                {{{"a1", 0}, {"b1", 1024}, {"a2", 1536}, {"b2", 0}, {"o", 512}}, 1600, 2 * kMiB});

  // make_plan with lescea.
  const roam::PlanResult r =
      roam::make_plan(g, roamtest::request("lescea", "llfb", 1), roam::lower_bound(g, 1));
  EXPECT_EQ(r.plan.order, lescea);
  EXPECT_EQ(r.plan.stats.theoretical_peak_bytes, 1020u);
  EXPECT_EQ(r.plan.stats.lower_bound_bytes, 1010u);
  EXPECT_EQ(r.plan.stats.resident_bytes, 8u);
  // "auto" takes the order method with the smallest Tp: at most LESCEA's 1020, at least the
  // best order's 1010.
  const roam::PlanResult a =
      roam::make_plan(g, roamtest::request("auto", "llfb", 1), roam::lower_bound(g, 1));
  EXPECT_LE(a.plan.stats.theoretical_peak_bytes, 1020u);
  EXPECT_GE(a.plan.stats.theoretical_peak_bytes, 1010u);
  for (const auto& m : roamtest::baseline_orders()) {
    EXPECT_LE(a.plan.stats.theoretical_peak_bytes,
              roam::theoretical_peak(g, roam::make_order(g, m, 1), 1)) << m;
  }
}

// ------------------------------------------------------------------------------------------
// inplace_update.json:
//   n0 fwd x,w -> h(400); n1 fwd relu_: h -> h_relu (alias of h); n2 fwd h_relu -> loss(4);
//   n3 bwd loss,h_relu -> gh(400); n4 update add_: w,gh -> w_new (alias of the param w,
//   after n0); n5 other mul_: gh -> gh_scaled (alias of gh, after n4: n4 reads the old gh).
//   outputs [loss]; resident x 64 + w 128 = 192.
// Dependencies: n1<-n0; n2<-n1; n3<-n1,n2; n4<-n0,n3; n5<-n3,n4 -> one order only.
// Storages: h (users n0..n3) [0,3]; loss [2,5] (graph output); gh (users n3,n4,n5) [3,5];
//   w_new aliases a resident: no storage.
//   bytes 400, 400, 404, 804, 404, 404 -> Tp 804 = lower bound; all ops key points.
// Without n5's `after` edge, n4 and n5 may swap: asap 4 / alap 5 for both, key points n0..n3.
// kinds: h and loss (forward, read by backward n3) activations; gh temporary.
// llfb: lifetimes h 3, loss 3 (h larger first), gh 2: h 0, loss 400, gh 404 -> arena 804.
// pytorch: h 0; loss 512; gh 1024 (h is freed only after step 3) -> arena 1424.
// Alignment 64: h 448, loss 64, gh 448 -> Tp = bound = 960; llfb h 0, loss 448, gh 512.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, InplaceUpdate) {
  const Graph g = roamtest::load_fixture("inplace_update.json");
  EXPECT_EQ(g.resident_bytes, 192u);
  ASSERT_EQ(g.num_storages(), 3);
  EXPECT_EQ(g.storage_of[g.tensor_index.at("h_relu")], g.storage_of[g.tensor_index.at("h")]);
  EXPECT_EQ(g.storage_of[g.tensor_index.at("gh_scaled")], g.storage_of[g.tensor_index.at("gh")]);
  EXPECT_EQ(g.storage_of[g.tensor_index.at("w_new")], -1);
  auto preds = [&](const std::string& op) {
    std::vector<std::string> out;
    for (auto u : g.preds[g.op_index.at(op)]) out.push_back(g.ops[u].id);
    return out;
  };
  EXPECT_EQ(preds("n3"), (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(preds("n4"), (std::vector<std::string>{"n0", "n3"}));
  EXPECT_EQ(preds("n5"), (std::vector<std::string>{"n3", "n4"}));
  const Order prog = g.program_order();
  const auto live = roam::compute_liveness(g, prog);
  EXPECT_EQ(intervals(g, live), (Intervals{{"h", {0, 3}}, {"loss", {2, 5}}, {"gh", {3, 5}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, live, 1),
            (std::vector<uint64_t>{400, 400, 404, 804, 404, 404}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 1), 804u);
  EXPECT_EQ(roam::lower_bound(g, 1), 804u);
  EXPECT_EQ(roam::lower_bound_per_op(g, 1),
            (std::vector<uint64_t>{400, 400, 404, 804, 404, 404}));
  EXPECT_EQ(count_topo_orders(g), 1);
  const auto aa = roam::asap_alap(g);
  EXPECT_EQ(aa.asap, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(aa.alap, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(roam::key_points(g), (std::vector<roam::OpIdx>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(roam::key_points_quadratic(g), roam::key_points(g));
  EXPECT_EQ(kinds_by_id(g), (std::map<std::string, StorageKind>{{"h", StorageKind::kActivation},
                                                                 {"loss", StorageKind::kActivation},
                                                                 {"gh", StorageKind::kTemporary}}));
  expect_layout(g, prog, "llfb", 1, {{{"h", 0}, {"loss", 400}, {"gh", 404}}, 804, 804});
  expect_layout(g, prog, "pytorch", 1, {{{"h", 0}, {"loss", 512}, {"gh", 1024}}, 1424, 2 * kMiB});
  EXPECT_EQ(roam::theoretical_peak(g, prog, 64), 960u);
  EXPECT_EQ(roam::lower_bound(g, 64), 960u);
  expect_layout(g, prog, "llfb", 64, {{{"h", 0}, {"loss", 448}, {"gh", 512}}, 960, 960});

  // Drop the after edge n4 -> n5: the two tail ops become interchangeable.
  nlohmann::json doc = roam::read_json_file(roamtest::fixture_path("inplace_update.json"));
  doc["ops"][5].erase("after");
  const Graph g2 = roam::parse_graph(doc, "inplace_no_after.json");
  const auto aa2 = roam::asap_alap(g2);
  EXPECT_EQ(aa2.asap, (std::vector<int32_t>{0, 1, 2, 3, 4, 4}));
  EXPECT_EQ(aa2.alap, (std::vector<int32_t>{0, 1, 2, 3, 5, 5}));
  EXPECT_EQ(roam::key_points(g2), (std::vector<roam::OpIdx>{0, 1, 2, 3}));
  EXPECT_EQ(roam::key_points_quadratic(g2), roam::key_points(g2));
  EXPECT_EQ(count_topo_orders(g2), 2);
}

// ------------------------------------------------------------------------------------------
// view_chain.json: n0 fwd x -> a(1000); n1 view a -> av; n2 permute av -> avv; n3 fwd mm
//   avv -> b(200); n4 bwd b -> c(300); n5 bwd c,avt -> d(50) where avt is an alias of avv that
//   no op produces (a tuple element). outputs [d].
// av, avv, avt all share a's storage. n5 depends on n4 (c) and n2 (avt's nearest producer).
// Storages: a (users n0..n3 and n5) [0,5]; b [3,4]; c [4,5]; d [5,5].
//   bytes 1000, 1000, 1000, 1200, 1500, 1350 -> Tp 1500 = lower bound; one order only.
// kinds: a (fwd, read by bwd n5) and b (fwd, read by bwd n4) activations; c, d temporaries.
// llfb: lifetimes a 5, b 1, c 1 (c larger), d 0: a 0; c 1000; b conflicts a, c -> 1300;
//   d conflicts a [0,1000), c [1000,1300) (b ended at 4) -> 1300. arena 1500.
// pytorch: a 1000 -> 1024 B at 0; b 1024; c 1536, then b freed; d takes b's hole -> 1024.
//   arena max(1000, 1224, 1836, 1074) = 1836.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, ViewChain) {
  const Graph g = roamtest::load_fixture("view_chain.json");
  ASSERT_EQ(g.num_storages(), 4);
  const auto sa = g.storage_of[g.tensor_index.at("a")];
  for (const char* v : {"av", "avv", "avt"}) EXPECT_EQ(g.storage_of[g.tensor_index.at(v)], sa) << v;
  EXPECT_EQ(g.tensors[g.tensor_index.at("avt")].root, g.tensor_index.at("a"));
  std::vector<std::string> p5;
  for (auto u : g.preds[g.op_index.at("n5")]) p5.push_back(g.ops[u].id);
  EXPECT_EQ(p5, (std::vector<std::string>{"n2", "n4"}));
  const Order prog = g.program_order();
  const auto live = roam::compute_liveness(g, prog);
  EXPECT_EQ(intervals(g, live),
            (Intervals{{"a", {0, 5}}, {"b", {3, 4}}, {"c", {4, 5}}, {"d", {5, 5}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, live, 1),
            (std::vector<uint64_t>{1000, 1000, 1000, 1200, 1500, 1350}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 1), 1500u);
  EXPECT_EQ(roam::lower_bound(g, 1), 1500u);
  EXPECT_EQ(count_topo_orders(g), 1);
  EXPECT_EQ(roam::key_points(g), (std::vector<roam::OpIdx>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(roam::key_points_quadratic(g), roam::key_points(g));
  EXPECT_EQ(kinds_by_id(g), (std::map<std::string, StorageKind>{{"a", StorageKind::kActivation},
                                                                 {"b", StorageKind::kActivation},
                                                                 {"c", StorageKind::kTemporary},
                                                                 {"d", StorageKind::kTemporary}}));
  expect_layout(g, prog, "llfb", 1, {{{"a", 0}, {"c", 1000}, {"b", 1300}, {"d", 1300}}, 1500, 1500});
  expect_layout(g, prog, "pytorch", 1,
                {{{"a", 0}, {"b", 1024}, {"c", 1536}, {"d", 1024}}, 1836, 2 * kMiB});
}

// ------------------------------------------------------------------------------------------
// alias_output.json: n0 x -> a(100); n1 a -> b(200); n2 view b -> bv; n3 a -> c(300);
//   n4 c -> d(400); outputs [bv] (a view of b: b's storage lives to the last step).
// Program order: a [0,3]; b [1,4] (users n1, n2 but kept as output); c [3,4]; d [4,4]
//   bytes 100, 300, 300, 600, 900 -> Tp 900.
// All 6 orders (n0 first, then chains n1-n2 and n3-n4 interleaved): only n0 n3 n4 n1 n2 keeps b
//   off the d step: a [0,3] c [1,2] d [2,2] b [3,4]; bytes 100, 400, 800, 300, 200 -> 800;
//   every other order has b, c and d live together (900). Best Tp = 800.
// Must-live per op: n0 {a}=100; n1 {a,b}=300; n2 {b}=200; n3 {a,c}=400; n4 {c,d}=700.
// Cut bound (fewest bytes live at the op's step in any order): at n4, a is live unless n1 ran
//   before it, and then b (a graph output) is: c + d + min(a, b) = 800. n1: n3 and n4 may run
//   first, leaving a + b = 300; n2: with n3 and n4 before it only b = 200; n3: a + c = 400.
//   Per op [100, 300, 200, 400, 800] -> lower bound 800 = the best Tp.
// asap = [0,1,2,1,2], alap = [0,3,4,3,4]; key points: n0.
// LESCEA: n0; n1 (300) vs n3 (400) -> n1; n2 adds nothing (300 <= 300) -> n2; n3 (600, frees a);
//   n4 (900) -> program order, Tp 900.
// llfb (program): lifetimes a 3, b 3 (b larger first), c 1, d 0.
//   b 0; a 200; c conflicts b, a -> 300; d conflicts b [0,200), c [300,600) (not a): the gap
//   [200,300) is too small -> on top, 600. arena 1000, fragmentation 1000/900 - 1.
// llfb (best order): a 3, then c 1 (300) and b 1 (200), d 0: a 0; c 100; b conflicts a only
//   -> 100; d conflicts a, c -> 400. arena 800.
// pytorch (program): a 0; b 512; c 1024, a freed; d (400 -> 512) takes a's hole -> 0.
//   arena max(100, 712, 1324, 400) = 1324.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, AliasOutput) {
  const Graph g = roamtest::load_fixture("alias_output.json");
  ASSERT_EQ(g.num_storages(), 4);
  const auto sb = g.storage_of[g.tensor_index.at("b")];
  EXPECT_TRUE(g.storages[sb].graph_output);
  EXPECT_EQ(g.storage_of[g.tensor_index.at("bv")], sb);
  const Order prog = g.program_order();
  EXPECT_EQ(intervals(g, roam::compute_liveness(g, prog)),
            (Intervals{{"a", {0, 3}}, {"b", {1, 4}}, {"c", {3, 4}}, {"d", {4, 4}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, roam::compute_liveness(g, prog), 1),
            (std::vector<uint64_t>{100, 300, 300, 600, 900}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 1), 900u);
  const Order best = order_of(g, {"n0", "n3", "n4", "n1", "n2"});
  ASSERT_TRUE(roam::is_topological(g, best));
  EXPECT_EQ(intervals(g, roam::compute_liveness(g, best)),
            (Intervals{{"a", {0, 3}}, {"c", {1, 2}}, {"d", {2, 2}}, {"b", {3, 4}}}));
  EXPECT_EQ(roam::theoretical_peak(g, best, 1), 800u);
  EXPECT_EQ(count_topo_orders(g), 6);
  EXPECT_EQ(min_tp_all_orders(g, 1), 800u);
  EXPECT_EQ(roam::lower_bound_per_op(g, 1), (std::vector<uint64_t>{100, 300, 200, 400, 700}));
  std::vector<uint64_t> min_live;
  for (roam::OpIdx v = 0; v < g.num_ops(); ++v) min_live.push_back(roam::min_live_at_op(g, v, 1));
  EXPECT_EQ(min_live, (std::vector<uint64_t>{100, 300, 200, 400, 800}));
  EXPECT_EQ(roam::lower_bound(g, 1), 800u);
  const auto aa = roam::asap_alap(g);
  EXPECT_EQ(aa.asap, (std::vector<int32_t>{0, 1, 2, 1, 2}));
  EXPECT_EQ(aa.alap, (std::vector<int32_t>{0, 3, 4, 3, 4}));
  EXPECT_EQ(ids_of(g, roam::key_points(g)), (std::vector<std::string>{"n0"}));
  EXPECT_EQ(roam::key_points_quadratic(g), roam::key_points(g));
  EXPECT_EQ(roam::order_lescea(g, 1), prog);
  expect_layout(g, prog, "llfb", 1, {{{"b", 0}, {"a", 200}, {"c", 300}, {"d", 600}}, 1000, 1000});
  expect_layout(g, best, "llfb", 1, {{{"a", 0}, {"c", 100}, {"b", 100}, {"d", 400}}, 800, 800});
  expect_layout(g, prog, "pytorch", 1,
                {{{"a", 0}, {"b", 512}, {"c", 1024}, {"d", 0}}, 1324, 2 * kMiB});

  // The plan's stats for program + llfb.
  const roam::PlanResult r = roam::make_plan(g, roamtest::request("program", "llfb", 1),
                                             roam::lower_bound(g, 1));
  EXPECT_EQ(r.plan.stats.resident_bytes, 8u);
  EXPECT_EQ(r.plan.stats.theoretical_peak_bytes, 900u);
  EXPECT_EQ(r.plan.stats.arena_bytes, 1000u);
  EXPECT_EQ(r.plan.stats.peak_bytes, 1008u);
  EXPECT_EQ(r.plan.stats.lower_bound_bytes, 800u);
  EXPECT_DOUBLE_EQ(r.plan.stats.fragmentation, 1000.0 / 900.0 - 1.0);
  EXPECT_EQ(r.reserved_bytes, 1000u);
  const auto rep = roam::validate_plan(g, roam::plan_to_json(g, r.plan), "plan.json");
  EXPECT_TRUE(rep.valid) << (rep.problems.empty() ? "" : rep.problems.front());
}

// ------------------------------------------------------------------------------------------
// pytorch_pools.json (a chain, one order):
//   n0 -> p(512); n1 p -> q(500); n2 p,q -> r(512); n3 r -> s(1024); n4 s -> big(1 MiB + 1);
//   n5 big -> huge(20 MiB + 1); n6 huge,r -> t(1 MiB); outputs [t].
// Liveness: p [0,2] q [1,2] r [2,6] s [3,4] big [4,5] huge [5,6] t [6,6]
//   bytes 512, 1012, 1524, 1536, 1050113, 22020610, 22020609 -> Tp 22020610 = bound.
// pytorch:
//   t0 p: new 2 MiB small segment S0 at 0, p [0,512);  t1 q (500 -> 512) [512,1024);
//   t2 r [1024,1536), then p and q are freed and coalesce into [0,1024);
//   t3 s (1024): best fit is exactly that hole -> 0 (without coalescing it would go to 1536);
//   t4 big: 1049088 B > 1 MiB -> large pool, empty -> new 20 MiB segment S1 at 2 MiB; s freed;
//   t5 huge: 20972032 B does not fit S1's 19922432 B tail -> its own segment of
//      20972032 rounded up to 2 MiB = 22 MiB, at 2 MiB + 20 MiB = 23068672; big freed;
//   t6 t: exactly 1 MiB -> small pool; holes [0,1024) and [1536, 2 MiB) -> 1536.
//   reserved = 2 + 20 + 22 MiB = 46137344; arena = 23068672 + 20971521 = 44040193.
// llfb: lifetimes r 4, p 2, then 1: huge, big, s, q (by size), t 0.
//   r 0; p 512; huge (conflicts r) 512; big (r, huge) on top 20972033; s (r, big) gap
//   [512, 20972033) -> 512; q (p, r) -> 1024; t (r, huge) -> 20972033. arena 22020610 = Tp.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, PytorchPools) {
  const Graph g = roamtest::load_fixture("pytorch_pools.json");
  const Order prog = g.program_order();
  const auto live = roam::compute_liveness(g, prog);
  EXPECT_EQ(intervals(g, live), (Intervals{{"p", {0, 2}},
                                           {"q", {1, 2}},
                                           {"r", {2, 6}},
                                           {"s", {3, 4}},
                                           {"big", {4, 5}},
                                           {"huge", {5, 6}},
                                           {"t", {6, 6}}}));
  EXPECT_EQ(roam::live_bytes_per_step(g, live, 1),
            (std::vector<uint64_t>{512, 1012, 1524, 1536, 1050113, 22020610, 22020609}));
  EXPECT_EQ(roam::theoretical_peak(g, prog, 1), 22020610u);
  EXPECT_EQ(roam::lower_bound(g, 1), 22020610u);
  expect_layout(g, prog, "pytorch", 1,
                {{{"p", 0},
                  {"q", 512},
                  {"r", 1024},
                  {"s", 0},
                  {"big", 2 * kMiB},
                  {"huge", 22 * kMiB},
                  {"t", 1536}},
                 44040193,
                 46137344});
  expect_layout(g, prog, "llfb", 1,
                {{{"r", 0},
                  {"p", 512},
                  {"huge", 512},
                  {"big", 20972033},
                  {"s", 512},
                  {"q", 1024},
                  {"t", 20972033}},
                 22020610,
                 22020610});
  // The CLI/plan figure: program + pytorch reserves 44 MiB while its arena is 42 MiB + 1 B.
  const roam::PlanResult r = roam::make_plan(g, roamtest::request("program", "pytorch", 1),
                                             roam::lower_bound(g, 1));
  EXPECT_EQ(r.reserved_bytes, 46137344u);
  EXPECT_EQ(r.plan.stats.arena_bytes, 44040193u);
  EXPECT_EQ(r.plan.stats.peak_bytes, 44040193u + 4u);
}

// Every fixture: the library's Tp/liveness agree with the independent recount for every
// topological order, the bound is below the best order, and every baseline plan validates.
TEST(Fixtures, AllFixturesAgreeWithBruteForce) {
  for (const char* name : {"chain.json", "diamond.json", "two_branches.json", "inplace_update.json",
                           "view_chain.json", "alias_output.json", "pytorch_pools.json"}) {
    SCOPED_TRACE(name);
    const Graph g = roamtest::load_fixture(name);
    const BruteModel m = roamtest::brute_model(g);
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      uint64_t best = UINT64_MAX;
      roamtest::for_each_topo_order(m, [&](const std::vector<int>& o) {
        const Order order(o.begin(), o.end());
        EXPECT_TRUE(roam::is_topological(g, order));
        const uint64_t tp = roamtest::brute_tp(m, o, alignment);
        EXPECT_EQ(roam::theoretical_peak(g, order, alignment), tp);
        best = std::min(best, tp);
      });
      EXPECT_LE(roam::lower_bound(g, alignment), best);
      for (const auto& om : roam::order_methods()) {  // roam included: fixtures are tiny
        for (const auto& lm : roam::layout_methods()) {
          const auto r = roam::make_plan(g, roamtest::request(om, lm, alignment),
                                        roam::lower_bound(g, alignment));
          const auto rep = roam::validate_plan(g, roam::plan_to_json(g, r.plan), name);
          EXPECT_TRUE(rep.valid) << om << "/" << lm << ": "
                                 << (rep.problems.empty() ? "" : rep.problems.front());
          EXPECT_GE(r.plan.stats.theoretical_peak_bytes, best);
        }
      }
    }
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------
// The SiLU-backward pattern that made the must-live bound loose on EfficientNet: the backward
// op n4 = sigmoid(x) reads only the forward activation x, so it does not descend from the loss.
//   n0 in -> x (1000); n1 x -> y (50); n2 y -> loss (1); n3 loss -> g (50, backward);
//   n4 x -> s (1000, backward); n5 s, g -> dx (10, backward); outputs [dx].
// Must-live at n2 is y + loss = 51 (x's last user n4 is not a descendant of n2). But in every
// order either n4 has not run (x live) or it has and n5 has not (s live): min live = 1051.
// Same at n3 (loss + g + 1000 = 1051). n1: x + y, n4 may wait: 1050. n4: x + s with only n0
// before it: 2000. n5: s + g + dx = 1060. n0: x = 1000. Lower bound = 2000 (at n4).
// The best order is 2001 (n0 n1 n2 n4 n3 n5: x + s + loss at n4): x must outlive n1, so n4 runs
// with y, loss or g beside it -- the maximum of per-step minima (2000) is not reached. The pair
// refinement closes it: n4 before n1 holds x + y + s = 2050 at n1; n1 before n4 holds, at n4,
// x + s + (y, loss or g) >= 2001 -> lower bound min(2050, 2001) = 2001.
// ------------------------------------------------------------------------------------------
TEST(Fixtures, CutBoundSeesActivationOrItsBackwardUse) {
  roamtest::GraphJson b("silu");
  b.tensor("in", 8, "input").tensor("x", 1000).tensor("y", 50).tensor("loss", 1);
  b.tensor("g", 50).tensor("s", 1000).tensor("dx", 10);
  b.op("n0", {"in"}, {"x"}).op("n1", {"x"}, {"y"}).op("n2", {"y"}, {"loss"});
  b.op("n3", {"loss"}, {"g"}, "backward").op("n4", {"x"}, {"s"}, "backward");
  b.op("n5", {"s", "g"}, {"dx"}, "backward").output("dx");
  const Graph g = b.parse();
  EXPECT_EQ(roam::lower_bound_per_op(g, 1), (std::vector<uint64_t>{1000, 1050, 51, 51, 2000, 1060}));
  std::vector<uint64_t> min_live;
  for (roam::OpIdx v = 0; v < g.num_ops(); ++v) min_live.push_back(roam::min_live_at_op(g, v, 1));
  EXPECT_EQ(min_live, (std::vector<uint64_t>{1000, 1050, 1051, 1051, 2000, 1060}));
  EXPECT_EQ(roam::min_live_at_op(g, 1, 1, /*run_before=*/4), 2050u);   // at n1, n4 ran
  EXPECT_EQ(roam::min_live_at_op(g, 4, 1, /*run_before=*/1), 2001u);   // at n4, n1 ran
  EXPECT_EQ(roam::min_live_at_op(g, 4, 1, -1, /*run_after=*/1), 2000u);
  EXPECT_EQ(roam::lower_bound(g, 1), 2001u);
  EXPECT_EQ(min_tp_all_orders(g, 1), 2001u);
  EXPECT_THROW(roam::min_live_at_op(g, 4, 1, /*run_before=*/0), std::invalid_argument);  // n0 -> n4
  EXPECT_THROW(roam::min_live_at_op(g, 6, 1), std::invalid_argument);
}
