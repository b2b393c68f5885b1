// Planning with in-place permissions (GRAPH_FORMAT.md op field `inplace`): a functional graph
// whose program order holds what eager PyTorch holds, the lower bounds against brute force over
// every order and every set of writes, the forced graph, plans under a budget, the CLI and viz.
// The rule itself: tests/test_inplace.cpp.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "roam/headline.h"
#include "roam/inplace.h"
#include "roam/remat.h"
#include "testing.h"

namespace {

using json = nlohmann::json;
using roam::Graph;
using roam::InplacePair;
using roam::Order;
using roamtest::GraphJson;

std::string problems(const roam::ValidationReport& r) {
  std::string s;
  for (const auto& p : r.problems) s += p + " | ";
  return s;
}

// ---------------------------------------------------------------------------------------------
// A functional graph: program order with the planner's writes holds the eager peak
// ---------------------------------------------------------------------------------------------

// tests/fixtures/functional_relu.json, steps f0 f1 f2 f3 b0 b1 b2 b3 u0 (0..8), alignment 64
// (every size a multiple of it). Without the permissions used:
//   0: c 4096; 1: c r 8192; 2: r o 5120; 3: r o l 5184; 4: r l go 5184; 5: r l go gr 9280;
//   6: r l gr gc 12352; 7: l gc gw 4672; 8: l gw 576                    Tp 12352.
// Eager PyTorch ran relu_ over c and threshold_backward over gr: c/r one storage (steps 0-6),
// gr/gc one (5-7):
//   0: 4096; 1: 4096; 2: 5120; 3: 5184; 4: 5184; 5: 9280; 6: c/r l gr/gc 8256; 7: 4672; 8: 576
//                                                                           Tp 9280.
TEST(InplaceFunctional, ProgramOrderHoldsTheEagerPeak) {
  const Graph g = roamtest::load_fixture("functional_relu.json");
  const Order program = g.program_order();
  EXPECT_EQ(roam::theoretical_peak(g, program, 64), 12352u);
  const auto pairs = roam::inplace_valid_in(g, program);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(g.tensors[pairs[0].output].id, "r");
  EXPECT_EQ(g.tensors[pairs[1].output].id, "gc");
  EXPECT_EQ(roam::inplace_peak(g, program, 64), 9280u);
  const Graph x = roam::apply_inplace(g, pairs);
  const std::vector<uint64_t> expect = {4096, 4096, 5120, 5184, 5184, 9280, 8256, 4672, 576};
  EXPECT_EQ(roam::live_bytes_per_step(x, roam::compute_liveness(x, program), 64), expect);
  // The headline's CPU reference is that eager peak (resident 1536 B).
  EXPECT_EQ(roam::headline_reference(g, 64).cpu_program_bytes, 1536u + 9280u);

  // The lower bound: at b1 go + gr (own) + r (made before, read by b2) + l (graph output) = 9280
  // in every order, in-place writes allowed: program order is optimal.
  EXPECT_EQ(roam::lower_bound(g, 64), 9280u);
  // Savings: f1 and b2 write 4096 B over their inputs.
  const roam::InplaceBoundTerms terms = roam::inplace_bound_terms(g, 64);
  ASSERT_EQ(terms.savings.size(), 9u);
  EXPECT_EQ(terms.savings[1], 4096u);
  EXPECT_EQ(terms.savings[6], 4096u);
  EXPECT_EQ(terms.savings[0], 0u);
  EXPECT_TRUE(terms.storage_bytes.empty());
  // v2 bound: the largest op's own bytes less its savings, b2 r gr gc - 4096 = 8192, plus l
  // (64 B), made by f3 (not recomputable, an ancestor of b2) and a graph output: 8256.
  EXPECT_EQ(roam::recompute_lower_bound(g, 64), 8256u);

  // Program order planned: exactly what eager PyTorch holds, and a version-2 plan.
  roam::PlanRequest req = roamtest::request("program", "llfb", 64);
  const roam::PlanResult r = roam::make_plan(g, req);
  EXPECT_EQ(r.plan.stats.theoretical_peak_bytes, 9280u);
  EXPECT_GE(r.plan.stats.arena_bytes, 9280u);
  EXPECT_EQ(r.plan.inplace.size(), 2u);
  EXPECT_EQ(r.plan.version, 2);
  EXPECT_EQ(r.plan.stats.lower_bound_bytes, 8256u);
  EXPECT_EQ(r.plan.options["order_lower_bound_bytes"], 9280u);
  const json doc = roam::plan_to_json(g, r.plan);
  EXPECT_EQ(doc["version"], 2);
  EXPECT_EQ(doc["inplace"], (json{{"r", "c"}, {"gc", "gr"}}));
  EXPECT_FALSE(doc["offsets"].contains("r"));
  EXPECT_FALSE(doc["offsets"].contains("gc"));
  EXPECT_TRUE(doc["offsets"].contains("c"));
  EXPECT_DOUBLE_EQ(doc["stats"]["compute_seconds"].get<double>(), 0.0165);
  const auto rep = roam::validate_plan(g, doc, "p.json");
  ASSERT_TRUE(rep.valid) << problems(rep);
  EXPECT_EQ(rep.recomputed.lower_bound_bytes, 8256u);

  // The default request: no order does better than the bound.
  const roam::PlanResult best = roam::make_plan(g, roam::PlanRequest{});
  EXPECT_EQ(best.plan.stats.theoretical_peak_bytes, 9280u);
  EXPECT_TRUE(roam::validate_plan(g, roam::plan_to_json(g, best.plan), "p.json").valid);
}

// ---------------------------------------------------------------------------------------------
// Lower bounds against brute force (random graphs, random permissions)
// ---------------------------------------------------------------------------------------------

// Adds permissions to a random graph document: for about half of the ops with a non-resident
// input and a root output, a pair (i, j) with output j resized to input i's size. `root_inputs`:
// only inputs that are roots (then the input's storage has the output's size, as the planners
// need) and one pair per op, else any non-resident input (views of storages of other sizes too)
// and up to two pairs per op (an output or an input in two of them).
json with_permissions(json doc, uint64_t seed, bool root_inputs) {
  std::mt19937_64 rng(seed * 31 + 7);
  std::map<std::string, json*> tensor;
  for (json& t : doc["tensors"]) tensor[t["id"]] = &t;
  auto resident = [&](std::string id) {
    for (;;) {
      const json& t = *tensor[id];
      if (t.contains("role")) return true;
      if (!t.contains("alias_of")) return false;
      id = t["alias_of"].get<std::string>();
    }
  };
  for (json& op : doc["ops"]) {
    if (rng() % 2 == 0) continue;
    std::vector<size_t> ins, outs;
    for (size_t i = 0; i < op["inputs"].size(); ++i) {
      const std::string id = op["inputs"][i];
      if (resident(id) || (root_inputs && tensor[id]->contains("alias_of"))) continue;
      ins.push_back(i);
    }
    for (size_t j = 0; j < op["outputs"].size(); ++j) {
      if (!tensor[op["outputs"][j]]->contains("alias_of")) outs.push_back(j);
    }
    if (ins.empty() || outs.empty()) continue;
    json pairs = json::array();
    const int count = root_inputs ? 1 : 1 + static_cast<int>(rng() % 2);
    for (int k = 0; k < count; ++k) {
      const size_t i = ins[rng() % ins.size()], j = outs[rng() % outs.size()];
      (*tensor[op["outputs"][j]])["size"] = (*tensor[op["inputs"][i]])["size"];
      pairs.push_back(json::array({i, j}));
    }
    // Sizes set by a later pair may break an earlier one: keep the pairs whose sizes agree.
    json kept = json::array();
    for (const json& p : pairs) {
      if ((*tensor[op["inputs"][p[0].get<size_t>()]])["size"] ==
          (*tensor[op["outputs"][p[1].get<size_t>()]])["size"]) {
        kept.push_back(p);
      }
    }
    if (!kept.empty()) op["inplace"] = kept;
  }
  return doc;
}

// An independent reading of the in-place rule for an order running every op once (the "version"
// of a tensor: the nearest written output along its chain, or its root): every op listing a
// tensor of the version a write goes over runs no later than the writer, no graph output has
// that version, one write per op per version.
struct Write {
  int output, input;
};
bool writes_allowed(const Graph& g, const std::vector<int>& order, const std::vector<Write>& w) {
  const int nt = static_cast<int>(g.tensors.size()), n = g.num_ops();
  std::vector<int> over(nt, -1), producer(nt, -1), step(n);
  for (const Write& x : w) over[x.output] = x.input;
  for (int v = 0; v < n; ++v) {
    for (int t : g.ops[v].outputs) producer[t] = v;
  }
  for (int k = 0; k < n; ++k) step[order[k]] = k;
  auto version = [&](int t) {
    while (g.tensors[t].alias_of >= 0 && over[t] < 0) t = g.tensors[t].alias_of;
    return t;
  };
  std::vector<int> last(nt, -1);
  std::vector<char> kept(nt, 0);
  for (int v = 0; v < n; ++v) {
    for (const auto* list : {&g.ops[v].inputs, &g.ops[v].outputs}) {
      for (int t : *list) last[version(t)] = std::max(last[version(t)], step[v]);
    }
  }
  for (int t : g.outputs) kept[version(t)] = 1;
  std::set<std::pair<int, int>> seen;
  for (const Write& x : w) {
    const int v = producer[x.output], ver = version(x.input);
    if (kept[ver] || last[ver] > step[v] || !seen.insert({v, ver}).second) return false;
  }
  return true;
}

// The least Tp over every order of g and every set of writes (one per output) it allows, each
// counted on a graph document in which the written outputs are aliases of their inputs.
uint64_t brute_min_tp_with_writes(const json& doc, const Graph& g, uint64_t alignment,
                                  std::vector<uint64_t>* per_order_best = nullptr,
                                  std::vector<std::vector<int>>* orders = nullptr) {
  std::vector<Write> perms;
  for (const roam::Op& op : g.ops) {
    for (const auto& [i, j] : op.inplace) perms.push_back({op.outputs[j], op.inputs[i]});
  }
  std::vector<std::vector<Write>> sets;
  std::vector<roamtest::BruteModel> models;
  for (uint32_t mask = 0; mask < (1u << perms.size()); ++mask) {
    std::vector<Write> w;
    std::set<int> outs;
    bool ok = true;
    for (size_t k = 0; k < perms.size(); ++k) {
      if (mask >> k & 1) {
        ok = ok && outs.insert(perms[k].output).second;
        w.push_back(perms[k]);
      }
    }
    if (!ok) continue;
    json d = doc;
    for (json& op : d["ops"]) op.erase("inplace");
    for (const Write& x : w) d["tensors"][x.output]["alias_of"] = g.tensors[x.input].id;
    models.push_back(roamtest::brute_model(roam::parse_graph(d, "merged.json")));
    sets.push_back(std::move(w));
  }
  const roamtest::BruteModel base = roamtest::brute_model(g);
  uint64_t best = std::numeric_limits<uint64_t>::max();
  roamtest::for_each_topo_order(base, [&](const std::vector<int>& order) {
    uint64_t here = std::numeric_limits<uint64_t>::max();
    for (size_t k = 0; k < sets.size(); ++k) {
      if (writes_allowed(g, order, sets[k])) here = std::min(here, roamtest::brute_tp(models[k], order, alignment));
    }
    best = std::min(best, here);
    if (per_order_best) per_order_best->push_back(here);
    if (orders) orders->push_back(order);
  });
  return best;
}

TEST(InplaceBounds, LowerBoundsBelowBruteForceOverOrdersAndWrites) {
  int with_writes = 0, below_plain = 0, reduced = 0;
  for (uint64_t seed = 0; seed < 160; ++seed) {
    roamtest::RandomGraphOptions o;
    o.num_ops = 3 + static_cast<int>(seed % 5);  // 3..7 ops
    const bool root_inputs = seed % 2 == 0;
    const json doc = with_permissions(roamtest::random_graph_json(seed, o), seed, root_inputs);
    const Graph g = roam::parse_graph(doc, "random.json");
    size_t perms = 0;
    for (const auto& op : g.ops) perms += op.inplace.size();
    if (perms == 0 || perms > 8) continue;
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      std::vector<uint64_t> per_order;
      std::vector<std::vector<int>> orders;
      const uint64_t best = brute_min_tp_with_writes(doc, g, alignment, &per_order, &orders);
      const uint64_t plain = roamtest::brute_downsets(roamtest::brute_model(g), alignment).min_tp;
      ASSERT_LE(best, plain) << "seed " << seed;
      below_plain += best < plain;
      ++with_writes;
      reduced += !roam::inplace_bound_terms(g, alignment).storage_bytes.empty();
      EXPECT_LE(roam::lower_bound(g, alignment), best) << "seed " << seed << " alignment " << alignment;
      EXPECT_LE(roam::recompute_lower_bound(g, alignment), best) << "seed " << seed;
      const auto must = roam::lower_bound_per_op(g, alignment);
      for (roam::OpIdx v = 0; v < g.num_ops(); ++v) {
        EXPECT_LE(roam::min_live_at_op(g, v, alignment), best) << "seed " << seed << " op " << v;
        EXPECT_LE(must[v], roam::min_live_at_op(g, v, alignment)) << "seed " << seed << " op " << v;
      }
      // Every valid pair applied is the best choice for a fixed order, where the planners use
      // the permissions (input storage of the output's size): inplace_peak is the per-order
      // minimum of the brute force.
      if (root_inputs) {
        for (size_t k = 0; k < orders.size(); ++k) {
          const Order ord(orders[k].begin(), orders[k].end());
          EXPECT_EQ(roam::inplace_peak(g, ord, alignment), per_order[k]) << "seed " << seed << " order " << k;
        }
      }
    }
  }
  EXPECT_GT(with_writes, 60);
  EXPECT_GT(below_plain, 10);  // the writes matter on a good share of the graphs
  EXPECT_GT(reduced, 0);       // and some permissions write over views of other sizes
}

