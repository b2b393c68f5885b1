// `roam viz`: the arena of a plan and the live bytes of several orders as SVG or HTML.
// Everything is inline (styles, script): the documents open with no network access.
#include "roam/viz.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "roam/analysis.h"
#include "roam/inplace.h"
#include "roam/layout.h"
#include "roam/order.h"

namespace roam {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// ---- picture geometry (pixels) ----
constexpr double kWidth = 1300;
constexpr double kPlotX = 90;         // left edge of both plots
constexpr double kPlotW = 930;        // plot width
constexpr double kLegendX = kPlotX + kPlotW + 25;
constexpr double kArenaPlotY = 104;   // panel 1: title lines, phase labels, key ticks, plot
constexpr double kArenaPlotH = 460;
constexpr double kPeakTableY = kArenaPlotY + kArenaPlotH + 66;  // "what is at the peak"
constexpr int kPeakRows = 10;         // largest storages listed at the peak
constexpr double kRowH = 16;
constexpr double kArenaH = kPeakTableY + (kPeakRows + 5) * kRowH + 10;  // panel 1 height
constexpr double kOrdersH = 450;      // panel 2 height
constexpr double kOrdersPlotY = 60;
constexpr double kOrdersPlotH = 320;

const char* const kOrderColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr int kNumOrderColors = sizeof kOrderColors / sizeof kOrderColors[0];

// ---- text helpers ----

/// `v` with at most `decimals` decimals, trailing zeros (and a trailing dot) removed.
std::string num(double v, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

/// Full precision for the scale factors written into the documents.
std::string num_g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string mib(uint64_t bytes) {
  const double v = static_cast<double>(bytes) / kMiB;
  char buf[64];
  if (v >= 100) std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (v >= 1 || v == 0) std::snprintf(buf, sizeof buf, "%.3f", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

/// XML-escapes text and attribute values; characters XML 1.0 forbids become '?'.
std::string esc(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: {
        const auto u = static_cast<unsigned char>(c);
        out += (u < 0x20 && c != '\n' && c != '\t') ? '?' : c;
      }
    }
  }
  return out;
}

// ---- axes ----

/// A "nice" tick step (1, 2 or 5 times a power of ten) close to raw / target.
double nice_step(double range, int target) {
  const double raw = range / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

struct YAxis {
  double top_mib = 1;   // axis top, MiB
  double step_mib = 1;  // tick step, MiB
  int decimals = 0;     // label decimals
};

/// Axis over [0, max_bytes] (with a little headroom), labels in MiB.
YAxis y_axis(uint64_t max_bytes) {
  YAxis a;
  const double top = std::max<double>(static_cast<double>(max_bytes), 1.0) * 1.04 / kMiB;
  a.step_mib = nice_step(top, 6);
  a.top_mib = std::ceil(top / a.step_mib - 1e-9) * a.step_mib;
  a.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(a.step_mib) + 1e-9)));
  return a;
}

struct Frame {
  double x, y, w, h;       // plot area, pixels
  int32_t steps;           // x domain [0, steps]
  YAxis ya;
  double px_per_step() const { return w / std::max(steps, 1); }
  double px_per_mib() const { return h / ya.top_mib; }
  double px_x(double step) const { return x + step * px_per_step(); }
  double px_y(double mib_value) const { return y + h - mib_value * px_per_mib(); }
  double px_yb(uint64_t bytes) const { return px_y(static_cast<double>(bytes) / kMiB); }
  /// The mapping, as attributes of a data group (see include/roam/viz.h).
  std::string mapping() const {
    return "data-x0=\"" + num_g(x) + "\" data-px-per-step=\"" + num_g(px_per_step()) +
           "\" data-y0=\"" + num_g(y + h) + "\" data-px-per-mib=\"" + num_g(px_per_mib()) + "\"";
  }
};

