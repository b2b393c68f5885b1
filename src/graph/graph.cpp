// Parsing and validation of roam-graph v1 (GRAPH_FORMAT.md), and the derived structure
// (storages, dependency edges) that every planner shares.
#include "roam/graph.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace roam {

namespace {

using nlohmann::json;

// Largest total of sizes we accept, every root tensor and workspace counted rounded up to the
// largest alignment any tool uses (2^30 bytes, the plan validator's limit): sums of aligned
// sizes, offsets and arenas (at most that total) then never overflow, in uint64 or int64.
constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 62;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

// Adds `size` rounded up to kMaxAlignment to `total`; false when it goes over kMaxTotalBytes.
bool add_size(uint64_t& total, uint64_t size) {
  if (size > kMaxTotalBytes) return false;
  return !__builtin_add_overflow(total, align_up(size, kMaxAlignment), &total) && total <= kMaxTotalBytes;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

struct Ctx {
  const std::string& file;
  [[noreturn]] void fail(const std::string& field, const std::string& id,
                         const std::string& message) const {
    throw InputError(file, field, id, message);
  }
};

const json& require(const Ctx& c, const json& obj, const char* key, const std::string& field,
                    const std::string& id) {
  auto it = obj.find(key);
  if (it == obj.end()) c.fail(field + "." + key, id, "missing required field");
  return *it;
}

std::string require_string(const Ctx& c, const json& obj, const char* key,
                           const std::string& field, const std::string& id) {
  const json& v = require(c, obj, key, field, id);
  if (!v.is_string()) c.fail(field + "." + key, id, "must be a string, got " + v.dump());
  return v.get<std::string>();
}

std::string optional_string(const Ctx& c, const json& obj, const char* key,
                            const std::string& field, const std::string& id) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  if (!it->is_string()) c.fail(field + "." + key, id, "must be a string, got " + it->dump());
  return it->get<std::string>();
}

const json& require_array(const Ctx& c, const json& obj, const char* key,
                          const std::string& field, const std::string& id, bool optional) {
  static const json kEmpty = json::array();
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (optional) return kEmpty;
    c.fail(field + "." + key, id, "missing required field");
  }
  if (!it->is_array()) c.fail(field + "." + key, id, "must be an array, got " + it->dump());
  return *it;
}

uint64_t parse_size(const Ctx& c, const json& v, const std::string& field, const std::string& id) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_number_integer()) {
    c.fail(field, id, "size must be a non-negative integer number of bytes, got " + v.dump());
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d < 0) c.fail(field, id, "size must be non-negative, got " + v.dump());
    // Range first: converting a double at or above 2^64 to uint64 is undefined.
    if (d >= 18446744073709551616.0 || d != static_cast<double>(static_cast<uint64_t>(d))) {
      c.fail(field, id, "size must be an integer number of bytes that fits in 64 bits, got " +
                            v.dump());
    }
    c.fail(field, id, "size must be written as an integer, got " + v.dump());
  }
  c.fail(field, id, "size must be a number of bytes, got " + v.dump());
}

Role parse_role(const Ctx& c, const std::string& s, const std::string& field,
                const std::string& id) {
  if (s == "param") return Role::kParam;
  if (s == "buffer") return Role::kBuffer;
  if (s == "optimizer_state") return Role::kOptimizerState;
  if (s == "constant") return Role::kConstant;
  if (s == "input") return Role::kInput;
  c.fail(field, id,
         "unknown role " + quote(s) + " (expected param, buffer, optimizer_state, constant, input)");
}

Phase parse_phase(const Ctx& c, const std::string& s, const std::string& field,
                  const std::string& id) {
  if (s == "other") return Phase::kOther;
  if (s == "forward") return Phase::kForward;
  if (s == "backward") return Phase::kBackward;
  if (s == "update") return Phase::kUpdate;
  c.fail(field, id, "unknown phase " + quote(s) + " (expected forward, backward, update, other)");
}

