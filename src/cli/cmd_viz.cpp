// `roam viz GRAPH PLAN -o FILE.svg|.html [--orders a,b,c]`: a picture of a plan's arena and of
// the live bytes of several orders (see include/roam/viz.h). The plan is validated first; on any
// error nothing is written; the file is written atomically (temporary file, then rename).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/inplace.h"
#include "roam/order.h"
#include "roam/validate.h"
#include "roam/viz.h"
#include "verbs.h"

namespace roam::cli {

namespace {

struct VizArgs {
  std::string graph_path;
  std::string plan_path;
  std::string out_path;
  std::vector<std::string> orders;
  PlanOptions options;
};

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw std::runtime_error("cannot write " + path);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw std::runtime_error("cannot write " + path + ": " + ec.message());
  }
}

int run_viz(const VizArgs& a) {
  VizOptions vo;
  vo.file_name = a.out_path;
  viz_format(a.out_path);  // a bad extension fails before any work (std::invalid_argument, exit 2)
  for (const std::string& name : a.orders) {
    bool known = false;
    for (const std::string& m : order_methods()) known = known || m == name;
    if (!known) {
      std::string names;
      for (const std::string& m : order_methods()) names += (names.empty() ? "" : ", ") + m;
      throw std::invalid_argument("--orders: unknown order method '" + name + "' (valid: " +
                                  names + ")");
    }
  }
  vo.orders = a.orders;
  vo.order_options = a.options;

  progress("reading " + a.graph_path);
  const Graph g = load_graph(a.graph_path);
  const nlohmann::json doc = read_json_file(a.plan_path);
  progress("validating " + a.plan_path);
  const ValidationReport rep = validate_plan(g, doc, a.plan_path);
  if (!rep.valid && rep.problems.front().rfind("plan is for graph '", 0) == 0) {
    std::cerr << "roam: error: " << a.plan_path << ": " << rep.problems.front() << ", nothing written\n";
    return kExitInvalid;
  }
  if (!rep.valid) {
    std::cerr << "roam: error: " << a.plan_path << " is not a valid plan for " << a.graph_path
              << ", nothing written:\n";
    for (const std::string& p : rep.problems) std::cerr << "  " << p << "\n";
    return kExitInvalid;
  }
  if (doc.at("version") == 2 && rep.recomputed.recomputations > 0) {
    // draw the instance graph: recomputed instances are "id#k", in-place outputs in the block of
    // the instance they are written over
    const Graph& x = rep.instances->graph;
    vo.orders = {"program"};  // the plan's own schedule; other orders do not recompute
    vo.program_label = "this plan's schedule (with recomputation)";
    vo.order_label = "recomputing schedule";
    vo.resident_bytes = g.resident_bytes;
    if (const auto m = doc.find("method"); m != doc.end() && m->is_object()) {
      if (const auto l = m->find("layout"); l != m->end() && l->is_string()) vo.layout_label = l->get<std::string>();
    }
    vo.lower_bound_bytes = rep.recomputed.lower_bound_bytes;
    vo.recomputed.assign(x.storages.size(), false);
    for (StorageIdx s = 0; s < x.num_storages(); ++s) {
      const Storage& st = x.storages[s];
      vo.recomputed[s] = st.workspace_of >= 0 ? rep.instances->appearance[st.workspace_of] > 0
                                              : rep.instances->instance[st.root] > 0;
    }
    progress("rendering");
    const std::string text = render_viz(x, x.program_order(), rep.instance_offsets,
                                        doc.at("alignment").get<uint64_t>(), vo);
    write_text_atomic(a.out_path, text);
    std::cout << "wrote " << a.out_path << " (" << (text.size() + 1023) / 1024 << " KiB): arena of "
              << x.storages.size() << " instances (recomputed ones named id#k) over " << x.ops.size()
              << " steps\n";
    return 0;
  }
  // A valid plan: every op once in `order`, one offset per storage (of the graph with the plan's
  // in-place writes applied: an in-place output draws in the block of the input it overwrites,
  // and view 2 draws every order with the writes it allows).
  Order order;
  for (const auto& id : doc.at("order")) order.push_back(g.op_index.at(id.get<std::string>()));
  const Graph applied = rep.inplace.empty() ? Graph{} : apply_inplace(g, rep.inplace);
  const Graph& x = rep.inplace.empty() ? g : applied;
  if (!rep.inplace.empty()) {
    vo.orders_graph = &g;
    vo.storage_notes.assign(x.storages.size(), "");
    for (const InplacePair& p : rep.inplace) {
      std::string& note = vo.storage_notes[x.storage_of[p.output]];
      note += (note.empty() ? "written in place: " : ", ") + g.tensors[p.output].id + " over " +
              g.tensors[p.input].id + " by op " + g.ops[p.op].id;
    }
  }
  std::vector<uint64_t> offsets(x.storages.size(), 0);
  for (const auto& [id, value] : doc.at("offsets").items()) {
    offsets[x.storage_of[x.tensor_index.at(id)]] = value.get<uint64_t>();
  }
  const auto alignment = doc.at("alignment").get<uint64_t>();
  if (const auto m = doc.find("method"); m != doc.end() && m->is_object()) {
    if (const auto o = m->find("order"); o != m->end() && o->is_string()) vo.order_label = o->get<std::string>();
    if (const auto l = m->find("layout"); l != m->end() && l->is_string()) vo.layout_label = l->get<std::string>();
  }
  vo.lower_bound_bytes = rep.recomputed.lower_bound_bytes;
  // A plan of version 2 for its in-place writes alone: its file's bound is over every version-2
  // schedule; the line drawn is the bound over the orders of g (with in-place writes), proven here.
  if (!rep.inplace.empty()) {
    vo.lower_bound_bytes = std::max(vo.lower_bound_bytes, lower_bound(g, alignment, &order));
  }

  progress("rendering");
  const std::string text = render_viz(x, order, offsets, alignment, vo);
  write_text_atomic(a.out_path, text);
  const size_t num_orders = a.orders.empty() ? order_methods().size() : a.orders.size();
  std::cout << "wrote " << a.out_path << " (" << (text.size() + 1023) / 1024 << " KiB): arena of "
            << x.storages.size() << " storages over " << x.ops.size() << " steps, live bytes of "
            << num_orders << " orders";
  if (!rep.inplace.empty()) {
    std::cout << "; " << rep.inplace.size() << " in-place write" << (rep.inplace.size() == 1 ? "" : "s")
              << " drawn in the blocks they overwrite";
  }
  std::cout << "\n";
  return 0;
}

