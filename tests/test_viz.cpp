// `roam viz`: the SVG and HTML documents parsed back with a small XML reader written here, and
// checked against a hand-made graph whose kinds, live intervals and live bytes are worked out by
// hand; the CLI's error paths (exit status, no file written).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "roam/analysis.h"
#include "roam/graph.h"
#include "roam/layout.h"
#include "roam/order.h"
#include "roam/plan.h"
#include "roam/viz.h"

namespace {

using nlohmann::json;

// ------------------------------------------------------------------------------------------
// A minimal, strict XML reader: elements, attributes, text, comments, <?...?>, <!DOCTYPE>.
// Throws std::runtime_error on anything that is not well-formed.
// ------------------------------------------------------------------------------------------

struct Node {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<std::unique_ptr<Node>> children;
  std::string text;  // concatenated character data directly inside this element
  Node* parent = nullptr;

  std::string attr(const std::string& key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? std::string() : it->second;
  }
  bool has_class(const std::string& cls) const {
    std::istringstream in(attr("class"));
    std::string c;
    while (in >> c) {
      if (c == cls) return true;
    }
    return false;
  }
  void collect(const std::string& tag, std::vector<const Node*>& out) const {
    for (const auto& c : children) {
      if (c->name == tag) out.push_back(c.get());
      c->collect(tag, out);
    }
  }
  std::vector<const Node*> all(const std::string& tag) const {
    std::vector<const Node*> out;
    collect(tag, out);
    return out;
  }
  const Node* by_id(const std::string& id) const {
    if (attr("id") == id) return this;
    for (const auto& c : children) {
      if (const Node* n = c->by_id(id)) return n;
    }
    return nullptr;
  }
  const Node* child(const std::string& tag) const {
    for (const auto& c : children) {
      if (c->name == tag) return c.get();
    }
    return nullptr;
  }
};

class XmlReader {
 public:
  explicit XmlReader(const std::string& s) : s_(s) {}

