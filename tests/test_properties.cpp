// Property tests on seeded random DAGs (tests/testing.h): every baseline plan validates, Tp and
// liveness equal an independent recount, the lower bound is below every order (and equal to the
// best one on a family where that is provable), key points agree with the quadratic oracle,
// asap/alap agree with an exhaustive search, and the validator rejects corrupted plans.
#include <gtest/gtest.h>

#include <array>

#include "testing.h"

namespace {

using roam::Graph;
using roam::Order;
using roamtest::BruteModel;
using nlohmann::json;

Graph random_graph(uint64_t seed, int num_ops, roamtest::RandomGraphOptions o = {}) {
  o.num_ops = num_ops;
  return roam::parse_graph(roamtest::random_graph_json(seed, o), "random.json");
}

// JSON unsigned integer (what a parser produces for a non-negative number in a file).
json U(uint64_t v) { return json(v); }

std::string first_problem(const roam::ValidationReport& r) {
  return r.problems.empty() ? std::string("(none)") : r.problems.front();
}

bool has_problem(const roam::ValidationReport& r, const std::string& needle) {
  for (const auto& p : r.problems) {
    if (p.find(needle) != std::string::npos) return true;
  }
  return false;
}

// The generator itself: deterministic, and its graphs exercise every feature the tests claim.
TEST(Properties, GeneratorIsDeterministicAndCoversFeatures) {
  EXPECT_EQ(roamtest::random_graph_json(7, {}), roamtest::random_graph_json(7, {}));
  int multi = 0, alias = 0, after = 0, outputs = 0, resident = 0, free_view = 0, zero = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const Graph g = random_graph(seed, 30);
    for (const auto& op : g.ops) {
      multi += op.outputs.size() >= 2;
      after += !op.after.empty();
    }
    for (const auto& t : g.tensors) {
      alias += t.alias_of >= 0;
      resident += t.role != roam::Role::kNone;
      free_view += t.alias_of >= 0 && t.producer < 0;
      zero += t.alias_of < 0 && t.role == roam::Role::kNone && t.size == 0;
    }
    outputs += !g.outputs.empty();
  }
  EXPECT_GT(multi, 100);
  EXPECT_GT(alias, 100);
  EXPECT_GT(after, 100);
  EXPECT_GT(outputs, 100);
  EXPECT_GT(resident, 100);
  EXPECT_GT(free_view, 50);
  EXPECT_GT(zero, 20);
}

// The library's dependency edges and storages are the ones an independent reading of the
// format gives.
TEST(Properties, StructureMatchesIndependentReading) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const Graph g = random_graph(seed, 1 + static_cast<int>(seed % 60));
    const BruteModel m = roamtest::brute_model(g);
    ASSERT_EQ(static_cast<int>(g.preds.size()), m.n);
    for (int v = 0; v < m.n; ++v) {
      ASSERT_EQ(std::vector<int>(g.preds[v].begin(), g.preds[v].end()), m.preds[v])
          << "seed " << seed << " op " << g.ops[v].id;
    }
    ASSERT_EQ(g.num_storages(), static_cast<int>(m.storages.size())) << "seed " << seed;
    std::map<std::string, const roamtest::BruteStorage*> by_id;
    for (size_t s = 0; s < m.storages.size(); ++s) by_id[m.storage_ids[s]] = &m.storages[s];
    uint64_t resident = 0;
    for (const auto& t : g.tensors) {
      if (t.alias_of < 0 && t.role != roam::Role::kNone) resident += t.size;
    }
    EXPECT_EQ(g.resident_bytes, resident) << "seed " << seed;
    for (const auto& st : g.storages) {
      const auto* b = by_id.at(g.tensors[st.root].id);
      EXPECT_EQ(st.size, b->size);
      EXPECT_EQ(st.producer, b->producer);
      EXPECT_EQ(std::vector<int>(st.users.begin(), st.users.end()), b->users);
      EXPECT_EQ(st.graph_output, b->output);
    }
  }
}

