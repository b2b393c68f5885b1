// Operator orders: each a plain function order = f(graph). The result is a topological order
// (every data and `after` edge respected) containing every op exactly once.
#pragma once

#include <string>
#include <vector>

#include "roam/graph.h"
#include "roam/options.h"

namespace roam {

/// The file's order: what eager PyTorch runs (GRAPH_FORMAT.md "Ops").
Order order_program(const Graph& g);

/// LESCEA (ROAM paper's heuristic baseline, arXiv 2310.19295 Sec. 6): greedy list scheduling
/// over ready ops. At each step, among ready ops whose step peak (live bytes + new outputs)
/// does not exceed the running peak, take the one leaving the least live memory after it runs;
/// if none keeps the peak, take the one with the smallest new step peak. Ties: program order.
/// Sizes rounded up to `alignment` bytes. O(n * ready * degree).
Order order_lescea(const Graph& g, uint64_t alignment);

/// PyTorch Inductor's peak-memory topological sorts (torch/_inductor/memory.py), the orders a
/// user of torch.compile gets today:
/// - lpmf (least peak memory first): among ready ops, the lexicographic minimum of
///   (max(running peak, live + new outputs), live bytes after the op, program position);
/// - bfs: a ready op's priority is the sorted list of its predecessors' steps; the smallest
///   (lexicographically) runs next, ties by program position;
/// - dfs: depth-first post-order, visiting ops and their predecessors in increasing order of the
///   bytes they read and write (ties by program position).
Order order_lpmf(const Graph& g, uint64_t alignment);
Order order_bfs(const Graph& g);
Order order_dfs(const Graph& g, uint64_t alignment);

/// Names accepted by make_order, in display order: the baselines above and "roam" (ROAM's
/// order, include/roam/roam_order.h: never worse than any baseline).
const std::vector<std::string>& order_methods();

/// Dispatches on a method name. Throws std::invalid_argument for an unknown name. A graph with
/// `inplace` permissions is ordered on force_inplace(g).graph (roam/inplace.h): the result is
/// an order of g in which every write valid in program order stays valid (the functions above
/// order whatever graph they are given).
Order make_order(const Graph& g, const std::string& method, const PlanOptions& options);
inline Order make_order(const Graph& g, const std::string& method, uint64_t alignment) {
  return make_order(g, method, PlanOptions{alignment});
}

}  // namespace roam