  std::unique_ptr<Node> parse() {
    skip_misc(true);
    if (!at("<")) fail("no root element");
    auto root = element(nullptr);
    skip_misc(false);
    if (pos_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("XML: " + what + " at offset " + std::to_string(pos_));
  }
  bool at(const char* p) const { return s_.compare(pos_, std::char_traits<char>::length(p), p) == 0; }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void skip_until(const char* end) {
    const size_t e = s_.find(end, pos_);
    if (e == std::string::npos) fail(std::string("unterminated, expected ") + end);
    pos_ = e + std::char_traits<char>::length(end);
  }
  // Prolog / epilog: whitespace, comments, processing instructions, one DOCTYPE (prolog only).
  void skip_misc(bool prolog) {
    for (;;) {
      skip_ws();
      if (at("<!--")) {
        skip_until("-->");
      } else if (at("<?")) {
        skip_until("?>");
      } else if (prolog && at("<!DOCTYPE")) {
        skip_until(">");
      } else {
        return;
      }
    }
  }
  std::string name() {
    const size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                s_[pos_] == '-' || s_[pos_] == '_' || s_[pos_] == ':' ||
                                s_[pos_] == '.')) {
      ++pos_;
    }
    if (pos_ == b) fail("expected a name");
    return s_.substr(b, pos_ - b);
  }
  // Character data up to `stop`; checks entity references, decodes them.
  std::string chars(char stop) {
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != stop) {
      const char c = s_[pos_];
      if (c == '<') fail("raw '<' in character data");
      if (c == '&') {
        const size_t e = s_.find(';', pos_);
        if (e == std::string::npos) fail("unterminated entity");
        const std::string ent = s_.substr(pos_ + 1, e - pos_ - 1);
        if (ent == "amp") out += '&';
        else if (ent == "lt") out += '<';
        else if (ent == "gt") out += '>';
        else if (ent == "quot") out += '"';
        else if (ent == "apos") out += '\'';
        else if (ent.size() > 1 && ent[0] == '#') out += '?';
        else fail("unknown entity &" + ent + ";");
        pos_ = e + 1;
      } else {
        out += c;
        ++pos_;
      }
    }
    return out;
  }
  std::unique_ptr<Node> element(Node* parent) {
    ++pos_;  // '<'
    auto node = std::make_unique<Node>();
    node->parent = parent;
    node->name = name();
    for (;;) {
      const size_t before = pos_;
      skip_ws();
      if (at("/>")) {
        pos_ += 2;
        return node;
      }
      if (at(">")) {
        ++pos_;
        break;
      }
      if (pos_ == before) fail("expected whitespace before an attribute");
      const std::string key = name();
      skip_ws();
      if (!at("=")) fail("attribute without '='");
      ++pos_;
      skip_ws();
      if (!at("\"") && !at("'")) fail("unquoted attribute value");
      const char q = s_[pos_++];
      const std::string value = chars(q);
      if (pos_ >= s_.size()) fail("unterminated attribute value");
      ++pos_;
      if (!node->attrs.emplace(key, value).second) fail("duplicate attribute " + key);
    }
    for (;;) {
      if (pos_ >= s_.size()) fail("unclosed element <" + node->name + ">");
      if (at("</")) {
        pos_ += 2;
        const std::string end = name();
        if (end != node->name) fail("</" + end + "> closes <" + node->name + ">");
        skip_ws();
        if (!at(">")) fail("bad end tag");
        ++pos_;
        return node;
      }
      if (at("<!--")) {
        skip_until("-->");
      } else if (at("<![CDATA[")) {
        fail("CDATA not expected");
      } else if (at("<")) {
        node->children.push_back(element(node.get()));
      } else {
        node->text += chars('<');
      }
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
};

std::unique_ptr<Node> parse_xml(const std::string& text) { return XmlReader(text).parse(); }

std::vector<std::pair<double, double>> parse_points(const std::string& points) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(points);
  std::string pair;
  while (in >> pair) {
    const size_t comma = pair.find(',');
    if (comma == std::string::npos) throw std::runtime_error("bad point " + pair);
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

// The data-to-pixel mapping a data group carries (include/roam/viz.h).
struct Mapping {
  double x0 = 0, px_per_step = 0, y0 = 0, px_per_mib = 0;
  explicit Mapping(const Node& group)
      : x0(std::stod(group.attr("data-x0"))),
        px_per_step(std::stod(group.attr("data-px-per-step"))),
        y0(std::stod(group.attr("data-y0"))),
        px_per_mib(std::stod(group.attr("data-px-per-mib"))) {}
  double x(double step) const { return x0 + step * px_per_step; }
  double y(double bytes) const { return y0 - bytes / 1048576.0 * px_per_mib; }
  double h(double bytes) const { return bytes / 1048576.0 * px_per_mib; }
};
constexpr double kPx = 0.006;  // coordinates are rounded to 2 decimals

// ------------------------------------------------------------------------------------------
// The hand-made graph
// ------------------------------------------------------------------------------------------
//
// Program order, steps 0..7:      f0 f1 f2 b0 b1 u0 u1 o0
// Storages (aligned to 64 B), in StorageIdx order (producer order):
//   a     1000 -> 1024  f0 (forward), read by b0 (backward)   activation   steps 0..3
//   b      512          f1 (forward), read by f2 only          temporary    steps 1..2
//   loss     4 ->   64  f2 (forward), read by b0, last by o0   temporary    steps 2..7
//                        (other phase; graph output): not last used in backward
//   ga    1000 -> 1024  b0 (backward), read by b1, u0          gradient     steps 3..5
//   gw     256          b1 (backward), read by u1              gradient     steps 4..6
//   u      300 ->  320  u0 (update)                            optimizer    steps 5..6
//   s        8 ->   64  o0 (other)                             temporary    steps 7..7
// w_new is an in-place alias of the resident param w: nothing to place.
// Live bytes per step: 1024, 1536, 1600, 2112, 1344, 1664, 640, 128.
const char* kHandGraph = R"({
  "format": "roam-graph", "version": 1, "name": "viz <hand> & \"co\"",
  "tensors": [
    {"id": "x", "size": 64, "role": "input"},
    {"id": "w", "size": 256, "role": "param", "name": "fc.weight"},
    {"id": "a", "size": 1000, "name": "relu <&>"},
    {"id": "b", "size": 512, "name": "scratch"},
    {"id": "loss", "size": 4, "name": "loss"},
    {"id": "ga", "size": 1000, "name": "grad_a"},
    {"id": "gw", "size": 256, "name": "grad_w"},
    {"id": "u", "size": 300, "name": "adam_tmp"},
    {"id": "w_new", "size": 256, "alias_of": "w"},
    {"id": "s", "size": 8, "name": "stat"}
  ],
  "ops": [
    {"id": "f0", "target": "aten.mm.default", "phase": "forward", "inputs": ["x", "w"], "outputs": ["a"]},
    {"id": "f1", "target": "aten.relu.default", "phase": "forward", "inputs": ["a"], "outputs": ["b"]},
    {"id": "f2", "target": "aten.sum.default", "phase": "forward", "inputs": ["b"], "outputs": ["loss"]},
    {"id": "b0", "target": "aten.mul.Tensor", "phase": "backward", "inputs": ["loss", "a"], "outputs": ["ga"]},
    {"id": "b1", "target": "aten.mm.default", "phase": "backward", "inputs": ["ga"], "outputs": ["gw"]},
    {"id": "u0", "target": "aten.mul.Tensor", "phase": "update", "inputs": ["ga", "w"], "outputs": ["u"]},
    {"id": "u1", "target": "aten.add_.Tensor", "phase": "update", "inputs": ["u", "w", "gw"], "outputs": ["w_new"]},
    {"id": "o0", "target": "aten.clone.default", "phase": "other", "inputs": ["loss"], "outputs": ["s"]}
  ],
  "outputs": ["loss"]
})";