TEST(InplaceBounds, RecomputeLowerBoundBelowEveryBudgetPlan) {
  // Budgets from resident + the v2 bound up to the plan without recomputation, as in
  // tests/test_remat_plan.cpp, on random graphs with permissions: every plan validates against
  // the graph, meets its budget and holds at least the bound; a refusal's smallest budget is met.
  int plans = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    const json doc = with_permissions(roamtest::random_remat_graph(seed, 14 + static_cast<int>(seed % 20)), seed, true);
    const Graph g = roam::parse_graph(doc, "remat.json");
    roam::PlanRequest req;
    req.options.time_limit_seconds = 30;
    const uint64_t rlb = roam::recompute_lower_bound(g, 64);
    const uint64_t lb = g.resident_bytes + rlb;
    const uint64_t peak0 = roam::make_plan(g, req).plan.stats.peak_bytes;
    for (int i = 0; i <= 5; ++i) {
      const uint64_t budget = lb + (peak0 > lb ? (peak0 - lb) * static_cast<uint64_t>(i) / 5 : 0);
      try {
        const roam::PlanResult r = roam::plan_with_budget(g, req, budget);
        const auto rep = roam::validate_plan(g, roam::plan_to_json(g, r.plan), "p.json");
        ASSERT_TRUE(rep.valid) << "seed " << seed << " budget " << budget << ": " << problems(rep);
        EXPECT_LE(rlb, r.plan.stats.theoretical_peak_bytes) << "seed " << seed;
        EXPECT_LE(r.plan.stats.peak_bytes, budget);
        EXPECT_FALSE(r.plan.options.contains("inplace_fallback")) << r.plan.options.dump();
        ++plans;
      } catch (const roam::BudgetInfeasible& e) {
        EXPECT_EQ(e.lower_bound, lb);
        ASSERT_GT(e.smallest_budget, budget) << "seed " << seed;
        const roam::PlanResult r = roam::plan_with_budget(g, req, e.smallest_budget);
        EXPECT_LE(r.plan.stats.peak_bytes, e.smallest_budget) << "seed " << seed;
        EXPECT_TRUE(roam::validate_plan(g, roam::plan_to_json(g, r.plan), "p.json").valid);
      }
    }
  }
  // (These random graphs seldom need recomputation: InplaceRemat below has the chain that does.)
  EXPECT_GE(plans, 20);
}