// Op field `inplace` (GRAPH_FORMAT.md "Ops"): a list of [i, j] pairs, input position i and
// output position j, with input i and output j of the same size and output j a root. (The
// residency of input i needs the alias roots: check_inplace_residency, after finalize.)
std::vector<std::pair<int32_t, int32_t>> parse_inplace(const Ctx& c, const json& v,
                                                       const std::string& field, const Op& op,
                                                       const Graph& g) {
  if (!v.is_array()) {
    c.fail(field, op.id, "must be a list of [input position, output position] pairs, got " + v.dump());
  }
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (size_t k = 0; k < v.size(); ++k) {
    const json& p = v[k];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer()) {
      c.fail(field, op.id, "entry " + std::to_string(k) + " must be a pair [i, j] of integers, got " + p.dump());
    }
    const int64_t i = p[0].get<int64_t>(), j = p[1].get<int64_t>();
    if (i < 0 || i >= static_cast<int64_t>(op.inputs.size())) {
      c.fail(field, op.id, "entry " + std::to_string(k) + " " + p.dump() + ": input position " +
                               std::to_string(i) + " out of range (the op has " +
                               std::to_string(op.inputs.size()) + " inputs)");
    }
    if (j < 0 || j >= static_cast<int64_t>(op.outputs.size())) {
      c.fail(field, op.id, "entry " + std::to_string(k) + " " + p.dump() + ": output position " +
                               std::to_string(j) + " out of range (the op has " +
                               std::to_string(op.outputs.size()) + " outputs)");
    }
    const Tensor& in = g.tensors[op.inputs[static_cast<size_t>(i)]];
    const Tensor& out = g.tensors[op.outputs[static_cast<size_t>(j)]];
    if (in.size != out.size) {
      c.fail(field, op.id, "entry " + std::to_string(k) + " " + p.dump() + ": input " + quote(in.id) +
                               " (" + std::to_string(in.size) + " bytes) and output " + quote(out.id) +
                               " (" + std::to_string(out.size) +
                               " bytes) differ in size (an output is written over an input of its size only)");
    }
    if (out.alias_of >= 0) {
      c.fail(field, op.id, "entry " + std::to_string(k) + " " + p.dump() + ": output " + quote(out.id) +
                               " is an alias (of " + quote(g.tensors[out.alias_of].id) +
                               "); only a root output can be written over an input");
    }
    pairs.emplace_back(static_cast<int32_t>(i), static_cast<int32_t>(j));
  }
  return pairs;
}

// The rest of the `inplace` rule: input i is not resident (parameters, buffers, optimizer state
// and inputs are written through aliases with `after` edges, never through a permission).
void check_inplace_residency(const Ctx& c, const Graph& g) {
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    const Op& op = g.ops[v];
    for (size_t k = 0; k < op.inplace.size(); ++k) {
      const auto [i, j] = op.inplace[k];
      const TensorIdx t = op.inputs[static_cast<size_t>(i)];
      if (!g.is_resident(t)) continue;
      c.fail("ops[" + std::to_string(v) + "].inplace", op.id,
             "entry " + std::to_string(k) + " [" + std::to_string(i) + ", " + std::to_string(j) +
                 "]: input " + quote(g.tensors[t].id) + " is resident (role " +
                 quote(to_string(g.tensors[g.tensors[t].root].role)) +
                 "); a permission is only for an input that is not resident");
    }
  }
}

// Op field `collective` (docs/COLLECTIVES.md): an object with a non-empty
// string `kind` and an optional string `group`; other keys are ignored (new fields).
Collective parse_collective(const Ctx& c, const json& v, const std::string& field,
                            const std::string& id) {
  if (!v.is_object()) {
    c.fail(field, id,
           "must be an object {\"kind\": \"all_reduce\", \"group\": \"...\"}, got " + v.dump());
  }
  Collective col;
  auto kind = v.find("kind");
  if (kind == v.end()) {
    c.fail(field + ".kind", id,
           "missing required field (the collective's kind, e.g. all_reduce, all_gather, "
           "reduce_scatter)");
  }
  if (!kind->is_string() || kind->get_ref<const std::string&>().empty()) {
    c.fail(field + ".kind", id,
           "must be a non-empty string (e.g. all_reduce, all_gather, reduce_scatter), got " +
               kind->dump());
  }
  col.kind = kind->get<std::string>();
  if (auto group = v.find("group"); group != v.end()) {  // null too: not a string
    if (!group->is_string()) {
      c.fail(field + ".group", id,
             "must be a string (the process group's name), got " + group->dump());
    }
    col.group = group->get<std::string>();
  }
  return col;
}