struct Expected {
  const char* id;
  const char* cls;
  int first, last;
  uint64_t aligned;
};
const Expected kExpected[] = {
    {"a", "act", 0, 3, 1024},  {"b", "tmp", 1, 2, 512},  {"loss", "tmp", 2, 7, 64},
    {"ga", "grad", 3, 5, 1024}, {"gw", "grad", 4, 6, 256}, {"u", "opt", 5, 6, 320},
    {"s", "tmp", 7, 7, 64}};
const uint64_t kLiveBytes[] = {1024, 1536, 1600, 2112, 1344, 1664, 640, 128};

roam::Graph hand_graph() { return roam::parse_graph(json::parse(kHandGraph), "hand.json"); }

roam::Plan hand_plan(const roam::Graph& g) {
  roam::PlanRequest req{"program", "greedy_by_size", roam::PlanOptions{64}};
  return roam::make_plan(g, req, roam::lower_bound(g, 64)).plan;
}

roam::VizOptions options_for(const std::string& file, std::vector<std::string> orders = {}) {
  roam::VizOptions o;
  o.file_name = file;
  o.orders = std::move(orders);
  return o;
}

// Checks view 1 of a parsed document against the hand graph and the plan's offsets.
void check_arena(const Node& root, const roam::Graph& g, const std::vector<uint64_t>& offsets) {
  const Node* storages = root.by_id("storages");
  ASSERT_NE(storages, nullptr);
  const Mapping m(*storages);
  // One byte is more than 0.1 px here: the tolerance below pins offsets and sizes exactly.
  EXPECT_GT(m.h(1), 0.1);
  const auto rects = storages->all("rect");
  ASSERT_EQ(rects.size(), std::size(kExpected));
  ASSERT_EQ(g.num_storages(), static_cast<int>(std::size(kExpected)));
  for (size_t i = 0; i < rects.size(); ++i) {
    const Node& r = *rects[i];
    const Expected& e = kExpected[i];
    SCOPED_TRACE(e.id);
    ASSERT_EQ(g.tensors[g.storages[i].root].id, e.id);
    EXPECT_EQ(r.attr("class"), e.cls);
    EXPECT_NEAR(std::stod(r.attr("x")), m.x(e.first), kPx);
    EXPECT_NEAR(std::stod(r.attr("width")), (e.last + 1 - e.first) * m.px_per_step, kPx);
    // y is the top edge in pixels: the end of the byte range.
    EXPECT_NEAR(std::stod(r.attr("y")), m.y(static_cast<double>(offsets[i] + e.aligned)), kPx);
    EXPECT_NEAR(std::stod(r.attr("height")), m.h(static_cast<double>(e.aligned)), kPx);
    const Node* title = r.child("title");
    ASSERT_NE(title, nullptr);
    EXPECT_NE(title->text.find(e.id), std::string::npos);
    EXPECT_NE(title->text.find(g.ops[g.storages[i].producer].id), std::string::npos);
    EXPECT_NE(title->text.find(g.ops[g.storages[i].producer].target), std::string::npos);
    EXPECT_NE(title->text.find(std::to_string(g.storages[i].size) + " B"), std::string::npos);
    EXPECT_NE(title->text.find("MiB"), std::string::npos);
    EXPECT_NE(title->text.find("steps " + std::to_string(e.first) + "-" + std::to_string(e.last)),
              std::string::npos);
  }
  // The name with XML specials came back intact.
  EXPECT_NE(rects[0]->child("title")->text.find("relu <&>"), std::string::npos);

  // The Tp curve: one point per step, at (step + 0.5, live bytes).
  std::vector<const Node*> tp;
  for (const Node* p : storages->all("polyline")) {
    if (p->has_class("tp")) tp.push_back(p);
  }
  ASSERT_EQ(tp.size(), 1u);
  const auto pts = parse_points(tp[0]->attr("points"));
  ASSERT_EQ(pts.size(), std::size(kLiveBytes));
  for (size_t t = 0; t < pts.size(); ++t) {
    EXPECT_NEAR(pts[t].first, m.x(t + 0.5), kPx);
    EXPECT_NEAR(pts[t].second, m.y(static_cast<double>(kLiveBytes[t])), kPx);
  }
  // The arena line at the arena's height.
  const uint64_t arena = roam::arena_bytes(g, offsets, 64);
  bool found_arena = false;
  for (const Node* l : storages->all("line")) {
    if (!l->has_class("arena")) continue;
    found_arena = true;
    EXPECT_NEAR(std::stod(l->attr("y1")), m.y(static_cast<double>(arena)), kPx);
    EXPECT_NEAR(std::stod(l->attr("y2")), m.y(static_cast<double>(arena)), kPx);
    EXPECT_NEAR(std::stod(l->attr("x1")), m.x(0), kPx);
    EXPECT_NEAR(std::stod(l->attr("x2")), m.x(8), kPx);
  }
  EXPECT_TRUE(found_arena);
  // One key-point mark per key point of the graph.
  size_t marks = 0;
  for (const Node* p : storages->all("path")) {
    if (!p->has_class("keypoints")) continue;
    const std::string d = p->attr("d");
    marks += static_cast<size_t>(std::count(d.begin(), d.end(), 'M'));
  }
  EXPECT_EQ(marks, roam::key_points(g).size());
}