// Tp and live bytes per step equal the brute-force recount, for program, LESCEA and random
// topological orders, at alignments 1 and 64.
TEST(Properties, TheoreticalPeakEqualsBruteForce) {
  std::mt19937_64 rng(12345);
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const Graph g = random_graph(1000 + seed, 1 + static_cast<int>(seed % 60));
    const BruteModel m = roamtest::brute_model(g);
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      std::vector<Order> orders;
      for (const auto& method : roamtest::baseline_orders()) {
        orders.push_back(roam::make_order(g, method, alignment));
      }
      for (int i = 0; i < 5; ++i) {
        auto o = roamtest::random_topo_order(m, rng);
        orders.emplace_back(o.begin(), o.end());
      }
      for (const Order& order : orders) {
        ASSERT_TRUE(roam::is_topological(g, order)) << "seed " << seed;
        const std::vector<int> o(order.begin(), order.end());
        ASSERT_TRUE(roamtest::brute_is_topological(m, o));
        const auto live = roam::compute_liveness(g, order);
        const auto iv = roamtest::brute_intervals(m, o);
        for (roam::StorageIdx s = 0; s < g.num_storages(); ++s) {
          // brute storages are in tensor order, the library's in producer order: match by id.
          const std::string id = g.tensors[g.storages[s].root].id;
          const auto it = std::find(m.storage_ids.begin(), m.storage_ids.end(), id);
          ASSERT_NE(it, m.storage_ids.end());
          const auto& b = iv[static_cast<size_t>(it - m.storage_ids.begin())];
          EXPECT_EQ(live.first[s], b.first) << "seed " << seed << " storage " << id;
          EXPECT_EQ(live.last[s], b.second) << "seed " << seed << " storage " << id;
        }
        EXPECT_EQ(roam::live_bytes_per_step(g, live, alignment),
                  roamtest::brute_live_bytes(m, o, alignment))
            << "seed " << seed;
        EXPECT_EQ(roam::theoretical_peak(g, order, alignment), roamtest::brute_tp(m, o, alignment))
            << "seed " << seed;
      }
    }
  }
}

// Every order x layout baseline plan, through make_plan and plan_to_json, passes the validator,
// an independent pairwise overlap check, and its stats equal independent recounts.
TEST(Properties, EveryBaselinePlanValidates) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const Graph g = random_graph(2000 + seed, 1 + static_cast<int>(seed % 60));
    const BruteModel m = roamtest::brute_model(g);
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      const uint64_t lb = roam::lower_bound(g, alignment);
      const std::vector<std::string> orders = roamtest::baseline_orders();
      const std::vector<std::string> layouts = roamtest::baseline_layouts();
      for (const auto& om : orders) {
        for (const auto& lm : layouts) {
          SCOPED_TRACE("seed " + std::to_string(seed) + " " + om + "/" + lm + " alignment " +
                       std::to_string(alignment));
          const roam::PlanResult r = roam::make_plan(g, roamtest::request(om, lm, alignment), lb);
          const json doc = roam::plan_to_json(g, r.plan);
          const auto rep = roam::validate_plan(g, doc, "plan.json");
          ASSERT_TRUE(rep.valid) << first_problem(rep);
          const std::vector<int> o(r.plan.order.begin(), r.plan.order.end());
          ASSERT_TRUE(roamtest::brute_is_topological(m, o));
          EXPECT_EQ(roamtest::brute_layout_problem(m, o, r.plan.offsets, alignment), "");
          const auto& st = r.plan.stats;
          const uint64_t tp = roamtest::brute_tp(m, o, alignment);
          const uint64_t arena = roamtest::brute_arena(m, r.plan.offsets, alignment);
          EXPECT_EQ(st.theoretical_peak_bytes, tp);
          EXPECT_EQ(st.arena_bytes, arena);
          EXPECT_EQ(st.peak_bytes, g.resident_bytes + arena);
          EXPECT_EQ(st.lower_bound_bytes, lb);
          EXPECT_GE(arena, tp);  // every valid layout holds the peak step's storages disjointly
          EXPECT_LE(lb, tp);
          EXPECT_DOUBLE_EQ(st.fragmentation, tp == 0 ? 0.0 : double(arena) / double(tp) - 1.0);
          if (r.plan.layout_method == "pytorch") {
            // Blocks are multiples of 512 B inside 2 MiB-multiple segments.
            for (uint64_t off : r.plan.offsets) EXPECT_EQ(off % 512, 0u);
            EXPECT_EQ(r.reserved_bytes % (2 * 1048576), 0u);
            EXPECT_GE(r.reserved_bytes, arena);
          } else {
            EXPECT_EQ(r.reserved_bytes, arena);
          }
        }
      }
    }
  }
}