// Reports a dependency cycle among the ops left over by Kahn's algorithm.
[[noreturn]] void fail_cycle(const Ctx& c, const Graph& g, const std::vector<int32_t>& indegree) {
  // Every leftover op has a leftover predecessor: walk predecessors until one repeats.
  OpIdx start = -1;
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    if (indegree[v] > 0) { start = v; break; }
  }
  std::vector<int32_t> seen_at(g.ops.size(), -1);
  std::vector<OpIdx> path;
  OpIdx v = start;
  while (seen_at[v] < 0) {
    seen_at[v] = static_cast<int32_t>(path.size());
    path.push_back(v);
    OpIdx next = -1;
    for (OpIdx p : g.preds[v]) {
      if (indegree[p] > 0) { next = p; break; }
    }
    v = next;
  }
  std::vector<OpIdx> cycle(path.begin() + seen_at[v], path.end());
  std::reverse(cycle.begin(), cycle.end());  // predecessor first
  // an edge from a collective to the next one is the implicit collective order
  // (docs/COLLECTIVES.md), not a field of the file: say so where the cycle takes it
  std::vector<OpIdx> prev_collective(g.ops.size(), -1);
  for (size_t k = 1; k < g.collectives.size(); ++k) {
    prev_collective[g.collectives[k]] = g.collectives[k - 1];
  }
  std::ostringstream os;
  os << "dependency cycle through " << cycle.size() << " op(s): ";
  for (size_t k = 0; k < cycle.size(); ++k) {
    const OpIdx u = cycle[k], w = cycle[(k + 1) % cycle.size()];
    os << g.ops[u].id << (prev_collective[w] == u ? " -> (collective order) " : " -> ");
  }
  os << g.ops[cycle.front()].id;
  c.fail("ops", g.ops[cycle.front()].id, os.str());
}

