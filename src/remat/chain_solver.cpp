// Rematerialization on a chain (include/roam/remat_chain.h): the chain reader, the schedule
// simulator (the checker) and the exact dynamic program over staircases.
#include "roam/remat_chain.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "roam/graph.h"

namespace roam {

namespace {

using nlohmann::json;

constexpr double kMaxStageSeconds = 1e15;  // a stage's time (about 3e7 years)

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

struct Reader {
  const std::string& file;
  [[noreturn]] void fail(const std::string& field, const std::string& id,
                         const std::string& message) const {
    throw InputError(file, field, id, message);
  }

  const json* array(const json& doc, const char* key, size_t length, bool required) const {
    auto it = doc.find(key);
    if (it == doc.end()) {
      if (required) fail(key, "", "missing required field");
      return nullptr;
    }
    if (!it->is_array()) fail(key, "", "must be an array, got " + std::string(it->type_name()));
    if (it->size() != length) {
      fail(key, "", "must have " + std::to_string(length) + " entries (L = " +
                        std::to_string(doc.at("fw").size()) + " stages), has " +
                        std::to_string(it->size()));
    }
    return &*it;
  }

  double time(const json& v, const std::string& field, const std::string& id) const {
    if (!v.is_number()) fail(field, id, "time must be a number of seconds, got " + v.dump());
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0) {
      fail(field, id, "time must be a finite number of seconds >= 0, got " + v.dump());
    }
    // A schedule's time sums up to L runs of every stage: far below this, no sum overflows or
    // loses the seconds of the other stages (1e308 once made the solver call a fitting budget
    // infeasible).
    if (d > kMaxStageSeconds) {
      fail(field, id, "time must be at most 1e15 seconds, got " + v.dump());
    }
    return d;
  }

  uint64_t size(const json& v, const std::string& field, const std::string& id) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) {
      if (v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
      fail(field, id, "size must be a non-negative integer number of bytes, got " + v.dump());
    }
    if (v.is_number_float()) {
      fail(field, id, "size must be written as a non-negative integer number of bytes, got " +
                          v.dump());
    }
    fail(field, id, "size must be a number of bytes, got " + v.dump());
  }

  std::vector<double> times(const json& arr, const char* key) const {
    std::vector<double> out;
    out.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) out.push_back(time(arr[i], key, std::to_string(i)));
    return out;
  }

  std::vector<uint64_t> sizes(const json& arr, const char* key) const {
    std::vector<uint64_t> out;
    out.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) out.push_back(size(arr[i], key, std::to_string(i)));
    return out;
  }
};

// Adds `v` to `total`; false once the total passes kMaxChainTotalBytes.
bool add_total(uint64_t& total, uint64_t v) {
  if (v > kMaxChainTotalBytes) return false;
  total += v;  // both <= 2^62: no wrap
  return total <= kMaxChainTotalBytes;
}

}  // namespace