// The lower bound is at most the Tp of every order we can generate (every baseline order
// method, random topological orders) on graphs up to 60 ops.
TEST(Properties, LowerBoundBelowEveryGeneratedOrder) {
  std::mt19937_64 rng(99);
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const Graph g = random_graph(3000 + seed, 1 + static_cast<int>(seed % 60));
    const BruteModel m = roamtest::brute_model(g);
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      const uint64_t lb = roam::lower_bound(g, alignment);
      for (const auto& method : roamtest::baseline_orders()) {
        EXPECT_LE(lb, roam::theoretical_peak(g, roam::make_order(g, method, alignment), alignment))
            << "seed " << seed << " " << method;
      }
      // Per op too: the bytes the bound claims at op v are live at v in every order.
      const auto per_op = roam::lower_bound_per_op(g, alignment);
      for (int i = 0; i < 10; ++i) {
        const auto o = roamtest::random_topo_order(m, rng);
        const auto bytes = roamtest::brute_live_bytes(m, o, alignment);
        for (int k = 0; k < m.n; ++k) {
          EXPECT_LE(per_op[o[k]], bytes[k]) << "seed " << seed << " op " << g.ops[o[k]].id;
        }
        EXPECT_LE(lb, roamtest::brute_tp(m, o, alignment)) << "seed " << seed;
      }
    }
  }
}

// Small graphs: the exhaustive minimum over ALL topological orders (explicit enumeration up to
// 8 ops, downset search up to 12) bounds the lower bound from above and the baselines from below.
TEST(Properties, LowerBoundBelowBestOrderExhaustive) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const int n = 1 + static_cast<int>(seed % 12);
    const Graph g = random_graph(4000 + seed, n);
    const BruteModel m = roamtest::brute_model(g);
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      const auto ds = roamtest::brute_downsets(m, alignment);
      if (n <= 8) {
        uint64_t best = UINT64_MAX;
        roamtest::for_each_topo_order(m, [&](const std::vector<int>& o) {
          best = std::min(best, roamtest::brute_tp(m, o, alignment));
        });
        ASSERT_EQ(ds.min_tp, best) << "seed " << seed;  // the two oracles agree
      }
      const uint64_t lb = roam::lower_bound(g, alignment);
      EXPECT_LE(lb, ds.min_tp) << "seed " << seed;
      for (const auto& method : roamtest::baseline_orders()) {
        const Order o = roam::make_order(g, method, alignment);
        ASSERT_TRUE(roam::is_topological(g, o)) << method;
        EXPECT_GE(roam::theoretical_peak(g, o, alignment), ds.min_tp) << method;
      }
    }
  }
}

// Chains: one order only, so the bound is that order's Tp.
TEST(Properties, LowerBoundEqualsTpOnChains) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    std::mt19937_64 rng(seed);
    roamtest::GraphJson b("chain");
    b.tensor("x", 100, "input");
    std::string prev = "x";
    const int n = 1 + static_cast<int>(seed % 40);
    for (int v = 0; v < n; ++v) {
      const std::string t = "t" + std::to_string(v);
      b.tensor(t, roamtest::random_size(rng, 0.05));
      b.op("n" + std::to_string(v), {prev}, {t});
      prev = t;
    }
    const Graph g = b.parse();
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      EXPECT_EQ(roam::lower_bound(g, alignment),
                roam::theoretical_peak(g, g.program_order(), alignment));
    }
    EXPECT_EQ(static_cast<int>(roam::key_points(g).size()), n);
  }
}

// Caterpillars (testing.h explains why): the bound equals the best Tp over all orders.
TEST(Properties, LowerBoundTightOnCaterpillars) {
  int nontrivial = 0;  // graphs where the program order is strictly worse than the best
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const int chain = 1 + static_cast<int>(seed % 7);
    const int sinks = static_cast<int>((seed / 7) % 6);
    const Graph g = roam::parse_graph(roamtest::caterpillar_graph_json(seed, chain, sinks), "cat.json");
    ASSERT_LE(g.num_ops(), 12);
    const BruteModel m = roamtest::brute_model(g);
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      const auto ds = roamtest::brute_downsets(m, alignment);
      EXPECT_EQ(roam::lower_bound(g, alignment), ds.min_tp) << "seed " << seed;
      nontrivial += roam::theoretical_peak(g, g.program_order(), alignment) > ds.min_tp;
    }
  }
  EXPECT_GT(nontrivial, 20);
}