void finalize(Graph& g, const Ctx& c) {
  const auto nt = static_cast<int32_t>(g.tensors.size());
  const int32_t n = g.num_ops();

  // Resolve alias chains to roots, rejecting cycles.
  std::vector<int8_t> state(nt, 0);  // 0 unvisited, 1 on stack, 2 done
  for (TensorIdx t = 0; t < nt; ++t) {
    if (state[t] == 2) continue;
    std::vector<TensorIdx> chain;
    TensorIdx u = t;
    while (u >= 0 && state[u] == 0) {
      state[u] = 1;
      chain.push_back(u);
      u = g.tensors[u].alias_of;
    }
    if (u >= 0 && state[u] == 1) {
      std::ostringstream os;
      os << "alias cycle: ";
      auto pos = std::find(chain.begin(), chain.end(), u);
      for (auto it = pos; it != chain.end(); ++it) os << g.tensors[*it].id << " -> ";
      os << g.tensors[u].id;
      c.fail("tensors.alias_of", g.tensors[u].id, os.str());
    }
    TensorIdx root = u >= 0 ? g.tensors[u].root : chain.back();
    for (TensorIdx w : chain) {
      g.tensors[w].root = root;
      state[w] = 2;
    }
  }

  // Producer and role rules.
  uint64_t total = 0;
  for (TensorIdx t = 0; t < nt; ++t) {
    const Tensor& x = g.tensors[t];
    if (x.role != Role::kNone && x.producer >= 0) {
      c.fail("tensors.role", x.id,
             "tensor has role " + quote(to_string(x.role)) + " but is produced by op " +
                 quote(g.ops[x.producer].id) + " (a role is only for graph inputs)");
    }
    if (x.alias_of >= 0 && x.role != Role::kNone && g.tensors[x.root].role == Role::kNone) {
      c.fail("tensors.role", x.id,
             "alias of " + quote(g.tensors[x.root].id) + " has role " + quote(to_string(x.role)) +
                 " but its root is not resident (an alias shares its root's storage)");
    }
    if (x.alias_of < 0 && x.role == Role::kNone && x.producer < 0) {
      c.fail("tensors.role", x.id,
             "root tensor has no producer and no role (every non-resident root needs exactly "
             "one producing op)");
    }
    if (x.alias_of < 0 && !add_size(total, x.size)) {
      c.fail("tensors.size", x.id,
             "sizes overflow when summed (total exceeds 2^62 bytes, each rounded up to 2^30)");
    }
  }

  // Dependency edges: an op depends on the nearest producer along the alias chain of every
  // tensor it reads, and of the base of every alias it produces; plus `after` edges.
  g.preds.assign(n, {});
  g.succs.assign(n, {});
  // Nearest producer along each alias chain, memoized so that long chains stay linear.
  constexpr OpIdx kUnknown = -2;
  std::vector<OpIdx> nearest(nt, kUnknown);
  auto nearest_producer = [&](TensorIdx t) {
    std::vector<TensorIdx> walked;
    while (t >= 0 && nearest[t] == kUnknown && g.tensors[t].producer < 0) {
      walked.push_back(t);
      t = g.tensors[t].alias_of;
    }
    const OpIdx found = t < 0 ? OpIdx{-1} : nearest[t] != kUnknown ? nearest[t] : g.tensors[t].producer;
    if (t >= 0) nearest[t] = found;
    for (TensorIdx w : walked) nearest[w] = found;
    return found;
  };
  // Collective ops keep their program order (docs/COLLECTIVES.md): each depends on the
  // previous one, as if it listed it in `after`, so that every order respects it.
  g.collectives.clear();
  for (OpIdx v = 0; v < n; ++v) {
    if (g.ops[v].collective) g.collectives.push_back(v);
  }
  size_t next_collective = 0;
  for (OpIdx v = 0; v < n; ++v) {
    auto& p = g.preds[v];
    if (next_collective < g.collectives.size() && g.collectives[next_collective] == v) {
      if (next_collective > 0) p.push_back(g.collectives[next_collective - 1]);
      ++next_collective;
    }
    for (TensorIdx t : g.ops[v].inputs) {
      OpIdx u = nearest_producer(t);
      if (u >= 0) p.push_back(u);
    }
    for (TensorIdx t : g.ops[v].outputs) {
      OpIdx u = nearest_producer(g.tensors[t].alias_of);
      if (u >= 0 && u != v) p.push_back(u);  // an output may alias another output of v
    }
    for (OpIdx u : g.ops[v].after) p.push_back(u);
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    for (OpIdx u : p) g.succs[u].push_back(v);
  }

  // Kahn's algorithm detects dependency cycles.
  std::vector<int32_t> indegree(n);
  std::vector<OpIdx> ready;
  for (OpIdx v = 0; v < n; ++v) {
    indegree[v] = static_cast<int32_t>(g.preds[v].size());
    if (indegree[v] == 0) ready.push_back(v);
  }
  int32_t done = 0;
  while (!ready.empty()) {
    OpIdx v = ready.back();
    ready.pop_back();
    ++done;
    for (OpIdx w : g.succs[v]) {
      if (--indegree[w] == 0) ready.push_back(w);
    }
  }
  if (done != n) fail_cycle(c, g, indegree);
  // The file order is the program order, the order the framework ran: it must be valid.
  for (OpIdx v = 0; v < n; ++v) {
    for (OpIdx u : g.preds[v]) {
      if (u > v) {
        c.fail("ops[" + std::to_string(v) + "]", g.ops[v].id,
               "op is listed before op " + quote(g.ops[u].id) +
                   " that it depends on (the file order is the program order and must respect "
                   "every data and after edge)");
      }
    }
  }

  // Storages: non-resident roots of non-zero size, in program order of their producers.
  g.resident_bytes = 0;
  g.storage_of.assign(nt, -1);
  g.storages.clear();
  for (TensorIdx t = 0; t < nt; ++t) {
    const Tensor& x = g.tensors[t];
    if (x.alias_of < 0 && x.role != Role::kNone) g.resident_bytes += x.size;
  }
  std::vector<StorageIdx> storage_of_root(nt, -1);
  for (OpIdx v = 0; v < n; ++v) {
    for (TensorIdx t : g.ops[v].outputs) {
      const Tensor& x = g.tensors[t];
      if (x.alias_of >= 0 || x.size == 0) continue;
      storage_of_root[t] = static_cast<StorageIdx>(g.storages.size());
      Storage s;
      s.root = t;
      s.size = x.size;
      s.producer = v;
      g.storages.push_back(std::move(s));
    }
  }
  for (TensorIdx t = 0; t < nt; ++t) g.storage_of[t] = storage_of_root[g.tensors[t].root];

  g.op_storages.assign(n, {});
  for (OpIdx v = 0; v < n; ++v) {
    auto& ss = g.op_storages[v];
    for (TensorIdx t : g.ops[v].inputs) {
      if (g.storage_of[t] >= 0) ss.push_back(g.storage_of[t]);
    }
    for (TensorIdx t : g.ops[v].outputs) {
      if (g.storage_of[t] >= 0) ss.push_back(g.storage_of[t]);
    }
    std::sort(ss.begin(), ss.end());
    ss.erase(std::unique(ss.begin(), ss.end()), ss.end());
    for (StorageIdx s : ss) g.storages[s].users.push_back(v);
  }
  for (TensorIdx t : g.outputs) {
    if (g.storage_of[t] >= 0) g.storages[g.storage_of[t]].graph_output = true;
  }

  // Workspaces: one storage per op with a non-zero workspace, produced and used by that op only.
  g.num_tensor_storages = g.num_storages();
  for (OpIdx v = 0; v < n; ++v) {
    const uint64_t w = g.ops[v].workspace;
    if (w == 0) continue;
    if (!add_size(total, w)) {
      c.fail("ops[" + std::to_string(v) + "].workspace", g.ops[v].id,
             "sizes overflow when summed (total exceeds 2^62 bytes, each rounded up to 2^30)");
    }
    Storage s;
    s.workspace_of = v;
    s.size = w;
    s.producer = v;
    s.users = {v};
    g.op_storages[v].push_back(g.num_storages());
    g.storages.push_back(std::move(s));
  }
}

}  // namespace

