// Rematerialization on a chain (the Rotor model): exact optimal schedules under a memory budget.
//
// The model is the one of bench/rotor/README.md (Beaumont, Eyraud-Dubois, Herrmann, Joly,
// Shilova, "Optimal re-materialization strategies for heterogeneous chains: how to train deep
// neural networks with limited memory", ACM TOMS 2024, as its public solver implements it).
// A chain has L stages 0..L-1 followed by the loss. Units: every size is in bytes, every time
// in seconds (any consistent time unit works: times are only added and compared).
//
// Items that a schedule holds: x_i (activation a^i, x[i] bytes, i = 0..L), xb_i (the record
// kept by the recording forward of stage i-1, xbar[i-1] bytes, i = 1..L; it includes a^i),
// d_i (the gradient of a^i, x[i] bytes). Memory starts holding x_0. Operations:
//   Fc_i  needs a^i (x_i, else xb_i); stores x_(i+1); time ff_fw[i]; transient ff_ftmp[i].
//   Fn_i  the same as Fc_i, then frees x_i. It continues a forward run: it is valid only
//         directly after Fc_(i-1) or Fn_(i-1), and frees the x_i that op stored (see below).
//   Fe_i  needs a^i; stores xb_(i+1); time fw[i]; transient ftmp[i].
//   L     needs a^L; stores d_L; time loss_bw; transient loss_btmp; runs once.
//   B_i   needs d_(i+1) and xb_(i+1); stores d_i; time bw[i]; transient btmp[i]; then frees
//         x_i if held, d_(i+1) and xb_(i+1). Runs once per stage.
// Storing an item that is already stored is invalid. The peak of an operation is the bytes
// stored after its output is stored (before its frees) plus its transient; the schedule's
// peak is the largest; its time is the sum of its operations' times. A valid schedule ends
// with every stage back-propagated (so with d_0 stored).
//
// The Fn rule. The README's wording ("Fn_i ... then frees its input x_i (or xb_i)") would also
// let Fn_i free any held x_i, or a record, at any later moment: for example drop x_i right
// after Fe_i (B_i does not read x_i) or consume a checkpoint and recompute it later. Rotor's
// schedules never do that (every Fn is part of a run Fc_s Fn_(s+1) .. Fn_(j-1) that keeps only
// its first input and its last output), and its dynamic program does not model it: on random
// chains of 2-4 stages an exhaustive search under that wider reading beats the program about
// half the time. roam keeps Rotor's model: Fn only continues a forward run. Under this rule the
// dynamic program below is optimal (tests/test_remat_chain.cpp compares it with an exhaustive
// search over all schedules on hundreds of random chains).
//
// Method. Rotor's dynamic program over sub-chains (Beaumont et al., TOMS 2024, Section 4 "the
// dynamic program"): the cost of sub-chain [s, t] with its input held is the minimum over
// "Fe_s, then [s+1, t], then B_s" and, for each split j, "Fc_s Fn_(s+1) .. Fn_(j-1), then [j, t]
// holding x_j, then [s, j-1]". Rotor tabulates it at 500 memory slots (sizes rounded up to
// budget/500). roam's change: each table entry is the whole staircase "optimal time as a
// function of memory" kept as its breakpoints (bytes, seconds), exact in bytes; the recurrence
// shifts staircases by the bytes held and takes their sums and minima, and only Pareto-optimal
// breakpoints (more bytes must mean strictly less time) are kept, capped at the budget.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace roam {

/// A chain problem (bench/rotor/README.md). Sizes in bytes, times in seconds.
struct Chain {
  std::string name;
  std::vector<double> fw, bw, ff_fw;        // L entries each; ff_fw defaults to fw
  std::vector<uint64_t> x;                  // L + 1 entries
  std::vector<uint64_t> xbar, ftmp, btmp, ff_ftmp;  // L entries each; ff_ftmp defaults to ftmp
  double loss_bw = 0;
  uint64_t loss_btmp = 0;

  int32_t length() const { return static_cast<int32_t>(fw.size()); }
};