std::vector<std::string> order_polylines(const Node& root) {
  const Node* orders = root.by_id("orders");
  if (!orders) return {};
  std::vector<std::string> names;
  for (const Node* p : orders->all("polyline")) {
    if (p->has_class("order")) names.push_back(p->attr("data-order"));
  }
  return names;
}

TEST(Viz, KindsFromPhases) {
  const roam::Graph g = hand_graph();
  const auto kinds = roam::viz_kinds(g);
  ASSERT_EQ(kinds.size(), std::size(kExpected));
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_STREQ(roam::viz_class(kinds[i]), kExpected[i].cls) << kExpected[i].id;
  }
}

TEST(Viz, FormatFromExtension) {
  EXPECT_EQ(roam::viz_format("a.svg"), roam::VizFormat::kSvg);
  EXPECT_EQ(roam::viz_format("dir/A.SVG"), roam::VizFormat::kSvg);
  EXPECT_EQ(roam::viz_format("a.html"), roam::VizFormat::kHtml);
  EXPECT_THROW(roam::viz_format("a.png"), std::invalid_argument);
  EXPECT_THROW(roam::viz_format("svg"), std::invalid_argument);
  EXPECT_THROW(roam::viz_format("a.htm"), std::invalid_argument);
  const roam::Graph g = hand_graph();
  EXPECT_THROW(roam::render_viz(g, hand_plan(g), options_for("out.pdf")), std::invalid_argument);
}

TEST(Viz, SvgHandGraph) {
  const roam::Graph g = hand_graph();
  const roam::Plan plan = hand_plan(g);
  const std::string svg = roam::render_viz(g, plan, options_for("out.svg"));
  std::unique_ptr<Node> root;
  ASSERT_NO_THROW(root = parse_xml(svg));
  EXPECT_EQ(root->name, "svg");
  EXPECT_EQ(root->attr("xmlns"), "http://www.w3.org/2000/svg");
  check_arena(*root, g, plan.offsets);
  EXPECT_EQ(order_polylines(*root), roam::order_methods());
  // Two panels: the arena, then the orders below it.
  ASSERT_NE(root->by_id("view-arena"), nullptr);
  ASSERT_NE(root->by_id("view-orders"), nullptr);
  EXPECT_NE(root->by_id("view-orders")->attr("transform").find("translate"), std::string::npos);
  // No URL other than the SVG namespace.
  std::string rest = svg;
  rest.erase(rest.find("http://www.w3.org/2000/svg"), 26);
  EXPECT_EQ(rest.find("http"), std::string::npos);
}