// ---------------------------------------------------------------------------------------------
// The forced graph
// ---------------------------------------------------------------------------------------------

TEST(InplaceForced, ProgramOrderValidAndForcedPairsValidInEveryOrderFound) {
  int forced_total = 0, edges = 0;
  for (uint64_t seed = 0; seed < 120; ++seed) {
    roamtest::RandomGraphOptions o;
    o.num_ops = 6 + static_cast<int>(seed % 30);
    const Graph g = roam::parse_graph(with_permissions(roamtest::random_graph_json(seed, o), seed, true), "r.json");
    const roam::ForcedGraph f = roam::force_inplace(g);
    EXPECT_FALSE(roam::has_inplace(f.graph));
    EXPECT_EQ(f.pairs, roam::inplace_valid_in(g, g.program_order()));
    ASSERT_TRUE(roam::is_topological(f.graph, g.program_order())) << "seed " << seed;
    forced_total += static_cast<int>(f.pairs.size());
    for (roam::OpIdx v = 0; v < g.num_ops(); ++v) {
      edges += static_cast<int>(f.graph.ops[v].after.size() - g.ops[v].after.size());
    }
    // The forced graph's storages are those of g with the forced writes applied.
    const Graph x = roam::apply_inplace(g, f.pairs);
    ASSERT_EQ(x.num_storages(), f.graph.num_storages());
    for (roam::StorageIdx s = 0; s < x.num_storages(); ++s) {
      EXPECT_EQ(x.storages[s].root, f.graph.storages[s].root);
      EXPECT_EQ(x.storages[s].users, f.graph.storages[s].users);
    }
    for (const std::string& method : roam::order_methods()) {
      roam::PlanOptions po;
      po.time_limit_seconds = 5;
      const Order order = roam::make_order(g, method, po);
      ASSERT_TRUE(roam::is_topological(g, order)) << method << " seed " << seed;
      ASSERT_TRUE(roam::is_topological(f.graph, order)) << method << " seed " << seed;
      const auto valid = roam::inplace_valid_in(g, order);
      for (const InplacePair& p : f.pairs) {
        EXPECT_NE(std::find(valid.begin(), valid.end(), p), valid.end())
            << method << " seed " << seed << ": forced pair of op " << g.ops[p.op].id << " not valid";
      }
    }
    // Every plan validates and uses at least the forced writes.
    const roam::PlanResult r = roam::make_plan(g, roamtest::request("auto", "auto", 64));
    const auto rep = roam::validate_plan(g, roam::plan_to_json(g, r.plan), "p.json");
    ASSERT_TRUE(rep.valid) << "seed " << seed << ": " << problems(rep);
    EXPECT_GE(r.plan.inplace.size(), f.pairs.size());
    EXPECT_EQ(r.plan.version, r.plan.inplace.empty() ? 1 : 2);
  }
  EXPECT_GT(forced_total, 100);
  EXPECT_GT(edges, 10);  // some writes needed `after` edges to stay valid in every order
}