/// Grid, ticks and labels of a plot (pixels).
std::string axes(const Frame& f, const std::string& y_title) {
  std::string s = "<g class=\"axis\">\n";
  // y grid and labels (MiB)
  const int ny = static_cast<int>(std::lround(f.ya.top_mib / f.ya.step_mib));
  for (int i = 0; i <= ny; ++i) {
    const double v = i * f.ya.step_mib;
    const double y = f.px_y(v);
    s += "<line class=\"grid\" x1=\"" + num(f.x) + "\" x2=\"" + num(f.x + f.w) + "\" y1=\"" +
         num(y) + "\" y2=\"" + num(y) + "\"/>";
    char label[64];
    std::snprintf(label, sizeof label, "%.*f", f.ya.decimals, v);
    s += "<text x=\"" + num(f.x - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
         label + "</text>\n";
  }
  // x ticks (op indices); in the HTML the script redraws them when zooming
  const int32_t n = std::max(f.steps, 1);
  const double xs = std::max(1.0, nice_step(n, 10));
  s += "<g class=\"xticks\" data-y=\"" + num(f.y + f.h) + "\">";
  for (double t = 0; t <= n + 1e-9; t += xs) {
    const double x = f.px_x(t);
    s += "<line x1=\"" + num(x) + "\" x2=\"" + num(x) + "\" y1=\"" + num(f.y + f.h) + "\" y2=\"" +
         num(f.y + f.h + 5) + "\"/><text x=\"" + num(x) + "\" y=\"" + num(f.y + f.h + 18) +
         "\" text-anchor=\"middle\">" + num(t, 0) + "</text>\n";
  }
  s += "</g>\n";
  s += "<path class=\"frame\" d=\"M" + num(f.x) + " " + num(f.y) + "V" + num(f.y + f.h) + "H" +
       num(f.x + f.w) + "\"/>\n";
  s += "<text x=\"" + num(f.x + f.w / 2) + "\" y=\"" + num(f.y + f.h + 36) +
       "\" text-anchor=\"middle\">op index (position in the order)</text>\n";
  s += "<text transform=\"translate(" + num(f.x - 58) + " " + num(f.y + f.h / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + esc(y_title) + "</text>\n";
  s += "</g>\n";
  return s;
}

// ---- key points ----

/// One short tick per key point in a strip just above the plot.
std::string key_ticks(const Frame& f, const std::vector<int32_t>& key_steps) {
  std::string s = "<path class=\"keypoints\" d=\"";
  const std::string y = num(f.y - 8), y2 = num(f.y - 1);
  for (const int32_t k : key_steps) s += "M" + num(f.px_x(k + 0.5)) + " " + y + "V" + y2;
  return s + "\"><title>key points (ops at the same step in every valid order): " +
         std::to_string(key_steps.size()) + "</title></path>\n";
}

/// Faint full-height lines at the key points, when they are few enough not to cover the plot.
std::string key_lines(const Frame& f, const std::vector<int32_t>& key_steps) {
  if (key_steps.empty() || key_steps.size() > 80 ||
      static_cast<double>(key_steps.size()) * 6 > f.w) {
    return "";
  }
  std::string s = "<path class=\"keylines\" d=\"";
  for (const int32_t k : key_steps) {
    s += "M" + num(f.px_x(k + 0.5)) + " " + num(f.y + f.h) + "V" + num(f.y);
  }
  return s + "\"/>\n";
}

// ---- the documents ----

const char* kind_label(VizKind k) {
  switch (k) {
    case VizKind::kActivation: return "activation";
    case VizKind::kGradient: return "gradient";
    case VizKind::kOptimizerTemporary: return "optimizer temporary";
    case VizKind::kRecomputed: return "recomputed instance";
    case VizKind::kTemporary: break;
  }
  return "temporary";
}

std::string style(int32_t steps) {
  std::string s =
      "text{font-family:sans-serif;font-size:12px;fill:#222}"
      ".h1{font-size:16px;font-weight:bold}.small{font-size:11px;fill:#555}"
      ".bold{font-weight:bold}.mono{font-family:monospace;font-size:11.5px}"
      ".bg{fill:#fff}"
      ".act{fill:#4e79a7}.tmp{fill:#f1a340}.grad{fill:#e15759}.opt{fill:#9467bd}.rec{fill:#59a14f}"
      ".band-forward{fill:#dbe8f6}.band-backward{fill:#f8dede}.band-update{fill:#e6def3}"
      ".band-other{fill:#eeeeee}"
      ".bandlabel{font-size:11px;font-weight:bold;fill:#555}"
      ".axis line,.frame{stroke:#333;fill:none}.axis .grid{stroke:#e4e4e4}"
      ".tp{fill:none;stroke:#000;stroke-width:1.3}"
      ".arena{stroke:#c00;stroke-width:1.5;stroke-dasharray:7 4}"
      ".keypoints{stroke:#1a1;stroke-width:1.2}.keylines{stroke:#2a2;stroke-opacity:.35}"
      ".order{fill:none;stroke-opacity:.9}.legend .order{stroke-width:2.5}"
      ".lb{stroke:#555;stroke-width:1;stroke-dasharray:3 3}"
      ".peak{stroke:#000;stroke-width:2}.peakmark{fill:none;stroke:#000;stroke-width:2}"
      ".peaklabel{font-weight:bold}.peaknum{font-size:11px;font-weight:bold;fill:#000}"
      ".peakrow:nth-child(odd) .rowbg{fill:#f4f4f4}.rowbg{fill:none}"
      ".zoom *{vector-effect:non-scaling-stroke}";
  for (int i = 0; i < kNumOrderColors; ++i) {
    s += std::string(".o") + std::to_string(i) + "{stroke:" + kOrderColors[i] + "}";
  }
  // Thin dark outlines separate neighbouring rectangles (and keep very thin ones visible) when
  // steps are wide enough to show them.
  if (steps > 0 && kPlotW / steps >= 3) {
    s += "#storages rect{stroke:#000;stroke-opacity:.35;stroke-width:.5}";
  }
  return s;
}

struct Ctx {
  const Graph& g;
  const Order& order;
  const std::vector<uint64_t>& offsets;
  uint64_t alignment;
  const VizOptions& opt;
  int32_t n = 0;
  Liveness live;
  std::vector<uint64_t> live_bytes;
  uint64_t tp = 0;
  uint64_t arena = 0;
  std::vector<VizKind> kinds;
  std::vector<int32_t> key_steps;
  int32_t peak_step = -1;           // first step with the most live bytes; -1 without ops
  std::vector<StorageIdx> at_peak;  // storages live there, largest first
};

/// "layer1.0.conv1", or "(no module)" when the graph names none (the loss, the optimizer, or a
/// capture without module paths).
std::string module_of(const Op& op) { return op.module.empty() ? "(no module)" : op.module; }

/// What a storage is called on screen: the tensor's id and name, or "workspace of OP".
std::string storage_label(const Graph& g, StorageIdx i) {
  const Storage& st = g.storages[i];
  if (st.root < 0) return "workspace of " + g.ops[st.workspace_of].id;
  const Tensor& t = g.tensors[st.root];
  return t.name.empty() || t.name == t.id ? t.id : t.id + " " + t.name;
}

/// `s` cut to at most `n` characters (an ellipsis marks the cut).
std::string clip(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  return s.substr(0, n - 3) + "...";
}

/// Same, keeping the end: module paths differ in their last parts.
std::string clip_left(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  return "..." + s.substr(s.size() - (n - 3));
}

std::string legend_swatch(double x, double y, const std::string& cls, const std::string& label,
                          const std::string& sub) {
  std::string s = "<rect class=\"" + cls + "\" x=\"" + num(x) + "\" y=\"" + num(y - 10) +
                  "\" width=\"14\" height=\"12\"/><text x=\"" + num(x + 20) + "\" y=\"" + num(y) +
                  "\">" + esc(label) + "</text>";
  if (!sub.empty()) {
    s += "<text class=\"small\" x=\"" + num(x + 20) + "\" y=\"" + num(y + 14) + "\">" + esc(sub) +
         "</text>";
  }
  return s + "\n";
}

std::string legend_line(double x, double y, const std::string& cls, const std::string& label,
                        const std::string& sub, const std::string& extra_attrs = "") {
  std::string s = "<line class=\"" + cls + "\" x1=\"" + num(x) + "\" x2=\"" + num(x + 14) +
                  "\" y1=\"" + num(y - 4) + "\" y2=\"" + num(y - 4) + "\"" + extra_attrs +
                  "/><text x=\"" + num(x + 20) + "\" y=\"" + num(y) + "\">" + esc(label) + "</text>";
  if (!sub.empty()) {
    s += "<text class=\"small\" x=\"" + num(x + 20) + "\" y=\"" + num(y + 14) + "\">" + esc(sub) +
         "</text>";
  }
  return s + "\n";
}

/// The clip path of a plot (ids differ per panel) and the opening of its zoomable group: the
/// HTML script sets the group's transform (x only) and moves every element with data-sx.
std::string zoom_open(const Frame& f, const std::string& id, double top_margin) {
  return "<clipPath id=\"" + id + "\"><rect x=\"" + num(f.x) + "\" y=\"" + num(f.y - top_margin) +
         "\" width=\"" + num(f.w) + "\" height=\"" + num(f.h + top_margin) +
         "\"/></clipPath>\n<g clip-path=\"url(#" + id + ")\"><g class=\"zoom\">\n";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kUpdate: return "update";
    case Phase::kOther: break;
  }
  return "other";
}

/// Phase bands behind the plot (one rect per run of ops of one phase in the order) and their
/// labels in the strip above it (runs at least 40 px wide).
std::string phase_bands(const Ctx& c, const Frame& f, std::string& labels) {
  std::string s = "<g class=\"bands\">";
  int32_t t = 0;
  while (t < c.n) {
    const Phase p = c.g.ops[c.order[t]].phase;
    int32_t e = t;
    while (e + 1 < c.n && c.g.ops[c.order[e + 1]].phase == p) ++e;
    const double x0 = f.px_x(t), x1 = f.px_x(e + 1);
    s += "<rect class=\"band-" + std::string(phase_name(p)) + "\" x=\"" + num(x0) + "\" y=\"" +
         num(f.y) + "\" width=\"" + num(x1 - x0) + "\" height=\"" + num(f.h) + "\"><title>" +
         phase_name(p) + " phase: op indices " + std::to_string(t) + "-" + std::to_string(e) +
         " (" + std::to_string(e + 1 - t) + " ops)</title></rect>";
    t = e + 1;
  }
  // Labels: phases interleave (roam runs each parameter's update right after its gradient), so
  // label windows of 24 px by the phases that have at least a tenth of their ops, merged while
  // the same ("backward + update").
  constexpr double kWindow = 24;
  const int windows = std::max(1, static_cast<int>(std::ceil(f.w / kWindow)));
  std::vector<std::string> sig(windows);
  for (int w = 0; w < windows; ++w) {
    int counts[4] = {0, 0, 0, 0}, total = 0;
    const auto lo = static_cast<int32_t>(std::ceil(w * kWindow / f.px_per_step() - 0.5));
    const auto hi = static_cast<int32_t>(std::ceil((w + 1) * kWindow / f.px_per_step() - 0.5));
    for (int32_t u = std::max(lo, 0); u < std::min(hi, c.n); ++u) {
      ++counts[static_cast<int>(c.g.ops[c.order[u]].phase)];
      ++total;
    }
    for (const Phase p : {Phase::kForward, Phase::kBackward, Phase::kUpdate, Phase::kOther}) {
      if (total > 0 && counts[static_cast<int>(p)] * 10 >= total) {
        sig[w] += (sig[w].empty() ? "" : " + ") + std::string(phase_name(p));
      }
    }
  }
  for (int w = 0; w < windows;) {
    int e = w;
    while (e + 1 < windows && sig[e + 1] == sig[w]) ++e;
    const double x0 = f.x + w * kWindow, x1 = std::min(f.x + f.w, f.x + (e + 1) * kWindow);
    if (!sig[w].empty() && x1 - x0 >= 6.5 * static_cast<double>(sig[w].size())) {
      labels += "<text class=\"bandlabel\" data-sx=\"" + num((x0 + x1) / 2) + "\" x=\"" +
                num((x0 + x1) / 2) + "\" y=\"" + num(f.y - 14) + "\" text-anchor=\"middle\">" +
                sig[w] + "</text>";
    }
    w = e + 1;
  }
  return s + "</g>\n";
}

/// View 1 in local pixel coordinates [0, kWidth] x [0, kArenaH].
std::string arena_panel(const Ctx& c) {
  const Graph& g = c.g;
  Frame f{kPlotX, kArenaPlotY, kPlotW, kArenaPlotH, c.n, y_axis(std::max(c.arena, c.tp))};
  std::string s;
  s.reserve(256 + static_cast<size_t>(g.num_storages()) * 200);
  const std::string order_label = c.opt.order_label.empty() ? "?" : c.opt.order_label;
  const std::string layout_label = c.opt.layout_label.empty() ? "?" : c.opt.layout_label;
  const double frag = c.tp == 0 ? 0.0 : static_cast<double>(c.arena) / static_cast<double>(c.tp) - 1;
  s += "<text class=\"h1\" x=\"" + num(kPlotX) + "\" y=\"24\">Arena of " + esc(g.name) +
       " (order " + esc(order_label) + ", layout " + esc(layout_label) + ", alignment " +
       std::to_string(c.alignment) + " B)</text>\n";
  s += "<text x=\"" + num(kPlotX) + "\" y=\"44\">" + std::to_string(c.n) + " ops, " +
       std::to_string(g.num_storages()) + " storages; resident " +
       mib(c.opt.resident_bytes ? *c.opt.resident_bytes : g.resident_bytes) +
       " MiB (not drawn), Tp " + mib(c.tp) + " MiB, arena " + mib(c.arena) +
       " MiB, fragmentation " + num(100 * frag, 2) + " %, " + std::to_string(c.key_steps.size()) +
       " key points</text>\n";
  s += "<text class=\"small\" x=\"" + num(kPlotX) + "\" y=\"62\">x: op index (a storage covers "
       "the ops from the one that makes it to its last use), y: offset in the arena; hover a "
       "rectangle for its tensor and module; the table below lists what is live at the peak</text>\n";
  s += axes(f, "offset (MiB)");

  std::string labels;
  s += zoom_open(f, "clip-arena", 14);
  s += phase_bands(c, f, labels);
  s += key_lines(f, c.key_steps);
  s += "<g id=\"storages\" " + f.mapping() + ">\n";
  for (StorageIdx i = 0; i < g.num_storages(); ++i) {
    const Storage& st = g.storages[i];
    const Op& op = g.ops[st.producer];
    const uint64_t size = align_up(st.size, c.alignment);
    const int32_t first = c.live.first[i], last = c.live.last[i];
    s += "<rect class=\"";
    s += viz_class(c.kinds[i]);
    s += "\" x=\"" + num(f.px_x(first)) + "\" y=\"" + num(f.px_yb(c.offsets[i] + size)) +
         "\" width=\"" + num((last + 1 - first) * f.px_per_step()) + "\" height=\"" +
         num(static_cast<double>(size) / kMiB * f.px_per_mib()) + "\"><title>" +
         esc(storage_label(g, i));
    s += "\n" + std::to_string(st.size) + " B (" + mib(st.size) + " MiB)";
    s += ", ";
    s += kind_label(c.kinds[i]);
    if (st.graph_output) s += ", graph output";
    if (static_cast<size_t>(i) < c.opt.storage_notes.size() && !c.opt.storage_notes[i].empty()) {
      s += "\n" + esc(c.opt.storage_notes[i]);
    }
    s += "\nmodule " + esc(module_of(op)) + "\noffset " + std::to_string(c.offsets[i]) +
         " B\nop " + esc(op.id) + " " + esc(op.target) + " (" + phase_name(op.phase) +
         ")\nsteps " + std::to_string(first) + "-" + std::to_string(last) + " (" +
         std::to_string(last + 1 - first) + " ops)</title></rect>\n";
  }
  s += "<polyline class=\"tp\" points=\"";
  for (int32_t t = 0; t < c.n; ++t) {
    if (t) s += ' ';
    s += num(f.px_x(t + 0.5)) + "," + num(f.px_yb(c.live_bytes[t]));
  }
  s += "\"><title>Tp curve: live bytes per op index, peak " + std::to_string(c.tp) + " B (" +
       mib(c.tp) + " MiB)</title></polyline>\n";
  s += "<line class=\"arena\" x1=\"" + num(f.px_x(0)) + "\" x2=\"" + num(f.px_x(c.n)) +
       "\" y1=\"" + num(f.px_yb(c.arena)) + "\" y2=\"" + num(f.px_yb(c.arena)) + "\"><title>arena " + std::to_string(c.arena) +
       " B (" + mib(c.arena) + " MiB)</title></line>\n";
  s += key_ticks(f, c.key_steps);
  s += "</g>\n";
  // The peak: a vertical line at the peak op and an outline on its largest storages.
  std::string peak_labels;
  if (c.peak_step >= 0) {
    const double px = f.px_x(c.peak_step + 0.5);
    const Op& op = g.ops[c.order[c.peak_step]];
    s += "<g id=\"peak\" data-step=\"" + std::to_string(c.peak_step) + "\">";
    s += "<line class=\"peak\" x1=\"" + num(px) + "\" x2=\"" + num(px) + "\" y1=\"" + num(f.y) +
         "\" y2=\"" + num(f.y + f.h) + "\"><title>the peak: " + mib(c.tp) + " MiB live at op index " +
         std::to_string(c.peak_step) + " (" + esc(op.id) + " " + esc(op.target) + ", module " +
         esc(module_of(op)) + ")</title></line>";
    const size_t shown = std::min<size_t>(c.at_peak.size(), kPeakRows);
    for (size_t r = 0; r < shown; ++r) {
      const StorageIdx i = c.at_peak[r];
      const uint64_t size = align_up(g.storages[i].size, c.alignment);
      const double y0 = f.px_yb(c.offsets[i] + size), h = static_cast<double>(size) / kMiB * f.px_per_mib();
      s += "<rect class=\"peakmark\" x=\"" + num(f.px_x(c.live.first[i])) + "\" y=\"" + num(y0) +
           "\" width=\"" + num((c.live.last[i] + 1 - c.live.first[i]) * f.px_per_step()) +
           "\" height=\"" + num(h) + "\"/>";
      if (h >= 11) {
        peak_labels += "<text class=\"peaknum\" data-sx=\"" + num(px) + "\" data-dx=\"4\" x=\"" + num(px + 4) +
                       "\" y=\"" + num(y0 + h / 2 + 4) + "\">" + std::to_string(r + 1) + "</text>";
      }
    }
    s += "</g>\n";
  }
  s += "</g></g>\n";  // zoom, clip
  s += labels + peak_labels + "\n";
  if (c.peak_step >= 0) {
    const double px = f.px_x(c.peak_step + 0.5);
    const bool right = px > f.x + f.w * 0.6;
    s += "<text class=\"peaklabel\" data-sx=\"" + num(px) + "\" data-dx=\"" + (right ? "-6" : "6") + "\" x=\"" +
         num(px + (right ? -6 : 6)) + "\" y=\"" + num(f.y + 14) + "\" text-anchor=\"" +
         (right ? "end" : "start") + "\">peak " + mib(c.tp) + " MiB at op index " +
         std::to_string(c.peak_step) + "</text>\n";
  }

  // What is at the peak: the largest storages live there, with the op and module that made them.
  double y = kPeakTableY;
  if (c.peak_step < 0) {
    s += "<text x=\"" + num(kPlotX) + "\" y=\"" + num(y) + "\">no ops: nothing to show</text>\n";
  } else {
    const Op& op = g.ops[c.order[c.peak_step]];
    uint64_t total = 0;
    for (const StorageIdx i : c.at_peak) total += align_up(g.storages[i].size, c.alignment);
    s += "<g id=\"peak-table\">\n";
    s += "<text class=\"h1\" x=\"" + num(kPlotX) + "\" y=\"" + num(y) + "\">At the peak: " +
         mib(c.tp) + " MiB live at op index " + std::to_string(c.peak_step) + " (" + esc(op.id) +
         " " + esc(clip(op.target, 40)) + ", module " + esc(clip_left(module_of(op), 50)) + ")</text>\n";
    y += kRowH + 2;
    const size_t shown = std::min<size_t>(c.at_peak.size(), kPeakRows);
    uint64_t shown_bytes = 0;
    for (size_t r = 0; r < shown; ++r) shown_bytes += align_up(g.storages[c.at_peak[r]].size, c.alignment);
    s += "<text class=\"small\" x=\"" + num(kPlotX) + "\" y=\"" + num(y) + "\">" +
         std::to_string(c.at_peak.size()) + " storages live (" + mib(total) + " MiB); the " +
         std::to_string(shown) + " largest (" + mib(shown_bytes) +
         " MiB), numbered in the picture; module: where the op that made the tensor ran</text>\n";
    y += kRowH + 2;
    const double cols[] = {kPlotX, kPlotX + 24, kPlotX + 330, kPlotX + 395, kPlotX + 520,
                           kPlotX + 820, kPlotX + 1085};
    const char* heads[] = {"#", "tensor", "MiB", "kind", "made by op", "module", "live ops"};
    for (int k = 0; k < 7; ++k) {
      s += "<text class=\"bold\" x=\"" + num(cols[k]) + "\" y=\"" + num(y) + "\"" +
           (k == 2 ? " text-anchor=\"end\"" : "") + ">" + heads[k] + "</text>";
    }
    s += "\n";
    for (size_t r = 0; r < shown; ++r) {
      y += kRowH;
      const StorageIdx i = c.at_peak[r];
      const Storage& st = g.storages[i];
      const Op& p = g.ops[st.producer];
      s += "<g class=\"peakrow\"><rect class=\"rowbg\" x=\"" + num(kPlotX - 4) + "\" y=\"" +
           num(y - 12) + "\" width=\"" + num(kWidth - kPlotX - 10) + "\" height=\"" + num(kRowH) + "\"/>";
      const std::string cells[] = {std::to_string(r + 1),
                                   clip(storage_label(g, i), 44),
                                   mib(st.size),
                                   kind_label(c.kinds[i]),
                                   clip(p.id + " " + p.target, 42),
                                   clip_left(module_of(p), 35),
                                   std::to_string(c.live.first[i]) + "-" + std::to_string(c.live.last[i])};
      for (int k = 0; k < 7; ++k) {
        s += "<text" + std::string(k == 1 || k == 4 || k == 5 ? " class=\"mono\"" : "") + " x=\"" +
             num(cols[k] + (k == 2 ? 40 : 0)) + "\" y=\"" + num(y) + "\"" +
             (k == 2 ? " text-anchor=\"end\"" : "") + ">" + esc(cells[k]) + "</text>";
      }
      s += "</g>\n";
    }
    // The modules that made the bytes live at the peak.
    std::vector<std::pair<std::string, uint64_t>> by_module;
    for (const StorageIdx i : c.at_peak) {
      const std::string m = module_of(g.ops[g.storages[i].producer]);
      auto it = std::find_if(by_module.begin(), by_module.end(), [&](const auto& e) { return e.first == m; });
      if (it == by_module.end()) by_module.emplace_back(m, 0), it = by_module.end() - 1;
      it->second += align_up(g.storages[i].size, c.alignment);
    }
    std::stable_sort(by_module.begin(), by_module.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    y += kRowH + 4;
    std::string line = "live at the peak by module:";
    for (size_t k = 0; k < std::min<size_t>(by_module.size(), 4); ++k) {
      line += (k ? ", " : " ") + clip_left(by_module[k].first, 30) + " " + mib(by_module[k].second) + " MiB";
    }
    if (by_module.size() > 4) line += ", ... (" + std::to_string(by_module.size()) + " modules)";
    s += "<text id=\"peak-modules\" x=\"" + num(kPlotX) + "\" y=\"" + num(y) + "\">" + esc(line) + "</text>\n";
    s += "</g>\n";
  }

  // Legend: kinds with counts and bytes, then the lines and the phase bands.
  uint64_t count[5] = {0, 0, 0, 0, 0}, bytes[5] = {0, 0, 0, 0, 0};
  for (StorageIdx i = 0; i < g.num_storages(); ++i) {
    const int k = static_cast<int>(c.kinds[i]);
    ++count[k];
    bytes[k] += align_up(g.storages[i].size, c.alignment);
  }
  s += "<g class=\"legend\">\n";
  y = kArenaPlotY + 10;
  for (const VizKind k : {VizKind::kActivation, VizKind::kGradient, VizKind::kOptimizerTemporary,
                          VizKind::kTemporary, VizKind::kRecomputed}) {
    const int i = static_cast<int>(k);
    if (k == VizKind::kRecomputed && count[i] == 0) continue;
    s += legend_swatch(kLegendX, y, viz_class(k), kind_label(k),
                       std::to_string(count[i]) + (count[i] == 1 ? " storage, " : " storages, ") +
                           mib(bytes[i]) + " MiB");
    y += 34;
  }
  s += legend_line(kLegendX, y, "tp", "Tp curve (live bytes)", "peak " + mib(c.tp) + " MiB");
  y += 34;
  s += legend_line(kLegendX, y, "arena", "arena", mib(c.arena) + " MiB");
  y += 34;
  s += legend_line(kLegendX, y, "peak", "the peak", "its largest tensors outlined");
  y += 34;
  s += "<line class=\"keypoints\" x1=\"" + num(kLegendX + 7) + "\" x2=\"" + num(kLegendX + 7) +
       "\" y1=\"" + num(y - 12) + "\" y2=\"" + num(y + 2) + "\"/><text x=\"" + num(kLegendX + 20) +
       "\" y=\"" + num(y) + "\">key point</text><text class=\"small\" x=\"" + num(kLegendX + 20) +
       "\" y=\"" + num(y + 14) + "\">same step in every order</text>\n";
  y += 38;
  s += "<text class=\"bold\" x=\"" + num(kLegendX) + "\" y=\"" + num(y) + "\">phase (background)</text>\n";
  y += 20;
  for (const char* p : {"forward", "backward", "update"}) {
    s += legend_swatch(kLegendX, y, std::string("band-") + p, p, "");
    y += 20;
  }
  s += "</g>\n";
  return s;
}

/// Point indices of a polyline over `v`: every index, or per pixel column its min and max.
std::vector<int32_t> kept_points(const std::vector<uint64_t>& v) {
  const auto n = static_cast<int32_t>(v.size());
  const auto columns = static_cast<int32_t>(kPlotW);
  std::vector<int32_t> keep;
  if (n <= 4 * columns) {
    keep.resize(n);
    for (int32_t i = 0; i < n; ++i) keep[i] = i;
    return keep;
  }
  int32_t lo = 0;
  for (int32_t col = 0; col < columns; ++col) {
    const auto hi = static_cast<int32_t>((static_cast<int64_t>(col) + 1) * n / columns);
    if (hi <= lo) continue;
    int32_t mn = lo, mx = lo;
    for (int32_t i = lo; i < hi; ++i) {
      if (v[i] < v[mn]) mn = i;
      if (v[i] > v[mx]) mx = i;
    }
    keep.push_back(std::min(mn, mx));
    if (mn != mx) keep.push_back(std::max(mn, mx));
    lo = hi;
  }
  return keep;
}

/// View 2 in local pixel coordinates [0, kWidth] x [0, kOrdersH].
std::string orders_panel(const Ctx& c) {
  // The orders of the graph the plan is for (with each order's own in-place writes), which is
  // not the one drawn when the plan writes in place (options.orders_graph).
  const Graph& g = c.opt.orders_graph != nullptr ? *c.opt.orders_graph : c.g;
  std::vector<std::string> names = c.opt.orders.empty() ? order_methods() : c.opt.orders;
  PlanOptions po = c.opt.order_options;
  po.alignment = c.alignment;
  struct Curve {
    std::string name;
    std::vector<uint64_t> bytes;
    uint64_t peak = 0;
    size_t same_as = 0;   // index of the first curve with exactly these bytes (itself if none)
    size_t rank = 0;      // position among the curves with these bytes
    size_t copies = 1;    // how many curves have these bytes
  };
  std::vector<Curve> curves;
  uint64_t max_bytes = c.opt.lower_bound_bytes;
  for (const std::string& name : names) {
    const Order o = make_order(g, name, po);
    const std::string label = name == "program" && !c.opt.program_label.empty() ? c.opt.program_label : name;
    std::vector<uint64_t> bytes;
    if (has_inplace(g)) {
      const Graph x = apply_inplace(g, inplace_valid_in(g, o));
      bytes = live_bytes_per_step(x, compute_liveness(x, o), c.alignment);
    } else {
      bytes = live_bytes_per_step(g, compute_liveness(g, o), c.alignment);
    }
    Curve cv{label, std::move(bytes), 0, curves.size(), 0, 1};
    for (const uint64_t b : cv.bytes) cv.peak = std::max(cv.peak, b);
    max_bytes = std::max(max_bytes, cv.peak);
    for (size_t j = 0; j < curves.size(); ++j) {
      Curve& other = curves[j];
      if (other.same_as == j && other.bytes == cv.bytes) {
        cv.same_as = j;
        cv.rank = other.copies++;
        break;
      }
    }
    curves.push_back(std::move(cv));
  }
  for (Curve& cv : curves) cv.copies = curves[cv.same_as].copies;
  Frame f{kPlotX, kOrdersPlotY, kPlotW, kOrdersPlotH, c.n, y_axis(max_bytes)};
  std::string s;
  s += "<text class=\"h1\" x=\"" + num(kPlotX) + "\" y=\"24\">Live bytes per op index for " +
       std::to_string(curves.size()) + (curves.size() == 1 ? " order of " : " orders of ") +
       esc(g.name) + "</text>\n";
  s += "<text class=\"small\" x=\"" + num(kPlotX) + "\" y=\"42\">each curve: the bytes of the "
       "storages live at each op index (sizes rounded to " + std::to_string(c.alignment) +
       " B); its maximum is the order's Tp; identical curves are drawn dashed in turns</text>\n";
  s += axes(f, "live bytes (MiB)");
  s += zoom_open(f, "clip-orders", 10);
  s += key_lines(f, c.key_steps);
  s += "<g id=\"orders\" " + f.mapping() + ">\n";
  s += key_ticks(f, c.key_steps);
  if (c.opt.lower_bound_bytes > 0) {
    const std::string y = num(f.px_yb(c.opt.lower_bound_bytes));
    s += "<line class=\"lb\" x1=\"" + num(f.px_x(0)) + "\" x2=\"" + num(f.px_x(c.n)) + "\" y1=\"" + y +
         "\" y2=\"" + y +
         "\"><title>lower bound on Tp over all orders: " + mib(c.opt.lower_bound_bytes) +
         " MiB</title></line>\n";
  }
  // Dashes for identical curves: each copy shows its colour on its own share of the line.
  auto dash_attrs = [](const Curve& cv, double dash) {
    if (cv.copies <= 1) return std::string();
    return " stroke-dasharray=\"" + num(dash) + " " + num(dash * static_cast<double>(cv.copies - 1)) +
           "\" stroke-dashoffset=\"" + num(-dash * static_cast<double>(cv.rank)) + "\"";
  };
  for (size_t i = 0; i < curves.size(); ++i) {
    const Curve& cv = curves[i];
    // Earlier distinct curves are drawn wider, so that curves that nearly coincide stay visible.
    const size_t w_index = cv.same_as;
    const double width = 1.2 + 1.4 * static_cast<double>(curves.size() - 1 - w_index) /
                                   static_cast<double>(std::max<size_t>(curves.size() - 1, 1));
    s += "<polyline class=\"order o" + std::to_string(i % kNumOrderColors) + "\" stroke-width=\"" +
         num(width, 1) + "\"" + dash_attrs(cv, 10) + " data-order=\"" + esc(cv.name) + "\" points=\"";
    bool first = true;
    for (const int32_t t : kept_points(cv.bytes)) {
      if (!first) s += ' ';
      first = false;
      s += num(f.px_x(t + 0.5)) + "," + num(f.px_yb(cv.bytes[t]));
    }
    s += "\"><title>" + esc(cv.name) + ": Tp " + std::to_string(cv.peak) + " B (" + mib(cv.peak) +
         " MiB)</title></polyline>\n";
  }
  s += "</g>\n</g></g>\n<g class=\"legend\">\n";
  double y = kOrdersPlotY + 10;
  for (size_t i = 0; i < curves.size(); ++i) {
    const Curve& cv = curves[i];
    std::string label = cv.name;
    if (cv.name == c.opt.order_label) label += " (the plan's order)";
    std::string sub = "Tp " + mib(cv.peak) + " MiB";
    if (cv.same_as != i) sub += ", same curve as " + curves[cv.same_as].name;
    else if (cv.copies > 1) sub += ", " + std::to_string(cv.copies - 1) + " more: same curve";
    s += legend_line(kLegendX, y, "order o" + std::to_string(i % kNumOrderColors), label, sub,
                     " data-order=\"" + esc(cv.name) + "\"");
    y += 32;
  }
  if (c.opt.lower_bound_bytes > 0) {
    s += legend_line(kLegendX, y, "lb", "lower bound on Tp", mib(c.opt.lower_bound_bytes) + " MiB");
    y += 32;
  }
  s += "<line class=\"keypoints\" x1=\"" + num(kLegendX + 7) + "\" x2=\"" + num(kLegendX + 7) +
       "\" y1=\"" + num(y - 12) + "\" y2=\"" + num(y + 2) + "\"/><text x=\"" + num(kLegendX + 20) +
       "\" y=\"" + num(y) + "\">key point</text>\n";
  s += "</g>\n";
  return s;
}

// The HTML script, plain JS with no network access. The tooltip shows the <title> text of the
// hovered element in a box that follows the mouse (the title is moved into data-tip on first
// hover, so that the browser's own tooltip does not show as well). Zoom and pan act on the op
// index axis of both pictures together: the wheel over a plot zooms around the mouse, dragging
// pans, a double click or "reset" shows everything, "zoom to the peak" shows the ops around it.
// Written without '<' and '&' so that the page stays well-formed XML.
const char* const kScript = R"JS(
(function () {
  var tip = document.getElementById('tip');
  document.addEventListener('mouseover', function (e) {
    var el = e.target;
    var t = el.firstElementChild;
    if (t) { if (t.localName === 'title') { el.setAttribute('data-tip', t.textContent); t.remove(); } }
    var text = el.getAttribute ? el.getAttribute('data-tip') : null;
    if (!text) { tip.style.display = 'none'; return; }
    tip.textContent = text;
    tip.style.display = 'block';
  });
  document.addEventListener('mousemove', function (e) {
    var x = e.pageX + 14;
    if (e.clientX + 14 + tip.offsetWidth > window.innerWidth) x = e.pageX - 14 - tip.offsetWidth;
    tip.style.left = x + 'px';
    tip.style.top = (e.pageY + 14) + 'px';
  });

  var svgs = Array.prototype.slice.call(document.querySelectorAll('svg.zoomable'));
  if (svgs.length === 0) return;
  var X0 = +svgs[0].getAttribute('data-plot-x'), W = +svgs[0].getAttribute('data-plot-w');
  var N = Math.max(1, +svgs[0].getAttribute('data-steps'));
  var K = 1, TX = 0;  // a pixel x of the unzoomed picture is drawn at X0 + TX + K * (x - X0)
  var KMAX = Math.max(1, N / 8);
  function clampView() {
    K = Math.min(Math.max(K, 1), KMAX);
    TX = Math.min(0, Math.max(TX, -(K - 1) * W));
  }
  function niceStep(range) {
    var raw = range / 10, p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10)), m = raw / p;
    var f = 10;
    if (7.5 > m) f = 5;
    if (3.5 > m) f = 2;
    if (1.5 > m) f = 1;
    return Math.max(1, f * p);
  }
  function ticks(svg) {
    var g = svg.querySelector('g.xticks');
    if (!g) return;
    var y = +g.getAttribute('data-y');
    while (g.firstChild) g.removeChild(g.firstChild);
    var lo = -TX / K / W * N, hi = lo + N / K, step = niceStep(hi - lo), ns = svg.namespaceURI;
    for (var t = Math.ceil(lo / step) * step; hi + 1e-9 >= t; t += step) {
      var x = X0 + TX + K * (t / N * W);
      var l = document.createElementNS(ns, 'line');
      l.setAttribute('x1', x); l.setAttribute('x2', x);
      l.setAttribute('y1', y); l.setAttribute('y2', y + 5);
      var tx = document.createElementNS(ns, 'text');
      tx.setAttribute('x', x); tx.setAttribute('y', y + 18);
      tx.setAttribute('text-anchor', 'middle');
      tx.textContent = String(Math.round(t));
      g.appendChild(l); g.appendChild(tx);
    }
  }
  function apply() {
    clampView();
    svgs.forEach(function (svg) {
      svg.querySelectorAll('g.zoom').forEach(function (g) {
        g.setAttribute('transform', 'matrix(' + K + ' 0 0 1 ' + (X0 * (1 - K) + TX) + ' 0)');
      });
      svg.querySelectorAll('[data-sx]').forEach(function (el) {
        var x = X0 + TX + K * (+el.getAttribute('data-sx') - X0);
        el.setAttribute('x', x + (+el.getAttribute('data-dx') || 0));
        el.style.display = (X0 - 1 > x || x > X0 + W + 1) ? 'none' : '';
      });
      ticks(svg);
    });
    var info = document.getElementById('zoominfo');
    var lo = Math.round(-TX / K / W * N);
    if (info) info.textContent = K === 1 ? 'all ' + N + ' ops shown' :
        'op indices ' + lo + '-' + Math.round(lo + N / K) + ' shown (zoom x' + K.toFixed(1) + ')';
  }
  function svgX(svg, e) {
    var p = svg.createSVGPoint();
    p.x = e.clientX; p.y = e.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse()).x;
  }
  function inPlot(x) { return x >= X0 ? X0 + W >= x : false; }
  var drag = null;
  svgs.forEach(function (svg) {
    svg.addEventListener('wheel', function (e) {
      var x = svgX(svg, e);
      if (!inPlot(x)) return;
      e.preventDefault();
      var u = X0 + (x - X0 - TX) / K;          // unzoomed x under the mouse
      K = K * Math.exp(-e.deltaY * 0.0025);
      clampView();
      TX = x - X0 - K * (u - X0);
      apply();
    }, {passive: false});
    svg.addEventListener('mousedown', function (e) {
      var x = svgX(svg, e);
      if (inPlot(x)) { drag = {svg: svg, x: x, tx: TX}; e.preventDefault(); }
    });
    svg.addEventListener('dblclick', function () { K = 1; TX = 0; apply(); });
  });
  document.addEventListener('mousemove', function (e) {
    if (!drag) return;
    TX = drag.tx + (svgX(drag.svg, e) - drag.x);
    apply();
  });
  document.addEventListener('mouseup', function () { drag = null; });
  var reset = document.getElementById('zoom-reset');
  if (reset) reset.addEventListener('click', function () { K = 1; TX = 0; apply(); });
  var topeak = document.getElementById('zoom-peak');
  var peak = document.getElementById('peak');
  if (topeak) topeak.addEventListener('click', function () {
    if (!peak) return;
    var s = +peak.getAttribute('data-step');
    K = Math.max(1, N / Math.max(40, N / 20));
    clampView();
    TX = W / 2 - K * ((s + 0.5) / N * W);
    apply();
  });
  apply();
  if (location.hash === '#zoom-peak') { if (topeak) topeak.click(); }
})();
)JS";

}  // namespace

