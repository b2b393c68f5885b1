// Operator orders: each a plain function order = f(graph). The result is a topological order
// (every data and `after` edge respected) containing every op exactly once.
#pragma once

#include <string>
#include <vector>

#include "roam/graph.h"

namespace roam {

/// The file's order: what eager PyTorch runs (GRAPH_FORMAT.md "Ops").
Order order_program(const Graph& g);

/// LESCEA (ROAM paper's heuristic baseline, arXiv 2310.19295 Sec. 6): greedy list scheduling
/// over ready ops. At each step, among ready ops whose step peak (live bytes + new outputs)
/// does not exceed the running peak, take the one leaving the least live memory after it runs;
/// if none keeps the peak, take the one with the smallest new step peak. Ties: program order.
/// Sizes rounded up to `alignment` bytes. O(n * ready * degree).
Order order_lescea(const Graph& g, uint64_t alignment);

/// Names accepted by make_order, in display order.
const std::vector<std::string>& order_methods();

/// Dispatches on a method name. Throws std::invalid_argument for an unknown name.
Order make_order(const Graph& g, const std::string& method, uint64_t alignment);

}  // namespace roam
