// Graph remat's per-span options (src/remat/span_staircase.cpp): the exact bytes a span holds
// under a set of recomputations and the greedy time-versus-memory staircase, against values
// worked by hand and an exhaustive enumeration; the time limit of plan_with_budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../src/remat/remat_internal.h"
#include "roam/options.h"
#include "roam/remat.h"
#include "roam/validate.h"
#include "testing.h"

namespace {

using roamtest::GraphJson;
using json = nlohmann::json;
using roam::remat_internal::StairPoint;

// x (input) -> A -> a (1024 B) -> B -> b (2048 B) -> C -> c (512 B) -> L -> l (64 B, output).
// Backward: G1 reads l, G2 reads c, G3 reads b, G4 reads a. A, B, C recomputable (0.4, 0.1,
// 0.3 s); L outputs the graph output (never recomputed).
GraphJson chain_graph() {
  GraphJson b("stair-chain");
  b.tensor("x", 64, "input").tensor("a", 1024).tensor("b", 2048).tensor("c", 512)
      .tensor("l", 64).tensor("g1", 64).tensor("g2", 64).tensor("g3", 64).tensor("g4", 64);
  b.op("A", {"x"}, {"a"}).op("B", {"a"}, {"b"}).op("C", {"b"}, {"c"}).op("L", {"c"}, {"l"})
      .op("G1", {"l"}, {"g1"}, "backward").op("G2", {"g1", "c"}, {"g2"}, "backward")
      .op("G3", {"g2", "b"}, {"g3"}, "backward").op("G4", {"g3", "a"}, {"g4"}, "backward")
      .output("l");
  for (json& op : b.doc["ops"]) {
    const std::string id = op["id"];
    op["recomputable"] = id == "A" || id == "B" || id == "C";
    op["cost"] = id == "A" ? 0.4 : id == "B" ? 0.1 : id == "C" ? 0.3 : 0.01;
  }
  return b;
}

std::vector<char> mask(const roam::Graph& g, const std::vector<std::string>& ids) {
  std::vector<char> m(g.ops.size(), 0);
  for (const std::string& id : ids) m[g.op_index.at(id)] = 1;
  return m;
}

std::vector<std::string> names(const roam::Graph& g, const std::vector<roam::OpIdx>& ops) {
  std::vector<std::string> out;
  for (roam::OpIdx v : ops) out.push_back(g.ops[v].id);
  return out;
}

// Held bytes by hand (alignment 64): a storage is held when an op that is not recomputed
// produced it and a backward op or a recomputed op reads it.
TEST(SpanKeptBytes, ChainWorkedByHand) {
  const roam::Graph g = chain_graph().parse();
  const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
  auto kept = [&](const std::vector<std::string>& clones) {
    return roam::remat_internal::span_kept_bytes(g, st, 0, 4, mask(g, clones), 64);
  };
  EXPECT_EQ(kept({}), 1024u + 2048u + 512u + 64u);  // a, b, c, l: all read by the backward
  EXPECT_EQ(kept({"A", "B", "C"}), 64u);            // l only
  EXPECT_EQ(kept({"A", "B"}), 512u + 64u);          // c, l
  EXPECT_EQ(kept({"B", "C"}), 1024u + 64u);         // a (read by B's recomputation), l
  EXPECT_EQ(kept({"C"}), 1024u + 2048u + 64u);      // a, b (read by C's recomputation), l
  EXPECT_EQ(kept({"A", "C"}), 2048u + 64u);         // b, l
}

// x -> A -> a (1024 B); V: view av of a; B: a -> b; L: b -> l (output); G2 reads av.
TEST(SpanKeptBytes, ViewReadByBackwardHoldsItsBase) {
  const roam::Graph g = roamtest::alias_remat_graph().parse();  // held bytes: costs play no part
  const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
  auto kept = [&](const std::vector<std::string>& clones) {
    return roam::remat_internal::span_kept_bytes(g, st, 0, 4, mask(g, clones), 64);
  };
  EXPECT_EQ(kept({}), 1024u + 64u);       // a (through av), l
  EXPECT_EQ(kept({"A"}), 1024u + 64u);    // the old view still binds a: nothing saved
  EXPECT_EQ(kept({"A", "V"}), 64u);       // the backward reads the recomputed view
}

// The same graph split into one-op spans: a's bytes belong to A's span although the op that
// makes the view the backward pass reads (V) is in another span, so the per-span counts add up
// to the whole span's (they did not: the unit of A counted nothing for a, and the chain model
// of BERT-base missed 12 MiB per layer norm read in the backward pass through a view).
TEST(SpanKeptBytes, SplitSpansAddUpWhenAViewIsMadeElsewhere) {
  const roam::Graph g = roamtest::alias_remat_graph().parse();
  const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
  for (const std::vector<std::string>& clones :
       {std::vector<std::string>{}, {"A"}, {"A", "V"}, {"V"}, {"B"}, {"A", "V", "B"}}) {
    const std::vector<char> m = mask(g, clones);
    uint64_t parts = 0;
    for (int32_t i = 0; i < 4; ++i) parts += roam::remat_internal::span_kept_bytes(g, st, i, i + 1, m, 64);
    EXPECT_EQ(parts, roam::remat_internal::span_kept_bytes(g, st, 0, 4, m, 64));
  }
  EXPECT_EQ(roam::remat_internal::span_kept_bytes(g, st, 0, 1, mask(g, {}), 64), 1024u);
  EXPECT_EQ(roam::remat_internal::span_kept_bytes(g, st, 0, 1, mask(g, {"A", "V"}), 64), 0u);
}

// A view made in the backward pass of a recomputed forward view reads the recomputed instance:
// x -> A -> a; V: av = view(a); L: av -> l (output); backward T: at = view(av), G reads at.
TEST(SpanKeptBytes, BackwardViewOfARecomputedViewReadsTheNewInstance) {
  GraphJson b("backward-view");
  b.tensor("x", 64, "input").tensor("a", 1024).tensor("av", 1024, "", "a").tensor("l", 64)
      .tensor("g1", 64).tensor("at", 1024, "", "av").tensor("g2", 64);
  b.op("A", {"x"}, {"a"}).op("V", {"a"}, {"av"}).op("L", {"av"}, {"l"})
      .op("G1", {"l"}, {"g1"}, "backward").op("T", {"av"}, {"at"}, "backward")
      .op("G2", {"g1", "at"}, {"g2"}, "backward").output("l");
  for (json& op : b.doc["ops"]) op["recomputable"] = op["id"] == "A" || op["id"] == "V";
  const roam::Graph g = b.parse();
  const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
  auto kept = [&](const std::vector<std::string>& clones) {
    return roam::remat_internal::span_kept_bytes(g, st, 0, 3, mask(g, clones), 64);
  };
  EXPECT_EQ(kept({}), 1024u + 64u);          // a (through av and at), l
  EXPECT_EQ(kept({"A"}), 1024u + 64u);       // T views the old av: a stays
  EXPECT_EQ(kept({"A", "V"}), 64u);          // T views the recomputed av
}

// Independent recount on random graphs: the bytes span_kept_bytes holds for a set of
// recomputations are those of the storages made by forward ops of g that an op of the expanded
// graph outside the forward pass (a backward op or a recomputation) reads, whichever span
// split is used.
TEST(SpanKeptBytes, EqualsTheExpandedGraphsReadsOnRandomGraphs) {
  int checked = 0;
  for (uint64_t seed = 0; seed < 80; ++seed) {
    roamtest::RandomGraphOptions o;
    o.num_ops = 10 + static_cast<int>(seed % 15);
    json doc = roamtest::random_graph_json(seed, o);
    std::mt19937_64 rng(seed * 13 + 5);
    for (json& op : doc["ops"]) op["recomputable"] = rng() % 10 < 7;
    const roam::Graph g = roam::parse_graph(doc, "random.json");
    const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
    const auto m = static_cast<int32_t>(st.forward.size());
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<roam::OpIdx> clones;
      std::vector<char> cl(g.ops.size(), 0);
      for (roam::OpIdx v : st.forward) {
        if (st.cloneable[v] && rng() % 2) {
          clones.push_back(v);
          cl[v] = 1;
        }
      }
      std::sort(clones.begin(), clones.end());
      roam::remat_internal::Expanded e;
      try {
        e = roam::remat_internal::expand(g, st, clones);
      } catch (const roam::InputError&) {
        continue;
      }
      std::set<roam::StorageIdx> read;
      for (const roam::Op& op : e.graph.ops) {
        if (op.phase == roam::Phase::kForward) continue;
        for (roam::TensorIdx t : op.inputs) {
          const roam::StorageIdx s = e.graph.storage_of[t];
          if (s < 0) continue;
          const roam::OpIdx p = e.graph.storages[s].producer;
          if (p >= 0 && e.graph.ops[p].phase == roam::Phase::kForward) read.insert(s);
        }
      }
      uint64_t want = 0;
      for (roam::StorageIdx s : read) want += roamtest::round_up(e.graph.storages[s].size, 64);
      uint64_t split = 0;
      for (int32_t i = 0; i < m; i += 3) {
        split += roam::remat_internal::span_kept_bytes(g, st, i, std::min(m, i + 3), cl, 64);
      }
      EXPECT_EQ(roam::remat_internal::span_kept_bytes(g, st, 0, m, cl, 64), want) << "seed " << seed;
      EXPECT_EQ(split, want) << "seed " << seed;
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
}

// The greedy staircase, worked by hand. From {A, B, C} (0.8 s, 64 B held), removals score
// seconds saved per byte newly held: A 0.4/1024, B 0.1/2048, C 0.3/512 -> C goes: {A, B}
// (0.5 s, 576 B). Then A 0.4/1024 vs B 0.1/2048 -> A goes: {B} (0.1 s, 1600 B). Then {}
// (0 s, 3648 B).
TEST(SpanStaircase, ChainWorkedByHand) {
  const roam::Graph g = chain_graph().parse();
  const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
  const std::vector<StairPoint> pts = roam::remat_internal::span_staircase(g, st, 0, 4, -1, 64);
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(names(g, pts[0].clones), (std::vector<std::string>{"A", "B", "C"}));
  EXPECT_EQ(pts[0].kept, 64u);
  EXPECT_DOUBLE_EQ(pts[0].cost, 0.8);
  EXPECT_EQ(names(g, pts[1].clones), (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(pts[1].kept, 576u);
  EXPECT_DOUBLE_EQ(pts[1].cost, 0.5);
  EXPECT_EQ(names(g, pts[2].clones), (std::vector<std::string>{"B"}));
  EXPECT_EQ(pts[2].kept, 1600u);
  EXPECT_DOUBLE_EQ(pts[2].cost, 0.1);
  EXPECT_TRUE(pts[3].clones.empty());
  EXPECT_EQ(pts[3].kept, 3648u);
  // `keep` (a boundary's producer) is never recomputed.
  const std::vector<StairPoint> kept_c =
      roam::remat_internal::span_staircase(g, st, 0, 4, g.op_index.at("C"), 64);
  for (const StairPoint& p : kept_c) {
    EXPECT_EQ(std::count(p.clones.begin(), p.clones.end(), g.op_index.at("C")), 0);
  }
  // More cloneable ops than max_ops: recompute-all only.
  const std::vector<StairPoint> capped =
      roam::remat_internal::span_staircase(g, st, 0, 4, -1, 64, /*max_ops=*/2);
  ASSERT_EQ(capped.size(), 1u);
  EXPECT_EQ(capped[0].clones.size(), 3u);
}

// Random forward chains with skip edges: every staircase point recomputes only cloneable ops,
// its seconds and held bytes equal a recount, the points form a Pareto front (held bytes
// rising, seconds falling) ending at recomputing nothing. (The greedy is not exact: on the
// chain above, every subset gives also (1088 B, 0.4 s) from {B, C}, which it skips.)
TEST(SpanStaircase, PointsAreExactAndParetoOrdered) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 6);  // forward ops
    GraphJson b("stair-random-" + std::to_string(trial));
    b.tensor("x", 64, "input");
    for (int i = 0; i < n; ++i) b.tensor("f" + std::to_string(i), 64 * (1 + rng() % 16));
    b.tensor("l", 64);
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> in = {i == 0 ? "x" : "f" + std::to_string(i - 1)};
      if (i >= 2 && rng() % 3 == 0) in.push_back("f" + std::to_string(rng() % (i - 1)));
      b.op("F" + std::to_string(i), in, {"f" + std::to_string(i)});
    }
    b.op("L", {"f" + std::to_string(n - 1)}, {"l"}).output("l");
    std::string prev = "l";
    for (int i = n - 1; i >= 0; --i) {
      const std::string gi = "g" + std::to_string(i);
      b.tensor(gi, 64);
      std::vector<std::string> in = {prev};
      if (rng() % 4 != 0) in.push_back("f" + std::to_string(i));
      b.op("G" + std::to_string(i), in, {gi}, "backward");
      prev = gi;
    }
    for (json& op : b.doc["ops"]) {
      const std::string id = op["id"];
      op["recomputable"] = id[0] == 'F' && rng() % 5 != 0;
      op["cost"] = static_cast<double>(1 + rng() % 50) / 100.0;
    }
    const roam::Graph g = b.parse();
    const roam::remat_internal::Structure st = roam::remat_internal::analyse(g);
    const int32_t end = static_cast<int32_t>(st.forward.size());
    // Exhaustive: every subset of recomputable forward ops, closed the same way (a
    // recomputed op's recomputable producers that it reads are recomputed too only if in the
    // subset), held bytes by span_kept_bytes, seconds summed here.
    std::vector<roam::OpIdx> cand;
    for (roam::OpIdx v : st.forward) {
      if (st.cloneable[v]) cand.push_back(v);
    }
    std::vector<std::pair<uint64_t, double>> all;
    for (uint32_t s = 0; s < (1u << cand.size()); ++s) {
      std::vector<char> cl(g.ops.size(), 0);
      double cost = 0;
      for (size_t k = 0; k < cand.size(); ++k) {
        if (s >> k & 1) {
          cl[cand[k]] = 1;
          cost += *g.ops[cand[k]].cost;
        }
      }
      all.push_back({roam::remat_internal::span_kept_bytes(g, st, 0, end, cl, 64), cost});
    }
    const std::vector<StairPoint> pts = roam::remat_internal::span_staircase(g, st, 0, end, -1, 64);
    ASSERT_FALSE(pts.empty());
    for (size_t k = 0; k < pts.size(); ++k) {
      const StairPoint& p = pts[k];
      std::vector<char> cl(g.ops.size(), 0);
      double cost = 0;
      for (roam::OpIdx v : p.clones) {
        EXPECT_TRUE(st.cloneable[v]);
        cl[v] = 1;
        cost += *g.ops[v].cost;
      }
      EXPECT_NEAR(p.cost, cost, 1e-12) << "trial " << trial;
      EXPECT_EQ(p.kept, roam::remat_internal::span_kept_bytes(g, st, 0, end, cl, 64));
      if (k > 0) {
        EXPECT_GT(p.kept, pts[k - 1].kept);
        EXPECT_LT(p.cost, pts[k - 1].cost);
      }
    }
    // The last point recomputes nothing; no point holds less than the exhaustive least.
    uint64_t least = UINT64_MAX;
    for (const auto& [kept, c] : all) least = std::min(least, kept);
    EXPECT_GE(pts.front().kept, least) << "trial " << trial;
    EXPECT_TRUE(pts.back().clones.empty());
    EXPECT_EQ(pts.back().kept, roam::remat_internal::span_kept_bytes(
                                   g, st, 0, end, std::vector<char>(g.ops.size(), 0), 64));
  }
}

