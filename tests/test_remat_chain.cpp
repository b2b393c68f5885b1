// Tests of rematerialization on a chain (include/roam/remat_chain.h, src/remat/chain_solver.cpp)
// and of `roam remat` (src/cli/cmd_remat.cpp): the chain reader's errors, the simulator's rules,
// toy5's hand-worked values and rand50's published optima (bench/rotor/README.md), and the
// solver against an exhaustive search over all schedules on random chains of 1-6 stages.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "roam/graph.h"
#include "roam/remat_chain.h"

namespace roam {
namespace {

using nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string rotor_path(const std::string& name) {
  return std::string(ROAM_FIXTURES) + "/../../bench/rotor/" + name;
}

bool same_time(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

// ------------------------------------------------------------------------------------------
// Exhaustive search, written from bench/rotor/README.md and the Fn rule of remat_chain.h alone:
// Dijkstra over memory states (which x_i / xb_i are stored, how far the backward has gone, and
// whether the previous op was a forward run ending at some x_j). Every operation is tried in
// every state; an op whose peak passes the budget is not taken.
// ------------------------------------------------------------------------------------------

class BruteForce {
 public:
  explicit BruteForce(const Chain& c) : c_(c), L_(c.length()) {}

  // The least time of a schedule whose peak is at most `budget`; +inf when none.
  double min_time(uint64_t budget) const { return search(budget, false); }
  // The least peak of any schedule (a bottleneck path: Dijkstra on the running maximum).
  uint64_t min_peak() const { return static_cast<uint64_t>(search(0, true)); }

 private:
  // State: bits 0..L = x_0..x_L, bits L+1..2L = xb_1..xb_L; `front` = L while the loss has not
  // run, then k when B_k is next (d_(k+1) stored), -1 at the end; `run` = j when the previous op
  // was Fc_(j-1) or Fn_(j-1), else -1.
  struct State {
    uint32_t mask;
    int front;
    int run;
  };
  size_t key(const State& s) const {
    return (static_cast<size_t>(s.mask) * (L_ + 2) + (s.front + 1)) * (L_ + 2) + (s.run + 1);
  }
  uint64_t bytes(const State& s) const {
    uint64_t m = 0;
    for (int i = 0; i <= L_; ++i) {
      if (s.mask >> i & 1) m += c_.x[i];
    }
    for (int i = 1; i <= L_; ++i) {
      if (s.mask >> (L_ + i) & 1) m += c_.xbar[i - 1];
    }
    if (s.front < L_ && s.front >= -1) {
      if (s.front >= 0) m += c_.x[s.front + 1];  // d_(front+1)
      else m += c_.x[0];                           // d_0 at the end
    }
    return m;
  }
  uint32_t xbit(int i) const { return uint32_t{1} << i; }
  uint32_t xbbit(int i) const { return uint32_t{1} << (L_ + i); }

  // peak_mode: minimize the running peak (no budget); else minimize time under the budget.
  double search(uint64_t budget, bool peak_mode) const {
    const size_t n = (size_t{1} << (2 * L_ + 1)) * (L_ + 2) * (L_ + 2);
    std::vector<double> dist(n, kInf);
    using Item = std::pair<double, State>;
    auto cmp = [](const Item& a, const Item& b) { return a.first > b.first; };
    std::priority_queue<Item, std::vector<Item>, decltype(cmp)> pq(cmp);
    const State start{xbit(0), L_, -1};
    const double start_cost = peak_mode ? static_cast<double>(c_.x[0]) : 0.0;
    dist[key(start)] = start_cost;
    pq.push({start_cost, start});
    while (!pq.empty()) {
      const auto [d, s] = pq.top();
      pq.pop();
      if (d > dist[key(s)]) continue;
      if (s.front == -1) return d;
      const uint64_t mem = bytes(s);
      auto relax = [&](const State& t, uint64_t peak, double dt) {
        double nd;
        if (peak_mode) {
          nd = std::max(d, static_cast<double>(peak));
        } else {
          if (peak > budget) return;
          nd = d + dt;
        }
        if (nd < dist[key(t)]) {
          dist[key(t)] = nd;
          pq.push({nd, t});
        }
      };
      // Forwards.
      for (int i = 0; i < L_; ++i) {
        const bool has_x = s.mask & xbit(i);
        const bool has_xb = i >= 1 && (s.mask & xbbit(i));
        if (!has_x && !has_xb) continue;
        // Fe_i
        if (!(s.mask & xbbit(i + 1))) {
          relax({s.mask | xbbit(i + 1), s.front, -1}, mem + c_.xbar[i] + c_.ftmp[i], c_.fw[i]);
        }
        if (!(s.mask & xbit(i + 1))) {
          const uint64_t peak = mem + c_.x[i + 1] + c_.ff_ftmp[i];
          relax({s.mask | xbit(i + 1), s.front, i + 1}, peak, c_.ff_fw[i]);  // Fc_i
          if (s.run == i && has_x) {                                        // Fn_i
            relax({(s.mask | xbit(i + 1)) & ~xbit(i), s.front, i + 1}, peak, c_.ff_fw[i]);
          }
        }
      }
      // The loss.
      if (s.front == L_ && (s.mask & (xbit(L_) | xbbit(L_)))) {
        relax({s.mask, L_ - 1, -1}, mem + c_.x[L_] + c_.loss_btmp, c_.loss_bw);
      }
      // B_k.
      const int k = s.front;
      if (k >= 0 && k < L_ && (s.mask & xbbit(k + 1))) {
        const uint64_t peak = mem + c_.x[k] + c_.btmp[k];
        relax({s.mask & ~xbit(k) & ~xbbit(k + 1), k - 1, -1}, peak, c_.bw[k]);
      }
    }
    return kInf;
  }

  const Chain& c_;
  int L_;
};

// ------------------------------------------------------------------------------------------
// Random chains
// ------------------------------------------------------------------------------------------

Chain random_chain(std::mt19937_64& rng, int L) {
  auto pick = [&](std::initializer_list<uint64_t> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  const bool real_times = rng() % 4 == 0;  // sometimes times with rounding, not quarters
  auto time = [&]() {
    if (real_times) return std::uniform_real_distribution<double>(0.0, 3.0)(rng);
    return static_cast<double>(pick({0, 1, 1, 2, 3, 5, 8})) * 0.25;
  };
  auto size = [&]() { return pick({0, 0, 1, 2, 3, 5, 8, 13}); };
  Chain c;
  c.name = "random";
  for (int i = 0; i < L; ++i) {
    c.fw.push_back(time());
    c.bw.push_back(time());
    c.ftmp.push_back(size());
    c.btmp.push_back(size());
  }
  for (int i = 0; i <= L; ++i) c.x.push_back(size());
  const bool record_has_output = rng() % 4 != 0;  // mostly xbar[i] >= x[i+1], as in real chains
  for (int i = 0; i < L; ++i) c.xbar.push_back((record_has_output ? c.x[i + 1] : 0) + size());
  if (rng() % 2) {
    for (int i = 0; i < L; ++i) c.ff_fw.push_back(time());
  } else {
    c.ff_fw = c.fw;
  }
  if (rng() % 2) {
    for (int i = 0; i < L; ++i) c.ff_ftmp.push_back(size());
  } else {
    c.ff_ftmp = c.ftmp;
  }
  if (rng() % 2) {
    c.loss_bw = time();
    c.loss_btmp = size();
  }
  return c;
}

std::string dump(const Chain& c) {
  json j;
  j["fw"] = c.fw;
  j["bw"] = c.bw;
  j["ff_fw"] = c.ff_fw;
  j["x"] = c.x;
  j["xbar"] = c.xbar;
  j["ftmp"] = c.ftmp;
  j["btmp"] = c.btmp;
  j["ff_ftmp"] = c.ff_ftmp;
  j["loss_bw"] = c.loss_bw;
  j["loss_btmp"] = c.loss_btmp;
  return j.dump();
}

// solve_chain at `budget`: its time (+inf if none), after checking the schedule with the
// simulator (valid, same time, same peak, within the budget).
double checked_solve(const Chain& c, uint64_t budget) {
  const auto s = solve_chain(c, budget);
  if (!s) return kInf;
  const ChainSimulation sim = simulate_chain_schedule(c, s->ops);
  EXPECT_TRUE(sim.valid) << sim.problem << " at budget " << budget << " " << dump(c);
  EXPECT_TRUE(same_time(sim.time, s->time)) << sim.time << " vs " << s->time;
  EXPECT_EQ(sim.peak_bytes, s->peak_bytes) << "budget " << budget << " " << dump(c);
  EXPECT_LE(s->peak_bytes, budget);
  return s->time;
}

// ------------------------------------------------------------------------------------------
// toy5 and rand50 (bench/rotor/README.md)
// ------------------------------------------------------------------------------------------

TEST(ChainToy5, NoRematAndHandWorkedBudgets) {
  const Chain c = load_chain(rotor_path("toy5.json"));
  ASSERT_EQ(c.length(), 5);
  const ChainSchedule nr = no_remat_schedule(c);
  EXPECT_EQ(nr.time, 24);
  EXPECT_EQ(nr.peak_bytes, 410u);
  const ChainSimulation sim = simulate_chain_schedule(c, nr.ops);
  EXPECT_TRUE(sim.valid) << sim.problem;
  EXPECT_EQ(sim.time, 24);
  EXPECT_EQ(sim.peak_bytes, 410u);
  EXPECT_EQ(to_string(nr.ops.front()), "Fe_0");
  EXPECT_EQ(to_string(nr.ops[5]), "L");
  EXPECT_EQ(to_string(nr.ops.back()), "B_0");

  EXPECT_EQ(checked_solve(c, 410), 24);
  EXPECT_EQ(checked_solve(c, 300), 28);
  const auto s250 = solve_chain(c, 250);
  ASSERT_TRUE(s250.has_value());
  EXPECT_EQ(s250->time, 28);
  EXPECT_LE(s250->peak_bytes, 250u);
  EXPECT_EQ(checked_solve(c, 250), 28);
  EXPECT_FALSE(solve_chain(c, 230).has_value());
  // The exhaustive search agrees, and puts the smallest feasible budget at 240 (time 31).
  const BruteForce bf(c);
  EXPECT_EQ(bf.min_time(300), 28);
  EXPECT_EQ(bf.min_time(250), 28);
  EXPECT_EQ(bf.min_time(230), kInf);
  EXPECT_EQ(min_feasible_budget(c), bf.min_peak());
  EXPECT_EQ(min_feasible_budget(c), 240u);
  EXPECT_EQ(checked_solve(c, 240), bf.min_time(240));
  EXPECT_EQ(checked_solve(c, 239), kInf);
}

TEST(ChainRand50, PublishedOptimaAtEveryBudget) {
  const Chain c = load_chain(rotor_path("rand50.json"));
  ASSERT_EQ(c.length(), 50);
  const ChainSchedule nr = no_remat_schedule(c);
  EXPECT_NEAR(nr.time, 451.58, 0.005);
  EXPECT_EQ(nr.peak_bytes, 4463788032u);
  // The published solver, run exactly (bench/rotor/README.md): roam's exact staircases reach
  // the same optima.
  const std::vector<std::pair<uint64_t, double>> published = {
      {3571030425u, 468.153}, {2678272819u, 490.089}, {2231894016u, 502.841},
      {1785515212u, 516.086}, {1339136409u, 535.760}, {892757606u, 563.649}};
  for (const auto& [budget, time] : published) {
    const double t = checked_solve(c, budget);
    EXPECT_NEAR(t, time, 5e-4) << "budget " << budget;
  }
}

TEST(ChainRand50, FrontierIsConsistentWithSolve) {
  const Chain c = load_chain(rotor_path("rand50.json"));
  const auto f = chain_frontier(c);
  ASSERT_GE(f.size(), 2u);
  EXPECT_EQ(f.front().first, min_feasible_budget(c));
  EXPECT_TRUE(same_time(f.back().second, no_remat_schedule(c).time));
  EXPECT_LE(f.back().first, no_remat_schedule(c).peak_bytes);
  for (size_t i = 1; i < f.size(); ++i) {
    EXPECT_LT(f[i - 1].first, f[i].first);
    EXPECT_GT(f[i - 1].second, f[i].second);
  }
  EXPECT_FALSE(solve_chain(c, f.front().first - 1).has_value());
  // A few breakpoints and the budgets just below them.
  for (size_t i : {size_t{0}, f.size() / 3, f.size() / 2, f.size() - 1}) {
    EXPECT_TRUE(same_time(checked_solve(c, f[i].first), f[i].second)) << i;
    if (i > 0) {
      EXPECT_TRUE(same_time(checked_solve(c, f[i].first - 1), f[i - 1].second)) << i;
    }
  }
}

// ------------------------------------------------------------------------------------------
// The solver against the exhaustive search
// ------------------------------------------------------------------------------------------

// ROAM_CHAIN_SOAK=N runs N times as many chains (a longer soak than the default few hundred).
int soak() {
  const char* v = std::getenv("ROAM_CHAIN_SOAK");
  const int n = v ? std::atoi(v) : 1;
  return std::max(1, n);
}

void check_against_brute_force(int L, int chains, uint64_t seed) {
  chains *= soak();
  std::mt19937_64 rng(seed);
  for (int n = 0; n < chains; ++n) {
    const Chain c = random_chain(rng, L);
    const BruteForce bf(c);
    const ChainSchedule nr = no_remat_schedule(c);
    const ChainSimulation nr_sim = simulate_chain_schedule(c, nr.ops);
    ASSERT_TRUE(nr_sim.valid) << nr_sim.problem;
    ASSERT_EQ(nr_sim.peak_bytes, nr.peak_bytes);
    ASSERT_TRUE(same_time(nr_sim.time, nr.time));
    ASSERT_TRUE(same_time(bf.min_time(nr.peak_bytes), nr.time));
    const uint64_t nr_peak = nr.peak_bytes;
    const uint64_t mf = bf.min_peak();
    ASSERT_EQ(min_feasible_budget(c), mf) << dump(c);
    ASSERT_LE(mf, nr_peak);
    std::vector<uint64_t> budgets = {mf, nr_peak, nr_peak + 3};
    if (mf > 0) budgets.push_back(mf - 1);
    for (int k = 0; k < 3; ++k) {
      budgets.push_back(std::uniform_int_distribution<uint64_t>(mf, nr_peak)(rng));
    }
    for (uint64_t b : budgets) {
      const double expect = bf.min_time(b);
      const double got = checked_solve(c, b);
      ASSERT_TRUE(same_time(got, expect)) << "budget " << b << ": solver " << got
                                          << ", exhaustive " << expect << " " << dump(c);
    }
    // The frontier: budgets increasing, times strictly decreasing, first at the smallest
    // feasible budget, last at the no-remat time; at and between breakpoints it is the
    // exhaustive optimum.
    const auto f = chain_frontier(c);
    ASSERT_FALSE(f.empty());
    EXPECT_EQ(f.front().first, mf);
    EXPECT_TRUE(same_time(f.back().second, no_remat_schedule(c).time));
    for (size_t i = 0; i < f.size(); ++i) {
      if (i > 0) {
        ASSERT_LT(f[i - 1].first, f[i].first);
        ASSERT_GT(f[i - 1].second, f[i].second);
      }
      ASSERT_TRUE(same_time(bf.min_time(f[i].first), f[i].second)) << i << " " << dump(c);
      ASSERT_TRUE(same_time(checked_solve(c, f[i].first), f[i].second));
      if (f[i].first > 0) {
        const double below = i == 0 ? kInf : f[i - 1].second;
        ASSERT_TRUE(same_time(bf.min_time(f[i].first - 1), below)) << i << " " << dump(c);
      }
      if (i + 1 < f.size() && f[i + 1].first - f[i].first > 1) {
        const uint64_t mid = std::uniform_int_distribution<uint64_t>(f[i].first + 1, f[i + 1].first - 1)(rng);
        ASSERT_TRUE(same_time(checked_solve(c, mid), f[i].second));
      }
    }
  }
}

TEST(ChainBruteForce, OneAndTwoStages) {
  check_against_brute_force(1, 60, 1);
  check_against_brute_force(2, 80, 2);
}
TEST(ChainBruteForce, ThreeStages) { check_against_brute_force(3, 80, 3); }
TEST(ChainBruteForce, FourStages) { check_against_brute_force(4, 60, 4); }
TEST(ChainBruteForce, FiveStages) { check_against_brute_force(5, 60, 5); }
TEST(ChainBruteForce, SixStages) { check_against_brute_force(6, 30, 6); }

TEST(ChainBruteForce, ZeroSizes) {
  // Every activation, record and transient 0: any schedule fits 0 bytes; the fastest is the
  // no-remat one.
  std::mt19937_64 rng(7);
  Chain c = random_chain(rng, 4);
  std::fill(c.x.begin(), c.x.end(), 0);
  for (auto* v : {&c.xbar, &c.ftmp, &c.btmp, &c.ff_ftmp}) std::fill(v->begin(), v->end(), 0);
  c.loss_btmp = 0;
  EXPECT_EQ(min_feasible_budget(c), 0u);
  EXPECT_TRUE(same_time(checked_solve(c, 0), no_remat_schedule(c).time));
  EXPECT_EQ(chain_frontier(c).size(), 1u);
}

// ------------------------------------------------------------------------------------------
// The simulator's rules
// ------------------------------------------------------------------------------------------

std::vector<ChainOp> ops(std::initializer_list<const char*> names) {
  std::vector<ChainOp> out;
  for (const char* n : names) out.push_back(parse_chain_op(n));
  return out;
}

TEST(ChainSimulator, Rules) {
  const Chain c = load_chain(rotor_path("toy5.json"));
  auto problem = [&](std::initializer_list<const char*> names) {
    const ChainSimulation s = simulate_chain_schedule(c, ops(names));
    EXPECT_FALSE(s.valid);
    return s.problem;
  };
  EXPECT_NE(problem({"Fe_1"}).find("needs a^1"), std::string::npos);
  EXPECT_NE(problem({"Fe_0", "Fe_0"}).find("already stored"), std::string::npos);
  EXPECT_NE(problem({"Fe_0", "Fn_0"}).find("never valid"), std::string::npos);
  EXPECT_NE(problem({"Fe_0", "Fn_1"}).find("must directly follow"), std::string::npos);
  EXPECT_NE(problem({"Fc_0", "Fe_1", "Fn_1"}).find("must directly follow"), std::string::npos);
  EXPECT_NE(problem({"B_0"}).find("needs d_1"), std::string::npos);
  EXPECT_NE(problem({"Fe_7"}).find("no stage 7"), std::string::npos);
  EXPECT_NE(problem({"Fe_0"}).find("ends before stage 4"), std::string::npos);
  EXPECT_NE(problem({"Fe_0", "Fe_1", "Fe_2", "Fe_3", "Fe_4", "L", "L"}).find("already run"),
            std::string::npos);

  // A forward run: Fc_0 Fn_1 Fn_2 keeps x_0 and x_3 only. Then Fe_3 Fe_4 L B_4 B_3, and
  // stages 0..2 from x_0: peaks by hand.
  const ChainSimulation s = simulate_chain_schedule(
      c, ops({"Fc_0", "Fn_1", "Fn_2", "Fe_3", "Fe_4", "L", "B_4", "B_3", "Fe_0", "Fe_1", "Fe_2",
              "B_2", "B_1", "B_0"}));
  ASSERT_TRUE(s.valid) << s.problem;
  EXPECT_EQ(s.time, 1 + 2 + 1 + 24);
  // B_3: x_0 10 + x_3 60 + xb_4 40 + d_4 20 + d_3 60 + btmp 40 = 230; Fe_2: x_0 + xb_1 80 +
  // xb_2 40 + xb_3 120 + d_3 60 = 310; B_2: 310 + d_2 20 + btmp 10 = 340.
  EXPECT_EQ(s.peak_bytes, 340u);
}

TEST(ChainOpNames, RoundTripAndErrors) {
  for (const char* n : {"Fc_3", "Fn_0", "Fe_1", "L", "B_2", "B_2147483647"}) {
    EXPECT_EQ(to_string(parse_chain_op(n)), n);
  }
  EXPECT_EQ(parse_chain_op("Fc_3"), (ChainOp{ChainOp::Kind::kFc, 3}));
  EXPECT_EQ(parse_chain_op("L").kind, ChainOp::Kind::kLoss);
  for (const char* n : {"", "F_1", "Fc", "Fc_", "Fc_-1", "Fc_01", "Fc_1x", "L_0", "B_2147483648",
                        "fc_1", "Fc_ 1", "Bx_1"}) {
    EXPECT_THROW(parse_chain_op(n), std::invalid_argument) << n;
  }
}

// ------------------------------------------------------------------------------------------
// The reader's errors
// ------------------------------------------------------------------------------------------

json toy_doc() {
  return json::parse(R"({"name": "t", "fw": [1, 2], "bw": [2, 4], "x": [10, 20, 5],
                         "xbar": [30, 10], "ftmp": [0, 1], "btmp": [3, 0]})");
}

void expect_input_error(const json& doc, const std::string& field, const std::string& id) {
  try {
    parse_chain(doc, "c.json");
    ADD_FAILURE() << "no error for " << doc.dump();
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "c.json");
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_EQ(e.id(), id) << e.what();
  }
}

TEST(ChainReader, DefaultsAndErrors) {
  const Chain c = parse_chain(toy_doc(), "c.json");
  EXPECT_EQ(c.length(), 2);
  EXPECT_EQ(c.ff_fw, c.fw);
  EXPECT_EQ(c.ff_ftmp, c.ftmp);
  EXPECT_EQ(c.loss_bw, 0);
  EXPECT_EQ(c.loss_btmp, 0u);

  expect_input_error(json::array(), "(document)", "");
  for (const char* key : {"fw", "bw", "x", "xbar", "ftmp", "btmp"}) {
    json d = toy_doc();
    d.erase(key);
    expect_input_error(d, key, "");
    d = toy_doc();
    d[key].push_back(1);
    expect_input_error(d, key == std::string("fw") ? "bw" : key, "");  // fw sets L
    d = toy_doc();
    d[key] = "nope";
    expect_input_error(d, key, "");
  }
  json d = toy_doc();
  d["fw"] = json::array();
  expect_input_error(d, "fw", "");  // L = 0
  d = toy_doc();
  d["x"][1] = -1;
  expect_input_error(d, "x", "1");
  d = toy_doc();
  d["xbar"][0] = 1.5;
  expect_input_error(d, "xbar", "0");
  d = toy_doc();
  d["btmp"][1] = 2.0;  // written as a float
  expect_input_error(d, "btmp", "1");
  d = toy_doc();
  d["ftmp"][0] = "3";
  expect_input_error(d, "ftmp", "0");
  d = toy_doc();
  d["bw"][1] = -0.5;
  expect_input_error(d, "bw", "1");
  d = toy_doc();
  d["fw"][0] = std::nan("");
  expect_input_error(d, "fw", "0");
  d = toy_doc();
  d["fw"][1] = std::numeric_limits<double>::infinity();
  expect_input_error(d, "fw", "1");
  // Finite but past 1e15 s: sums of such times lose the other stages' seconds (1e308 made a
  // fitting budget infeasible, found by an adversarial review).
  d = toy_doc();
  d["fw"][0] = 1e308;
  expect_input_error(d, "fw", "0");
  d["fw"][0] = 1e15;
  EXPECT_NO_THROW(parse_chain(d, "c.json"));
  d["bw"][1] = 1.5e15;
  expect_input_error(d, "bw", "1");
  d = toy_doc();
  d["ff_fw"] = {1};
  expect_input_error(d, "ff_fw", "");
  d = toy_doc();
  d["ff_ftmp"] = {1, -2};
  expect_input_error(d, "ff_ftmp", "1");
  d = toy_doc();
  d["loss_bw"] = -1;
  expect_input_error(d, "loss_bw", "");
  d = toy_doc();
  d["loss_btmp"] = -1;
  expect_input_error(d, "loss_btmp", "");
  d = toy_doc();
  d["name"] = 3;
  expect_input_error(d, "name", "");
  // Sizes whose total passes 2^62 (each fits in 64 bits).
  d = toy_doc();
  d["x"] = {uint64_t{1} << 60, 0, 0};  // counted twice (activation and gradient)
  EXPECT_NO_THROW(parse_chain(d, "c.json"));
  d["x"] = {uint64_t{1} << 61, 1, 0};  // 2 x 2^61 = 2^62, then one byte more
  expect_input_error(d, "x", "1");
  d = toy_doc();
  d["xbar"][1] = std::numeric_limits<uint64_t>::max();
  expect_input_error(d, "xbar", "1");
  d = toy_doc();
  d["loss_btmp"] = uint64_t{1} << 62;
  expect_input_error(d, "loss_btmp", "");
}

TEST(ChainReader, Files) {
  EXPECT_THROW(load_chain(rotor_path("no_such_chain.json")), InputError);
  const Chain c = load_chain(rotor_path("rand50.json"));
  EXPECT_EQ(c.name, "rand50-s1");
  EXPECT_EQ(c.x.size(), 51u);
}

// ------------------------------------------------------------------------------------------
// `roam remat`
// ------------------------------------------------------------------------------------------

class ChainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("roam_remat_tests_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
  }
  static std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Runs `roam ARGS`; returns the exit status, stdout and stderr in out_/err_.
  int run(const std::string& args) {
    const std::string cmd = std::string("'") + ROAM_BIN + "' " + args + " >'" + file("stdout") +
                            "' 2>'" + file("stderr") + "'";
    const int rc = std::system(cmd.c_str());
    out_ = slurp(file("stdout"));
    err_ = slurp(file("stderr"));
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  std::filesystem::path dir_;
  std::string out_, err_;
};

TEST_F(ChainCli, SolveWriteAndCheck) {
  const std::string toy = rotor_path("toy5.json");
  ASSERT_EQ(run("remat --chain '" + toy + "' --budget 250 -o '" + file("s.json") + "'"), 0) << err_;
  EXPECT_NE(out_.find("time           28.000000 s"), std::string::npos) << out_;
  EXPECT_NE(out_.find("overhead 16.67%"), std::string::npos) << out_;
  const json doc = json::parse(slurp(file("s.json")));
  EXPECT_EQ(doc.at("time").get<double>(), 28);
  EXPECT_LE(doc.at("peak_bytes").get<uint64_t>(), 250u);
  ASSERT_TRUE(doc.at("schedule").is_array());
  EXPECT_EQ(doc.at("schedule").front(), "Fc_0");

  ASSERT_EQ(run("remat --chain '" + toy + "' --check '" + file("s.json") + "'"), 0) << err_;
  EXPECT_NE(out_.find("28.000000 s"), std::string::npos) << out_;
  EXPECT_NE(out_.find("peak           250 B"), std::string::npos) << out_;

  // Units: 0.25 KiB = 256 bytes.
  ASSERT_EQ(run("remat --chain '" + toy + "' --budget 0.25KiB"), 0) << err_;
  EXPECT_NE(out_.find("budget         256 B"), std::string::npos) << out_;
  ASSERT_EQ(run("remat --chain '" + toy + "' --budget '410 B'"), 0) << err_;
  EXPECT_NE(out_.find("time           24.000000 s (overhead 0.00%"), std::string::npos) << out_;
}

TEST_F(ChainCli, InfeasibleBudget) {
  const std::string toy = rotor_path("toy5.json");
  EXPECT_EQ(run("remat --chain '" + toy + "' --budget 230 -o '" + file("s.json") + "'"), 3);
  EXPECT_FALSE(std::filesystem::exists(file("s.json")));
  EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
  EXPECT_NE(err_.find("smallest feasible budget is 240 bytes"), std::string::npos) << err_;
}

TEST_F(ChainCli, CheckInvalidAndUnreadable) {
  const std::string toy = rotor_path("toy5.json");
  write("bad.json", R"({"schedule": ["Fe_0", "Fe_1", "Fn_1"]})");
  EXPECT_EQ(run("remat --chain '" + toy + "' --check '" + file("bad.json") + "'"), 1);
  EXPECT_NE(out_.find("must directly follow"), std::string::npos) << out_;
  write("short.json", R"({"schedule": ["Fe_0", "Fe_1"]})");
  EXPECT_EQ(run("remat --chain '" + toy + "' --check '" + file("short.json") + "'"), 1);

  write("name.json", R"({"schedule": ["Fe_0", "Fx_1"]})");
  EXPECT_EQ(run("remat --chain '" + toy + "' --check '" + file("name.json") + "'"), 2);
  EXPECT_NE(err_.find("name.json: field schedule (id '1')"), std::string::npos) << err_;
  EXPECT_EQ(std::count(err_.begin(), err_.end(), '\n'), 1) << err_;
  write("notjson.json", "{");
  EXPECT_EQ(run("remat --chain '" + toy + "' --check '" + file("notjson.json") + "'"), 2);
  write("noarray.json", R"({"schedule": 3})");
  EXPECT_EQ(run("remat --chain '" + toy + "' --check '" + file("noarray.json") + "'"), 2);
  EXPECT_NE(err_.find("field schedule"), std::string::npos) << err_;
}

TEST_F(ChainCli, BadInput) {
  const std::string toy = rotor_path("toy5.json");
  write("chain.json", R"({"fw": [1], "bw": [1], "x": [1, -2], "xbar": [1], "ftmp": [0], "btmp": [0]})");
  EXPECT_EQ(run("remat --chain '" + file("chain.json") + "' --budget 100 -o '" + file("o.json") + "'"), 2);
  EXPECT_NE(err_.find("field x (id '1')"), std::string::npos) << err_;
  EXPECT_FALSE(std::filesystem::exists(file("o.json")));
  EXPECT_EQ(run("remat --chain '" + file("missing.json") + "' --budget 100"), 2);
  for (const char* b : {"12XB", "-5", "1.5", "abc", "1e9", "99999999999999999999", "8GiBx"}) {
    EXPECT_EQ(run("remat --chain '" + toy + "' --budget '" + std::string(b) + "'"), 2) << b;
    EXPECT_NE(err_.find("--budget"), std::string::npos) << b << ": " << err_;
  }
  EXPECT_EQ(run("remat --chain '" + toy + "'"), 2);
  EXPECT_EQ(run("remat --chain '" + toy + "' --budget 300 --frontier"), 2);
  EXPECT_EQ(run("remat --chain '" + toy + "' --frontier -o '" + file("o.json") + "'"), 2);
  EXPECT_EQ(run("remat --chain '" + toy + "' --budget 300 -o '" + toy + "'"), 2);
}

TEST_F(ChainCli, FrontierAndHelp) {
  const std::string toy = rotor_path("toy5.json");
  ASSERT_EQ(run("remat --chain '" + toy + "' --frontier"), 0) << err_;
  EXPECT_NE(out_.find("\n240 "), std::string::npos) << out_;
  EXPECT_NE(out_.find("\n250 0.000 28.000000"), std::string::npos) << out_;
  ASSERT_EQ(run("remat --help"), 0);
  for (const char* s : {"bytes", "seconds", "KiB", "Exit 0", "3 no schedule fits", "TOMS 2024"}) {
    EXPECT_NE(out_.find(s), std::string::npos) << s << "\n" << out_;
  }
}

}  // namespace
}  // namespace roam