const char* to_string(Role role) {
  switch (role) {
    case Role::kNone: return "";
    case Role::kParam: return "param";
    case Role::kBuffer: return "buffer";
    case Role::kOptimizerState: return "optimizer_state";
    case Role::kConstant: return "constant";
    case Role::kInput: return "input";
  }
  return "";
}

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kUpdate: return "update";
    case Phase::kOther: return "other";
  }
  return "other";
}

namespace {

// The message is one line whatever the file holds: control characters of ids, names and values
// quoted from it are written as escapes (\n, \t, \r, \xNN).
std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u != 0x7f) {
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\r') {
      out += "\\r";
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace

InputError::InputError(const std::string& file, const std::string& field, const std::string& id,
                       const std::string& message)
    : std::runtime_error(one_line(file + ": field " + field +
                                  (id.empty() ? "" : " (id " + quote(id) + ")") + ": " + message)),
      file_(file), field_(field), id_(id) {}

std::string Graph::storage_name(StorageIdx s) const {
  const Storage& st = storages[s];
  if (st.workspace_of >= 0) return "workspace of op '" + ops[st.workspace_of].id + "'";
  return tensors[st.root].id;
}

Order Graph::program_order() const {
  Order order(ops.size());
  for (OpIdx v = 0; v < num_ops(); ++v) order[v] = v;
  return order;
}

Graph parse_graph(const json& doc, const std::string& file) {
  const Ctx c{file};
  if (!doc.is_object()) c.fail("(document)", "", "must be a JSON object");
  const std::string format = require_string(c, doc, "format", "", "");
  if (format != "roam-graph") c.fail("format", "", "expected \"roam-graph\", got " + quote(format));
  const json& version = require(c, doc, "version", "", "");
  if (!version.is_number_integer() || version.get<int64_t>() != 1) {
    c.fail("version", "", "unsupported version " + version.dump() + " (this reader takes 1)");
  }

  Graph g;
  g.name = optional_string(c, doc, "name", "", "");
  if (auto it = doc.find("meta"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) c.fail("meta", "", "must be an object");
    g.meta = *it;
  }

  // Tensors.
  const json& tensors = require_array(c, doc, "tensors", "", "", false);
  g.tensors.reserve(tensors.size());
  g.tensor_index.reserve(tensors.size());
  std::vector<std::string> alias_names(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& jt = tensors[i];
    const std::string field = "tensors[" + std::to_string(i) + "]";
    if (!jt.is_object()) c.fail(field, "", "must be an object");
    Tensor t;
    t.id = require_string(c, jt, "id", field, "");
    if (t.id.empty()) c.fail(field + ".id", "", "tensor id must be a non-empty string");
    t.size = parse_size(c, require(c, jt, "size", field, t.id), field + ".size", t.id);
    const std::string role = optional_string(c, jt, "role", field, t.id);
    if (!role.empty()) t.role = parse_role(c, role, field + ".role", t.id);
    alias_names[i] = optional_string(c, jt, "alias_of", field, t.id);
    if (alias_names[i].empty() && jt.contains("alias_of") && jt["alias_of"].is_string()) {
      c.fail(field + ".alias_of", t.id, "must be a non-empty tensor id (omit it for a root tensor)");
    }
    t.name = optional_string(c, jt, "name", field, t.id);
    t.dtype = optional_string(c, jt, "dtype", field, t.id);
    if (auto it = jt.find("shape"); it != jt.end() && !it->is_null()) {
      if (!it->is_array()) c.fail(field + ".shape", t.id, "must be an array of integers, got " + it->dump());
      for (const json& d : *it) {
        if (!d.is_number_integer()) c.fail(field + ".shape", t.id, "must be an array of integers, got " + it->dump());
        t.shape.push_back(d.get<int64_t>());
      }
    }
    if (!g.tensor_index.emplace(t.id, static_cast<TensorIdx>(i)).second) {
      c.fail(field + ".id", t.id, "duplicate tensor id");
    }
    g.tensors.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (alias_names[i].empty()) continue;
    auto it = g.tensor_index.find(alias_names[i]);
    if (it == g.tensor_index.end()) {
      c.fail("tensors[" + std::to_string(i) + "].alias_of", g.tensors[i].id,
             "unknown tensor id " + quote(alias_names[i]));
    }
    g.tensors[i].alias_of = it->second;
  }

  // Ops.
  const json& ops = require_array(c, doc, "ops", "", "", false);
  g.ops.reserve(ops.size());
  g.op_index.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const json& jo = ops[i];
    const std::string field = "ops[" + std::to_string(i) + "]";
    if (!jo.is_object()) c.fail(field, "", "must be an object");
    Op op;
    op.id = require_string(c, jo, "id", field, "");
    if (op.id.empty()) c.fail(field + ".id", "", "op id must be a non-empty string");
    if (!g.op_index.emplace(op.id, static_cast<OpIdx>(i)).second) {
      c.fail(field + ".id", op.id, "duplicate op id");
    }
    op.target = optional_string(c, jo, "target", field, op.id);
    if (jo.contains("phase")) {
      op.phase = parse_phase(c, require_string(c, jo, "phase", field, op.id), field + ".phase", op.id);
    }
    if (auto it = jo.find("workspace"); it != jo.end() && !it->is_null()) {
      op.workspace = parse_size(c, *it, field + ".workspace", op.id);
    }
    if (auto it = jo.find("recomputable"); it != jo.end() && !it->is_null()) {
      if (!it->is_boolean()) c.fail(field + ".recomputable", op.id, "must be true or false, got " + it->dump());
      op.recomputable = it->get<bool>();
    }
    op.module = optional_string(c, jo, "module", field, op.id);
    if (auto it = jo.find("cost"); it != jo.end() && !it->is_null()) {
      if (!it->is_number() || it->get<double>() < 0) {
        c.fail(field + ".cost", op.id, "must be a non-negative number of seconds, got " + it->dump());
      }
      op.cost = it->get<double>();
    }
    for (const char* key : {"inputs", "outputs"}) {
      const json& arr = require_array(c, jo, key, field, op.id, true);
      auto& dst = std::string(key) == "inputs" ? op.inputs : op.outputs;
      for (const json& ref : arr) {
        if (!ref.is_string()) c.fail(field + "." + key, op.id, "entries must be tensor ids");
        auto it = g.tensor_index.find(ref.get<std::string>());
        if (it == g.tensor_index.end()) {
          c.fail(field + "." + key, op.id, "unknown tensor id " + quote(ref.get<std::string>()));
        }
        dst.push_back(it->second);
      }
    }
    if (auto it = jo.find("inplace"); it != jo.end() && !it->is_null()) {
      op.inplace = parse_inplace(c, *it, field + ".inplace", op, g);
    }
    if (auto it = jo.find("collective"); it != jo.end()) {  // null too: not an object
      op.collective = parse_collective(c, *it, field + ".collective", op.id);
      if (op.recomputable) {
        c.fail(field + ".recomputable", op.id,
               "a collective op (collective kind " + quote(op.collective->kind) +
                   ") must not be recomputable: running it again would issue one more collective "
                   "on this rank only");
      }
    }
    g.ops.push_back(std::move(op));
  }
  // `after` refers to ops by id, possibly later in the file; resolve in a second pass.
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string op_field = "ops[" + std::to_string(i) + "]";
    const std::string field = op_field + ".after";
    for (const json& ref : require_array(c, ops[i], "after", op_field, g.ops[i].id, true)) {
      if (!ref.is_string()) c.fail(field, g.ops[i].id, "entries must be op ids");
      auto it = g.op_index.find(ref.get<std::string>());
      if (it == g.op_index.end()) {
        c.fail(field, g.ops[i].id, "unknown op id " + quote(ref.get<std::string>()));
      }
      g.ops[i].after.push_back(it->second);
    }
  }
  // Producers: at most one per tensor.
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    for (TensorIdx t : g.ops[v].outputs) {
      Tensor& x = g.tensors[t];
      if (x.producer >= 0) {
        c.fail("ops[" + std::to_string(v) + "].outputs", g.ops[v].id,
               "tensor " + quote(x.id) + " already produced by op " + quote(g.ops[x.producer].id) +
                   " (a tensor has exactly one producer)");
      }
      x.producer = v;
    }
  }

  for (const json& ref : require_array(c, doc, "outputs", "", "", true)) {
    if (!ref.is_string()) c.fail("outputs", "", "entries must be tensor ids");
    auto it = g.tensor_index.find(ref.get<std::string>());
    if (it == g.tensor_index.end()) {
      c.fail("outputs", ref.get<std::string>(), "unknown tensor id " + quote(ref.get<std::string>()));
    }
    g.outputs.push_back(it->second);
  }

  finalize(g, c);
  check_inplace_residency(c, g);
  return g;
}