// Key points: the O(V+E) sweep equals the quadratic definition on hundreds of DAGs.
TEST(Properties, KeyPointsMatchQuadratic) {
  int with_keys = 0, without = 0;
  for (uint64_t seed = 0; seed < 600; ++seed) {
    roamtest::RandomGraphOptions o;
    o.p_after = (seed % 3) * 0.2;  // more edges -> more key points
    const Graph g = random_graph(5000 + seed, 1 + static_cast<int>(seed % 60), o);
    const auto fast = roam::key_points(g);
    EXPECT_EQ(fast, roam::key_points_quadratic(g)) << "seed " << seed;
    const int kp = static_cast<int>(fast.size());
    (kp > 1 ? with_keys : without)++;
  }
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const int chain = 1 + static_cast<int>(seed % 12);
    const Graph g = roam::parse_graph(
        roamtest::caterpillar_graph_json(seed, chain, static_cast<int>(seed % 4)), "cat.json");
    EXPECT_EQ(roam::key_points(g), roam::key_points_quadratic(g)) << "caterpillar seed " << seed;
  }
  EXPECT_GT(with_keys, 25);
  EXPECT_GT(without, 50);
}

// asap / alap equal the smallest / largest step an op takes over all topological orders
// (explicit enumeration up to 8 ops; exhaustive downset search up to 12).
TEST(Properties, AsapAlapMatchEnumeration) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const int n = 1 + static_cast<int>(seed % 12);
    const Graph g = random_graph(6000 + seed, n);
    const BruteModel m = roamtest::brute_model(g);
    const auto aa = roam::asap_alap(g);
    const auto ds = roamtest::brute_downsets(m, 1);
    if (n <= 8) {
      std::vector<int> lo(n, n), hi(n, -1);
      roamtest::for_each_topo_order(m, [&](const std::vector<int>& o) {
        for (int k = 0; k < n; ++k) {
          lo[o[k]] = std::min(lo[o[k]], k);
          hi[o[k]] = std::max(hi[o[k]], k);
        }
      });
      ASSERT_EQ(lo, ds.asap);
      ASSERT_EQ(hi, ds.alap);
    }
    EXPECT_EQ(std::vector<int>(aa.asap.begin(), aa.asap.end()), ds.asap) << "seed " << seed;
    EXPECT_EQ(std::vector<int>(aa.alap.begin(), aa.alap.end()), ds.alap) << "seed " << seed;
    std::vector<roam::OpIdx> keys;
    for (int v = 0; v < n; ++v) {
      if (ds.asap[v] == ds.alap[v]) keys.push_back(v);
    }
    std::sort(keys.begin(), keys.end(), [&](int a, int b) { return ds.asap[a] < ds.asap[b]; });
    EXPECT_EQ(roam::key_points(g), keys) << "seed " << seed;
  }
}

// ------------------------------------------------------------------------------------------
// The validator rejects corrupted plans (each built by mutating a valid plan's JSON).
// ------------------------------------------------------------------------------------------

json valid_plan(const Graph& g, const std::string& order, const std::string& layout,
                uint64_t alignment) {
  const auto r = roam::make_plan(g, roamtest::request(order, layout, alignment),
                                roam::lower_bound(g, alignment));
  json doc = roam::plan_to_json(g, r.plan);
  const auto rep = roam::validate_plan(g, doc, "plan.json");
  EXPECT_TRUE(rep.valid) << first_problem(rep);
  return doc;
}

