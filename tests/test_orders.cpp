// Baseline orders on a hand-made graph, each worked out by hand below.
#include <gtest/gtest.h>

#include "roam/analysis.h"
#include "roam/order.h"

namespace roam {
namespace {

// n0 makes A (10 B); two branches read A:
//   n1: A -> B (100 B), n2: B -> C (1 B)      (branch 1: a big intermediate)
//   n3: A -> D (50 B),  n4: D -> E (1 B)      (branch 2: a medium one)
// n5: C, E -> F (1 B), the graph output. Alignment 1 throughout.
Graph two_branch_graph() {
  return parse_graph(nlohmann::json::parse(R"({
    "format": "roam-graph", "version": 1, "name": "two-branches",
    "tensors": [{"id": "A", "size": 10}, {"id": "B", "size": 100}, {"id": "C", "size": 1},
                {"id": "D", "size": 50}, {"id": "E", "size": 1}, {"id": "F", "size": 1}],
    "ops": [{"id": "n0", "outputs": ["A"]},
            {"id": "n1", "inputs": ["A"], "outputs": ["B"]},
            {"id": "n2", "inputs": ["B"], "outputs": ["C"]},
            {"id": "n3", "inputs": ["A"], "outputs": ["D"]},
            {"id": "n4", "inputs": ["D"], "outputs": ["E"]},
            {"id": "n5", "inputs": ["C", "E"], "outputs": ["F"]}],
    "outputs": ["F"]})"),
                     "two-branches");
}

TEST(BaselineOrders, Program) {
  const Graph g = two_branch_graph();
  EXPECT_EQ(order_program(g), (Order{0, 1, 2, 3, 4, 5}));
  // Live per step: {A}=10, {A,B}=110, {A,B,C}=111, {A,C,D}=61, {C,D,E}=52, {C,E,F}=3.
  EXPECT_EQ(theoretical_peak(g, order_program(g), 1), 111u);
}

TEST(BaselineOrders, Lescea) {
  const Graph g = two_branch_graph();
  // Step 0: only n0 (grows the peak to 10). Step 1: n1 would make 110, n3 60; neither keeps
  // the peak of 10, so the smaller new peak wins: n3 (peak 60). Step 2: n1 -> 160, n4 -> 61:
  // n4 (peak 61; D dies, live 11). Step 3: n1 -> 111 (A dies after, live 101). Step 4: n2 keeps
  // the peak (102 <= 111) and leaves 2. Step 5: n5.
  const Order o = order_lescea(g, 1);
  EXPECT_EQ(o, (Order{0, 3, 4, 1, 2, 5}));
  EXPECT_EQ(theoretical_peak(g, o, 1), 111u);
}

TEST(BaselineOrders, Lpmf) {
  const Graph g = two_branch_graph();
  // Keys (max(peak so far, step peak), live after): step 1: n1 (110, 110), n3 (60, 60) -> n3;
  // step 2: n1 (160, 160), n4 (61, 11) -> n4; then n1, n2, n5 as the only ready ops.
  const Order o = order_lpmf(g, 1);
  EXPECT_EQ(o, (Order{0, 3, 4, 1, 2, 5}));
  EXPECT_EQ(theoretical_peak(g, o, 1), 111u);
}

TEST(BaselineOrders, Bfs) {
  const Graph g = two_branch_graph();
  // n0 at step 0; n1 and n3 both have key [0]: program position picks n1. Then n2 has key [1]
  // and n3 [0]: n3. Then n2 [1] before n4 [3]; then n4, n5.
  // Live: step 1 {A,B}=110, step 2 {A,B,D}=160 -> Tp 160.
  const Order o = order_bfs(g);
  EXPECT_EQ(o, (Order{0, 1, 3, 2, 4, 5}));
  EXPECT_EQ(theoretical_peak(g, o, 1), 160u);
}

TEST(BaselineOrders, Dfs) {
  const Graph g = two_branch_graph();
  // Bytes read + written: n0 10, n1 110, n2 101, n3 60, n4 51, n5 3. Visiting n5 first (3 B),
  // its predecessors by bytes: n4 (51) before n2 (101). n4 needs n3, which needs n0: emit n0,
  // n3, n4; then n2 needs n1: emit n1, n2; then n5.
  const Order o = order_dfs(g, 1);
  EXPECT_EQ(o, (Order{0, 3, 4, 1, 2, 5}));
  EXPECT_EQ(theoretical_peak(g, o, 1), 111u);
}

TEST(BaselineOrders, RegistryAndErrors) {
  const Graph g = two_branch_graph();
  for (const std::string& m : order_methods()) EXPECT_TRUE(is_topological(g, make_order(g, m, 1))) << m;
  EXPECT_THROW(make_order(g, "nope", 1), std::invalid_argument);
}

}  // namespace
}  // namespace roam