VizFormat viz_format(const std::string& file_name) {
  std::string lower = file_name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  auto ends_with = [&](const std::string& suffix) {
    return lower.size() > suffix.size() &&
           lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".svg")) return VizFormat::kSvg;
  if (ends_with(".html")) return VizFormat::kHtml;
  throw std::invalid_argument("viz output '" + file_name + "' must be a file name ending in .svg or .html");
}

std::vector<VizKind> viz_kinds(const Graph& g) {
  const std::vector<StorageKind> base = storage_kinds(g);
  std::vector<VizKind> kinds(g.storages.size(), VizKind::kTemporary);
  for (StorageIdx s = 0; s < g.num_storages(); ++s) {
    const Phase p = g.ops[g.storages[s].producer].phase;
    if (base[s] == StorageKind::kActivation) kinds[s] = VizKind::kActivation;
    else if (p == Phase::kBackward) kinds[s] = VizKind::kGradient;
    else if (p == Phase::kUpdate) kinds[s] = VizKind::kOptimizerTemporary;
  }
  return kinds;
}

const char* viz_class(VizKind kind) {
  switch (kind) {
    case VizKind::kActivation: return "act";
    case VizKind::kGradient: return "grad";
    case VizKind::kOptimizerTemporary: return "opt";
    case VizKind::kRecomputed: return "rec";
    case VizKind::kTemporary: break;
  }
  return "tmp";
}