Chain parse_chain(const json& doc, const std::string& file) {
  const Reader r{file};
  if (!doc.is_object()) r.fail("(document)", "", "a chain must be a JSON object");
  auto fw_it = doc.find("fw");
  if (fw_it == doc.end()) r.fail("fw", "", "missing required field");
  if (!fw_it->is_array()) r.fail("fw", "", "must be an array, got " + std::string(fw_it->type_name()));
  const size_t L = fw_it->size();
  if (L == 0) r.fail("fw", "", "the chain has no stage (L = 0)");
  if (L > static_cast<size_t>(std::numeric_limits<int32_t>::max() - 2)) {
    r.fail("fw", "", "too many stages");
  }

  Chain c;
  if (auto it = doc.find("name"); it != doc.end()) {
    if (!it->is_string()) r.fail("name", "", "must be a string, got " + it->dump());
    c.name = it->get<std::string>();
  }
  c.fw = r.times(*fw_it, "fw");
  c.bw = r.times(*r.array(doc, "bw", L, true), "bw");
  c.x = r.sizes(*r.array(doc, "x", L + 1, true), "x");
  c.xbar = r.sizes(*r.array(doc, "xbar", L, true), "xbar");
  c.ftmp = r.sizes(*r.array(doc, "ftmp", L, true), "ftmp");
  c.btmp = r.sizes(*r.array(doc, "btmp", L, true), "btmp");
  const json* ff_fw = r.array(doc, "ff_fw", L, false);
  c.ff_fw = ff_fw ? r.times(*ff_fw, "ff_fw") : c.fw;
  const json* ff_ftmp = r.array(doc, "ff_ftmp", L, false);
  c.ff_ftmp = ff_ftmp ? r.sizes(*ff_ftmp, "ff_ftmp") : c.ftmp;
  if (auto it = doc.find("loss_bw"); it != doc.end()) c.loss_bw = r.time(*it, "loss_bw", "");
  if (auto it = doc.find("loss_btmp"); it != doc.end()) c.loss_btmp = r.size(*it, "loss_btmp", "");

  // Every byte count the simulator or the solver forms is at most this total.
  uint64_t total = 0;
  auto add = [&](uint64_t v, const char* key, const std::string& id) {
    if (!add_total(total, v)) {
      r.fail(key, id,
             "sizes too large: the chain's total (2 x sum(x) + sum(xbar) + all transients) "
             "exceeds 2^62 bytes");
    }
  };
  auto check = [&](const std::vector<uint64_t>& v, const char* key, int times) {
    for (size_t i = 0; i < v.size(); ++i) {
      for (int k = 0; k < times; ++k) add(v[i], key, std::to_string(i));
    }
  };
  check(c.x, "x", 2);  // activation and gradient
  check(c.xbar, "xbar", 1);
  check(c.ftmp, "ftmp", 1);
  check(c.btmp, "btmp", 1);
  check(c.ff_ftmp, "ff_ftmp", 1);
  add(c.loss_btmp, "loss_btmp", "");
  return c;
}

Chain load_chain(const std::string& path) { return parse_chain(read_json_file(path), path); }

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

std::string to_string(const ChainOp& op) {
  switch (op.kind) {
    case ChainOp::Kind::kFc: return "Fc_" + std::to_string(op.stage);
    case ChainOp::Kind::kFn: return "Fn_" + std::to_string(op.stage);
    case ChainOp::Kind::kFe: return "Fe_" + std::to_string(op.stage);
    case ChainOp::Kind::kLoss: return "L";
    case ChainOp::Kind::kB: return "B_" + std::to_string(op.stage);
  }
  return "?";
}

ChainOp parse_chain_op(const std::string& name) {
  if (name == "L") return {ChainOp::Kind::kLoss, 0};
  auto bad = [&]() -> ChainOp {
    throw std::invalid_argument("not a chain operation: \"" + name +
                                "\" (expected Fc_i, Fn_i, Fe_i, L or B_i with i a stage number)");
  };
  const size_t us = name.find('_');
  if (us == std::string::npos) return bad();
  const std::string kind = name.substr(0, us);
  const std::string num = name.substr(us + 1);
  ChainOp op;
  if (kind == "Fc") op.kind = ChainOp::Kind::kFc;
  else if (kind == "Fn") op.kind = ChainOp::Kind::kFn;
  else if (kind == "Fe") op.kind = ChainOp::Kind::kFe;
  else if (kind == "B") op.kind = ChainOp::Kind::kB;
  else return bad();
  if (num.empty() || (num.size() > 1 && num[0] == '0')) return bad();
  for (char ch : num) {
    if (ch < '0' || ch > '9') return bad();
  }
  int32_t stage = 0;
  const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), stage);
  if (ec != std::errc() || ptr != num.data() + num.size()) return bad();
  op.stage = stage;
  return op;
}

// ---------------------------------------------------------------------------------------------
// The simulator: the README's rules, item by item (x_i, xb_i, d_i held or not).
// ---------------------------------------------------------------------------------------------