// The time limit: a deadline already passed cuts the search, and the refusal says so.
TEST(GraphRematTimeLimit, PassedDeadlineSaysWithinTheTimeLimit) {
  // A 12-layer chain (too large for the exhaustive search): budget at the proven bound.
  GraphJson b("stair-deadline");
  b.tensor("x", 64, "input");
  const int n = 12;
  for (int i = 0; i < n; ++i) b.tensor("f" + std::to_string(i), 4096);
  b.tensor("l", 64);
  for (int i = 0; i < n; ++i) {
    b.op("F" + std::to_string(i), {i == 0 ? "x" : "f" + std::to_string(i - 1)},
         {"f" + std::to_string(i)});
  }
  b.op("L", {"f" + std::to_string(n - 1)}, {"l"}).output("l");
  std::string prev = "l";
  for (int i = n - 1; i >= 0; --i) {
    b.tensor("g" + std::to_string(i), 64);
    b.op("G" + std::to_string(i), {prev, "f" + std::to_string(i)}, {"g" + std::to_string(i)},
         "backward");
    prev = "g" + std::to_string(i);
  }
  for (json& op : b.doc["ops"]) {
    op["recomputable"] = op["id"].get<std::string>()[0] == 'F';
    op["cost"] = 0.1;
  }
  const roam::Graph g = b.parse();
  const uint64_t bound = g.resident_bytes + roam::recompute_lower_bound(g, 64);
  roam::PlanRequest req;
  req.options.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  try {
    roam::plan_with_budget(g, req, bound);
    FAIL() << "a passed deadline planned a recomputing schedule";
  } catch (const roam::BudgetInfeasible& e) {
    EXPECT_TRUE(e.time_limited);
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot be met within the time limit"), std::string::npos) << what;
    EXPECT_NE(what.find("smallest budget roam meets within the time limit is"),
              std::string::npos) << what;
    EXPECT_EQ(e.lower_bound, bound);
  }
  // Without the deadline the same budget is met or refused without "within the time limit".
  roam::RematStats stats;
  try {
    const roam::PlanResult r = roam::plan_with_budget(g, roam::PlanRequest{}, bound, &stats);
    EXPECT_LE(r.plan.stats.peak_bytes, bound);
    EXPECT_TRUE(roam::validate_plan(g, roam::plan_to_json(g, r.plan), "p.json").valid);
  } catch (const roam::BudgetInfeasible& e) {
    EXPECT_FALSE(e.time_limited);
    EXPECT_EQ(std::string(e.what()).find("within the time limit"), std::string::npos);
  }
  EXPECT_FALSE(stats.time_limited);
}

