// The graph remat's shortcuts for time (src/remat, issue 10): the expanded graph built without
// names is the named one less its names, and deferring the quick layouts of candidates that
// their cut bound rules out changes no plan and no refusal.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../src/remat/remat_internal.h"
#include "roam/analysis.h"
#include "roam/remat.h"
#include "roam/validate.h"
#include "testing.h"

namespace {

using json = nlohmann::json;
using roam::remat_internal::Expanded;
using roamtest::random_remat_graph;

// Every field the planners read, compared one by one.
void expect_same_structure(const Expanded& named, const Expanded& bare, const std::string& what) {
  const roam::Graph& a = named.graph;
  const roam::Graph& b = bare.graph;
  ASSERT_EQ(a.ops.size(), b.ops.size()) << what;
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
  for (size_t k = 0; k < a.ops.size(); ++k) {
    EXPECT_EQ(a.ops[k].phase, b.ops[k].phase) << what << " op " << k;
    EXPECT_EQ(a.ops[k].inputs, b.ops[k].inputs) << what << " op " << k;
    EXPECT_EQ(a.ops[k].outputs, b.ops[k].outputs) << what << " op " << k;
    EXPECT_EQ(a.ops[k].after, b.ops[k].after) << what << " op " << k;
    EXPECT_EQ(a.ops[k].cost, b.ops[k].cost) << what << " op " << k;
    EXPECT_EQ(a.ops[k].workspace, b.ops[k].workspace) << what << " op " << k;
    EXPECT_EQ(a.ops[k].recomputable, b.ops[k].recomputable) << what << " op " << k;
    EXPECT_TRUE(b.ops[k].id.empty() && b.ops[k].target.empty() && b.ops[k].module.empty());
  }
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    EXPECT_EQ(a.tensors[t].size, b.tensors[t].size) << what << " tensor " << t;
    EXPECT_EQ(a.tensors[t].role, b.tensors[t].role) << what << " tensor " << t;
    EXPECT_EQ(a.tensors[t].alias_of, b.tensors[t].alias_of) << what << " tensor " << t;
    EXPECT_EQ(a.tensors[t].root, b.tensors[t].root) << what << " tensor " << t;
    EXPECT_EQ(a.tensors[t].producer, b.tensors[t].producer) << what << " tensor " << t;
    EXPECT_TRUE(b.tensors[t].id.empty()) << what << " tensor " << t;
  }
  EXPECT_EQ(a.outputs, b.outputs) << what;
  ASSERT_EQ(a.storages.size(), b.storages.size()) << what;
  for (size_t s = 0; s < a.storages.size(); ++s) {
    EXPECT_EQ(a.storages[s].root, b.storages[s].root) << what << " storage " << s;
    EXPECT_EQ(a.storages[s].workspace_of, b.storages[s].workspace_of) << what << " storage " << s;
    EXPECT_EQ(a.storages[s].size, b.storages[s].size) << what << " storage " << s;
    EXPECT_EQ(a.storages[s].producer, b.storages[s].producer) << what << " storage " << s;
    EXPECT_EQ(a.storages[s].users, b.storages[s].users) << what << " storage " << s;
    EXPECT_EQ(a.storages[s].graph_output, b.storages[s].graph_output) << what << " storage " << s;
  }
  EXPECT_EQ(a.num_tensor_storages, b.num_tensor_storages) << what;
  EXPECT_EQ(a.storage_of, b.storage_of) << what;
  EXPECT_EQ(a.preds, b.preds) << what;
  EXPECT_EQ(a.succs, b.succs) << what;
  EXPECT_EQ(a.op_storages, b.op_storages) << what;
  EXPECT_EQ(a.resident_bytes, b.resident_bytes) << what;
  EXPECT_EQ(named.op_of, bare.op_of) << what;
  EXPECT_EQ(named.appearance, bare.appearance) << what;
  EXPECT_EQ(named.tensor_of, bare.tensor_of) << what;
  EXPECT_EQ(named.instance, bare.instance) << what;
  EXPECT_TRUE(b.op_index.empty() && b.tensor_index.empty()) << what;
  EXPECT_EQ(a.op_index.size(), a.ops.size()) << what;
}