ChainSimulation simulate_chain_schedule(const Chain& chain, const std::vector<ChainOp>& ops) {
  ChainSimulation sim;
  const int32_t L = chain.length();
  std::vector<char> x(L + 1, 0), xb(L + 1, 0), d(L + 1, 0), done(L, 0);
  bool loss_done = false;
  uint64_t mem = chain.x[0];
  x[0] = 1;
  sim.peak_bytes = mem;
  // The position whose x the previous op stored when it was Fc or Fn (a forward run), else -1.
  int32_t run_end = -1;

  for (size_t pos = 0; pos < ops.size(); ++pos) {
    const ChainOp& op = ops[pos];
    auto fail = [&](const std::string& why) {
      sim.valid = false;
      sim.problem = "op " + std::to_string(pos) + " (" + to_string(op) + "): " + why;
      return sim;
    };
    const int32_t i = op.stage;
    uint64_t transient = 0;
    int32_t next_run_end = -1;
    switch (op.kind) {
      case ChainOp::Kind::kFc:
      case ChainOp::Kind::kFn:
      case ChainOp::Kind::kFe: {
        if (i < 0 || i >= L) return fail("no stage " + std::to_string(i) + " (L = " + std::to_string(L) + ")");
        if (!x[i] && !xb[i]) {
          return fail("needs a^" + std::to_string(i) + " (x_" + std::to_string(i) + " or xb_" +
                      std::to_string(i) + "), neither is stored");
        }
        if (op.kind == ChainOp::Kind::kFn && run_end != i) {
          if (i == 0) return fail("Fn_0 is never valid: it would free x_0, which no op recomputes");
          return fail("Fn_" + std::to_string(i) + " must directly follow Fc_" +
                      std::to_string(i - 1) + " or Fn_" + std::to_string(i - 1) +
                      " (it continues a forward run and frees the x_" + std::to_string(i) +
                      " that op stored)");
        }
        if (op.kind == ChainOp::Kind::kFe) {
          if (xb[i + 1]) return fail("xb_" + std::to_string(i + 1) + " is already stored");
          xb[i + 1] = 1;
          mem += chain.xbar[i];
          transient = chain.ftmp[i];
          sim.time += chain.fw[i];
        } else {
          if (x[i + 1]) return fail("x_" + std::to_string(i + 1) + " is already stored");
          x[i + 1] = 1;
          mem += chain.x[i + 1];
          transient = chain.ff_ftmp[i];
          sim.time += chain.ff_fw[i];
          next_run_end = i + 1;
        }
        sim.peak_bytes = std::max(sim.peak_bytes, mem + transient);
        if (op.kind == ChainOp::Kind::kFn) {
          x[i] = 0;
          mem -= chain.x[i];
        }
        break;
      }
      case ChainOp::Kind::kLoss: {
        if (loss_done) return fail("the loss has already run");
        if (!x[L] && !xb[L]) {
          return fail("needs a^" + std::to_string(L) + " (x_" + std::to_string(L) + " or xb_" +
                      std::to_string(L) + "), neither is stored");
        }
        loss_done = true;
        d[L] = 1;
        mem += chain.x[L];
        sim.time += chain.loss_bw;
        sim.peak_bytes = std::max(sim.peak_bytes, mem + chain.loss_btmp);
        break;
      }
      case ChainOp::Kind::kB: {
        if (i < 0 || i >= L) return fail("no stage " + std::to_string(i) + " (L = " + std::to_string(L) + ")");
        if (done[i]) return fail("stage " + std::to_string(i) + " was already back-propagated");
        if (!d[i + 1]) return fail("needs d_" + std::to_string(i + 1) + ", not stored");
        if (!xb[i + 1]) return fail("needs xb_" + std::to_string(i + 1) + ", not stored");
        if (d[i]) return fail("d_" + std::to_string(i) + " is already stored");
        done[i] = 1;
        d[i] = 1;
        mem += chain.x[i];
        sim.time += chain.bw[i];
        sim.peak_bytes = std::max(sim.peak_bytes, mem + chain.btmp[i]);
        if (x[i]) {
          x[i] = 0;
          mem -= chain.x[i];
        }
        d[i + 1] = 0;
        mem -= chain.x[i + 1];
        xb[i + 1] = 0;
        mem -= chain.xbar[i];
        break;
      }
    }
    run_end = next_run_end;
  }
  for (int32_t i = L - 1; i >= 0; --i) {
    if (!done[i]) {
      sim.valid = false;
      sim.problem = "the schedule ends before stage " + std::to_string(i) + " is back-propagated" +
                    (loss_done ? "" : " (the loss never ran)");
      return sim;
    }
  }
  sim.valid = true;
  return sim;
}