/// Largest total of a chain's sizes that parse_chain accepts (2^62 bytes): every sum of sizes
/// that the simulator and the solver form then fits in a signed 64-bit integer.
constexpr uint64_t kMaxChainTotalBytes = uint64_t{1} << 62;

/// Reads a chain document ({"fw": [...], "bw": [...], "x": [...], "xbar": [...], "ftmp": [...],
/// "btmp": [...], optional "ff_fw", "ff_ftmp", "loss_bw", "loss_btmp", "name"}). Throws
/// roam::InputError(file, field, id, message), id being the index of the bad entry, for a
/// document that is not an object, a missing or non-array field, a wrong length, L = 0, a time
/// that is not a finite number in [0, 1e15] seconds, a size that is not an integer >= 0, or
/// sizes whose total (2 * sum x + sum xbar + all transients) exceeds kMaxChainTotalBytes.
Chain parse_chain(const nlohmann::json& doc, const std::string& file);

/// Reads `path` (plain JSON, or gzip) with roam::read_json_file and parses it. Throws InputError.
Chain load_chain(const std::string& path);

/// One operation of a schedule. `stage` is the i of Fc_i, Fn_i, Fe_i, B_i; 0 for the loss.
struct ChainOp {
  enum class Kind { kFc, kFn, kFe, kLoss, kB };
  Kind kind = Kind::kFc;
  int32_t stage = 0;
  bool operator==(const ChainOp&) const = default;
};

/// "Fc_3", "Fn_0", "Fe_1", "L", "B_2".
std::string to_string(const ChainOp& op);

/// The inverse of to_string. Throws std::invalid_argument for anything else (unknown kind,
/// missing or non-decimal stage, leading zeros, a stage above 2^31 - 1, a stage on "L").
ChainOp parse_chain_op(const std::string& name);

/// What simulate_chain_schedule found: `valid`, and otherwise the first `problem` (names the
/// op and its position). `time` (seconds) and `peak_bytes` cover the ops simulated so far.
struct ChainSimulation {
  bool valid = false;
  std::string problem;
  double time = 0;
  uint64_t peak_bytes = 0;
};

/// Runs `ops` under the rules above, written independently of the solver: the checker of every
/// schedule roam writes. Never throws for a bad schedule (stages out of range included).
ChainSimulation simulate_chain_schedule(const Chain& chain, const std::vector<ChainOp>& ops);

/// A schedule with its time (seconds) and peak (bytes), as the simulator computes them.
struct ChainSchedule {
  std::vector<ChainOp> ops;
  double time = 0;
  uint64_t peak_bytes = 0;
};

/// Fe_0 .. Fe_(L-1), L, B_(L-1) .. B_0: the fastest schedule (every op once); its peak is the
/// "no-remat peak".
ChainSchedule no_remat_schedule(const Chain& chain);

/// The minimum-time schedule whose peak is at most `budget_bytes`, or nullopt when no schedule
/// fits (budget below min_feasible_budget). Among schedules of the minimum time it returns one
/// of the smallest peak. Exact in bytes; times are compared up to 1e-12 relative (the same
/// times added in another order). `time` is the sum of its ops' times, `peak_bytes` its peak:
/// simulate_chain_schedule gives the same. Throws std::invalid_argument for a chain without
/// stages (parse_chain never returns one).
std::optional<ChainSchedule> solve_chain(const Chain& chain, uint64_t budget_bytes);

/// The smallest budget (bytes) for which a schedule exists.
uint64_t min_feasible_budget(const Chain& chain);

/// Every breakpoint (budget bytes, optimal time seconds) of the optimal time as a function of
/// the budget, budgets increasing and times strictly decreasing: the optimal time at budget B is
/// the time of the last breakpoint with budget <= B (none: infeasible). The first breakpoint is
/// (min_feasible_budget, its time); the last one has the no-remat time.
std::vector<std::pair<uint64_t, double>> chain_frontier(const Chain& chain);

}  // namespace roam