TEST(InplaceForced, GraphWithoutPermissionsPlansAsBefore) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    roamtest::RandomGraphOptions o;
    o.num_ops = 20 + static_cast<int>(seed);
    const Graph g = roam::parse_graph(roamtest::random_graph_json(seed, o), "r.json");
    ASSERT_FALSE(roam::has_inplace(g));
    const roam::ForcedGraph f = roam::force_inplace(g);
    EXPECT_TRUE(f.pairs.empty());
    EXPECT_EQ(roam::graph_to_json(f.graph), roam::graph_to_json(g));
    EXPECT_TRUE(roam::inplace_valid_in(g, g.program_order()).empty());
    roam::PlanOptions po;
    for (const std::string& m : roamtest::baseline_orders()) {
      EXPECT_EQ(roam::make_order(g, m, po), roam::make_order(f.graph, m, po)) << m;
    }
    EXPECT_EQ(roam::lower_bound(g, 64), roam::lower_bound(f.graph, 64));
    json a = roam::plan_to_json(g, roam::make_plan(g, roamtest::request("auto", "auto", 64)).plan);
    json b = roam::plan_to_json(f.graph, roam::make_plan(f.graph, roamtest::request("auto", "auto", 64)).plan);
    EXPECT_FALSE(a.contains("inplace"));
    EXPECT_EQ(a["version"], 1);
    a["stats"].erase("solve_seconds");
    b["stats"].erase("solve_seconds");
    a["method"]["options"].erase("order_stats");
    b["method"]["options"].erase("order_stats");
    EXPECT_EQ(a, b) << "seed " << seed;
  }
}