json graph_to_json(const Graph& g) {
  json doc;
  doc["format"] = "roam-graph";
  doc["version"] = 1;
  doc["name"] = g.name;
  doc["meta"] = g.meta;
  json tensors = json::array();
  for (const Tensor& t : g.tensors) {
    json jt;
    jt["id"] = t.id;
    jt["size"] = t.size;
    if (t.role != Role::kNone) jt["role"] = to_string(t.role);
    if (t.alias_of >= 0) jt["alias_of"] = g.tensors[t.alias_of].id;
    if (!t.name.empty()) jt["name"] = t.name;
    if (!t.dtype.empty()) jt["dtype"] = t.dtype;
    if (!t.shape.empty()) jt["shape"] = t.shape;
    tensors.push_back(std::move(jt));
  }
  doc["tensors"] = std::move(tensors);
  json ops = json::array();
  for (const Op& op : g.ops) {
    json jo;
    jo["id"] = op.id;
    jo["target"] = op.target;
    jo["phase"] = to_string(op.phase);
    auto ids = [&](const std::vector<TensorIdx>& v) {
      json a = json::array();
      for (TensorIdx t : v) a.push_back(g.tensors[t].id);
      return a;
    };
    jo["inputs"] = ids(op.inputs);
    jo["outputs"] = ids(op.outputs);
    if (!op.after.empty()) {
      json a = json::array();
      for (OpIdx u : op.after) a.push_back(g.ops[u].id);
      jo["after"] = std::move(a);
    }
    if (op.cost) jo["cost"] = *op.cost;
    if (op.workspace != 0) jo["workspace"] = op.workspace;
    if (op.recomputable) jo["recomputable"] = true;
    if (!op.module.empty()) jo["module"] = op.module;
    if (!op.inplace.empty()) {
      json a = json::array();
      for (const auto& [i, j] : op.inplace) a.push_back(json::array({i, j}));
      jo["inplace"] = std::move(a);
    }
    if (op.collective) {
      jo["collective"] = {{"kind", op.collective->kind}};
      if (op.collective->group) jo["collective"]["group"] = *op.collective->group;
    }
    ops.push_back(std::move(jo));
  }
  doc["ops"] = std::move(ops);
  json outs = json::array();
  for (TensorIdx t : g.outputs) outs.push_back(g.tensors[t].id);
  doc["outputs"] = std::move(outs);
  return doc;
}

Graph load_graph(const std::string& path) { return parse_graph(read_json_file(path), path); }

void finalize_graph(Graph& g, const std::string& file) {
  for (Tensor& t : g.tensors) {
    t.root = -1;
    t.producer = -1;
  }
  for (OpIdx v = 0; v < g.num_ops(); ++v) {
    for (TensorIdx t : g.ops[v].outputs) {
      if (g.tensors[t].producer >= 0) {
        throw InputError(file, "ops[" + std::to_string(v) + "].outputs", g.ops[v].id,
                         "tensor " + quote(g.tensors[t].id) + " already produced by op " +
                             quote(g.ops[g.tensors[t].producer].id));
      }
      g.tensors[t].producer = v;
    }
  }
  finalize(g, Ctx{file});
}

}  // namespace roam