TEST(GraphRematTimeLimit, MessageWithoutCut) {
  const roam::BudgetInfeasible e(1000, 2000, 500);
  EXPECT_FALSE(e.time_limited);
  EXPECT_EQ(std::string(e.what()),
            "budget 1000 B (0.00 MiB) cannot be met: the smallest budget roam meets is 2000 B "
            "(0.00 MiB); no schedule, recomputation included, fits below 500 B (0.00 MiB, proven); "
            "the smallest budget met is 300.0% above it");
  const roam::BudgetInfeasible cut(1000, 2000, 500, true);
  EXPECT_TRUE(cut.time_limited);
  EXPECT_NE(std::string(cut.what()).find("smallest budget roam meets within the time limit is 2000 B"),
            std::string::npos);
}

TEST(LayoutKnobs, SecondPassProbesParsed) {
  const auto [key, value] = roam::parse_extra_option("second_pass_probes=4", "layout");
  EXPECT_EQ(key, "second_pass_probes");
  EXPECT_EQ(value.get<int64_t>(), 4);
  EXPECT_THROW(roam::parse_extra_option("second_pass_probes=-1", "layout"), std::invalid_argument);
  EXPECT_THROW(roam::parse_extra_option("second_pass_probes=4", "order"), std::invalid_argument);
}

}  // namespace