TEST(Validator, RejectsOverlappingLiveStorages) {
  // diamond, program order, llfb: b [0,400) and c [500,800) are both live at step 2.
  const Graph g = roamtest::load_fixture("diamond.json");
  json doc = valid_plan(g, "program", "llfb", 1);
  ASSERT_EQ(doc["offsets"]["b"], 0);
  doc["offsets"]["c"] = U(100);  // [100,400) inside b's range
  const auto rep = roam::validate_plan(g, doc, "plan.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "overlap")) << first_problem(rep);
  EXPECT_TRUE(has_problem(rep, "'b'") && has_problem(rep, "'c'")) << first_problem(rep);

  // Storages that are never live together may share bytes: a [0,2] and d [3,3].
  json ok = valid_plan(g, "program", "llfb", 1);
  ok["offsets"]["d"] = ok["offsets"]["a"];
  const auto rep_ok = roam::validate_plan(g, ok, "plan.json");
  EXPECT_TRUE(rep_ok.valid) << first_problem(rep_ok);
  // ... but touching intervals are live together at the shared step (inclusive): b [1,3], d [3,3].
  json bad = valid_plan(g, "program", "llfb", 1);
  bad["offsets"]["d"] = U(0);
  bad["stats"]["arena_bytes"] = U(800);
  EXPECT_FALSE(roam::validate_plan(g, bad, "plan.json").valid);
}

TEST(Validator, RejectsDependencyViolatingOrder) {
  const Graph g = roamtest::load_fixture("diamond.json");
  json doc = valid_plan(g, "program", "llfb", 1);
  ASSERT_EQ(doc["order"], json({"n0", "n1", "n2", "n3"}));
  doc["order"] = {"n1", "n0", "n2", "n3"};  // n1 reads a, produced by n0
  const auto rep = roam::validate_plan(g, doc, "plan.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "depends on")) << first_problem(rep);
  // Swapping the two independent branches is fine (n2 before n1): a [0,2] c [1,3] b [2,3]
  // d [3,3], Tp stays 800; with a 400, b 0, c 500, d 800 nothing live together overlaps
  // (d moves off llfb's 400, where it would overlap nothing either, to change the arena).
  json ok = valid_plan(g, "program", "llfb", 1);
  ok["order"] = {"n0", "n2", "n1", "n3"};
  ok["offsets"] = {{"a", U(400)}, {"b", U(0)}, {"c", U(500)}, {"d", U(800)}};
  ok["stats"]["arena_bytes"] = U(850);
  ok["stats"]["peak_bytes"] = U(1850);
  ok["stats"]["fragmentation"] = 850.0 / 800.0 - 1.0;
  const auto rep_ok = roam::validate_plan(g, ok, "plan.json");
  EXPECT_TRUE(rep_ok.valid) << first_problem(rep_ok);
  // Missing and duplicated ops.
  json dup = valid_plan(g, "program", "llfb", 1);
  dup["order"] = {"n0", "n1", "n1", "n3"};
  EXPECT_FALSE(roam::validate_plan(g, dup, "plan.json").valid);
  json unknown = valid_plan(g, "program", "llfb", 1);
  unknown["order"][3] = "nope";
  EXPECT_FALSE(roam::validate_plan(g, unknown, "plan.json").valid);
}

TEST(Validator, RejectsMisalignedOffset) {
  const Graph g = roamtest::load_fixture("diamond.json");
  json doc = valid_plan(g, "program", "llfb", 64);
  // At alignment 64: a 128, b 448, c 320, d 64; llfb: b 0, a 448, c 576, d 448; arena 896.
  ASSERT_EQ(doc["offsets"], json({{"a", 448}, {"b", 0}, {"c", 576}, {"d", 448}}));
  doc["offsets"]["c"] = U(1000);  // not a multiple of 64, overlaps nothing
  doc["stats"]["arena_bytes"] = U(1000 + 320);
  doc["stats"]["peak_bytes"] = U(1000 + 1000 + 320);
  doc["stats"]["fragmentation"] = 1320.0 / doc["stats"]["theoretical_peak_bytes"].get<double>() - 1;
  const auto rep = roam::validate_plan(g, doc, "plan.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "multiple of the alignment")) << first_problem(rep);
  EXPECT_EQ(rep.problems.size(), 1u) << rep.problems.back();
  // A missing offset and an offset for a non-storage are rejected too.
  json missing = valid_plan(g, "program", "llfb", 64);
  missing["offsets"].erase("d");
  EXPECT_FALSE(roam::validate_plan(g, missing, "plan.json").valid);
  json extra = valid_plan(g, "program", "llfb", 64);
  extra["offsets"]["x"] = U(4096);  // resident input
  EXPECT_FALSE(roam::validate_plan(g, extra, "plan.json").valid);
}

TEST(Validator, RejectsWrongStats) {
  const Graph g = roamtest::load_fixture("two_branches.json");
  for (const char* key : {"resident_bytes", "theoretical_peak_bytes", "arena_bytes", "peak_bytes",
                          "lower_bound_bytes"}) {
    json doc = valid_plan(g, "program", "llfb", 1);
    doc["stats"][key] = doc["stats"][key].get<uint64_t>() + 1;
    const auto rep = roam::validate_plan(g, doc, "plan.json");
    EXPECT_FALSE(rep.valid) << key;
    EXPECT_TRUE(has_problem(rep, key)) << key << ": " << first_problem(rep);
  }
  json doc = valid_plan(g, "program", "llfb", 1);
  doc["stats"]["fragmentation"] = 0.5;
  const auto rep = roam::validate_plan(g, doc, "plan.json");
  EXPECT_FALSE(rep.valid);
  EXPECT_TRUE(has_problem(rep, "fragmentation")) << first_problem(rep);
  // The recount itself: two_branches program + llfb at alignment 1.
  const auto good = roam::validate_plan(g, valid_plan(g, "program", "llfb", 1), "plan.json");
  EXPECT_EQ(good.recomputed.theoretical_peak_bytes, 1510u);
  EXPECT_EQ(good.recomputed.arena_bytes, 1510u);
  EXPECT_EQ(good.recomputed.lower_bound_bytes, 1010u);
  EXPECT_EQ(good.recomputed.resident_bytes, 8u);
  EXPECT_EQ(good.recomputed.peak_bytes, 1518u);
}

// Mutations of random plans: an overlap between two storages that are live together, and a
// dependency swap, are always caught.
TEST(Validator, RejectsCorruptedRandomPlans) {
  int overlaps = 0, swaps = 0;
  for (uint64_t seed = 0; seed < 150; ++seed) {
    const Graph g = random_graph(7000 + seed, 2 + static_cast<int>(seed % 40));
    const BruteModel m = roamtest::brute_model(g);
    const json doc = valid_plan(g, seed % 2 ? "lescea" : "program", "llfb", 64);
    Order order;
    for (const auto& id : doc["order"]) order.push_back(g.op_index.at(id.get<std::string>()));
    const auto live = roam::compute_liveness(g, order);
    // Overlap: the first pair of storages live at the same step.
    bool done = false;
    for (roam::StorageIdx a = 0; a < g.num_storages() && !done; ++a) {
      for (roam::StorageIdx b = a + 1; b < g.num_storages() && !done; ++b) {
        if (live.first[a] <= live.last[b] && live.first[b] <= live.last[a]) {
          json bad = doc;
          const std::string ia = g.tensors[g.storages[a].root].id;
          const std::string ib = g.tensors[g.storages[b].root].id;
          bad["offsets"][ib] = bad["offsets"][ia];
          const auto rep = roam::validate_plan(g, bad, "plan.json");
          EXPECT_FALSE(rep.valid) << "seed " << seed;
          EXPECT_TRUE(has_problem(rep, "overlap")) << "seed " << seed << ": " << first_problem(rep);
          done = true;
          ++overlaps;
        }
      }
    }
    // Dependency: move an op with a predecessor to the front.
    for (roam::OpIdx v = 0; v < g.num_ops(); ++v) {
      if (g.preds[v].empty()) continue;
      json bad = doc;
      json neworder = json::array({g.ops[v].id});
      for (const auto& id : doc["order"]) {
        if (id != g.ops[v].id) neworder.push_back(id);
      }
      bad["order"] = neworder;
      const auto rep = roam::validate_plan(g, bad, "plan.json");
      EXPECT_FALSE(rep.valid) << "seed " << seed;
      EXPECT_TRUE(has_problem(rep, "depends on")) << "seed " << seed << ": " << first_problem(rep);
      ++swaps;
      break;
    }
  }
  EXPECT_GT(overlaps, 100);
  EXPECT_GT(swaps, 100);
}

// Library issue (reported): a non-negative integer held as a *signed* JSON number (what C++ code
// gets from an int literal, and what pybind11_json produces for Python ints) is refused with
// "must be a non-negative integer, got 100". Files are unaffected (the parser stores
// non-negative numbers as unsigned).
TEST(Validator, AcceptsNonNegativeSignedIntegers) {
  const Graph g = roamtest::load_fixture("diamond.json");
  json doc = valid_plan(g, "program", "llfb", 1);
  doc["offsets"]["a"] = static_cast<int64_t>(doc["offsets"]["a"].get<uint64_t>());
  doc["alignment"] = 1;  // int literal: signed
  roam::ValidationReport rep;
  EXPECT_NO_THROW(rep = roam::validate_plan(g, doc, "plan.json"));
  EXPECT_TRUE(rep.valid) << first_problem(rep);
}

}  // namespace

// The cut bound per op is exact: min_live_at_op(v) equals the minimum, over every valid order,
// of the bytes live at v's step, also with an incomparable op w forced before or after v
// (explicit enumeration of all orders, graphs up to 8 ops); lower_bound lies between the maximum
// of the unforced minima and the best Tp, and does not depend on the hint order.
TEST(Properties, MinLiveAtOpEqualsExhaustiveMinimum) {
  std::mt19937_64 rng(7);
  int tighter = 0;  // ops where the cut finds more than the must-live bytes
  int forced = 0, pair_raised = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const int n = 1 + static_cast<int>(seed % 8);
    const Graph g = random_graph(9000 + seed, n);
    const BruteModel m = roamtest::brute_model(g);
    for (uint64_t alignment : {uint64_t{1}, uint64_t{64}}) {
      std::vector<uint64_t> best(n, UINT64_MAX);
      // cond[v][w][0]: min live at v over orders running w before v; [1]: w after v.
      std::vector<std::vector<std::array<uint64_t, 2>>> cond(
          n, std::vector<std::array<uint64_t, 2>>(n, {UINT64_MAX, UINT64_MAX}));
      uint64_t min_tp = UINT64_MAX;
      roamtest::for_each_topo_order(m, [&](const std::vector<int>& o) {
        const auto bytes = roamtest::brute_live_bytes(m, o, alignment);
        std::vector<int> pos(n);
        for (int k = 0; k < n; ++k) pos[o[k]] = k;
        for (int k = 0; k < n; ++k) {
          best[o[k]] = std::min(best[o[k]], bytes[k]);
          for (int w = 0; w < n; ++w) {
            auto& c = cond[o[k]][w][pos[w] < k ? 0 : 1];
            c = std::min(c, bytes[k]);
          }
        }
        min_tp = std::min(min_tp, *std::max_element(bytes.begin(), bytes.end()));
      });
      for (roam::OpIdx v = 0; v < n; ++v) {
        for (roam::OpIdx w = 0; w < n; ++w) {
          // Incomparable iff both relative orders occur.
          if (w == v || cond[v][w][0] == UINT64_MAX || cond[v][w][1] == UINT64_MAX) continue;
          ASSERT_EQ(roam::min_live_at_op(g, v, alignment, w, -1), cond[v][w][0]) << "seed " << seed;
          ASSERT_EQ(roam::min_live_at_op(g, v, alignment, -1, w), cond[v][w][1]) << "seed " << seed;
          ++forced;
        }
      }
      const auto must = roam::lower_bound_per_op(g, alignment);
      uint64_t max_min = 0;
      for (roam::OpIdx v = 0; v < n; ++v) {
        ASSERT_EQ(roam::min_live_at_op(g, v, alignment), best[v]) << "seed " << seed << " op " << v;
        EXPECT_LE(must[v], best[v]);
        tighter += must[v] < best[v];
        max_min = std::max(max_min, best[v]);
      }
      const uint64_t lb = roam::lower_bound(g, alignment);
      EXPECT_GE(lb, max_min) << "seed " << seed;
      EXPECT_LE(lb, min_tp) << "seed " << seed;
      pair_raised += lb > max_min;
      const auto o = roamtest::random_topo_order(m, rng);
      const Order hint(o.begin(), o.end());
      EXPECT_EQ(roam::lower_bound(g, alignment, &hint), lb) << "seed " << seed;
    }
  }
  EXPECT_GT(tighter, 50);  // the random graphs do exercise the cut
  EXPECT_GT(forced, 500);
  EXPECT_GT(pair_raised, 10);  // and the pair refinement
}
