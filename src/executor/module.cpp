// roam._native: the Python extension of the executor (pybind11).
//   * the planner: plan / validate / theoretical_peak over roam-graph and roam-plan JSON text
//     (libroam linked in, no subprocess);
//   * Session: the planned CPU allocator of arena_allocator.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/core/Allocator.h>

#include "arena_allocator.h"
#include "planner_bridge.h"

namespace py = pybind11;
using roam_exec::Mode;
using roam_exec::PlannedAlloc;
using roam_exec::Session;
using roam_exec::SessionStats;

namespace {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kPassThrough: return "pass_through";
    case Mode::kPlanned: return "planned";
    case Mode::kDiverged: return "diverged";
  }
  return "?";
}

py::dict stats_dict(const SessionStats& s) {
  py::dict d;
  d["mode"] = mode_name(s.mode);
  d["arena_bytes"] = s.arena_bytes;
  d["arena_high_water"] = s.arena_high_water;
  d["arena_live_peak"] = s.arena_live_peak;
  d["arena_allocs"] = s.arena_allocs;
  d["fallback_allocs"] = s.fallback_allocs;
  d["fallback_live"] = s.fallback_live;
  d["fallback_peak"] = s.fallback_peak;
  d["total_peak"] = s.total_peak;
  d["rearmed"] = s.rearmed;
  d["release_waits"] = s.release_waits;
  d["mismatches"] = s.mismatches;
  d["first_mismatch_step"] = s.first_mismatch_step;
  d["first_mismatch"] = s.first_mismatch;
  d["debug_checks"] = s.debug_checks;
  d["debug_violations"] = s.debug_violations;
  d["first_violation"] = s.first_violation;
  d["outside_ops"] = s.outside_ops;
  d["arena_workspaces"] = s.arena_workspaces;
  d["arena_workspace_bytes"] = s.arena_workspace_bytes;
  d["block_workspaces"] = s.block_workspaces;
  d["block_workspace_bytes"] = s.block_workspace_bytes;
  d["loan_workspaces"] = s.loan_workspaces;
  d["loan_workspace_bytes"] = s.loan_workspace_bytes;
  return d;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "roam executor extension: libroam planner bindings and the planned CPU allocator";

  m.def(
      "plan",
      [](const std::string& graph_json, const std::string& order, const std::string& layout,
         uint64_t alignment, int threads, double time_limit_seconds) {
        roam_exec::PlanCall call{order, layout, alignment, threads, time_limit_seconds};
        py::gil_scoped_release release;
        return roam_exec::plan_json(graph_json, call);
      },
      py::arg("graph_json"), py::arg("order") = "auto", py::arg("layout") = "auto",
      py::arg("alignment") = 64, py::arg("threads") = 1, py::arg("time_limit_seconds") = 60.0,
      "Plan a roam-graph v1 (JSON text) with libroam's make_plan; returns roam-plan v1 JSON text "
      "(validated). ValueError for an unknown method, RuntimeError for a bad graph.");
  m.def(
      "plan_budget",
      [](const std::string& graph_json, uint64_t budget_bytes, const std::string& order,
         const std::string& layout, uint64_t alignment, int threads, double time_limit_seconds) {
        roam_exec::PlanCall call{order, layout, alignment, threads, time_limit_seconds,
                                 budget_bytes};
        py::gil_scoped_release release;
        return roam_exec::plan_budget_json(graph_json, call);
      },
      py::arg("graph_json"), py::arg("budget_bytes"), py::arg("order") = "auto",
      py::arg("layout") = "auto", py::arg("alignment") = 64, py::arg("threads") = 1,
      py::arg("time_limit_seconds") = 60.0,
      "Plan a roam-graph (JSON text) so that resident + arena <= budget_bytes (bytes), with "
      "recomputation where needed (libroam plan_with_budget); returns JSON text {\"plan\": "
      "roam-plan v1 or v2 (validated)} or {\"infeasible\": {budget_bytes, "
      "smallest_budget_bytes, lower_bound_bytes, message}}. ValueError for an unknown method, "
      "RuntimeError for a bad graph.");
  m.def(
      "validate",
      [](const std::string& graph_json, const std::string& plan_json) {
        py::gil_scoped_release release;
        return roam_exec::validate_json(graph_json, plan_json);
      },
      py::arg("graph_json"), py::arg("plan_json"),
      "Validate a plan against a graph (both JSON text); returns JSON text "
      "{valid, problems, recomputed}.");
  m.def("theoretical_peak", &roam_exec::theoretical_peak_json, py::arg("graph_json"),
        py::arg("order"), py::arg("alignment") = 64,
        "Tp in bytes of an order given as op ids, with every in-place write (op field inplace) "
        "the order allows (ValueError if the order is not valid).");
  m.def("program_cuda_reserved", &roam_exec::program_cuda_reserved_json, py::arg("graph_json"),
        py::arg("alignment") = 64,
        "Bytes PyTorch's CUDA caching allocator would reserve (simulated) for the graph's own op "
        "order with the in-place writes it allows, resident tensors excluded (the headline's GPU "
        "reference).");
  m.def("order_methods", &roam_exec::order_method_names);
  m.def("layout_methods", &roam_exec::layout_method_names);
  m.def("cpu_allocator_is_roam", [] {
    return c10::GetAllocator(c10::DeviceType::CPU) == roam_exec::global_allocator();
  });

  py::class_<Session, std::shared_ptr<Session>>(m, "Session",
                                                "Planned CPU allocator session (one arena).")
      .def(py::init<>())
      .def(
          "configure",
          [](Session& s, uint64_t arena_bytes, uint64_t alignment,
             const std::vector<std::vector<std::tuple<uint64_t, uint64_t, uint32_t>>>& schedule,
             const std::vector<std::pair<uint64_t, uint64_t>>& workspaces,
             const std::vector<std::vector<std::tuple<uint64_t, uint32_t, uint32_t>>>& loans) {
            std::vector<std::vector<PlannedAlloc>> sch(schedule.size());
            for (size_t k = 0; k < schedule.size(); ++k) {
              for (const auto& [size, offset, rank] : schedule[k]) {
                sch[k].push_back({size, offset, rank});
              }
            }
            std::vector<roam_exec::WorkspaceBlock> ws;
            ws.reserve(workspaces.size());
            for (const auto& [offset, size] : workspaces) ws.push_back({offset, size});
            std::vector<std::vector<roam_exec::Loan>> ln(loans.size());
            for (size_t k = 0; k < loans.size(); ++k) {
              for (const auto& [size, rank, out] : loans[k]) ln[k].push_back({size, rank, out});
            }
            s.configure(arena_bytes, alignment, std::move(sch), std::move(ws), std::move(ln));
          },
          py::arg("arena_bytes"), py::arg("alignment"), py::arg("schedule"),
          py::arg("workspaces") = std::vector<std::pair<uint64_t, uint64_t>>{},
          py::arg("loans") = std::vector<std::vector<std::tuple<uint64_t, uint32_t, uint32_t>>>{},
          "schedule[k]: [(size, offset, rank), ...] planned allocations of the op at step k "
          "(rank: which request of that size during the op it is, 0 = the first); "
          "workspaces: [] or one (offset, size) per step, the op's planned workspace block "
          "(size 0: none); loans: [] or one list per step of (size, rank, output index): the "
          "rank-th request of size bytes during the step may sit in that pending output's slot "
          "(it was freed before the output was requested in the calibration run)")
      .def("set_pass_through", &Session::set_pass_through)
      .def("set_workspaces_in_arena", &Session::set_workspaces_in_arena)
      .def("set_release_wait", &Session::set_release_wait)
      .def_property("debug", &Session::debug, &Session::set_debug)
      .def_property("record", [](const Session&) { return false; }, &Session::set_record)
      .def("events", &Session::events)
      .def("install", &Session::install, py::arg("priority") = 100)
      .def("uninstall", &Session::uninstall)
      .def_property_readonly("installed", &Session::installed)
      .def("begin_op", &Session::begin_op)
      .def("end_op", &Session::end_op, py::arg("step"), py::arg("ptrs"), py::arg("what"))
      .def("end_begin_op", &Session::end_begin_op, py::arg("step"), py::arg("ptrs"),
           py::arg("what"), py::arg("next_step"),
           "end_op(step, ptrs, what) then begin_op(next_step) in one call (nothing may be "
           "allocated between the two ops)")
      .def("diverge", &Session::diverge)
      .def("stats", [](const Session& s) { return stats_dict(s.stats()); })
      .def_property_readonly("arena_base", &Session::arena_base)
      .def_property_readonly("arena_live_blocks", &Session::arena_live_blocks)
      .def("live_ranges", &Session::live_ranges);
}
