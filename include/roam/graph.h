// roam-graph v1: the training-step graph that every planner reads.
//
// The file contract is docs/GRAPH_FORMAT.md (a copy of the project's shared contract): tensors with
// sizes in bytes, aliases resolved to root storages, ops in program order, `after` control
// edges, phases. Inside the library ids are dense integers (TensorIdx, OpIdx); the string ids
// of the file are kept for messages and output.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace roam {

using TensorIdx = int32_t;
using OpIdx = int32_t;
using StorageIdx = int32_t;
/// An execution order: every op index exactly once; op order[k] runs at step k.
using Order = std::vector<OpIdx>;

/// Resident roles (GRAPH_FORMAT.md "Tensors"): allocated before the step and after it.
enum class Role : uint8_t { kNone, kParam, kBuffer, kOptimizerState, kConstant, kInput };
enum class Phase : uint8_t { kForward, kBackward, kUpdate, kOther };

const char* to_string(Role role);
const char* to_string(Phase phase);

/// Bad input: names the file, the field and the id. The CLI prints what() and exits 2.
class InputError : public std::runtime_error {
 public:
  InputError(const std::string& file, const std::string& field, const std::string& id,
             const std::string& message);
  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }
  const std::string& id() const { return id_; }

 private:
  std::string file_, field_, id_;
};

struct Tensor {
  std::string id;
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t size = 0;             // bytes (numel x element size)
  Role role = Role::kNone;       // kNone for tensors produced by an op
  TensorIdx alias_of = -1;       // direct base, -1 for a root
  TensorIdx root = -1;           // resolved root (itself for a root)
  OpIdx producer = -1;           // op listing it in `outputs`, -1 if none
};

/// docs/COLLECTIVES.md op field `collective`: the op communicates with the other ranks of a process
/// group (torch.distributed). Every rank must issue the same collectives in the same order, so
/// collective ops keep their program order relative to each other in every execution order
/// (finalize: each one depends on the previous one, Graph::preds) and never run twice.
struct Collective {
  std::string kind;                  // non-empty: all_reduce, all_gather, reduce_scatter, ...
  std::optional<std::string> group;  // the process group's name, when the file gives one
  bool operator==(const Collective& o) const { return kind == o.kind && group == o.group; }
};

struct Op {
  std::string id;
  std::string target;
  Phase phase = Phase::kOther;
  std::vector<TensorIdx> inputs;
  std::vector<TensorIdx> outputs;
  std::vector<OpIdx> after;      // control dependencies
  std::optional<double> cost;    // seconds
  uint64_t workspace = 0;        // bytes the op allocates internally, live at its step only
  bool recomputable = false;     // may run again later with bit-identical outputs (plan v2)
  std::string module;            // informational: path of the module that ran it
  /// Permissions to write an output over an input (GRAPH_FORMAT.md op field `inplace`): pairs
  /// (i, j) of positions in `inputs` and `outputs`, in file order. Only a plan that says so uses
  /// one (roam/inplace.h); liveness in the graph is as if the op wrote a new storage.
  std::vector<std::pair<int32_t, int32_t>> inplace;
  /// Set for a collective op (never together with `recomputable`).
  std::optional<Collective> collective;
};

/// What the arena must place: a non-resident root storage of non-zero size, or the `workspace`
/// of an op (GRAPH_FORMAT.md "Liveness": a storage of its own, live at that op's step only).
/// Workspace storages come after every tensor storage.
struct Storage {
  TensorIdx root = -1;           // -1 for a workspace
  OpIdx workspace_of = -1;       // the op whose workspace it is; -1 for a tensor storage
  uint64_t size = 0;             // bytes, unrounded
  OpIdx producer = -1;
  std::vector<OpIdx> users;      // ops listing the root or an alias of it (inputs or outputs),
                                 // sorted, unique, producer included
  bool graph_output = false;     // root or an alias is a graph output: live to the last step
};