TEST(Viz, HtmlHandGraph) {
  const roam::Graph g = hand_graph();
  const roam::Plan plan = hand_plan(g);
  const std::string html = roam::render_viz(g, plan, options_for("out.html", {"program", "bfs"}));
  std::string lower = html;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_EQ(lower.find("http"), std::string::npos);
  EXPECT_EQ(lower.find("src="), std::string::npos);
  EXPECT_EQ(lower.find("href"), std::string::npos);
  EXPECT_EQ(lower.find("@import"), std::string::npos);
  EXPECT_EQ(lower.rfind("<!doctype html>", 0), 0u);
  std::unique_ptr<Node> root;
  ASSERT_NO_THROW(root = parse_xml(html));
  EXPECT_EQ(root->name, "html");
  check_arena(*root, g, plan.offsets);
  EXPECT_EQ(order_polylines(*root), (std::vector<std::string>{"program", "bfs"}));
  // Two sections, an inline tooltip script and its box.
  const auto sections = root->all("section");
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_NE(sections[0]->by_id("storages"), nullptr);
  EXPECT_NE(sections[1]->by_id("orders"), nullptr);
  EXPECT_NE(root->by_id("tip"), nullptr);
  const auto scripts = root->all("script");
  ASSERT_EQ(scripts.size(), 1u);
  EXPECT_NE(scripts[0]->text.find("mouseover"), std::string::npos);
}

TEST(Viz, OrdersView) {
  const roam::Graph g = hand_graph();
  const roam::Plan plan = hand_plan(g);
  for (const auto& orders : std::vector<std::vector<std::string>>{
           {"program"}, {"lescea", "lpmf", "dfs"}, {}}) {
    const std::string svg = roam::render_viz(g, plan, options_for("v.svg", orders));
    const auto root = parse_xml(svg);
    EXPECT_EQ(order_polylines(*root), orders.empty() ? roam::order_methods() : orders);
    // Each polyline: one point per step with that order's live bytes.
    const Node* group = root->by_id("orders");
    ASSERT_NE(group, nullptr);
    const Mapping m(*group);
    for (const Node* p : group->all("polyline")) {
      const auto pts = parse_points(p->attr("points"));
      const roam::Order o = roam::make_order(g, p->attr("data-order"), uint64_t{64});
      const auto live = roam::live_bytes_per_step(g, roam::compute_liveness(g, o), 64);
      ASSERT_EQ(pts.size(), live.size());
      for (size_t t = 0; t < pts.size(); ++t) {
        EXPECT_NEAR(pts[t].first, m.x(t + 0.5), kPx);
        EXPECT_NEAR(pts[t].second, m.y(static_cast<double>(live[t])), kPx);
      }
    }
  }
  EXPECT_THROW(roam::render_viz(g, plan, options_for("v.svg", {"nope"})), std::invalid_argument);
}

TEST(Viz, ExplicitOrderAndOffsets) {
  const roam::Graph g = hand_graph();
  // Hand offsets (the renderer draws what it is given) and the program order.
  const std::vector<uint64_t> offsets = {0, 1024, 1536, 1600, 0, 256, 0};
  const std::string svg =
      roam::render_viz(g, g.program_order(), offsets, 64, options_for("x.svg", {"program"}));
  const auto root = parse_xml(svg);
  check_arena(*root, g, offsets);
  EXPECT_THROW(roam::render_viz(g, g.program_order(), {0, 1}, 64, options_for("x.svg")),
               std::invalid_argument);
  EXPECT_THROW(roam::render_viz(g, roam::Order{0, 1}, offsets, 64, options_for("x.svg")),
               std::invalid_argument);
}

TEST(Viz, LargeSizes) {
  // 3 GiB storages: pixels stay inside the plot, the mapping recovers the bytes to a pixel.
  const json doc = json::parse(R"({
    "format": "roam-graph", "version": 1, "name": "big",
    "tensors": [{"id": "p", "size": 3221225472}, {"id": "q", "size": 3221225472}],
    "ops": [{"id": "n0", "target": "f", "phase": "forward", "outputs": ["p"]},
            {"id": "n1", "target": "g", "phase": "backward", "inputs": ["p"], "outputs": ["q"]}],
    "outputs": ["q"]})");
  const roam::Graph g = roam::parse_graph(doc, "big.json");
  const std::vector<uint64_t> offsets = {0, 3221225472};
  const auto root = parse_xml(roam::render_viz(g, g.program_order(), offsets, 64,
                                               options_for("big.svg", {"program"})));
  const Node* storages = root->by_id("storages");
  ASSERT_NE(storages, nullptr);
  const Mapping m(*storages);
  const auto rects = storages->all("rect");
  ASSERT_EQ(rects.size(), 2u);
  EXPECT_EQ(rects[0]->attr("class"), "act");
  EXPECT_EQ(rects[1]->attr("class"), "grad");
  EXPECT_NEAR(std::stod(rects[1]->attr("y")), m.y(6442450944.0), kPx);
  EXPECT_NEAR(std::stod(rects[1]->attr("height")), m.h(3221225472.0), kPx);
  EXPECT_GT(std::stod(rects[1]->attr("y")), 0.0);  // the axis top is above the arena
}