// ---------------------------------------------------------------------------------------------
// Under a budget: recomputation with in-place writes
// ---------------------------------------------------------------------------------------------

// k blocks of conv (cost 0.004) -> functional relu (permission, cost 0.001); a loss; the
// backward: per block (last first) the gradient of the relu output, threshold_backward over it
// (permission) reading the relu output, the convolution's backward. Every forward op
// recomputable; blocks of 64 KiB.
json relu_chain(int k) {
  GraphJson b("relu-chain");
  const uint64_t s = 65536;
  b.tensor("x", s, "input");
  std::string h = "x";
  for (int i = 0; i < k; ++i) {
    const std::string c = "c" + std::to_string(i), r = "r" + std::to_string(i);
    b.tensor(c, s).tensor(r, s);
    b.op("conv" + std::to_string(i), {h}, {c}).op("relu" + std::to_string(i), {c}, {r});
    h = r;
  }
  b.tensor("loss", 64).op("loss", {h}, {"loss"});
  std::string grad = "loss";
  for (int i = k - 1; i >= 0; --i) {
    const std::string n = std::to_string(i);
    b.tensor("gr" + n, s).tensor("gc" + n, s).tensor("gh" + n, s);
    b.op("grad" + n, {grad}, {"gr" + n}, "backward")
        .op("relu_bw" + n, {"gr" + n, "r" + n}, {"gc" + n}, "backward")
        .op("conv_bw" + n, {"gc" + n}, {"gh" + n}, "backward");
    grad = "gh" + n;
  }
  b.output("loss");
  for (json& op : b.doc["ops"]) {
    const std::string id = op["id"];
    const bool fwd = op["phase"] == "forward";
    op["recomputable"] = fwd && id != "loss";
    op["cost"] = id.rfind("conv", 0) == 0 ? 0.004 : 0.001;
    if (id.rfind("relu", 0) == 0) op["inplace"] = json::array({json::array({0, 0})});
  }
  return b.doc;
}

