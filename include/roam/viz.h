// `roam viz`: a picture of a plan's arena and of the live bytes of several orders, as one
// self-contained SVG or HTML document (no network access: no external URL, everything inline).
//
// Units: x is the step, shown as "op index" (0-based position in an execution order; a storage
// live at steps first..last inclusive covers x in [first, last + 1)); y is bytes. Axis labels
// are in MiB (2^20 bytes); hover texts give bytes and MiB.
//
// Pictures are in pixels (coordinates rounded to 2 decimals). Each data group carries its
// mapping from data to pixels: data-x0 (pixel x of step 0), data-px-per-step, data-y0 (pixel y
// of 0 bytes; y grows downwards, so bytes go up) and data-px-per-mib:
//   x(step) = x0 + step * px_per_step,   y(bytes) = y0 - bytes / 2^20 * px_per_mib.
//
// View 1, the arena (group id="storages"): one <rect> per storage, in StorageIdx order, spanning
// steps [first, last + 1) and bytes [offset, offset + aligned size). Each rect has exactly one
// class, its kind (VizKind, from phases only, never names):
//   "act"  activation: produced in the forward phase and used by a backward op (storage_kinds);
//   "grad" gradient: produced in the backward phase;
//   "opt"  optimizer temporary: produced in the update phase;
//   "tmp"  every other storage (forward-only or `other`-phase temporaries);
// and a <title> child (the hover text): tensor id and name, size (bytes, MiB), kind, the
// module of the producing op (Op::module, "(no module)" when empty), offset, producing op id,
// target and phase, live steps. In the same group: the polyline class "tp" (live
// bytes per step, one point (x(step + 0.5), y(live bytes)) per step), the line class "arena"
// (at y(arena bytes)) and the path class "keypoints" (one vertical tick just above the plot at
// x(step + 0.5) of each key point under the plan's order; with at most 80 key points also faint
// full-height lines, path class "keylines", behind the rectangles). Resident bytes are not drawn
// (they are not in the arena). Behind the rectangles (group class "bands"): one rect per run of
// ops of one phase in the order, class "band-forward", "band-backward", "band-update" or
// "band-other", labelled above the plot per 24-pixel window by the phases with at least a tenth
// of its ops ("backward + update"). The peak (group id="peak", data-step = the first step with
// the most live bytes): a vertical line class "peak" and, class "peakmark", an outline on each
// of the 10 largest storages live there, which the table below the plot (group
// id="peak-table") lists with size, kind, producing op and module, followed by the bytes live at
// the peak per module (text id="peak-modules").
//
// HTML only: both pictures are <svg class="zoomable"> with data-plot-x, data-plot-w and
// data-steps; their plot contents sit in <g class="zoom"> groups (clipped to the plot) whose
// transform the inline script sets to zoom and pan the x axis (wheel, drag, double click,
// buttons "reset zoom" and "zoom to the peak"; the URL fragment #zoom-peak opens zoomed). Text
// that follows the zoom carries data-sx (its unzoomed x) and data-dx (a fixed pixel offset); the
// x ticks (group class "xticks") are redrawn by the script.
//
// View 2, the orders (group id="orders"; in SVG a second panel below the first, in HTML a
// second section): one polyline class "order" per order method, with `data-order` = the method
// name and a <title>, points (x(step + 0.5), y(live bytes)). Curves with exactly the same live
// bytes get stroke-dasharray / stroke-dashoffset so that each colour shows on its own share of
// the line, and the legend says "same curve as ...". When the graph has more than 4
// steps per pixel column, a polyline keeps, per column, only its minimum and maximum points
// (visually the same drawing, a small file); otherwise one point per step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "roam/graph.h"
#include "roam/options.h"
#include "roam/plan.h"

namespace roam {

enum class VizFormat : uint8_t { kSvg, kHtml };

/// The format for an output file name: ".svg" or ".html" (case-insensitive).
/// Throws std::invalid_argument for any other name.
VizFormat viz_format(const std::string& file_name);

/// Storage kinds as drawn (see the header comment), indexed by StorageIdx.
enum class VizKind : uint8_t { kActivation, kTemporary, kGradient, kOptimizerTemporary, kRecomputed };
std::vector<VizKind> viz_kinds(const Graph& g);
/// "act", "tmp", "grad", "opt", "rec": the rect class of a kind.
const char* viz_class(VizKind kind);

struct VizOptions {
  /// The output file name; only its extension is used, to choose the format (viz_format).
  std::string file_name = "viz.svg";
  /// View 2: order methods (names accepted by make_order). Empty: every name in order_methods().
  std::vector<std::string> orders;
  /// Options for make_order in view 2; `alignment` is replaced by the plan's alignment.
  PlanOptions order_options;
  /// Shown in the heading. The Plan overload fills them from the plan when empty.
  std::string order_label;
  std::string layout_label;
  /// Drawn as a dashed line in view 2 when > 0 (bytes; e.g. lower_bound(g, alignment)).
  uint64_t lower_bound_bytes = 0;
  /// Resident bytes shown in the heading (default: g.resident_bytes; an instance graph of a
  /// version-2 plan has none of its own).
  std::optional<uint64_t> resident_bytes;
  /// The name of the "program" curve in view 2 (empty: "program"); a version-2 plan's instance
  /// graph has the plan's own schedule as its program order.
  std::string program_label;
  /// Per storage (empty: none): an instance that a recomputation created (plan version 2),
  /// drawn as its own kind.
  std::vector<bool> recomputed;
  /// View 2 orders this graph instead of the one drawn, each order with the in-place writes it
  /// allows (roam/inplace.h): set when the graph drawn is apply_inplace(g, the plan's writes).
  const Graph* orders_graph = nullptr;
  /// Per storage (empty: none): one more line of its hover text, e.g. which outputs are written
  /// in place into it.
  std::vector<std::string> storage_notes;
};

/// The document text (SVG or HTML per options.file_name) for a plan given as its order, one
/// offset per StorageIdx (bytes) and its alignment (bytes, >= 1). It draws what it is given: the
/// caller validates the plan first (validate_plan). Throws std::invalid_argument for a bad file
/// extension, an order that is not a permutation of the ops, an offsets vector of the wrong
/// length, alignment 0, or an unknown order method in options.orders.
std::string render_viz(const Graph& g, const Order& order, const std::vector<uint64_t>& offsets,
                       uint64_t alignment, const VizOptions& options);

/// Same, for a Plan (uses plan.order, plan.offsets, plan.alignment, its method names and its
/// lower bound when options leave them empty / 0).
std::string render_viz(const Graph& g, const Plan& plan, const VizOptions& options);

}  // namespace roam