// Random graphs, random sets of cloneable ops: the same graph with and without names, the same
// quick plan (order, offsets, peak), the same live bytes and cut at the busiest op; the named
// one's recomputations are called "<id>#1".
TEST(RematExpand, WithoutNamesIsTheSameGraph) {
  int compared = 0, refused = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const roam::Graph g =
        roam::parse_graph(random_remat_graph(seed + 300, 12 + static_cast<int>(seed % 24)), "r.json");
    const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
    std::mt19937_64 rng(seed);
    for (int draw = 0; draw < 6; ++draw) {
      std::vector<roam::OpIdx> clones;
      for (roam::OpIdx v : st.forward) {
        if (st.cloneable[v] && rng() % 2) clones.push_back(v);
      }
      const std::string what = "seed " + std::to_string(seed) + " draw " + std::to_string(draw);
      Expanded named, bare;
      bool named_threw = false, bare_threw = false;
      try {
        named = roam::remat_internal::expand(g, st, clones, true);
      } catch (const roam::InputError&) {
        named_threw = true;
      }
      try {
        bare = roam::remat_internal::expand(g, st, clones, false);
      } catch (const roam::InputError&) {
        bare_threw = true;
      }
      ASSERT_EQ(named_threw, bare_threw) << what;
      if (named_threw) {
        ++refused;
        continue;
      }
      expect_same_structure(named, bare, what);
      for (size_t k = 0; k < named.op_of.size(); ++k) {
        const std::string& id = g.ops[named.op_of[k]].id;
        EXPECT_EQ(named.graph.ops[k].id, named.appearance[k] ? id + "#1" : id) << what;
      }
      roam::Order oa, ob;
      std::vector<uint64_t> fa, fb;
      EXPECT_EQ(roam::remat_internal::quick_peak(named, 64, oa, fa),
                roam::remat_internal::quick_peak(bare, 64, ob, fb)) << what;
      EXPECT_EQ(oa, ob) << what;
      EXPECT_EQ(fa, fb) << what;
      const std::vector<uint64_t> la = roam::live_bytes_at_ops(named.graph, oa, 64);
      EXPECT_EQ(la, roam::live_bytes_at_ops(bare.graph, ob, 64)) << what;
      const auto top = static_cast<roam::OpIdx>(std::max_element(la.begin(), la.end()) - la.begin());
      EXPECT_EQ(roam::min_live_at_op(named.graph, top, 64), roam::min_live_at_op(bare.graph, top, 64))
          << what;
      if (!clones.empty()) ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

// Plans with the candidates' layouts deferred against the same search with every quick layout
// made (remat_internal::plan_with_budget, defer_layouts false): the same plan, or the same
// refusal (smallest budget named, proven bound, message), at budgets from 1 byte and the
// resident bytes through the proven bound to the plan without recomputation, at 1 and 2
// threads. The deferral has to happen (deferred) and refusals have to lay out some deferred
// candidates again (resolved).
TEST(RematDefer, SamePlansAndRefusalsAsEveryLayoutMade) {
  size_t deferred = 0, resolved = 0, plans = 0, refusals = 0;
  auto strip = [](json d) {
    d["stats"].erase("solve_seconds");
    d["method"]["options"].erase("remat");
    d["method"]["options"].erase("order_stats");
    return d;
  };
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const roam::Graph g =
        roam::parse_graph(random_remat_graph(seed + 500, 14 + static_cast<int>(seed % 20)), "r.json");
    roam::PlanRequest req;
    req.options.time_limit_seconds = 30;
    req.options.threads = 1 + static_cast<int>(seed % 2);
    const uint64_t peak0 = roam::make_plan(g, req).plan.stats.peak_bytes;
    const uint64_t lb = g.resident_bytes + roam::recompute_lower_bound(g, 64);
    std::vector<uint64_t> budgets = {1, g.resident_bytes};
    for (int i = 0; i <= 8; ++i) budgets.push_back(lb + (peak0 > lb ? (peak0 - lb) * i / 8 : 0));
    for (uint64_t budget : budgets) {
      const std::string what = "seed " + std::to_string(seed) + " budget " + std::to_string(budget);
      roam::RematStats with, without;
      json a, b;
      std::string ra, rb;
      try {
        a = strip(roam::plan_to_json(
            g, roam::remat_internal::plan_with_budget(g, req, budget, &with, true).plan));
      } catch (const roam::BudgetInfeasible& e) {
        ASSERT_FALSE(e.time_limited) << what;
        ra = e.what();
      }
      try {
        b = strip(roam::plan_to_json(
            g, roam::remat_internal::plan_with_budget(g, req, budget, &without, false).plan));
      } catch (const roam::BudgetInfeasible& e) {
        rb = e.what();
      }
      EXPECT_EQ(ra, rb) << what;
      EXPECT_EQ(a, b) << what;
      EXPECT_EQ(without.deferred, 0u) << what;
      if (ra.empty()) {
        ++plans;
        EXPECT_TRUE(roam::validate_plan(g, roam::plan_to_json(
            g, roam::remat_internal::plan_with_budget(g, req, budget, nullptr, true).plan),
            "p.json").valid) << what;
      } else {
        ++refusals;
      }
      deferred += with.deferred;
      resolved += with.resolved;
    }
  }
  EXPECT_GT(plans, 20u);
  EXPECT_GT(refusals, 20u);
  EXPECT_GT(deferred, 0u);
  EXPECT_GT(resolved, 0u);
}

}  // namespace