// ---------------------------------------------------------------------------------------------
// No rematerialization
// ---------------------------------------------------------------------------------------------

ChainSchedule no_remat_schedule(const Chain& chain) {
  const int32_t L = chain.length();
  ChainSchedule s;
  uint64_t mem = chain.x[0];
  s.peak_bytes = mem;
  for (int32_t i = 0; i < L; ++i) {
    s.ops.push_back({ChainOp::Kind::kFe, i});
    mem += chain.xbar[i];
    s.peak_bytes = std::max(s.peak_bytes, mem + chain.ftmp[i]);
    s.time += chain.fw[i];
  }
  s.ops.push_back({ChainOp::Kind::kLoss, 0});
  mem += chain.x[L];
  s.peak_bytes = std::max(s.peak_bytes, mem + chain.loss_btmp);
  s.time += chain.loss_bw;
  for (int32_t i = L - 1; i >= 0; --i) {
    s.ops.push_back({ChainOp::Kind::kB, i});
    mem += chain.x[i];
    s.peak_bytes = std::max(s.peak_bytes, mem + chain.btmp[i]);
    s.time += chain.bw[i];
    mem -= chain.x[i + 1] + chain.xbar[i] + (i == 0 ? chain.x[0] : 0);
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// The dynamic program
// ---------------------------------------------------------------------------------------------
//
// Sub-problem (s, t), 0 <= s <= t <= L (stage L is the loss): a^s is held (as x_s or xb_s) and,
// when t < L, d_(t+1); run B_t .. B_s (and the loss when t = L), ending with d_s stored, the
// input x_s freed by B_s when held, d_(t+1) freed. Its staircase gives, for each bound m on the
// "extra" bytes (peak minus the bytes held at its start), the least time. When t = L there are
// two variants g: g = 1 when the loss reads x_L, which nothing ever frees (x_L then stays
// stored until the end: g * x[L] more bytes after the sub-problem), g = 0 when it reads xb_L.
//
// Choices (relative bytes, X[L+1] = 0, xt = X[t+1]):
//   leaf s = t < L: Fe_s B_s; peak max(xbar+ftmp, xbar+x[s]+btmp).
//   leaf s = t = L: the loss; peak x[L] + loss_btmp.
//   Fe:  Fe_s, (s+1, t), B_s: m >= xbar[s]+ftmp[s] and m >= xbar[s]+x[s+1]-xt+g*x[L]+x[s]+btmp[s];
//        time fw+bw + E(s+1,t)(m - xbar[s]).
//   Fc j (s < j <= t): Fc_s Fn_(s+1) .. Fn_(j-1), then (j, t) holding x_j, then (s, j-1):
//        m >= max(x[s+1]+ff_ftmp[s], max_k x[k]+x[k+1]+ff_ftmp[k] for s<k<j);
//        time sum ff_fw[s..j-1] + E(j,t)(m - x[j]) + E(s,j-1)(m - out), out = x[j]-xt+g*x[L]
//        (j = L: the loss reads x_L: g = 1 and out = 2*x[L]).

namespace {

// A time counts as smaller only when below the other by more than this relative amount.
constexpr double kTimeEps = 1e-12;
bool improves(double t, double than) { return t < than - kTimeEps * std::fabs(than); }

constexpr int32_t kChoiceFe = -1;    // Fe_s, (s+1,t), B_s; or the leaf Fe_s B_s
constexpr int32_t kChoiceLoss = -2;  // the loss leaf

struct Point {
  int64_t m;       // extra bytes
  double t;        // seconds
  int32_t choice;  // kChoiceFe, kChoiceLoss or the split j
};
using Stair = std::vector<Point>;

class ChainDP {
 public:
  ChainDP(const Chain& c, int64_t cap) : c_(c), L_(c.length()), cap_(cap) {
    X_.assign(L_ + 2, 0);
    for (int32_t i = 0; i <= L_; ++i) X_[i] = static_cast<int64_t>(c.x[i]);
  }

  // Index of the staircase of (s, t, g); g only matters when t = L and s < L.
  size_t id(int32_t s, int32_t t, int g) const {
    const size_t base = static_cast<size_t>(t) * (L_ + 1) + s;
    return t == L_ && s < L_ && g == 1 ? static_cast<size_t>(L_ + 1) * (L_ + 1) + s : base;
  }

  void run() {
    tables_.assign(static_cast<size_t>(L_ + 1) * (L_ + 1) + L_ + 1, {});
    for (int32_t t = 0; t <= L_; ++t) {
      for (int32_t s = t; s >= 0; --s) {
        for (int g = 0; g < (t == L_ && s < L_ ? 2 : 1); ++g) {
          Stair env;
          build(s, t, g, env);
          tables_[id(s, t, g)] = std::move(env);
        }
      }
    }
  }

  const Stair& table(int32_t s, int32_t t, int g) const { return tables_[id(s, t, g)]; }

  // The schedule of (s, t, g) at extra bound m (a breakpoint's m gives its exact peak).
  void reconstruct(int32_t s, int32_t t, int g, int64_t m, std::vector<ChainOp>& out) const {
    struct Task {
      bool emit;
      ChainOp op;
      int32_t s, t, g;
      int64_t m;
    };
    std::vector<Task> stack;
    stack.push_back({false, {}, s, t, g, m});
    while (!stack.empty()) {
      const Task task = stack.back();
      stack.pop_back();
      if (task.emit) {
        out.push_back(task.op);
        continue;
      }
      const Stair& st = table(task.s, task.t, task.g);
      auto it = std::upper_bound(st.begin(), st.end(), task.m,
                                 [](int64_t v, const Point& p) { return v < p.m; });
      if (it == st.begin()) throw std::logic_error("chain DP: reconstruction below the staircase");
      const Point& p = *(it - 1);
      const int32_t s0 = task.s, t0 = task.t;
      const int g0 = task.g;
      if (p.choice == kChoiceLoss) {
        out.push_back({ChainOp::Kind::kLoss, 0});
      } else if (p.choice == kChoiceFe) {
        out.push_back({ChainOp::Kind::kFe, s0});
        stack.push_back({true, {ChainOp::Kind::kB, s0}, 0, 0, 0, 0});
        if (s0 < t0) {
          stack.push_back({false, {}, s0 + 1, t0, g0, p.m - static_cast<int64_t>(c_.xbar[s0])});
        }
      } else {
        const int32_t j = p.choice;
        out.push_back({ChainOp::Kind::kFc, s0});
        for (int32_t k = s0 + 1; k < j; ++k) out.push_back({ChainOp::Kind::kFn, k});
        const int64_t xt = X_[t0 + 1];
        const int64_t out_bytes =
            j == L_ ? 2 * X_[L_] : X_[j] - xt + (t0 == L_ ? g0 * X_[L_] : 0);
        // (j, t) first, then (s, j-1): push in reverse.
        stack.push_back({false, {}, s0, j - 1, 0, p.m - out_bytes});
        stack.push_back({false, {}, j, t0, j == L_ ? 0 : g0, p.m - X_[j]});
      }
    }
  }

 private:
  // env = the lower envelope of the staircases of every choice of (s, t, g), m <= cap_. Each
  // choice's staircase goes to cand_, then is merged into env (choices in the order Fe, j = s+1,
  // s+2, ...: on equal times the earlier choice stays).
  void build(int32_t s, int32_t t, int g, Stair& env) {
    const Chain& c = c_;
    std::vector<Point>& cand = cand_;
    cand.clear();
    if (s == L_) {  // the loss
      push(cand, X_[L_] + static_cast<int64_t>(c.loss_btmp), c.loss_bw, kChoiceLoss);
      merge_min(env, cand);
      return;
    }
    const int64_t xbar = static_cast<int64_t>(c.xbar[s]);
    const int64_t xt = X_[t + 1];
    const int64_t garbage = t == L_ ? g * X_[L_] : 0;
    if (s == t) {  // s < L: Fe_s B_s
      const int64_t need = std::max(xbar + static_cast<int64_t>(c.ftmp[s]),
                                    xbar + X_[s] + static_cast<int64_t>(c.btmp[s]));
      push(cand, need, c.fw[s] + c.bw[s], kChoiceFe);
      merge_min(env, cand);
      return;
    }
    // Fe_s, (s+1, t), B_s. When s + 1 = L the loss reads xb_L: only variant 0.
    if (!(s + 1 == L_ && g == 1)) {
      const int64_t lo = std::max(xbar + static_cast<int64_t>(c.ftmp[s]),
                                  xbar + X_[s + 1] - xt + garbage + X_[s] +
                                      static_cast<int64_t>(c.btmp[s]));
      shift_into(table(s + 1, t, g), xbar, c.fw[s] + c.bw[s], lo, kChoiceFe, cand);
      merge_min(env, cand);
    }
    // Fc_s Fn_(s+1) .. Fn_(j-1), (j, t), (s, j-1).
    int64_t fwd = X_[s + 1] + static_cast<int64_t>(c.ff_ftmp[s]);
    double tf = c.ff_fw[s];
    for (int32_t j = s + 1; j <= t; ++j) {
      if (fwd > cap_) break;  // every later split runs this forward too
      cand.clear();
      if (j == L_) {
        if (g == 1) {
          sum_into(table(L_, L_, 0), X_[L_], table(s, L_ - 1, 0), 2 * X_[L_], tf, fwd, j, env,
                   cand);
        }
      } else {
        sum_into(table(j, t, g), X_[j], table(s, j - 1, 0), X_[j] - xt + garbage, tf, fwd, j,
                 env, cand);
      }
      merge_min(env, cand);
      if (j < t) {
        fwd = std::max(fwd, X_[j] + X_[j + 1] + static_cast<int64_t>(c.ff_ftmp[j]));
        tf += c.ff_fw[j];
      }
    }
  }

  void push(std::vector<Point>& cand, int64_t m, double t, int32_t choice) const {
    if (m <= cap_) cand.push_back({m, t, choice});
  }

  // Points of m -> add + a(m - da) for m >= lo.
  void shift_into(const Stair& a, int64_t da, double add, int64_t lo, int32_t choice,
                  std::vector<Point>& cand) const {
    if (a.empty()) return;
    size_t i = 0;
    // The last point of a at or below lo - da gives the value at lo.
    while (i + 1 < a.size() && a[i + 1].m + da <= lo) ++i;
    if (a[i].m + da > lo) lo = a[i].m + da;
    if (lo > cap_) return;
    cand.push_back({lo, add + a[i].t, choice});
    for (++i; i < a.size(); ++i) {
      const int64_t m = a[i].m + da;
      if (m > cap_) break;
      cand.push_back({m, add + a[i].t, choice});
    }
  }

  // Points of m -> add + a(m - da) + b(m - db) for m >= lo.
  // Skipped when env is already at or below the sum's best time where the sum starts (env is
  // non-increasing: the sum could not go below it anywhere).
  void sum_into(const Stair& a, int64_t da, const Stair& b, int64_t db, double add, int64_t lo,
                int32_t choice, const Stair& env, std::vector<Point>& cand) const {
    if (a.empty() || b.empty()) return;
    int64_t m = std::max({lo, a[0].m + da, b[0].m + db});
    if (m > cap_) return;
    auto at = std::upper_bound(env.begin(), env.end(), m,
                               [](int64_t v, const Point& p) { return v < p.m; });
    if (at != env.begin() && !improves(add + a.back().t + b.back().t, (at - 1)->t)) return;
    size_t i = 0, k = 0;
    while (i + 1 < a.size() && a[i + 1].m + da <= m) ++i;
    while (k + 1 < b.size() && b[k + 1].m + db <= m) ++k;
    for (;;) {
      cand.push_back({m, add + a[i].t + b[k].t, choice});
      const int64_t na = i + 1 < a.size() ? a[i + 1].m + da : std::numeric_limits<int64_t>::max();
      const int64_t nb = k + 1 < b.size() ? b[k + 1].m + db : std::numeric_limits<int64_t>::max();
      m = std::min(na, nb);
      if (m == std::numeric_limits<int64_t>::max() || m > cap_) break;
      if (na == m) ++i;
      if (nb == m) ++k;
    }
  }

  // env = the lower envelope of env and cand (both by increasing m, times non-increasing),
  // keeping the points whose time strictly decreases (by more than rounding, see improves()).
  // On equal times env's point stays.
  void merge_min(Stair& env, const std::vector<Point>& cand) {
    if (cand.empty()) return;
    Stair& out = merged_;
    out.clear();
    constexpr double kNone = std::numeric_limits<double>::infinity();
    double ve = kNone, vc = kNone;
    int32_t ce = 0, cc = 0;
    size_t i = 0, k = 0;
    while (i < env.size() || k < cand.size()) {
      int64_t m = std::numeric_limits<int64_t>::max();
      if (i < env.size()) m = env[i].m;
      if (k < cand.size()) m = std::min(m, cand[k].m);
      if (i < env.size() && env[i].m == m) {
        ve = env[i].t;
        ce = env[i].choice;
        ++i;
      }
      if (k < cand.size() && cand[k].m == m) {
        vc = cand[k].t;
        cc = cand[k].choice;
        ++k;
      }
      const bool from_env = ve <= vc;
      const double v = from_env ? ve : vc;
      if (out.empty() ? v < kNone : improves(v, out.back().t)) {
        out.push_back({m, v, from_env ? ce : cc});
      }
    }
    env.swap(out);
  }

  const Chain& c_;
  int32_t L_;
  int64_t cap_;
  std::vector<int64_t> X_;
  std::vector<Stair> tables_;
  std::vector<Point> cand_;  // scratch: one choice's staircase
  Stair merged_;             // scratch: merge_min's output
};

// The top staircase (0, L): the better of the two loss variants at each m, with the variant.
struct TopPoint {
  int64_t m;
  double t;
  int g;
};

std::vector<TopPoint> top_staircase(const ChainDP& dp, int32_t L) {
  std::vector<TopPoint> all;
  for (int g = 0; g < 2; ++g) {
    for (const Point& p : dp.table(0, L, g)) all.push_back({p.m, p.t, g});
  }
  std::sort(all.begin(), all.end(), [](const TopPoint& p, const TopPoint& q) {
    if (p.m != q.m) return p.m < q.m;
    if (p.t != q.t) return p.t < q.t;
    return p.g < q.g;
  });
  std::vector<TopPoint> out;
  for (const TopPoint& p : all) {
    if (out.empty() || improves(p.t, out.back().t)) out.push_back(p);
  }
  return out;
}

}  // namespace

std::optional<ChainSchedule> solve_chain(const Chain& chain, uint64_t budget_bytes) {
  const int32_t L = chain.length();
  if (L <= 0) throw std::invalid_argument("solve_chain: the chain has no stage");
  const uint64_t x0 = chain.x[0];
  if (budget_bytes < x0) return std::nullopt;
  // Beyond the no-remat peak no schedule is faster than the no-remat one.
  const uint64_t cap = std::min(budget_bytes, no_remat_schedule(chain).peak_bytes);
  ChainDP dp(chain, static_cast<int64_t>(cap - x0));
  dp.run();
  const std::vector<TopPoint> top = top_staircase(dp, L);
  if (top.empty()) return std::nullopt;
  const TopPoint& best = top.back();  // all points are <= cap: the last is the fastest
  ChainSchedule out;
  dp.reconstruct(0, L, best.g, best.m, out.ops);
  for (const ChainOp& op : out.ops) {
    switch (op.kind) {
      case ChainOp::Kind::kFc:
      case ChainOp::Kind::kFn: out.time += chain.ff_fw[op.stage]; break;
      case ChainOp::Kind::kFe: out.time += chain.fw[op.stage]; break;
      case ChainOp::Kind::kLoss: out.time += chain.loss_bw; break;
      case ChainOp::Kind::kB: out.time += chain.bw[op.stage]; break;
    }
  }
  out.peak_bytes = x0 + static_cast<uint64_t>(best.m);
  return out;
}

std::vector<std::pair<uint64_t, double>> chain_frontier(const Chain& chain) {
  const int32_t L = chain.length();
  if (L <= 0) throw std::invalid_argument("chain_frontier: the chain has no stage");
  const uint64_t x0 = chain.x[0];
  const uint64_t cap = no_remat_schedule(chain).peak_bytes;
  ChainDP dp(chain, static_cast<int64_t>(cap - x0));
  dp.run();
  std::vector<std::pair<uint64_t, double>> out;
  for (const TopPoint& p : top_staircase(dp, L)) out.emplace_back(x0 + static_cast<uint64_t>(p.m), p.t);
  return out;
}

uint64_t min_feasible_budget(const Chain& chain) {
  // The same recurrence on the least extra bytes alone (no time).
  const int32_t L = chain.length();
  if (L <= 0) throw std::invalid_argument("min_feasible_budget: the chain has no stage");
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> X(L + 2, 0);
  for (int32_t i = 0; i <= L; ++i) X[i] = static_cast<int64_t>(chain.x[i]);
  const size_t n1 = static_cast<size_t>(L + 1);
  std::vector<int64_t> M(n1 * n1 + n1, kInf);
  auto id = [&](int32_t s, int32_t t, int g) {
    return t == L && s < L && g == 1 ? n1 * n1 + s : static_cast<size_t>(t) * n1 + s;
  };
  for (int32_t t = 0; t <= L; ++t) {
    for (int32_t s = t; s >= 0; --s) {
      for (int g = 0; g < (t == L && s < L ? 2 : 1); ++g) {
        int64_t best = kInf;
        if (s == L) {
          best = X[L] + static_cast<int64_t>(chain.loss_btmp);
        } else if (s == t) {
          const int64_t xbar = static_cast<int64_t>(chain.xbar[s]);
          best = std::max(xbar + static_cast<int64_t>(chain.ftmp[s]),
                          xbar + X[s] + static_cast<int64_t>(chain.btmp[s]));
        } else {
          const int64_t xbar = static_cast<int64_t>(chain.xbar[s]);
          const int64_t xt = X[t + 1];
          const int64_t garbage = t == L ? g * X[L] : 0;
          if (!(s + 1 == L && g == 1) && M[id(s + 1, t, g)] < kInf) {
            best = std::max({xbar + static_cast<int64_t>(chain.ftmp[s]),
                             xbar + X[s + 1] - xt + garbage + X[s] + static_cast<int64_t>(chain.btmp[s]),
                             xbar + M[id(s + 1, t, g)]});
          }
          int64_t fwd = X[s + 1] + static_cast<int64_t>(chain.ff_ftmp[s]);
          for (int32_t j = s + 1; j <= t; ++j) {
            int64_t a = kInf, b = kInf, out = 0;
            if (j == L) {
              if (g == 1) {
                a = M[id(L, L, 0)];
                b = M[id(s, L - 1, 0)];
                out = 2 * X[L];
              }
            } else {
              a = M[id(j, t, g)];
              b = M[id(s, j - 1, 0)];
              out = X[j] - xt + garbage;
            }
            if (a < kInf && b < kInf) best = std::min(best, std::max({fwd, X[j] + a, out + b}));
            if (j < t) fwd = std::max(fwd, X[j] + X[j + 1] + static_cast<int64_t>(chain.ff_ftmp[j]));
          }
        }
        M[id(s, t, g)] = best;
      }
    }
  }
  const int64_t extra = std::min(M[id(0, L, 0)], M[id(0, L, 1)]);
  return chain.x[0] + static_cast<uint64_t>(extra);
}

}  // namespace roam