TEST(Viz, EmptyGraph) {
  const json doc = json::parse(R"({"format": "roam-graph", "version": 1, "name": "empty",
    "tensors": [], "ops": [], "outputs": []})");
  const roam::Graph g = roam::parse_graph(doc, "empty.json");
  for (const char* file : {"e.svg", "e.html"}) {
    const auto root = parse_xml(roam::render_viz(g, roam::Order{}, {}, 64, options_for(file)));
    ASSERT_NE(root->by_id("storages"), nullptr);
    EXPECT_TRUE(root->by_id("storages")->all("rect").empty());
  }
}

// ------------------------------------------------------------------------------------------
// CLI
// ------------------------------------------------------------------------------------------

class VizCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("roam_viz_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const roam::Graph g = hand_graph();
    std::ofstream(file("g.json")) << kHandGraph;
    roam::write_json_file(file("plan.json"), roam::plan_to_json(g, hand_plan(g)));
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  int roam(const std::string& args) const {
    const std::string cmd = std::string(ROAM_BIN) + " " + args + " > " + file("stdout.txt") +
                            " 2> " + file("stderr.txt");
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(file(name));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  bool exists(const std::string& name) const { return std::filesystem::exists(file(name)); }
  // Nothing but the inputs and the captured output in the directory (no temporary left over).
  size_t num_files() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir_),
                                             std::filesystem::directory_iterator()));
  }

  std::filesystem::path dir_;
};

TEST_F(VizCli, WritesSvgAndHtml) {
  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("plan.json") + " -o " + file("v.svg")), 0)
      << read("stderr.txt");
  ASSERT_TRUE(exists("v.svg"));
  auto root = parse_xml(read("v.svg"));
  EXPECT_EQ(root->by_id("storages")->all("rect").size(), std::size(kExpected));
  EXPECT_EQ(order_polylines(*root), roam::order_methods());

  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("plan.json") + " -o " + file("v.html") +
                 " --orders program,lescea"),
            0)
      << read("stderr.txt");
  const std::string html = read("v.html");
  EXPECT_EQ(html.find("http"), std::string::npos);
  root = parse_xml(html);
  EXPECT_EQ(order_polylines(*root), (std::vector<std::string>{"program", "lescea"}));
  EXPECT_EQ(num_files(), 6u);  // g.json plan.json stdout stderr v.svg v.html
}

TEST_F(VizCli, BadExtension) {
  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("plan.json") + " -o " + file("v.png")), 2);
  EXPECT_FALSE(exists("v.png"));
  EXPECT_NE(read("stderr.txt").find(".svg or .html"), std::string::npos);
  EXPECT_EQ(num_files(), 4u);
}

TEST_F(VizCli, UnknownOrder) {
  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("plan.json") + " -o " + file("v.svg") +
                 " --orders program,nope"),
            2);
  EXPECT_FALSE(exists("v.svg"));
}

TEST_F(VizCli, InvalidPlan) {
  json plan = json::parse(read("plan.json"));
  plan["offsets"]["ga"] = plan["offsets"]["a"];  // a and ga are both live at step 3
  std::ofstream(file("bad.json")) << plan.dump();
  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("bad.json") + " -o " + file("v.html")), 1);
  EXPECT_FALSE(exists("v.html"));
  EXPECT_NE(read("stderr.txt").find("overlap"), std::string::npos) << read("stderr.txt");
}

TEST_F(VizCli, UnreadablePlan) {
  std::ofstream(file("junk.json")) << "{not json";
  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("junk.json") + " -o " + file("v.svg")), 2);
  EXPECT_FALSE(exists("v.svg"));
  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("missing.json") + " -o " + file("v.svg")), 2);
  EXPECT_FALSE(exists("v.svg"));
  // Wrong format field.
  std::ofstream(file("wrong.json")) << R"({"format": "roam-graph", "version": 1})";
  EXPECT_EQ(roam("viz " + file("g.json") + " " + file("wrong.json") + " -o " + file("v.svg")), 2);
  EXPECT_FALSE(exists("v.svg"));
}

}  // namespace
