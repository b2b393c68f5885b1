// The independent plan validator. It shares the graph reader and liveness with the planners and
// nothing else: dependency check, overlap sweep, Tp and arena are recounted here.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "roam/graph.h"
#include "roam/inplace.h"
#include "roam/plan.h"

namespace roam {

struct InstanceGraph;

struct ValidationReport {
  bool valid = true;
  std::vector<std::string> problems;  // the first offending ops/storages (at most 10)
  size_t problem_count = 0;           // all problems found, including those not listed
  PlanStats recomputed;               // stats recomputed from the graph, order and offsets
  /// When valid: the instance graph of the plan's order (see instance_graph) and the offset of
  /// each of its storages (bytes), e.g. to draw a version-2 plan. Null otherwise.
  std::shared_ptr<const InstanceGraph> instances;
  std::vector<uint64_t> instance_offsets;
  /// The plan's in-place writes (field `inplace`) as read, when valid.
  std::vector<InplacePair> inplace;
};

/// The instance graph of a schedule (GRAPH_FORMAT.md "Plan version 2: rematerialization"):
/// one op per appearance, in schedule order (its program order); each appearance binds a new
/// instance of every root it outputs (tensor id "t" for instance 0, "t#k" for instance k, k =
/// the appearance's index among the op's appearances) and binds every alias output to the
/// instance its base is bound to at that step; every input reads the tensor it is bound to.
/// Storages of the instance graph are the instances (and one workspace per appearance), so its
/// liveness, Tp and arena are the plan's (with `inplace` writes: an in-place output is bound to
/// its input's instance and makes none).
struct InstanceGraph {
  Graph graph;                      // finalized; no `after` edges (checked on the schedule)
  std::vector<OpIdx> op_of;         // per instance-graph op: the op of `g`
  std::vector<int32_t> appearance;  // per instance-graph op: 0 for the first run, 1, 2, ...
  std::vector<TensorIdx> tensor_of; // per instance-graph tensor: the tensor of `g`
  std::vector<int32_t> instance;    // per instance-graph tensor: appearance that created it
  std::vector<std::string> problems;  // the first broken rules (at most 10); graph is empty then
  size_t problem_count = 0;
};

/// Builds the instance graph of `schedule` (op indices of `g`, repeats allowed). Rules checked
/// (each a problem): every op appears; a repeat only of an op with `recomputable: true` (a
/// repeated collective op is named as one); every
/// input resident or bound by an earlier appearance; an alias output's base bound; every
/// appearance of v before every appearance of w when w lists v in `after`.
/// `inplace` (plan field `inplace`, the pairs already checked against the ops' permissions):
/// at every appearance of its op, such an output is bound to the instance its input is bound to
/// (no new instance; its aliases follow it), and that write bumps the instance's version. Every
/// binding records the version it was made at; reading a binding of an older version (an input,
/// the base of an alias output, or a graph output at the end of the order) is a problem naming
/// the reader, the tensor and the op and step that overwrote it; so is an appearance writing two
/// outputs over one instance.
InstanceGraph instance_graph(const Graph& g, const std::vector<OpIdx>& schedule,
                             const std::vector<InplacePair>& inplace = {});

/// A proven lower bound on Tp over every valid schedule, recomputation and in-place writes
/// allowed (bytes, sizes rounded to `alignment`), the maximum of:
///  - each appearance of op v holds its inputs, outputs and workspace at its step, less what its
///    own in-place writes can share (InplaceBoundTerms of roam/analysis.h);
///  - the graph outputs are all live at the last step;
///  - at v's first appearance, also every output storage of an op that is not recomputable (one
///    instance, made by its only run) born by an ancestor of v and used by a descendant of v:
///    no schedule frees it before that use (must-live bytes with only those storages counted
///    where they cross v, analysis.h lower_bound_per_op; the ops visited in decreasing order of
///    an upper bound of it, stopped at the first that cannot raise the bound or after 2.5e8
///    bitset words of work).
/// On a graph whose ops are all recomputable it is the first two.
uint64_t recompute_lower_bound(const Graph& g, uint64_t alignment);

/// Checks a roam-plan v1 or v2 document against `g`. Throws InputError (naming `file`, the field and
/// the id) when the document is unreadable: not an object, wrong format/version, fields of the
/// wrong type. Everything else (order not a valid permutation, dependency violated, missing or
/// misaligned offset, overlapping live storages, stats that differ from the recount, a
/// lower_bound_bytes above the bound roam::lower_bound proves -- a lower one is accepted, as any
/// proven bound is) makes the plan invalid, with the problems listed. Version 2: the schedule
/// rules of instance_graph, an offset for every instance (`offsets`, `recompute_offsets`) and
/// workspace appearance (`workspace_offsets`), the three recomputation stats, and a
/// lower_bound_bytes at most recompute_lower_bound. `inplace` (version 2 only; in a version-1
/// plan a problem): an object of output tensor id -> input tensor id (another shape: InputError,
/// field `inplace`), each pair listed in its op's permissions, the output without an entry in
/// `offsets` / `recompute_offsets`, and the rule of instance_graph at every appearance. Both
/// versions: peak_bytes at most method.options.budget_bytes where the plan records a budget;
/// collective ops run in program order (a problem names the two ops out of order), and
/// `collectives` (an array of op ids, another shape: InputError) is present exactly when the graph
/// has collective ops and equals them in program order and in the order the plan runs them.
/// `proven_lower_bound`: a version-1 bound the caller has already proven for `g` at the plan's
/// alignment (e.g. the planner's own lower_bound, when it validates the plan it is about to
/// write); lower_bound_bytes is checked against it instead of computing roam::lower_bound again.
ValidationReport validate_plan(const Graph& g, const nlohmann::json& plan, const std::string& file,
                               std::optional<uint64_t> proven_lower_bound = std::nullopt);

}  // namespace roam
