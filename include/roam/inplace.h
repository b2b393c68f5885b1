// In-place writes (GRAPH_FORMAT.md op field `inplace`, plan field `inplace`): which of a graph's
// permissions an order allows, and the graphs in which the chosen writes are aliases, so that
// every liveness, Tp and layout function works on them unchanged.
//
// A permission [i, j] of op v lets a plan bind output t = outputs[j] to the storage S of input
// u = inputs[i] instead of a new storage. For an order with one appearance per op, roam uses it
// when (inplace_valid_in):
//  - S (the storage u is bound to in g, its root's storage) is not resident, has non-zero size
//    and exactly the size of t (bytes; a view of a larger or smaller storage is never written
//    over: the merged storage would hold more bytes after v than t alone, or t fewer bytes
//    than it has, and the proofs below need neither);
//  - v is the last step among S's users in the order (Storage::users: readers and alias
//    binders, producer included) and S is not a graph output: nothing reads the old contents
//    after v writes over them;
//  - no other output of v takes S already (the first listed pair of an output wins).
// Applying such a pair never raises the live bytes at any step (S dies at v and t is born at
// v: the merged storage is live over the union of two intervals that meet at v, with S's size),
// and pairs are independent of one another (merging S into t's storage makes v the last user
// of the merged storage of the next pair too), so for a fixed order the best choice is every
// valid pair.
//
// Source: the contract above; functional captures (PyTorch 2.x, DESIGN.md "Capture") turn the
// framework's in-place operators into these permissions.
#pragma once

#include <vector>

#include "roam/graph.h"

namespace roam {

/// One in-place write: `output` (a root output of `op`) is bound to the storage of `input` (an
/// input of `op`).
struct InplacePair {
  TensorIdx output = -1;
  TensorIdx input = -1;
  OpIdx op = -1;
  bool operator==(const InplacePair& o) const {
    return output == o.output && input == o.input && op == o.op;
  }
};

/// Whether some op of `g` lists an `inplace` permission.
bool has_inplace(const Graph& g);

/// The pairs of `g`'s permissions that `order` (every op once) allows, per the rules at the top
/// of this file, in op index order (within an op: listing order). O(n + sum of users).
/// Throws std::invalid_argument when `order` is not a permutation of the ops.
std::vector<InplacePair> inplace_valid_in(const Graph& g, const Order& order);

/// `g` with each pair's output made an alias of its input (same tensor and op indices; storages,
/// users and edges derived again by finalize_graph) and no `inplace` permission left: its
/// storages are the plan's, so liveness, Tp and layouts of it are those of the plan that uses
/// `pairs`. A copy of `g` (permissions removed) when `pairs` is empty. The pairs must be
/// permissions of `g` (not checked beyond what finalize_graph checks).
Graph apply_inplace(const Graph& g, const std::vector<InplacePair>& pairs);

/// The forced graph of roam's order planners (a graph without permissions):
/// apply_inplace(g, pairs valid in program order), and each such pair's op v gets `after` edges
/// from every other user of the storage it writes over that is not already an ancestor of v
/// (found by a bounded search, at most 512 ops per pair: beyond it the edge is added, redundant
/// but harmless). So every forced pair stays valid in every order of the forced graph, program
/// order is one of them, and each is a valid order of `g`. O(n + sum of users + 512 x pairs).
struct ForcedGraph {
  Graph graph;
  std::vector<InplacePair> pairs;  // the forced pairs (valid in program order), op index order
};
ForcedGraph force_inplace(const Graph& g);

/// `g` without any `inplace` permission (liveness and storages unchanged).
Graph without_inplace(const Graph& g);

/// Every permission of `g` whose output has a storage (non-zero size), whatever the sizes of
/// the input's storage (that may be absent: a root of size 0): the writes some valid plan could
/// make (GRAPH_FORMAT.md), for the lower bounds of include/roam/analysis.h. Op index order,
/// listing order within an op.
std::vector<InplacePair> inplace_permissions(const Graph& g);

}  // namespace roam