/// The validated graph plus the derived structure every planner shares.
struct Graph {
  std::string name;
  nlohmann::json meta = nlohmann::json::object();
  std::vector<Tensor> tensors;
  std::vector<Op> ops;                     // program order
  std::vector<TensorIdx> outputs;          // graph outputs

  // ---- derived by finalize() ----
  std::vector<Storage> storages;           // tensor storages in order of producer, then output
                                           // position; then workspaces in program order
  int32_t num_tensor_storages = 0;         // storages[0, num_tensor_storages) are tensors'
  std::vector<StorageIdx> storage_of;      // per tensor: its root's storage, -1 when resident/empty
  std::vector<std::vector<OpIdx>> preds;   // per op: unique dependency predecessors (data + after
                                           // + the previous collective op, for a collective op)
  std::vector<std::vector<OpIdx>> succs;   // per op: unique successors
  std::vector<std::vector<StorageIdx>> op_storages;  // per op: storages it reads or writes, unique
  std::vector<OpIdx> collectives;          // the collective ops, in program order
  uint64_t resident_bytes = 0;             // sum of sizes of resident root tensors
  std::unordered_map<std::string, TensorIdx> tensor_index;
  std::unordered_map<std::string, OpIdx> op_index;

  int32_t num_ops() const { return static_cast<int32_t>(ops.size()); }
  int32_t num_storages() const { return static_cast<int32_t>(storages.size()); }
  bool is_resident(TensorIdx t) const { return tensors[tensors[t].root].role != Role::kNone; }
  /// A readable name of a storage: its root tensor's id, or "workspace of op '<id>'".
  std::string storage_name(StorageIdx s) const;
  /// Program order: 0, 1, ..., n-1.
  Order program_order() const;
};

/// Parses and validates a roam-graph v1 document. `file` is used in error messages.
/// Throws InputError for every rule of GRAPH_FORMAT.md (format/version, duplicate or unknown
/// ids, producer/role rules, alias cycles, bad sizes, dependency cycles, `inplace` pairs: a list
/// of [i, j] integer pairs, positions in range, input i and output j of the same size, output j a
/// root, input i not resident; field `ops[k].inplace`, the op's id; `collective` an object with a
/// non-empty string `kind` and an optional string `group`, never on a `recomputable` op).
Graph parse_graph(const nlohmann::json& doc, const std::string& file);

/// Reads `path` (plain JSON or gzip when it ends in .gz, or any gzip stream) and parses it.
/// Throws InputError when the file cannot be read or is not valid JSON.
Graph load_graph(const std::string& path);

/// Derives what parse_graph derives (producers, alias roots, dependency edges, storages,
/// workspaces, resident bytes, the collective ops) for a graph built in memory from `tensors`
/// (id, size, role, alias_of), `ops` (in program order; each op with a `collective` depends on
/// the previous such op, as the file's collectives do) and `outputs`. Throws InputError, naming
/// `file`, for the rules parse_graph checks there (two producers, alias cycles, dependency
/// cycles, an op listed before one it depends on, sizes overflowing). Used for the instance
/// graphs of plan version 2.
void finalize_graph(Graph& g, const std::string& file);

/// Serialises a graph back to roam-graph v1 (used by tests and tools), `inplace` and `collective`
/// included.
nlohmann::json graph_to_json(const Graph& graph);

/// Reads a JSON document from a plain or gzip file. Throws InputError (field "(file)" or "(json)").
nlohmann::json read_json_file(const std::string& path);

/// Writes JSON atomically: to a temporary file beside `path`, then renamed over it; gzip when
/// `path` ends in ".gz". Throws std::runtime_error on I/O failure (no partial file remains).
void write_json_file(const std::string& path, const nlohmann::json& doc, int indent = -1);

/// Rounds `size` up to a multiple of `alignment` (alignment >= 1).
inline uint64_t align_up(uint64_t size, uint64_t alignment) {
  return (size + alignment - 1) / alignment * alignment;
}

}  // namespace roam