void add_viz_verb(CLI::App& app, Verbs& verbs) {
  static VizArgs args;
  CLI::App* cmd = app.add_subcommand(
      "viz",
      "Draw PLAN's arena (x = op index: the position in the plan's order, on forward / backward "
      "/ update bands; y = offset; one rectangle per storage coloured by kind: activation, "
      "gradient, optimizer temporary, temporary; the Tp curve, the arena line, key points), the "
      "peak (marked, its largest tensors outlined and listed below with their size, op and "
      "module) and the live bytes per op index of several orders of GRAPH, into one "
      "self-contained .svg or .html file (no network). In the HTML: hover a rectangle for its "
      "tensor, op and module; the mouse wheel zooms the op-index axis, dragging pans, \"zoom to "
      "the peak\" jumps there. Version-2 plans that recompute are drawn over their instance graph "
      "(recomputed instances named id#k); an output written in place (plan field inplace) is "
      "drawn in the block of the input it overwrites, and view 2 draws every order with the "
      "in-place writes it allows. The plan is validated first: exit 1 when invalid, 2 "
      "when unreadable; nothing is written on any error.");
  cmd->add_option("GRAPH", args.graph_path, "graph file")->required();
  cmd->add_option("PLAN", args.plan_path, "plan file (roam-plan v1 or v2)")->required();
  cmd->add_option("-o,--output", args.out_path, "picture to write: FILE.svg or FILE.html")
      ->required();
  cmd->add_option("--orders", args.orders,
                  "order methods for the second view, comma-separated (default: all)")
      ->delimiter(',');
  cmd->add_option("--threads", args.options.threads, "worker threads of the roam order planners")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--time-limit", args.options.time_limit_seconds,
                  "wall-clock budget of each roam order planner call, seconds")
      ->check(finite_seconds(1e-3, 1e6))->capture_default_str();
  verbs.push_back({cmd, [] { return run_viz(args); }});
}

[[maybe_unused]] const bool kRegistered = register_verb(60, &add_viz_verb);

}  // namespace

}  // namespace roam::cli
