// The ROAM order (include/roam/roam_order.h): pinning and key points on hand-made graphs, the
// weight-update scheduler's decisions on a hand-made training graph, exactness against brute
// force on random small graphs, the never-worse-than-a-baseline invariant on random graphs,
// and determinism across thread counts.
//
// Conventions of the comments: sizes at alignment 1; "live at X" lists the storages live at
// the step of op X; Tp is the maximum over steps.
#include <gtest/gtest.h>

#include "roam/roam_order.h"
#include "testing.h"

namespace {

using roam::Graph;
using roam::Order;
using roamtest::GraphJson;

std::vector<std::string> ids(const Graph& g, const std::vector<roam::OpIdx>& ops) {
  std::vector<std::string> out;
  for (auto v : ops) out.push_back(g.ops[v].id);
  return out;
}

// roam's own pipeline runs even where a baseline is already optimal (these tests check the
// pipeline; BaselineShortcut checks the shortcut).
roam::PlanOptions options(uint64_t alignment, int threads = 1) {
  roam::PlanOptions o;
  o.alignment = alignment;
  o.threads = threads;
  o.extra = {{"baseline_shortcut", false}};
  return o;
}

// ---------------------------------------------------------------------------------------------
// Key points after pinning
// ---------------------------------------------------------------------------------------------

// x, w: resident. Program order:
//   p0 t(w) -> wt (view of w: resident, no storage)      source, no storage: pinned before n1
//   n1 mm(x, wt) -> a [100]
//   n2 relu_(a) -> a2 (alias of a)                        memory-free: pinned after n1
//   z0 zeros() -> z [50]                                  source, z read later: pinned before n4
//   n3 detach(a2) -> d (alias of a)                       memory-free: pinned after n1
//   n4 add(a2, z) -> b [100]
//   n5 mul(a2, b) -> c [100]
//   n6 neg(c) -> e [100]          n6 and n7 are parallel: a segment of two ops
//   n7 exp(c) -> f [100]
//   n8 add(e, f, d) -> out [10] (graph output)
// In the raw graph p0 and z0 are comparable with almost nothing: only n8 (every op is its
// ancestor) is a key point; n1 is not (z0 is neither its ancestor nor its descendant), nor are
// n4/n5 (n3 is parallel to them). With p0, z0 pinned and n2, n3 attached to n1, the remaining ops
// n1 -> n4 -> n5 -> {n6, n7} -> n8 have key points n1, n4, n5, n8 and one segment {n6, n7}.
GraphJson pinning_graph() {
  GraphJson b("pinning");
  b.tensor("x", 64, "input").tensor("w", 64, "param");
  b.tensor("wt", 64, "", "w").tensor("a", 100).tensor("a2", 100, "", "a").tensor("z", 50);
  b.tensor("d", 100, "", "a").tensor("b", 100).tensor("c", 100).tensor("e", 100);
  b.tensor("f", 100).tensor("out", 10);
  b.op("p0", {"w"}, {"wt"})
      .op("n1", {"x", "wt"}, {"a"})
      .op("n2", {"a"}, {"a2"})
      .op("z0", {}, {"z"})
      .op("n3", {"a2"}, {"d"})
      .op("n4", {"a2", "z"}, {"b"})
      .op("n5", {"a2", "b"}, {"c"})
      .op("n6", {"c"}, {"e"})
      .op("n7", {"c"}, {"f"})
      .op("n8", {"e", "f", "d"}, {"out"});
  b.output("out");
  return b;
}

TEST(RoamOrder, KeyPointsAfterPinning) {
  const Graph g = pinning_graph().parse();
  EXPECT_EQ(ids(g, roam::key_points(g)), (std::vector<std::string>{"n8"}));
  const roam::RoamStructure rs = roam::roam_structure(g, options(1));
  EXPECT_EQ(ids(g, rs.pinned_sources), (std::vector<std::string>{"p0", "z0"}));
  EXPECT_TRUE(rs.groups.empty());
  EXPECT_EQ(ids(g, rs.core_key_points), (std::vector<std::string>{"n1", "n4", "n5", "n8"}));
  EXPECT_EQ(ids(g, rs.key_points), (std::vector<std::string>{"n1", "n4", "n5", "n8"}));
  ASSERT_EQ(rs.segments.size(), 1u);
  EXPECT_EQ(ids(g, rs.segments[0]), (std::vector<std::string>{"n6", "n7"}));
  // The order: p0 before n1, n2 n3 right after n1, z0 right before n4.
  // live: p0 {} ; n1 {a}=100 ; n2 {a}=100 ; n3 {a}=100 ; z0 {a,z}=150 ; n4 {a,z,b}=250 ;
  // n5 {a,b,c}=300 ; n6 {a,c,e}=300 ; n7 {a,c,e,f}=400 (c dies) ; n8 {a,e,f,out}=310. Tp 400,
  // the optimum: at whichever of n6, n7 runs second, a, c, e and f are all live. The lower bound
  // is 310 here (at n8); it counts, per op, only what every order must hold at that op.
  roam::RoamOrderStats st;
  const Order o = roam::order_roam(g, options(1), &st);
  EXPECT_EQ(ids(g, o),
            (std::vector<std::string>{"p0", "n1", "n2", "n3", "z0", "n4", "n5", "n6", "n7", "n8"}));
  EXPECT_EQ(roam::theoretical_peak(g, o, 1), 400u);
  EXPECT_EQ(roamtest::brute_downsets(roamtest::brute_model(g), 1).min_tp, 400u);
  EXPECT_EQ(roam::lower_bound(g, 1), 310u);
  EXPECT_EQ(st.pinned_sources, 2);
}

// Isolated ops: i0 makes a temporary nobody reads (first: alone at its step it holds only its
// own 30 bytes); i1 makes a graph output (last: it then adds to the end only). Both are cut
// from the graph, so n0 -> n1 is a chain of two key points.
TEST(RoamOrder, IsolatedOpsFirstAndLast) {
  GraphJson b("isolated");
  b.tensor("x", 64, "input").tensor("a", 100).tensor("b", 100).tensor("t", 30).tensor("o", 20);
  b.op("n0", {"x"}, {"a"}).op("i0", {}, {"t"}).op("i1", {}, {"o"}).op("n1", {"a"}, {"b"});
  b.output("b").output("o");
  const Graph g = b.parse();
  const roam::RoamStructure rs = roam::roam_structure(g, options(1));
  EXPECT_EQ(ids(g, rs.isolated_first), (std::vector<std::string>{"i0"}));
  EXPECT_EQ(ids(g, rs.isolated_last), (std::vector<std::string>{"i1"}));
  // n0 is a source whose output outlives it: pinned before n1, which is the only key point.
  EXPECT_EQ(ids(g, rs.pinned_sources), (std::vector<std::string>{"n0"}));
  EXPECT_EQ(ids(g, rs.key_points), (std::vector<std::string>{"n1"}));
  // i0 {t}=30 ; n0 {a}=100 ; n1 {a,b}=200 ; i1 {b,o}=120. Program order: n0 100, i0 130,
  // i1 {a,o}=120, n1 {a,b,o}=220.
  const Order o = roam::order_roam(g, options(1));
  EXPECT_EQ(ids(g, o), (std::vector<std::string>{"i0", "n0", "n1", "i1"}));
  EXPECT_EQ(roam::theoretical_peak(g, o, 1), 200u);
}

// ---------------------------------------------------------------------------------------------
// Weight-update scheduler
// ---------------------------------------------------------------------------------------------

// Three layers, Adam-like updates that make one temporary each (t_i) and then update the
// parameter in place (after every op that reads the old parameter). Sizes:
//   activations a1 a2 a3 = 100, loss = 10 (graph output), g3 = g2 = 100, g1 = 1000 (grads of
//   activations), gw3 = 2000 (large gradient), gw2 = gw1 = 10, t3 = 10, t2 = 1500 (large
//   temporary), t1 = 10, gx = 10 (grad of the input), out2 = 10 (graph output).
//   f1 (x,w1)->a1   f2 (a1,w2)->a2   f3 (a2,w3)->a3   f4 (a3)->loss
//   b1 (loss)->g3   b2 (g3,a2,w3)->g2,gw3   b3 (g2,a1,w2)->g1,gw2   b4 (g1,x,w1)->gw1,gx
//   c5 (gx)->out2
//   u3 (gw3,m3)->t3  u3b (w3,t3)->w3' in place   (likewise u2/u2b, u1/u1b)
// f1 reads residents only: a pinned source. The core f2 f3 f4 b1 b2 b3 b4 c5 is a chain: key
// points 0..7, gaps 0..8 (gap i between key i-1 and key i). Windows: w3's group can run from
// gap 5 (after b2) on, w2's from gap 6 (after b3), w1's from gap 7 (after b4); all until gap 8.
// Real memory, by placement (live at the op; "late" = after c5):
//   b2: a1 a2 loss g3 g2 gw3 = 2410, whatever the placement (the lower bound).
//   w3 early, u3: a1 loss g2 gw3 t3 = 2220; w3 later: gw3 is held through b3: a1 loss g2 g1 gw2
//   gw3 = 3220. So w3 goes early (a large gradient with a small temporary).
//   w2 early, u2: loss g1 gw2 t2 = 2520 (the 1500 temporary lands while g1 is live); w2 in
//   gap 7 (after b4): loss gw1 gx gw2 t2 = 1540 at most, and b4 holds gw2 as well: 1040. So w2
//   is delayed (small gradient, large temporary).
// The scheduler's estimate agrees. Core profile (program order, a gradient dies with its
// producer in the core view): key lives f2 200, f3 300, f4 310, b1 310, b2 2410, b3 1220,
// b4 1030, c5 30; levels after them 200, 300, 210, 310, 210, 1010, 20, 20. Groups go largest
// X first: w3 (G 2000, X 2010): gap 5 -> 210 + 2010 = 2220, global 2410; gap 6 -> b3 holds gw3:
// 3220. Chosen: 5. w2 (G 10, X 1510): gap 6 -> 1010 + 1510 = 2520; gap 7 -> 20 + 1510 = 1530
// (b4 1040), global 2410; gap 8 -> also global 2410 and 1530 at its gap: tie, the earlier wins.
// Chosen: 7. w1 (G 10, X 20): gap 7 -> 20 + 10 + 10 + 1500 = 1540; gap 8 -> 1540 too (gap 7
// keeps gw1); tie: 7. In gap 7 (no core op) w1 and w2 are chained smallest X - G first:
// u1 (loss gx gw1 gw2 t1 = 50) then u2 (loss gx gw2 t2 = 1530).
// Hence Tp(roam) = 2410, while "all updates early" gives 2520 and "all late" 3220; the program
// order (updates at the very end, w1 first) 3530 at u2 (loss out2 gw3 gw2 t2).
GraphJson update_graph() {
  GraphJson b("updates");
  b.tensor("x", 64, "input");
  for (const char* r : {"w1", "w2", "w3"}) b.tensor(r, 64, "param");
  for (const char* r : {"m1", "m2", "m3"}) b.tensor(r, 64, "optimizer_state");
  b.tensor("a1", 100).tensor("a2", 100).tensor("a3", 100).tensor("loss", 10);
  b.tensor("g3", 100).tensor("g2", 100).tensor("gw3", 2000).tensor("g1", 1000).tensor("gw2", 10);
  b.tensor("gw1", 10).tensor("gx", 10).tensor("out2", 10);
  b.tensor("t3", 10).tensor("t2", 1500).tensor("t1", 10);
  b.tensor("w3n", 64, "", "w3").tensor("w2n", 64, "", "w2").tensor("w1n", 64, "", "w1");
  b.op("f1", {"x", "w1"}, {"a1"})
      .op("f2", {"a1", "w2"}, {"a2"})
      .op("f3", {"a2", "w3"}, {"a3"})
      .op("f4", {"a3"}, {"loss"})
      .op("b1", {"loss"}, {"g3"}, "backward")
      .op("b2", {"g3", "a2", "w3"}, {"g2", "gw3"}, "backward")
      .op("b3", {"g2", "a1", "w2"}, {"g1", "gw2"}, "backward")
      .op("b4", {"g1", "x", "w1"}, {"gw1", "gx"}, "backward")
      .op("c5", {"gx"}, {"out2"}, "backward")
      .op("u1", {"gw1", "m1"}, {"t1"}, "update")
      .op("u1b", {"w1", "t1"}, {"w1n"}, "update", {"f1", "b4"})
      .op("u2", {"gw2", "m2"}, {"t2"}, "update")
      .op("u2b", {"w2", "t2"}, {"w2n"}, "update", {"f2", "b3"})
      .op("u3", {"gw3", "m3"}, {"t3"}, "update")
      .op("u3b", {"w3", "t3"}, {"w3n"}, "update", {"f3", "b2"});
  b.output("loss").output("out2");
  return b;
}

TEST(RoamOrder, WeightUpdateSchedulerDecisions) {
  const Graph g = update_graph().parse();
  const roam::RoamStructure rs = roam::roam_structure(g, options(1));
  EXPECT_EQ(ids(g, rs.pinned_sources), (std::vector<std::string>{"f1"}));
  EXPECT_EQ(ids(g, rs.core_key_points),
            (std::vector<std::string>{"f2", "f3", "f4", "b1", "b2", "b3", "b4", "c5"}));
  ASSERT_EQ(rs.groups.size(), 3u);
  // Groups are numbered by their first op in program order: w1's, w2's, w3's.
  const auto& w1 = rs.groups[0];
  const auto& w2 = rs.groups[1];
  const auto& w3 = rs.groups[2];
  EXPECT_EQ(ids(g, w1.ops), (std::vector<std::string>{"u1", "u1b"}));
  EXPECT_EQ(ids(g, w3.ops), (std::vector<std::string>{"u3", "u3b"}));
  EXPECT_EQ(w3.earliest, 5);
  EXPECT_EQ(w3.latest, 8);
  EXPECT_EQ(w3.held_bytes, 2000u);       // gw3
  EXPECT_EQ(w3.transient_bytes, 2010u);  // gw3 + t3
  EXPECT_EQ(w3.chosen, 5);               // early
  EXPECT_EQ(w2.earliest, 6);
  EXPECT_EQ(w2.held_bytes, 10u);
  EXPECT_EQ(w2.transient_bytes, 1510u);
  EXPECT_EQ(w2.chosen, 7);  // delayed past b4
  EXPECT_EQ(w1.earliest, 7);
  EXPECT_EQ(w1.chosen, 7);
  // With the artificial edges (b2 -> u3 -> b3; b4 -> u1 -> u1b -> u2 -> c5) every R op is a key
  // point: no segment is left to search.
  EXPECT_EQ(ids(g, rs.key_points), (std::vector<std::string>{"f2", "f3", "f4", "b1", "b2", "u3",
                                                             "b3", "b4", "u1", "u1b", "u2", "c5"}));
  EXPECT_TRUE(rs.segments.empty());
  roam::RoamOrderStats st;
  const Order o = roam::order_roam(g, options(1), &st);
  EXPECT_EQ(roam::theoretical_peak(g, o, 1), 2410u);
  EXPECT_EQ(roam::lower_bound(g, 1), 2410u);
  EXPECT_EQ(st.variants["roam-scheduled"]["tp"].get<uint64_t>(), 2410u);
  EXPECT_EQ(st.variants["roam-earliest"]["tp"].get<uint64_t>(), 2520u);
  EXPECT_EQ(st.variants["roam-latest"]["tp"].get<uint64_t>(), 3220u);
  EXPECT_EQ(st.baselines["program"].get<uint64_t>(), 3530u);
  EXPECT_EQ(ids(g, o), (std::vector<std::string>{"f1", "f2", "f3", "f4", "b1", "b2", "u3", "u3b",
                                                 "b3", "b4", "u1", "u1b", "u2", "u2b", "c5"}));
}

// An Adam-like group splits into a head (ua, ub: they read the gradient gw) and a tail (us, ud,
// up: sqrt/div temporaries, then the in-place parameter update), placed separately.
//   f1 (x,w)->a 100   f2 (a)->loss 10   b1 (loss)->g 100   b2 (g,a,w)->gw 1000, gx 100
//   b3 (gx)->h 950    c (h)->o 10 (loss and o are graph outputs)
//   m1 mul_(m)  ua add_(m1,gw)  v1 mul_(v)  ub addcmul_(v1,gw)  us sqrt(ub)->s 1000
//   ud div(s)->d 1000  ue add_(d)  up addcdiv_(w,ua,ue) after f1, b2
// Core f2 b1 b2 b3 c: key points 0..4, gaps 0..5; both parts may go from gap 3 (after b2).
// Core profile: b2 1310, level after b2 (loss gx) 110, b3 1060, after b3 960, c 970, after c 20.
//   Head (G = X = 1000): gap 3 -> 110 + 1000 = 1110 under the 1310 of b2; gap 4 or 5 -> b3
//   holds gw: 2060. Chosen: 3 (free the gradient at once).
//   Tail (G = 0, X = s + d = 2000): gap 3 -> 110 + 1000 (the head's gw, counted while the gap
//   runs) + 2000; gap 4 -> 960 + 2000; gap 5 -> 20 + 2000 = 2020. Chosen: 5 (after c).
// Real Tp: 2020 at ud (loss o s d), the optimum. Both parts at gap 3 (earliest): ud holds loss
// gx s d = 2110; both after c (latest, what the program does): b3 holds gw, 2060.
TEST(RoamOrder, WeightUpdateHeadAndTail) {
  GraphJson b("adam");
  b.tensor("x", 64, "input").tensor("w", 64, "param");
  b.tensor("m", 64, "optimizer_state").tensor("v", 64, "optimizer_state");
  b.tensor("a", 100).tensor("loss", 10).tensor("g", 100).tensor("gw", 1000).tensor("gx", 100);
  b.tensor("h", 950).tensor("o", 10).tensor("s", 1000).tensor("d", 1000);
  b.tensor("m1", 64, "", "m").tensor("m2", 64, "", "m").tensor("v1", 64, "", "v");
  b.tensor("v2", 64, "", "v").tensor("d2", 1000, "", "d").tensor("w2", 64, "", "w");
  b.op("f1", {"x", "w"}, {"a"})
      .op("f2", {"a"}, {"loss"})
      .op("b1", {"loss"}, {"g"}, "backward")
      .op("b2", {"g", "a", "w"}, {"gw", "gx"}, "backward")
      .op("b3", {"gx"}, {"h"}, "backward")
      .op("c", {"h"}, {"o"}, "backward")
      .op("m1", {"m"}, {"m1"}, "update")
      .op("ua", {"m1", "gw"}, {"m2"}, "update")
      .op("v1", {"v"}, {"v1"}, "update")
      .op("ub", {"v1", "gw"}, {"v2"}, "update")
      .op("us", {"v2"}, {"s"}, "update")
      .op("ud", {"s"}, {"d"}, "update")
      .op("ue", {"d"}, {"d2"}, "update")
      .op("up", {"w", "m2", "d2"}, {"w2"}, "update", {"f1", "b2"});
  b.output("loss").output("o");
  const Graph g = b.parse();
  const roam::RoamStructure rs = roam::roam_structure(g, options(1));
  EXPECT_EQ(ids(g, rs.pinned_sources), (std::vector<std::string>{"f1", "m1", "v1"}));
  EXPECT_EQ(ids(g, rs.core_key_points), (std::vector<std::string>{"f2", "b1", "b2", "b3", "c"}));
  ASSERT_EQ(rs.groups.size(), 2u);
  const auto& head = rs.groups[0];
  const auto& tail = rs.groups[1];
  EXPECT_EQ(head.part, 1);
  EXPECT_EQ(ids(g, head.ops), (std::vector<std::string>{"ua", "ub"}));
  EXPECT_EQ(head.held_bytes, 1000u);
  EXPECT_EQ(head.transient_bytes, 1000u);
  EXPECT_EQ(head.earliest, 3);
  EXPECT_EQ(head.chosen, 3);
  EXPECT_EQ(tail.part, 2);
  EXPECT_EQ(ids(g, tail.ops), (std::vector<std::string>{"us", "ud", "ue", "up"}));
  EXPECT_EQ(tail.held_bytes, 0u);
  EXPECT_EQ(tail.transient_bytes, 2000u);
  EXPECT_EQ(tail.earliest, 3);
  EXPECT_EQ(tail.chosen, 5);
  roam::RoamOrderStats st;
  const Order o = roam::order_roam(g, options(1), &st);
  EXPECT_EQ(ids(g, o), (std::vector<std::string>{"f1", "f2", "b1", "b2", "m1", "ua", "v1", "ub",
                                                 "b3", "c", "us", "ud", "ue", "up"}));
  EXPECT_EQ(roam::theoretical_peak(g, o, 1), 2020u);
  EXPECT_EQ(roamtest::brute_downsets(roamtest::brute_model(g), 1).min_tp, 2020u);
  EXPECT_EQ(st.variants["roam-scheduled"]["tp"].get<uint64_t>(), 2020u);
  EXPECT_EQ(st.variants["roam-earliest"]["tp"].get<uint64_t>(), 2110u);
  EXPECT_EQ(st.variants["roam-latest"]["tp"].get<uint64_t>(), 2060u);
  EXPECT_EQ(st.baselines["program"].get<uint64_t>(), 2060u);
}

// A head that makes nothing runs in its earliest gap (issue 15: resnet50 b2 64 px held a 4 MiB
// weight gradient through the next convolution backward, 15.9% above the bound). A residual
// block: b3 and b2 (the main branch's backward) are parallel to bd (the shortcut), so both lie
// in the gap between key points b1 and badd; each parameter's Adam-like group splits into a
// head (in-place moment updates reading the gradient) and a tail (sqrt temporary, then the
// in-place parameter update).
//   f1 (x)->a1 100  f2 (a1,w2)->a2 100  f3 (a2,w3)->a3 100  f4 (a3,a1)->loss 10
//   b1 (loss)->gs 100  b3 (gs,a2,w3)->g2 100, gw3 400  b2 (g2,a1,w2)->g1a 100, gw2 900
//   bd (gs)->g1b 100  badd (g1a,g1b)->g1 10 (loss and g1 are graph outputs)
//   w2: u2m mul_(m2)  u2a add_(.,gw2)  u2s sqrt->q2 400  u2p addcdiv_(w2) after f2, b2
//   w3: u3m mul_(m3)  u3a add_(.,gw3)  u3v mul_(v3)  u3b addcmul_(.,gw3)  u3s sqrt->q3 900
//       u3p addcdiv_(w3) after f3, b3
// Optimum 1310 at b2 (a1 loss g2 g1a gw2 g1b): w3's head runs right after b3, freeing gw3.
// The scheduler's estimate counted every head of a gap as held at once at the gap's lowest
// level (110 + 960 + 448 at 64-byte units) and sent w3's head past badd: b2 then also holds
// gw3, 1710. A head that makes no storage and needs nothing beyond what it reads only holds
// its inputs longer when it runs later: it now takes its earliest gap, where the segment
// search places it.
TEST(RoamOrder, HeadsThatMakeNothingRunEarly) {
  GraphJson b("resblock");
  b.tensor("x", 64, "input").tensor("w2", 64, "param").tensor("w3", 64, "param");
  b.tensor("m2", 64, "optimizer_state").tensor("m3", 64, "optimizer_state");
  b.tensor("v3", 64, "optimizer_state");
  for (const char* t : {"a1", "a2", "a3", "gs", "g2", "g1a", "g1b"}) b.tensor(t, 100);
  b.tensor("loss", 10).tensor("g1", 10).tensor("gw3", 400).tensor("gw2", 900);
  b.tensor("q2", 400).tensor("q3", 900);
  for (const char* m : {"m2a", "m2b"}) b.tensor(m, 64, "", "m2");
  for (const char* m : {"m3a", "m3b"}) b.tensor(m, 64, "", "m3");
  for (const char* v : {"v3a", "v3b"}) b.tensor(v, 64, "", "v3");
  b.tensor("w2n", 64, "", "w2").tensor("w3n", 64, "", "w3");
  b.op("f1", {"x"}, {"a1"})
      .op("f2", {"a1", "w2"}, {"a2"})
      .op("f3", {"a2", "w3"}, {"a3"})
      .op("f4", {"a3", "a1"}, {"loss"})
      .op("b1", {"loss"}, {"gs"}, "backward")
      .op("b3", {"gs", "a2", "w3"}, {"g2", "gw3"}, "backward")
      .op("b2", {"g2", "a1", "w2"}, {"g1a", "gw2"}, "backward")
      .op("bd", {"gs"}, {"g1b"}, "backward")
      .op("badd", {"g1a", "g1b"}, {"g1"}, "backward")
      .op("u2m", {"m2"}, {"m2a"}, "update")
      .op("u2a", {"m2a", "gw2"}, {"m2b"}, "update")
      .op("u2s", {"m2b"}, {"q2"}, "update")
      .op("u2p", {"w2", "m2b", "q2"}, {"w2n"}, "update", {"f2", "b2"})
      .op("u3m", {"m3"}, {"m3a"}, "update")
      .op("u3a", {"m3a", "gw3"}, {"m3b"}, "update")
      .op("u3v", {"v3"}, {"v3a"}, "update")
      .op("u3b", {"v3a", "gw3"}, {"v3b"}, "update")
      .op("u3s", {"v3b"}, {"q3"}, "update")
      .op("u3p", {"w3", "m3b", "q3"}, {"w3n"}, "update", {"f3", "b3"});
  b.output("loss").output("g1");
  const Graph g = b.parse();
  const roam::RoamStructure rs = roam::roam_structure(g, options(64));
  EXPECT_EQ(ids(g, rs.core_key_points),
            (std::vector<std::string>{"f2", "f3", "f4", "b1", "badd"}));
  int heads = 0;
  for (const auto& d : rs.groups) {
    if (d.part != 1) continue;
    ++heads;
    EXPECT_EQ(d.earliest, 4) << ids(g, d.ops).front();
    EXPECT_EQ(d.chosen, 4) << ids(g, d.ops).front();  // in b1..badd, with b3 and b2
  }
  EXPECT_EQ(heads, 2);
  const uint64_t best = roamtest::brute_downsets(roamtest::brute_model(g), 1).min_tp;
  EXPECT_EQ(best, 1310u);
  EXPECT_EQ(roam::lower_bound(g, 1), 1310u);
  roam::RoamOrderStats st;
  const Order o = roam::order_roam(g, options(1), &st);
  EXPECT_EQ(st.variants["roam-scheduled"]["tp"].get<uint64_t>(), 1310u);
  EXPECT_EQ(roam::theoretical_peak(g, o, 1), 1310u);
}

// The local search moves blocks: a chain that computes a SiLU derivative from the forward input
// x alone (c1 sigmoid(x)->s, c2 empty_like->e, c3 e.fill_(1).sub_(s) in place, c4 x*e->t, c5
// t.add_(1) in place, c6 s*t->d; the backward b3 multiplies d by the gradient) runs, in the
// program, at the end of the forward: c4 holds x s e t y loss = 510. Every single op moved
// alone holds more (c6 later keeps s and t instead of d; c1 earlier has x and s live at f1,
// f2, ...), so sliding single ops finds nothing. The chain moved as one block to just after
// f0 holds at most 400 (c4: x s e t); the peak is then b2's 410 (gz y gy loss d), which every
// order has (brute force). Exact search is switched off so that the local search decides.
TEST(RoamOrder, LocalSearchMovesChainsAsBlocks) {
  GraphJson b("silu");
  b.tensor("in", 64, "input");
  for (const char* t : {"x", "y", "z", "gz", "gy", "s", "e", "t", "d"}) b.tensor(t, 100);
  b.tensor("loss", 10).tensor("gx", 10).tensor("e2", 100, "", "e").tensor("t2", 100, "", "t");
  b.op("f0", {"in"}, {"x"})
      .op("f1", {"x"}, {"y"})
      .op("f2", {"y"}, {"z"})
      .op("f3", {"z"}, {"loss"})
      .op("c1", {"x"}, {"s"}, "backward")
      .op("c2", {"s"}, {"e"}, "backward")
      .op("c3", {"e", "s"}, {"e2"}, "backward")
      .op("c4", {"x", "e2"}, {"t"}, "backward")
      .op("c5", {"t"}, {"t2"}, "backward")
      .op("c6", {"s", "t2"}, {"d"}, "backward")
      .op("b1", {"loss"}, {"gz"}, "backward")
      .op("b2", {"gz", "y"}, {"gy"}, "backward")
      .op("b3", {"gy", "d"}, {"gx"}, "backward");
  b.output("loss").output("gx");
  const Graph g = b.parse();
  EXPECT_EQ(roamtest::brute_downsets(roamtest::brute_model(g), 1).min_tp, 410u);
  EXPECT_EQ(roam::theoretical_peak(g, g.program_order(), 1), 510u);
  roam::PlanOptions opt = options(1);
  opt.extra["exact_segments"] = false;
  roam::RoamOrderStats st;
  const Order o = roam::order_roam(g, opt, &st);
  EXPECT_EQ(st.variants["roam-scheduled"]["tp"].get<uint64_t>(), 410u);
  EXPECT_EQ(roam::theoretical_peak(g, o, 1), 410u);
  EXPECT_GT(st.swaps, 0);
}

// The optimizer's alpha is read from meta.optimizer. It is the fallback estimate of a group's
// transient X = max(G, alpha x parameter bytes) for groups whose temporaries are not in the
// graph; groups that make temporaries use their simulated peak (exact for the group alone).
TEST(RoamOrder, AlphaFromOptimizer) {
  GraphJson b = update_graph();
  b.doc["meta"] = {{"optimizer", "Adam"}};
  const Graph g = b.parse();
  const roam::RoamStructure rs = roam::roam_structure(g, options(1));
  EXPECT_EQ(rs.alpha, 3.0);
  EXPECT_EQ(rs.groups[0].transient_bytes, 20u);    // gw1 + t1, simulated
  EXPECT_EQ(rs.groups[2].transient_bytes, 2010u);  // gw3 + t3
  // Momentum SGD: buf.mul_ (a source), buf.add_(g) (no new storage), w.add_(buf) (pinned after
  // it): the group {a, p} makes no storage, so X = max(G = 10, alpha x 64).
  GraphJson s("sgd");
  s.tensor("x", 64, "input").tensor("w", 64, "param").tensor("buf", 64, "optimizer_state");
  s.tensor("y", 100).tensor("g", 10).tensor("b1", 64, "", "buf").tensor("b2", 64, "", "buf");
  s.tensor("w2", 64, "", "w").tensor("o", 10);
  s.op("f", {"x", "w"}, {"y"})
      .op("b", {"y"}, {"g"}, "backward")
      .op("c", {"g"}, {"o"}, "backward")  // keeps b out of the group (b feeds the core too)
      .op("m", {"buf"}, {"b1"}, "update")
      .op("a", {"b1", "g"}, {"b2"}, "update")
      .op("p", {"w", "b2"}, {"w2"}, "update", {"f"});
  s.output("o");
  for (const auto& [name, alpha, x] : {std::tuple{"SGD", 1.0, 64u}, std::tuple{"AdamW", 3.0, 192u},
                                       std::tuple{"Lion?", 0.0, 10u}}) {
    s.doc["meta"] = {{"optimizer", name}};
    const Graph gs = s.parse();
    const roam::RoamStructure r = roam::roam_structure(gs, options(1));
    EXPECT_EQ(r.alpha, alpha) << name;
    ASSERT_EQ(r.groups.size(), 1u);
    EXPECT_EQ(ids(gs, r.groups[0].ops), (std::vector<std::string>{"a", "p"}));
    EXPECT_EQ(r.groups[0].held_bytes, 10u);
    EXPECT_EQ(r.groups[0].transient_bytes, x) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// Random graphs
// ---------------------------------------------------------------------------------------------

roamtest::RandomGraphOptions small_options(int num_ops) {
  roamtest::RandomGraphOptions o;
  o.num_ops = num_ops;
  return o;
}

// The best Tp over all orders, by enumerating them (only for graphs with few orders).
uint64_t enumerated_min_tp(const roamtest::BruteModel& m, uint64_t alignment) {
  uint64_t best = UINT64_MAX;
  roamtest::for_each_topo_order(m, [&](const std::vector<int>& o) {
    best = std::min(best, roamtest::brute_tp(m, o, alignment));
  });
  return best;
}

// The roam pipeline itself (not only the baselines it falls back to) reaches the optimum.
TEST(RoamOrder, ExactOnSmallRandomGraphs) {
  int checked = 0, enumerated = 0;
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    const int n = 2 + static_cast<int>(seed % 11);  // 2..12 ops
    roamtest::RandomGraphOptions ro = small_options(n);
    if (seed % 2 == 0) {  // denser control edges and more update-phase ops
      ro.p_after = 0.4;
      ro.p_multi_output = 0.4;
    }
    const Graph g = roam::parse_graph(roamtest::random_graph_json(seed, ro), "r");
    const uint64_t alignment = seed % 3 == 0 ? 64 : 1;
    const roamtest::BruteModel m = roamtest::brute_model(g);
    const uint64_t best = roamtest::brute_downsets(m, alignment).min_tp;
    if (n <= 7) {
      ASSERT_EQ(enumerated_min_tp(m, alignment), best) << "seed " << seed;
      ++enumerated;
    }
    roam::RoamOrderStats st;
    const Order o = roam::order_roam(g, options(alignment), &st);
    ASSERT_TRUE(roam::is_topological(g, o)) << "seed " << seed;
    ASSERT_EQ(roamtest::brute_tp(m, std::vector<int>(o.begin(), o.end()), alignment), best)
        << "seed " << seed;
    uint64_t pipeline = UINT64_MAX;
    for (const auto& [name, v] : st.variants.items())
      pipeline = std::min(pipeline, v["tp"].get<uint64_t>());
    ASSERT_EQ(pipeline, best) << "seed " << seed;
    ++checked;
  }
  EXPECT_EQ(checked, 600);
  EXPECT_GT(enumerated, 100);
}

// Tp(roam) <= Tp of every baseline, the order is topological, and the segment model predicts
// Tp exactly (every variant's predicted Tp is its real Tp when no op is placed first or last).
TEST(RoamOrder, NeverWorseThanBaselinesOnRandomGraphs) {
  roam::PlanOptions opt = options(64);
  opt.extra["exact_state_limit"] = 5000;
  opt.extra["local_search_swaps"] = 20000;
  int checked = 0;
  for (uint64_t seed = 1000; seed < 1300; ++seed) {
    const int n = 10 + static_cast<int>(seed % 71);  // 10..80 ops
    const Graph g = roam::parse_graph(roamtest::random_graph_json(seed, small_options(n)), "r");
    roam::RoamOrderStats st;
    const Order o = roam::order_roam(g, opt, &st);
    ASSERT_TRUE(roam::is_topological(g, o)) << "seed " << seed;
    const uint64_t tp = roam::theoretical_peak(g, o, opt.alignment);
    EXPECT_EQ(tp, st.tp);
    for (const char* m : {"program", "lescea", "lpmf", "bfs", "dfs"}) {
      ASSERT_LE(tp, roam::theoretical_peak(g, roam::make_order(g, m, opt), opt.alignment))
          << "seed " << seed << " vs " << m;
    }
    ASSERT_GE(tp, roam::lower_bound(g, opt.alignment));
    const roam::RoamStructure rs = roam::roam_structure(g, opt);
    if (rs.isolated_first.empty() && rs.isolated_last.empty()) {
      for (const auto& [name, v] : st.variants.items()) {
        ASSERT_EQ(v["predicted_tp"], v["tp"]) << "seed " << seed << " " << name;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 300);
}

// On caterpillar graphs the lower bound is the optimum (testing.h proves it): roam reaches it.
TEST(RoamOrder, ReachesTheBoundOnCaterpillars) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const Graph g =
        roam::parse_graph(roamtest::caterpillar_graph_json(seed, 5 + static_cast<int>(seed % 30),
                                                           static_cast<int>(seed % 20)),
                          "c");
    const Order o = roam::order_roam(g, options(64));
    ASSERT_TRUE(roam::is_topological(g, o));
    ASSERT_EQ(roam::theoretical_peak(g, o, 64), roam::lower_bound(g, 64)) << "seed " << seed;
  }
}

// Same order for 1 and 2 threads (budgets are counted, never timed).
TEST(RoamOrder, DeterministicAcrossThreads) {
  for (uint64_t seed = 7; seed < 27; ++seed) {
    const Graph g = roam::parse_graph(roamtest::random_graph_json(seed, small_options(150)), "r");
    roam::PlanOptions one = options(64, 1), two = options(64, 2);
    for (auto* o : {&one, &two}) {
      o->extra["exact_state_limit"] = 20000;
      o->extra["local_search_swaps"] = 50000;
    }
    roam::RoamOrderStats s1, s2;
    const Order o1 = roam::order_roam(g, one, &s1);
    const Order o2 = roam::order_roam(g, two, &s2);
    ASSERT_EQ(o1, o2) << "seed " << seed;
    EXPECT_EQ(s1.states, s2.states);
    EXPECT_EQ(s1.swaps, s2.swaps);
  }
}

// Ablation switches are honoured: without the scheduler the groups sit at their latest gap.
TEST(RoamOrder, AblationSwitches) {
  const Graph g = update_graph().parse();
  roam::PlanOptions opt = options(1);
  opt.extra["weight_update_scheduler"] = false;
  roam::RoamOrderStats st;
  const Order o = roam::order_roam(g, opt, &st);
  EXPECT_FALSE(st.variants.contains("roam-scheduled"));
  EXPECT_EQ(st.variants["roam-latest"]["tp"].get<uint64_t>(), 3530u);  // program placement
  // The exact free variant (no artificial edges) still finds the optimum on this small graph.
  EXPECT_EQ(roam::theoretical_peak(g, o, 1), 2410u);
  opt.extra["exact_segments"] = false;
  const Order o2 = roam::order_roam(g, opt, &st);
  EXPECT_FALSE(st.variants.contains("roam-free"));
  EXPECT_EQ(st.states, 0);
  EXPECT_TRUE(roam::is_topological(g, o2));
}

// A baseline that reaches the cut lower bound is optimal: roam returns it without searching.
// chain.json has one valid order, so every baseline reaches the bound (its Tp, 600 at step n2:
// see tests/test_fixtures.cpp); the first of them, program, is returned.
TEST(RoamOrder, BaselineShortcut) {
  const Graph g = roamtest::load_fixture("chain.json");
  roam::PlanOptions opt;
  opt.alignment = 1;
  roam::RoamOrderStats st;
  const Order o = roam::order_roam(g, opt, &st);
  EXPECT_EQ(st.lower_bound, 600u);
  EXPECT_EQ(st.winner, "program");
  EXPECT_EQ(o, g.program_order());
  EXPECT_EQ(st.tp, 600u);
  EXPECT_TRUE(st.variants.empty());  // no roam candidate was run
  EXPECT_EQ(st.states, 0);
  opt.extra = {{"baseline_shortcut", false}};
  roam::order_roam(g, opt, &st);
  EXPECT_FALSE(st.variants.empty());
  EXPECT_EQ(st.tp, 600u);
}

}  // namespace