std::string render_viz(const Graph& g, const Order& order, const std::vector<uint64_t>& offsets,
                       uint64_t alignment, const VizOptions& options) {
  const VizFormat format = viz_format(options.file_name);
  if (alignment == 0) throw std::invalid_argument("viz: alignment must be at least 1");
  if (offsets.size() != g.storages.size()) {
    throw std::invalid_argument("viz: " + std::to_string(offsets.size()) + " offsets for " +
                                std::to_string(g.storages.size()) + " storages");
  }
  Ctx c{g, order, offsets, alignment, options, 0, {}, {}, 0, 0, {}, {}, -1, {}};
  c.n = g.num_ops();
  c.live = compute_liveness(g, order);  // throws std::invalid_argument unless a permutation
  c.live_bytes = live_bytes_per_step(g, c.live, alignment);
  for (const uint64_t b : c.live_bytes) c.tp = std::max(c.tp, b);
  c.arena = arena_bytes(g, offsets, alignment);
  c.kinds = viz_kinds(g);
  for (size_t i = 0; i < options.recomputed.size() && i < c.kinds.size(); ++i) {
    if (options.recomputed[i]) c.kinds[i] = VizKind::kRecomputed;
  }
  const std::vector<int32_t> step = steps_of(g, order);
  for (const OpIdx v : key_points(g)) c.key_steps.push_back(step[v]);
  std::sort(c.key_steps.begin(), c.key_steps.end());
  for (int32_t t = 0; t < c.n; ++t) {
    if (c.peak_step < 0 || c.live_bytes[t] > c.live_bytes[c.peak_step]) c.peak_step = t;
  }
  if (c.peak_step >= 0) {
    for (StorageIdx i = 0; i < g.num_storages(); ++i) {
      if (c.live.first[i] <= c.peak_step && c.peak_step <= c.live.last[i]) c.at_peak.push_back(i);
    }
    std::stable_sort(c.at_peak.begin(), c.at_peak.end(), [&](StorageIdx a, StorageIdx b) {
      return g.storages[a].size > g.storages[b].size;
    });
  }

  const std::string orders = orders_panel(c);  // first: an unknown method throws before work
  const std::string arena = arena_panel(c);
  const std::string css = style(c.n);
  const std::string zoom_attrs = " class=\"zoomable\" data-plot-x=\"" + num(kPlotX) + "\" data-plot-w=\"" +
                                 num(kPlotW) + "\" data-steps=\"" + std::to_string(c.n) + "\"";
  const std::string size1 = "width=\"" + num(kWidth) + "\" height=\"" + num(kArenaH) +
                            "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kArenaH) + "\"";
  const std::string size2 = "width=\"" + num(kWidth) + "\" height=\"" + num(kOrdersH) +
                            "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kOrdersH) + "\"";
  std::string doc;
  doc.reserve(arena.size() + orders.size() + 4096);
  if (format == VizFormat::kSvg) {
    const double h = kArenaH + kOrdersH;
    doc += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    doc += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
           num(h) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(h) + "\">\n";
    doc += "<title>roam viz: " + esc(g.name) + "</title>\n<style>" + css + "</style>\n";
    doc += "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"" + num(kWidth) + "\" height=\"" + num(h) +
           "\"/>\n";
    doc += "<g id=\"view-arena\">\n" + arena + "</g>\n";
    doc += "<g id=\"view-orders\" transform=\"translate(0 " + num(kArenaH) + ")\">\n" + orders +
           "</g>\n";
    doc += "</svg>\n";
  } else {
    doc += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
    doc += "<title>roam viz: " + esc(g.name) + "</title>\n<style>\n";
    doc += "body{font-family:sans-serif;margin:16px;background:#fff}"
           "svg{max-width:100%;height:auto;display:block}"
           "#storages rect:hover{fill-opacity:.6}"
           ".order:hover{stroke-width:3}"
           "#zoombar{margin:0 0 6px 90px;font-size:13px}#zoombar .hint{color:#666}"
           "#zoombar button{margin-right:4px}svg.zoomable{user-select:none}"
           "#tip{position:absolute;display:none;background:#fffff0;border:1px solid #888;"
           "padding:4px 6px;font:12px monospace;white-space:pre;pointer-events:none}\n";
    doc += css + "\n</style>\n</head>\n<body>\n";
    doc += "<div id=\"zoombar\"><button id=\"zoom-reset\" type=\"button\">reset zoom</button> "
           "<button id=\"zoom-peak\" type=\"button\">zoom to the peak</button> "
           "<span id=\"zoominfo\"></span> <span class=\"hint\">mouse wheel over a plot: zoom the op "
           "index axis; drag: pan; double click: everything; hover: tensor, op and module</span></div>\n";
    doc += "<section id=\"view-arena\">\n<svg" + zoom_attrs + " " + size1 + ">\n<rect class=\"bg\" x=\"0\" y=\"0\" "
           "width=\"" + num(kWidth) + "\" height=\"" + num(kArenaH) + "\"/>\n" + arena +
           "</svg>\n</section>\n";
    doc += "<section id=\"view-orders\">\n<svg" + zoom_attrs + " " + size2 + ">\n<rect class=\"bg\" x=\"0\" y=\"0\" "
           "width=\"" + num(kWidth) + "\" height=\"" + num(kOrdersH) + "\"/>\n" + orders +
           "</svg>\n</section>\n";
    doc += "<div id=\"tip\"></div>\n<script>" + std::string(kScript) + "</script>\n";
    doc += "</body>\n</html>\n";
  }
  return doc;
}

std::string render_viz(const Graph& g, const Plan& plan, const VizOptions& options) {
  VizOptions o = options;
  if (o.order_label.empty()) o.order_label = plan.order_method;
  if (o.layout_label.empty()) o.layout_label = plan.layout_method;
  if (o.lower_bound_bytes == 0) o.lower_bound_bytes = plan.stats.lower_bound_bytes;
  if (!plan.inplace.empty()) {  // its offsets place the storages of the graph with its writes
    const Graph x = apply_inplace(g, plan.inplace);
    if (o.orders_graph == nullptr) o.orders_graph = &g;
    return render_viz(x, plan.order, plan.offsets, plan.alignment, o);
  }
  return render_viz(g, plan.order, plan.offsets, plan.alignment, o);
}

}  // namespace roam