TEST(InplaceRemat, BudgetPlansRecomputeWithInplaceWritesAndValidate) {
  const Graph g = roam::parse_graph(relu_chain(6), "chain.json");
  const roam::PlanResult base = roam::make_plan(g, roamtest::request("auto", "auto", 64));
  // Without recomputation every relu writes over its conv output and every relu backward over
  // its gradient: 12 writes.
  EXPECT_EQ(base.plan.inplace.size(), 12u);
  const uint64_t arena = base.plan.stats.arena_bytes;
  int recomputing_with_writes = 0;
  uint64_t last_seconds = 0;
  for (int pct = 100; pct >= 40; pct -= 10) {
    const uint64_t budget = g.resident_bytes + arena * static_cast<uint64_t>(pct) / 100;
    try {
      const roam::PlanResult r = roam::plan_with_budget(g, roamtest::request("auto", "auto", 64), budget);
      const json doc = roam::plan_to_json(g, r.plan);
      const auto rep = roam::validate_plan(g, doc, "p.json");
      ASSERT_TRUE(rep.valid) << pct << "%: " << problems(rep);
      EXPECT_LE(r.plan.stats.peak_bytes, budget);
      EXPECT_FALSE(r.plan.options.contains("inplace_fallback"));
      EXPECT_FALSE(r.plan.inplace.empty());
      if (r.plan.stats.recomputations > 0) {
        ++recomputing_with_writes;
        EXPECT_EQ(doc["version"], 2);
        EXPECT_TRUE(doc.contains("inplace"));
        // A recomputed relu writes over the recomputed conv output: both run again.
        std::map<std::string, int> runs;
        for (const auto& id : doc["order"]) ++runs[id.get<std::string>()];
        for (int i = 0; i < 6; ++i) {
          if (runs["relu" + std::to_string(i)] > 1) {
            EXPECT_GT(runs["conv" + std::to_string(i)], 1);
          }
        }
      }
      last_seconds = static_cast<uint64_t>(r.plan.stats.recompute_seconds * 1e6);
    } catch (const roam::BudgetInfeasible&) {
      break;
    }
  }
  (void)last_seconds;
  EXPECT_GT(recomputing_with_writes, 0);
}

// ---------------------------------------------------------------------------------------------
// viz and the CLI
// ---------------------------------------------------------------------------------------------

TEST(InplaceCli, PlanSaysHowManyWritesAndValidateNamesTheRule) {
  roamtest::TempDir dir;
  const std::string graph = roamtest::fixture_path("functional_relu.json");
  const std::string out = dir.file("p.json");
  auto r = roamtest::run_roam(dir, "plan '" + graph + "' -o '" + out + "' --order program --layout llfb");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("in place       2 in-place writes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Tp bound       0.01 MiB (no order's Tp is lower, in-place writes included"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("v2 bound       0.01 MiB (the plan file's lower_bound_bytes"), std::string::npos) << r.out;
  const json doc = json::parse(roamtest::read_text(out));
  EXPECT_EQ(doc["version"], 2);
  EXPECT_EQ(doc["inplace"], (json{{"r", "c"}, {"gc", "gr"}}));
  EXPECT_EQ(doc["method"]["options"]["order_lower_bound_bytes"], 9280);
  auto v = roamtest::run_roam(dir, "validate '" + graph + "' '" + out + "'");
  EXPECT_EQ(v.status, 0) << v.out;
  EXPECT_NE(v.out.find("in place 2 writes"), std::string::npos) << v.out;
  // A forged write that no permission allows is named with its op and tensors.
  json forged = doc;
  forged["inplace"]["gr"] = "go";
  roamtest::write_text(dir.file("f.json"), forged.dump());
  v = roamtest::run_roam(dir, "validate '" + graph + "' '" + dir.file("f.json") + "'");
  EXPECT_EQ(v.status, 1);
  EXPECT_NE(v.out.find("inplace.gr: op 'b1' may not write 'gr' over 'go': not one of its permissions"),
            std::string::npos) << v.out;
  // viz draws the in-place outputs in the blocks they overwrite.
  auto z = roamtest::run_roam(dir, "viz '" + graph + "' '" + out + "' -o '" + dir.file("a.svg") + "'");
  ASSERT_EQ(z.status, 0) << z.err;
  EXPECT_NE(z.out.find("arena of 6 storages over 9 steps"), std::string::npos) << z.out;
  EXPECT_NE(z.out.find("2 in-place writes drawn in the blocks they overwrite"), std::string::npos) << z.out;
  const std::string svg = roamtest::read_text(dir.file("a.svg"));
  EXPECT_NE(svg.find("written in place: r over c by op f1"), std::string::npos);
  // compare: every row uses the writes its order allows.
  auto c = roamtest::run_roam(dir, "compare '" + graph + "' --orders program,lescea --layouts llfb");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("(over every order, in-place writes included)"), std::string::npos) << c.out;
}

TEST(InplaceCli, BudgetPlanRecomputesWithWritesAndValidates) {
  roamtest::TempDir dir;
  const std::string graph = dir.file("chain.json");
  roamtest::write_text(graph, relu_chain(6).dump());
  const Graph g = roam::parse_graph(relu_chain(6), "chain.json");
  const roam::PlanResult base = roam::make_plan(g, roamtest::request("auto", "auto", 64));
  // Two thirds of the arena without recomputation: some relu outputs are dropped and recomputed.
  const uint64_t budget = g.resident_bytes + base.plan.stats.arena_bytes * 2 / 3;
  const std::string out = dir.file("p.json");
  auto r = roamtest::run_roam(dir, "plan '" + graph + "' --budget " + std::to_string(budget) + " -o '" + out + "'");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("in place       "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recomputation  "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("recomputation  none"), std::string::npos) << r.out;
  const json doc = json::parse(roamtest::read_text(out));
  EXPECT_EQ(doc["version"], 2);
  EXPECT_FALSE(doc["inplace"].empty());
  EXPECT_GT(doc["stats"]["recomputations"].get<int>(), 0);
  EXPECT_LE(doc["stats"]["peak_bytes"].get<uint64_t>(), budget);
  auto v = roamtest::run_roam(dir, "validate '" + graph + "' '" + out + "'");
  EXPECT_EQ(v.status, 0) << v.out;
}

}  // namespace
