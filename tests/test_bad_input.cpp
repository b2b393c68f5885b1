// Bad input: one test per rule of GRAPH_FORMAT.md. parse_graph must throw roam::InputError
// naming the file, the field and the id. Then the CLI: exit 2 with one line naming the file and
// no output written; `validate` exit 1 on a corrupted plan, 2 on an unreadable one; round trips
// through plain and gzip files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include "roam/options.h"
#include "../src/order/roam_segment.h"
#include "roam/roam_order.h"
#include "testing.h"

namespace {

using nlohmann::json;
using roamtest::GraphJson;

constexpr const char* kFile = "bad_graph.json";

// x (input) -> n0 -> a -> n1 -> b; outputs [b].
GraphJson base() {
  GraphJson g("base");
  g.tensor("x", 8, "input").tensor("a", 100).tensor("b", 200);
  g.op("n0", {"x"}, {"a"}).op("n1", {"a"}, {"b"});
  g.output("b");
  return g;
}

struct Expect {
  std::string field;               // exact InputError::field()
  std::string id;                  // exact InputError::id()
  std::vector<std::string> words;  // more substrings of what()
};

void expect_input_error(const json& doc, const Expect& e) {
  try {
    roam::parse_graph(doc, kFile);
    ADD_FAILURE() << "accepted: " << doc.dump();
  } catch (const roam::InputError& err) {
    const std::string what = err.what();
    EXPECT_EQ(err.file(), kFile) << what;
    EXPECT_EQ(err.field(), e.field) << what;
    EXPECT_EQ(err.id(), e.id) << what;
    EXPECT_NE(what.find(kFile), std::string::npos) << what;
    EXPECT_NE(what.find(e.field), std::string::npos) << what;
    EXPECT_NE(what.find(e.id), std::string::npos) << what;
    for (const auto& w : e.words) EXPECT_NE(what.find(w), std::string::npos) << w << " in " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  } catch (const std::exception& err) {
    ADD_FAILURE() << "wrong exception type: " << err.what();
  }
}

TEST(BadInput, BaseGraphIsValid) { EXPECT_NO_THROW(base().parse(kFile)); }

TEST(BadInput, MalformedJson) {
  roamtest::TempDir dir;
  const std::string path = dir.file("broken.json");
  roamtest::write_text(path, "{\"format\": \"roam-graph\", \"version\": 1, \"tensors\": [");
  try {
    roam::read_json_file(path);
    ADD_FAILURE() << "malformed JSON accepted";
  } catch (const roam::InputError& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_NE(e.field().find("json"), std::string::npos) << e.field();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(roam::load_graph(path), roam::InputError);
  EXPECT_THROW(roam::load_graph(dir.file("does_not_exist.json")), roam::InputError);
  // A JSON document that is not an object.
  EXPECT_THROW(roam::parse_graph(json::array(), kFile), roam::InputError);
}

TEST(BadInput, WrongFormat) {
  auto g = base();
  g.doc["format"] = "roam-plan";
  expect_input_error(g.doc, {"format", "", {"roam-plan"}});
  g.doc.erase("format");
  EXPECT_THROW(roam::parse_graph(g.doc, kFile), roam::InputError);
}

TEST(BadInput, WrongVersion) {
  auto g = base();
  g.doc["version"] = 2;
  expect_input_error(g.doc, {"version", "", {"2"}});
  g.doc["version"] = "1";
  expect_input_error(g.doc, {"version", "", {}});
}

TEST(BadInput, DuplicateTensorId) {
  auto g = base();
  g.tensor("a", 5);
  expect_input_error(g.doc, {"tensors[3].id", "a", {"duplicate"}});
}

TEST(BadInput, DuplicateOpId) {
  auto g = base();
  g.op("n0", {"b"}, {});
  expect_input_error(g.doc, {"ops[2].id", "n0", {"duplicate"}});
}

TEST(BadInput, UnknownIdInInputs) {
  auto g = base();
  g.doc["ops"][1]["inputs"].push_back("ghost");
  expect_input_error(g.doc, {"ops[1].inputs", "n1", {"ghost"}});
}

TEST(BadInput, UnknownIdInOutputs) {
  auto g = base();
  g.doc["ops"][0]["outputs"].push_back("ghost");
  expect_input_error(g.doc, {"ops[0].outputs", "n0", {"ghost"}});
}

TEST(BadInput, UnknownIdInAfter) {
  auto g = base();
  g.doc["ops"][1]["after"] = {"n0", "ghost_op"};
  expect_input_error(g.doc, {"ops[1].after", "n1", {"ghost_op"}});
}

TEST(BadInput, UnknownIdInAliasOf) {
  auto g = base();
  g.tensor("v", 100, "", "ghost");
  expect_input_error(g.doc, {"tensors[3].alias_of", "v", {"ghost"}});
}

TEST(BadInput, UnknownIdInGraphOutputs) {
  auto g = base();
  g.output("ghost");
  expect_input_error(g.doc, {"outputs", "ghost", {}});
}

TEST(BadInput, RootWithoutProducerOrRole) {
  auto g = base();
  g.tensor("orphan", 64);
  expect_input_error(g.doc, {"tensors.role", "orphan", {"producer"}});
  // A view with no producer is fine (its data comes from its base) ...
  auto ok = base();
  ok.tensor("view", 100, "", "a");
  ok.doc["ops"][1]["inputs"].push_back("view");
  EXPECT_NO_THROW(ok.parse(kFile));
  // ... and so is a root of size 0 only when something produces it.
  auto zero = base();
  zero.tensor("empty", 0);
  expect_input_error(zero.doc, {"tensors.role", "empty", {}});
}

TEST(BadInput, RoleAndProducer) {
  auto g = base();
  g.doc["tensors"][1]["role"] = "param";  // a is produced by n0
  expect_input_error(g.doc, {"tensors.role", "a", {"n0", "param"}});
}

TEST(BadInput, TwoProducers) {
  auto g = base();
  g.doc["ops"][1]["outputs"].push_back("a");  // a is produced by n0 already
  expect_input_error(g.doc, {"ops[1].outputs", "n1", {"'a'", "n0"}});
}

TEST(BadInput, AliasCycle) {
  auto g = base();
  g.tensor("p", 10, "", "q").tensor("q", 10, "", "p");
  expect_input_error(g.doc, {"tensors.alias_of", "p", {"cycle", "q"}});
  auto self = base();
  self.tensor("s", 10, "", "s");
  expect_input_error(self.doc, {"tensors.alias_of", "s", {"cycle"}});
}

TEST(BadInput, NegativeSize) {
  auto g = base();
  g.doc["tensors"][1]["size"] = -100;
  expect_input_error(g.doc, {"tensors[1].size", "a", {"-100"}});
}

TEST(BadInput, FractionalSize) {
  auto g = base();
  g.doc["tensors"][2]["size"] = 10.5;
  expect_input_error(g.doc, {"tensors[2].size", "b", {"10.5"}});
  g.doc["tensors"][2]["size"] = "200";
  expect_input_error(g.doc, {"tensors[2].size", "b", {}});
}

TEST(BadInput, SizesOverflowWhenSummed) {
  // Each size fits in 64 bits; their sum does not.
  auto g = base();
  g.doc["tensors"][1]["size"] = uint64_t{1};
  g.doc["tensors"][2]["size"] = UINT64_MAX;
  expect_input_error(g.doc, {"tensors.size", "b", {"overflow"}});
  auto h = base();
  h.doc["tensors"][1]["size"] = uint64_t{1} << 63;
  h.doc["tensors"][2]["size"] = uint64_t{1} << 63;
  EXPECT_THROW(roam::parse_graph(h.doc, kFile), roam::InputError);
  // A size beyond 64 bits is a number the reader cannot hold.
  json doc = json::parse(
      R"({"format":"roam-graph","version":1,"tensors":[{"id":"x","size":8,"role":"input"},)"
      R"({"id":"a","size":18446744073709551616}],"ops":[{"id":"n0","inputs":["x"],"outputs":["a"]}]})");
  expect_input_error(doc, {"tensors[1].size", "a", {}});
}

TEST(BadInput, DependencyCycleListsItsOps) {
  // alpha -> beta -> gamma by data, gamma -> alpha by an `after` edge; delta is not on it.
  GraphJson g("cyc");
  g.tensor("x", 8, "input").tensor("a", 1).tensor("b", 1).tensor("c", 1).tensor("d", 1);
  g.op("alpha", {"x"}, {"a"}, "forward", {"gamma"});
  g.op("beta", {"a"}, {"b"});
  g.op("gamma", {"b"}, {"c"});
  g.op("delta", {"x"}, {"d"});
  try {
    g.parse(kFile);
    ADD_FAILURE() << "cycle accepted";
  } catch (const roam::InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file(), kFile);
    EXPECT_EQ(e.field(), "ops");
    EXPECT_NE(what.find(kFile), std::string::npos) << what;
    EXPECT_NE(what.find("cycle"), std::string::npos) << what;
    for (const char* op : {"alpha", "beta", "gamma"}) EXPECT_NE(what.find(op), std::string::npos) << what;
    EXPECT_EQ(what.find("delta"), std::string::npos) << what;
    EXPECT_TRUE(e.id() == "alpha" || e.id() == "beta" || e.id() == "gamma") << e.id();
  }
  // A cycle through data edges only.
  GraphJson d("cyc2");
  d.tensor("p", 1).tensor("q", 1);
  d.op("first", {"q"}, {"p"});
  d.op("second", {"p"}, {"q"});
  try {
    d.parse(kFile);
    ADD_FAILURE() << "cycle accepted";
  } catch (const roam::InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("first"), std::string::npos) << what;
    EXPECT_NE(what.find("second"), std::string::npos) << what;
  }
  // An op that must run after itself.
  auto self = base();
  self.doc["ops"][1]["after"] = {"n1"};
  EXPECT_THROW(roam::parse_graph(self.doc, kFile), roam::InputError);
}

TEST(BadInput, OpListedBeforeItsDependency) {
  GraphJson g("order");
  g.tensor("x", 8, "input").tensor("a", 1).tensor("b", 1);
  g.op("late", {"a"}, {"b"});   // reads a, produced by the next op
  g.op("early", {"x"}, {"a"});
  expect_input_error(g.doc, {"ops[0]", "late", {"early"}});
  // Same through an `after` edge.
  auto h = base();
  h.doc["ops"][0]["after"] = {"n1"};
  h.doc["ops"][1]["inputs"] = {"x"};
  expect_input_error(h.doc, {"ops[0]", "n0", {"n1"}});
}

// Library issue (reported): a size held as a signed JSON integer (an int literal in C++, a Python
// int through pybind11_json) is refused although it is a valid non-negative number of bytes.
TEST(BadInput, SignedNonNegativeSizeIsAccepted) {
  auto g = base();
  g.doc["tensors"][1]["size"] = 100;  // int literal: number_integer, not number_unsigned
  roam::Graph parsed;
  EXPECT_NO_THROW(parsed = roam::parse_graph(g.doc, kFile));
  if (parsed.num_storages() == 2) {
    EXPECT_EQ(parsed.storages[0].size, 100u);
  }
}

// Library issue (reported): an op whose output is a view of another of its own outputs (e.g. an
// op returning a tensor and a view of it) gets a self-edge and is rejected as
// "dependency cycle through 1 op(s): n0 -> n0". No order constraint exists: it is valid input.
TEST(BadInput, OutputAliasingAnotherOutputOfTheSameOpIsNotACycle) {
  GraphJson g("self_view");
  g.tensor("x", 8, "input").tensor("a", 100).tensor("av", 100, "", "a").tensor("b", 10);
  g.op("n0", {"x"}, {"a", "av"});
  g.op("n1", {"av"}, {"b"});
  g.output("b");
  roam::Graph parsed;
  ASSERT_NO_THROW(parsed = g.parse(kFile));
  EXPECT_TRUE(parsed.preds[0].empty());
  EXPECT_EQ(parsed.num_storages(), 2);
  EXPECT_EQ(roam::theoretical_peak(parsed, parsed.program_order(), 1), 110u);
}

TEST(BadInput, OtherFieldErrors) {
  auto role = base();
  role.doc["tensors"][0]["role"] = "weights";
  expect_input_error(role.doc, {"tensors[0].role", "x", {"weights"}});
  auto phase = base();
  phase.doc["ops"][0]["phase"] = "sideways";
  expect_input_error(phase.doc, {"ops[0].phase", "n0", {"sideways"}});
  auto tensors = base();
  tensors.doc.erase("tensors");
  EXPECT_THROW(roam::parse_graph(tensors.doc, kFile), roam::InputError);
}

TEST(BadInput, StricterFieldRules) {
  // An empty phase is not "other": it is no phase at all.
  auto phase = base();
  phase.doc["ops"][1]["phase"] = "";
  expect_input_error(phase.doc, {"ops[1].phase", "n1", {"unknown phase"}});
  // shape must be an array of integers.
  auto shape = base();
  shape.doc["tensors"][1]["shape"] = "x";
  expect_input_error(shape.doc, {"tensors[1].shape", "a", {"integers"}});
  shape.doc["tensors"][1]["shape"] = json::array({2, "x"});
  expect_input_error(shape.doc, {"tensors[1].shape", "a", {"integers"}});
  // A role on an alias whose root is an activation contradicts the root's residency.
  auto role = base();
  role.tensor("v", 100, "buffer", "a");
  expect_input_error(role.doc, {"tensors.role", "v", {"not resident"}});
  // The wrong type for `after` names ops[i].after once.
  auto after = base();
  after.doc["ops"][1]["after"] = "n0";
  expect_input_error(after.doc, {"ops[1].after", "n1", {"array"}});
}

TEST(BadInput, TruncatedGzipAndDeepNesting) {
  roamtest::TempDir dir;
  // A gzip file cut before its trailer (CRC and length) is refused, not silently accepted.
  const std::string text = base().doc.dump();
  const std::string gz = dir.file("cut.json.gz");
  {
    gzFile out = gzopen(gz.c_str(), "wb");
    gzwrite(out, text.data(), static_cast<unsigned>(text.size()));
    gzclose(out);
  }
  std::string bytes = roamtest::read_text(gz);
  EXPECT_NO_THROW(roam::load_graph(gz));
  bytes.resize(bytes.size() - 8);
  roamtest::write_text(gz, bytes);
  try {
    roam::load_graph(gz);
    ADD_FAILURE() << "truncated gzip accepted";
  } catch (const roam::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  // 100k nested arrays in meta: refused by depth before any recursive copy could overflow.
  const std::string deep = dir.file("deep.json");
  roamtest::write_text(deep, R"({"format":"roam-graph","version":1,"meta":{"x":)" +
                                 std::string(100000, '[') + std::string(100000, ']') +
                                 R"(},"tensors":[],"ops":[]})");
  try {
    roam::load_graph(deep);
    ADD_FAILURE() << "deep nesting accepted";
  } catch (const roam::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nesting"), std::string::npos) << e.what();
  }
  // A number that overflows a double is a JSON error naming the file.
  const std::string huge = dir.file("huge.json");
  roamtest::write_text(huge, R"({"format":"roam-graph","version":1,"tensors":[],"ops":[{"id":"n0","cost":1e999}]})");
  try {
    roam::load_graph(huge);
    ADD_FAILURE() << "1e999 accepted";
  } catch (const roam::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(huge), std::string::npos) << e.what();
  }
}

// A recorded lower bound at or below the one roam proves is a proven bound too (e.g. a plan
// written by an older, weaker bound): valid. One above it is not proven: invalid.
TEST(BadInput, PlanLowerBoundMayBeWeakerNeverStronger) {
  const roam::Graph g = roamtest::load_fixture("alias_output.json");  // bound 800 = best Tp
  const roam::PlanResult r = roam::make_plan(g, roamtest::request("program", "llfb", 1));
  json plan = roam::plan_to_json(g, r.plan);
  ASSERT_EQ(plan["stats"]["lower_bound_bytes"], 800);
  for (const uint64_t lb : {uint64_t{0}, uint64_t{700}, uint64_t{800}}) {
    plan["stats"]["lower_bound_bytes"] = lb;
    EXPECT_TRUE(roam::validate_plan(g, plan, "p.json").valid) << lb;
  }
  plan["stats"]["lower_bound_bytes"] = 801;
  const roam::ValidationReport rep = roam::validate_plan(g, plan, "p.json");
  EXPECT_FALSE(rep.valid);
  ASSERT_FALSE(rep.problems.empty());
  EXPECT_NE(rep.problems.front().find("above the bound proven here (800)"), std::string::npos)
      << rep.problems.front();
}

TEST(BadInput, PlanAlignmentAndOffsetsCannotOverflow) {
  const roam::Graph g = base().parse(kFile);
  const roam::PlanResult r = roam::make_plan(g, {"program", "llfb", roam::PlanOptions{64}}, 0);
  json plan = roam::plan_to_json(g, r.plan);
  plan["stats"]["lower_bound_bytes"] = roam::lower_bound(g, 64);
  plan["stats"]["solve_seconds"] = 0.0;
  ASSERT_TRUE(roam::validate_plan(g, plan, "p.json").valid);
  // 2^64 - 1 as the alignment would round every size to 0: refused as unreadable.
  json bad = plan;
  bad["alignment"] = std::numeric_limits<uint64_t>::max();
  EXPECT_THROW(roam::validate_plan(g, bad, "p.json"), roam::InputError);
  // An offset whose end wraps around 2^64 is invalid, not a tiny arena.
  bad = plan;
  bad["offsets"]["b"] = std::numeric_limits<uint64_t>::max() - 63;
  const roam::ValidationReport rep = roam::validate_plan(g, bad, "p.json");
  EXPECT_FALSE(rep.valid);
  ASSERT_FALSE(rep.problems.empty());
  EXPECT_NE(rep.problems.front().find("2^62"), std::string::npos) << rep.problems.front();
  // The graph name must be a string.
  bad = plan;
  bad["graph"] = 5;
  EXPECT_THROW(roam::validate_plan(g, bad, "p.json"), roam::InputError);
}

// ---- issue 12: ids, duplicate keys, gzip trailing data, aligned sums -------------------------

TEST(BadInput, IdsAreNonEmptyStrings) {
  auto tensor = base();
  tensor.doc["tensors"][1]["id"] = "";
  expect_input_error(tensor.doc, {"tensors[1].id", "", {"non-empty"}});
  auto op = base();
  op.doc["ops"][1]["id"] = "";
  expect_input_error(op.doc, {"ops[1].id", "", {"non-empty"}});
  // `"alias_of": ""` is not "no alias" (it was read so, and the executor reads it as an alias:
  // the tensor was placed on bytes still in use and the plan validated).
  auto alias = base();
  alias.tensor("v", 100);
  alias.doc["tensors"][3]["alias_of"] = "";
  alias.doc["ops"][1]["inputs"].push_back("v");
  expect_input_error(alias.doc, {"tensors[3].alias_of", "v", {"non-empty"}});
  // null still means "no alias" (an optional field written as null).
  auto null_alias = base();
  null_alias.doc["tensors"][1]["alias_of"] = nullptr;
  EXPECT_NO_THROW(roam::parse_graph(null_alias.doc, kFile));
}

// Found by the graph fuzz target: a value quoted from the file (here a role, an id) that holds
// a newline or another control character made the message span several lines.
TEST(BadInput, MessagesStayOneLineWhateverTheFileHolds) {
  auto role = base();
  role.doc["tensors"][0]["role"] = "in\nput\t\x01";
  expect_input_error(role.doc, {"tensors[0].role", "x", {"'in\\nput\\t\\x01'"}});
  auto id = base();
  id.doc["ops"][1]["inputs"].push_back("two\nlines\r");
  expect_input_error(id.doc, {"ops[1].inputs", "n1", {"'two\\nlines\\r'"}});
  // The id itself keeps its bytes (InputError::id()); only the message escapes them.
  auto dup = base();
  dup.tensor("a\nb", 1).tensor("a\nb", 2);
  try {
    roam::parse_graph(dup.doc, kFile);
    ADD_FAILURE() << "duplicate id accepted";
  } catch (const roam::InputError& e) {
    EXPECT_EQ(e.id(), "a\nb");
    EXPECT_NE(std::string(e.what()).find("(id 'a\\nb')"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

// Reads `text` as the file `name` in `dir`; returns the InputError (or fails the test).
roam::InputError read_error(const roamtest::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  roamtest::write_text(path, text);
  try {
    roam::read_json_file(path);
  } catch (const roam::InputError& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e;
  }
  ADD_FAILURE() << name << " accepted: " << text;
  return roam::InputError(path, "", "", "");
}

TEST(BadInput, DuplicateJsonKeysAreRefused) {
  roamtest::TempDir dir;
  // In a tensor: the field names the object and the key, the id is the tensor's.
  std::string text = base().doc.dump();
  const std::string size_a = R"("id":"a","size":100)";
  ASSERT_NE(text.find(size_a), std::string::npos) << text;
  text.replace(text.find(size_a), size_a.size(), R"("id":"a","size":100,"size":1)");
  roam::InputError e = read_error(dir, "dup_size.json", text);
  EXPECT_EQ(e.field(), "tensors[1].size");
  EXPECT_EQ(e.id(), "a");
  EXPECT_NE(std::string(e.what()).find("duplicate key 'size'"), std::string::npos) << e.what();
  // Before the id: the id is still found (from the parsed object).
  e = read_error(dir, "dup_first.json",
                 R"({"format":"roam-graph","version":1,"tensors":[],"ops":[{"inputs":[],"inputs":[],"id":"n7"}]})");
  EXPECT_EQ(e.field(), "ops[0].inputs");
  EXPECT_EQ(e.id(), "n7");
  // Inside an object nested in an op (its `collective`): the op's id.
  e = read_error(dir, "dup_nested.json",
                 R"({"format":"roam-graph","version":1,"tensors":[],"ops":[{"id":"c3","inputs":[],)"
                 R"("outputs":[],"collective":{"kind":"all_reduce","kind":"broadcast"}}]})");
  EXPECT_EQ(e.field(), "ops[0].collective.kind");
  EXPECT_EQ(e.id(), "c3");
  // At the top level, and nested in meta.
  e = read_error(dir, "dup_top.json", R"({"format":"roam-graph","version":1,"version":2})");
  EXPECT_EQ(e.field(), "version");
  EXPECT_EQ(e.id(), "");
  e = read_error(dir, "dup_meta.json", R"({"meta":{"a":[{"k":1},{"k":2,"k":3}]},"format":"x"})");
  EXPECT_EQ(e.field(), "meta.a[1].k");
  // Colons and braces inside strings, escaped quotes, and the same key in sibling objects are
  // fine.
  const std::string ok = dir.file("ok.json");
  roamtest::write_text(ok, R"({"name":"a:b{[\":","meta":{"x:y":{"k":1},"z":{"k":2},"q\"":":"},"list":[{"k":1},{"k":1}]})");
  const json doc = roam::read_json_file(ok);
  EXPECT_EQ(doc["name"], "a:b{[\":");
  EXPECT_EQ(doc["meta"]["q\""], ":");
}

// Found by an adversarial review: a graph followed by a NUL byte and garbage was planned (the
// parser stopped at the NUL), while the same garbage after a newline is refused.
TEST(BadInput, NulByteIsRefusedWhereverItIs) {
  roamtest::TempDir dir;
  const std::string text = base().doc.dump();
  roam::InputError after = read_error(dir, "nul_after.json", text + "\n" + std::string(1, '\0') + "{garbage");
  EXPECT_EQ(after.field(), "(json)");
  EXPECT_NE(std::string(after.what()).find("NUL byte at byte " + std::to_string(text.size() + 1)),
            std::string::npos)
      << after.what();
  // Inside a string a raw NUL is not valid JSON either (it must be written \u0000).
  std::string inside = text;
  inside.insert(inside.find("\"a\"") + 2, std::string(1, '\0'));
  roam::InputError in_string = read_error(dir, "nul_inside.json", inside);
  EXPECT_NE(std::string(in_string.what()).find("NUL byte"), std::string::npos) << in_string.what();
}

std::string gzip_bytes(const std::string& text) {
  uLongf len = compressBound(static_cast<uLong>(text.size())) + 64;
  std::string out(len, '\0');
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

TEST(BadInput, GzipStreamFollowedByAnythingIsRefused) {
  roamtest::TempDir dir;
  const std::string text = base().doc.dump();
  const std::string gz = gzip_bytes(text);
  const std::string good = dir.file("good.json.gz");
  roamtest::write_text(good, gz);
  EXPECT_EQ(roam::load_graph(good).num_ops(), 2);
  // Trailing garbage (zlib's gzread ignores it silently), a second gzip stream, one zero byte.
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"garbage.json.gz", gz + "garbage"},
           {"two_streams.json.gz", gz + gzip_bytes(text)},
           {"zero.json.gz", gz + std::string(1, '\0')}}) {
    const roam::InputError e = read_error(dir, name, bytes);
    EXPECT_EQ(e.field(), "(file)") << name;
    EXPECT_NE(std::string(e.what()).find("after the end of the gzip stream"), std::string::npos)
        << e.what();
  }
  // Still: a plain file named .gz is read as JSON, a gzip stream named .json as gzip.
  const std::string plain = dir.file("plain.json.gz");
  roamtest::write_text(plain, text);
  EXPECT_EQ(roam::load_graph(plain).num_ops(), 2);
  const std::string named_json = dir.file("gz.json");
  roamtest::write_text(named_json, gz);
  EXPECT_EQ(roam::load_graph(named_json).num_ops(), 2);
  // Corrupt data inside the stream.
  std::string corrupt = gz;
  corrupt[corrupt.size() / 2] = static_cast<char>(corrupt[corrupt.size() / 2] ^ 0x55);
  const roam::InputError c = read_error(dir, "corrupt.json.gz", corrupt);
  EXPECT_NE(std::string(c.what()).find("cannot decompress"), std::string::npos) << c.what();
}

TEST(BadInput, SizesWhoseAlignedSumOverflowsAreRefused) {
  constexpr uint64_t k62 = uint64_t{1} << 62, k30 = uint64_t{1} << 30;
  // Every root (resident ones too) and workspace counts rounded up to 2^30, the largest
  // alignment of any plan: x (8 bytes) counts 2^30.
  auto at_cap = base();
  at_cap.doc["tensors"][1]["size"] = k62 / 2 - k30;
  at_cap.doc["tensors"][2]["size"] = k62 / 2 - k30 + 1;  // rounds up to 2^61
  EXPECT_NO_THROW(roam::parse_graph(at_cap.doc, kFile));
  auto over = base();
  over.doc["tensors"][1]["size"] = k62 / 2;
  over.doc["tensors"][2]["size"] = k62 / 2 - k30 + 1;  // unaligned sum 2^62 - 2^30 + 9
  expect_input_error(over.doc, {"tensors.size", "b", {"overflow", "2^62", "2^30"}});
  auto one = base();
  one.doc["tensors"][2]["size"] = k62 - 1;
  expect_input_error(one.doc, {"tensors.size", "b", {"overflow"}});
  auto ws = base();
  ws.doc["tensors"][2]["size"] = k62 / 2;
  ws.doc["ops"][0]["workspace"] = k62 / 2 - k30;
  expect_input_error(ws.doc, {"ops[0].workspace", "n0", {"overflow"}});
}

// The graph of issue 12 on which `roam plan` aborted (exit 134 in priority_topological): update
// ops n1 and n4 form one update group, but n1 -> n3 (forward, a key point) -> n4, so no gap can
// hold the group; the group is dissolved and the order is found by the segment search.
constexpr const char* kUpdateCycleGraph =
    R"({"format":"roam-graph","version":1,"name":"fz","tensors":[{"id":"t0","size":64},{"id":"t4","size":64},)"
    R"({"id":"t5","size":64,"alias_of":"t4"},{"id":"t9","size":1,"alias_of":"t0"},{"id":"t10","size":64},)"
    R"({"id":"t11","size":64,"alias_of":"t9"},{"id":"t19","size":4096}],"ops":[{"id":"n0","phase":"other",)"
    R"("inputs":[],"outputs":["t0"]},{"id":"n1","phase":"update","inputs":["t0"],"outputs":["t4"]},)"
    R"({"id":"n3","phase":"forward","inputs":["t5"],"outputs":["t9","t10"]},{"id":"n4","phase":"update",)"
    R"("inputs":["t4"],"outputs":["t11"]},{"id":"n8","phase":"backward","inputs":[],"outputs":["t19"]}],)"
    R"("outputs":["t10"]})";

TEST(BadInput, UpdateGroupAcrossAKeyPointIsPlanned) {
  const roam::Graph g = roam::parse_graph(json::parse(kUpdateCycleGraph), "fz.json");
  // By hand: t0 (64) lives n0..n4 (t11 aliases t9 aliases t0), t4 (64) n1..n4, t10 (64) n3..end,
  // t19 (4096) only at n8's step. The only freedom is where n8 runs: alone with nothing live
  // (first) its step holds 4096; Tp = max(4096, 64 + 64 + 64 at n3/n4) = 4096 at best.
  for (const char* variant : {"", "roam-scheduled", "roam-earliest", "roam-latest"}) {
    roam::PlanRequest req;
    req.order = "roam";
    if (*variant) req.options.extra["return_variant"] = variant;
    const roam::PlanResult r = roam::make_plan(g, req);
    const json doc = roam::plan_to_json(g, r.plan);
    EXPECT_TRUE(roam::validate_plan(g, doc, "p.json").valid) << variant;
    EXPECT_EQ(doc["stats"]["theoretical_peak_bytes"], 4096) << variant;
    EXPECT_FALSE(doc["method"]["options"]["order_stats"].contains("warning")) << variant;
  }
  // The weight-update structure: no update group is left (it was dissolved into the core).
  const roam::RoamStructure rs = roam::roam_structure(g, roam::PlanOptions{});
  EXPECT_TRUE(rs.groups.empty());
  // Were artificial edges ever to close a cycle again, the order search throws an internal
  // error (order_roam warns and returns the best baseline) instead of aborting.
  EXPECT_THROW(roam::detail::priority_topological({{1}, {0}}, {{1}, {0}}, {0, 1}),
               roam::detail::InternalError);
  EXPECT_EQ(roam::detail::priority_topological({{}, {0}}, {{1}, {}}, {0, 1}),
            (std::vector<int32_t>{0, 1}));
}

// ------------------------------------------------------------------------------------------
// CLI
// ------------------------------------------------------------------------------------------

using RunResult = roamtest::CliResult;
using roamtest::run_roam;

std::vector<std::string> dir_listing(const roamtest::TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(Cli, BadGraphExits2WithOneLineAndNoOutput) {
  roamtest::TempDir dir;
  const std::string graph = dir.file("bad.json");
  auto g = base();
  g.doc["ops"][1]["inputs"].push_back("ghost");
  roamtest::write_text(graph, g.doc.dump());
  const std::string plan = dir.file("out.json");
  const RunResult r = run_roam(dir, "plan '" + graph + "' -o '" + plan + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(graph), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ops[1].inputs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("n1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ghost"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(plan));
  EXPECT_EQ(dir_listing(dir), (std::vector<std::string>{"bad.json"}));  // no temp file either

  // Malformed JSON, a missing file, and a gzip file that is not gzip-valid JSON.
  roamtest::write_text(graph, "{not json");
  RunResult m = run_roam(dir, "plan '" + graph + "' -o '" + plan + "'");
  EXPECT_EQ(m.status, 2);
  EXPECT_EQ(count_lines(m.err), 1u) << m.err;
  EXPECT_NE(m.err.find(graph), std::string::npos) << m.err;
  EXPECT_FALSE(std::filesystem::exists(plan));
  RunResult missing = run_roam(dir, "plan '" + dir.file("nope.json") + "' -o '" + plan + "'");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("nope.json"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(plan));

  // Bad options are bad input too, and write nothing.
  const std::string good = roamtest::fixture_path("diamond.json");
  EXPECT_EQ(run_roam(dir, "plan '" + good + "' --order nonsense -o '" + plan + "'").status, 2);
  EXPECT_EQ(run_roam(dir, "plan '" + good + "' --layout nonsense -o '" + plan + "'").status, 2);
  EXPECT_EQ(run_roam(dir, "plan '" + good + "' --alignment 3 -o '" + plan + "'").status, 2);
  EXPECT_FALSE(std::filesystem::exists(plan));
}

// The roam planners' knobs: typed, range-checked, recorded in the plan; a bad one exits 2
// naming the option and key, and writes nothing.
TEST(Cli, PlannerKnobs) {
  EXPECT_EQ(roam::parse_extra_option("weight_update_scheduler=false", "order"),
            (std::pair<std::string, json>{"weight_update_scheduler", false}));
  EXPECT_EQ(roam::parse_extra_option("delay_radius=3", "order").second, 3);
  EXPECT_EQ(roam::parse_extra_option("alpha=2.5", "order").second, 2.5);
  EXPECT_EQ(roam::parse_extra_option("node_limit=64", "layout").second, 64);
  for (const char* bad : {"delay_radius", "=3", "delay_radius=x", "delay_radius=3.5",
                          "delay_radius=-1", "exact_node_limit=257", "alpha=nan",
                          "node_limit=8", "nonsense=1", "exact_segments=1",
                          "return_variant=bogus", "return_variant="}) {
    EXPECT_THROW(roam::parse_extra_option(bad, "order"), std::invalid_argument) << bad;
  }
  EXPECT_THROW(roam::parse_extra_option("node_limit=1", "layout"), std::invalid_argument);

  roamtest::TempDir dir;
  const std::string graph = dir.file("g.json"), plan = dir.file("p.json");
  roamtest::write_text(graph, base().doc.dump());
  RunResult r = run_roam(dir, "plan '" + graph + "' -o '" + plan + "' --order-option exact_node_limit=0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--order-option exact_node_limit"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(plan));
  r = run_roam(dir, "compare '" + graph + "' --node-limit 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--node-limit"), std::string::npos) << r.err;
  for (const char* bad : {"--node-limit 0", "--node-limit 8 --layout-option node_limit=9",
                          "--order lescea --order-option alpha=2", "--layout llfb --node-limit 8",
                          "--order-option return_variant=bogus",
                          "--order-option delay_radius=1 --order-option delay_radius=2"}) {
    r = run_roam(dir, "plan '" + graph + "' -o '" + plan + "' " + bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_FALSE(std::filesystem::exists(plan)) << bad;
  }
  r = run_roam(dir, "plan '" + graph + "' -o '" + plan +
                        "' --order roam --order-option weight_update_scheduler=false --node-limit 16");
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = json::parse(roamtest::read_text(plan));
  EXPECT_EQ(doc["method"]["options"]["extra"],
            json({{"weight_update_scheduler", false}, {"node_limit", 16}}));
  EXPECT_EQ(doc["method"]["options"]["order_stats"]["tp"], doc["stats"]["theoretical_peak_bytes"]);
}

TEST(Cli, PlanRoundTripsThroughValidate) {
  roamtest::TempDir dir;
  const std::string graph = roamtest::fixture_path("two_branches.json");
  const std::string plan = dir.file("plan.json");
  const RunResult r = run_roam(dir, "plan '" + graph + "' -o '" + plan +
                                        "' --order program --layout llfb --alignment 1");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(std::filesystem::exists(plan));
  EXPECT_EQ(dir_listing(dir), (std::vector<std::string>{"plan.json"}));
  const json doc = roam::read_json_file(plan);
  EXPECT_EQ(doc["format"], "roam-plan");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["graph"], "two_branches");
  EXPECT_EQ(doc["order"], json({"n0", "n1", "n2", "n3", "n4"}));
  EXPECT_EQ(doc["offsets"], json({{"a1", 0}, {"b1", 1000}, {"a2", 1500}, {"b2", 0}, {"o", 10}}));
  EXPECT_EQ(doc["stats"]["theoretical_peak_bytes"], 1510);
  EXPECT_EQ(doc["stats"]["lower_bound_bytes"], 1010);
  EXPECT_EQ(doc["stats"]["arena_bytes"], 1510);
  EXPECT_EQ(doc["stats"]["peak_bytes"], 1518);
  const RunResult v = run_roam(dir, "validate '" + graph + "' '" + plan + "'");
  EXPECT_EQ(v.status, 0) << v.out << v.err;

  // Default options too (auto order and layout, alignment 64).
  const RunResult d = run_roam(dir, "plan '" + graph + "' -o '" + plan + "'");
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(run_roam(dir, "validate '" + graph + "' '" + plan + "'").status, 0);
  EXPECT_EQ(roam::read_json_file(plan)["alignment"], 64);
  // compare runs every baseline on the graph.
  EXPECT_EQ(run_roam(dir, "compare '" + graph + "'").status, 0);
}

TEST(Cli, ValidateCorruptedPlanExits1AndUnreadableExits2) {
  roamtest::TempDir dir;
  const std::string graph = roamtest::fixture_path("diamond.json");
  const std::string plan = dir.file("plan.json");
  ASSERT_EQ(run_roam(dir, "plan '" + graph + "' -o '" + plan + "' --order program --layout llfb")
                .status,
            0);
  json doc = roam::read_json_file(plan);
  // Overlap b and c, both live at step 2.
  doc["offsets"]["c"] = doc["offsets"]["b"];
  roamtest::write_text(plan, doc.dump());
  const RunResult bad = run_roam(dir, "validate '" + graph + "' '" + plan + "'");
  EXPECT_EQ(bad.status, 1) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("overlap"), std::string::npos) << bad.out;

  roamtest::write_text(plan, "this is not json");
  const RunResult junk = run_roam(dir, "validate '" + graph + "' '" + plan + "'");
  EXPECT_EQ(junk.status, 2);
  EXPECT_EQ(count_lines(junk.err), 1u) << junk.err;
  EXPECT_NE(junk.err.find(plan), std::string::npos) << junk.err;

  // JSON but not a plan.
  roamtest::write_text(plan, R"({"format": "roam-graph", "version": 1})");
  EXPECT_EQ(run_roam(dir, "validate '" + graph + "' '" + plan + "'").status, 2);
  // A bad graph given to validate is bad input as well.
  const std::string bad_graph = dir.file("bad.json");
  roamtest::write_text(bad_graph, "[]");
  EXPECT_EQ(run_roam(dir, "validate '" + bad_graph + "' '" + plan + "'").status, 2);
}

TEST(Cli, GzipInputAndOutput) {
  roamtest::TempDir dir;
  // Compress a fixture with zlib directly (independent of the library's writer).
  const std::string text = roamtest::read_text(roamtest::fixture_path("alias_output.json"));
  const std::string graph = dir.file("graph.json.gz");
  gzFile out = gzopen(graph.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(out), Z_OK);

  const roam::Graph g = roam::load_graph(graph);
  EXPECT_EQ(g.name, "alias_output");
  EXPECT_EQ(g.num_storages(), 4);

  const std::string plan = dir.file("plan.json.gz");
  const RunResult r = run_roam(dir, "plan '" + graph + "' -o '" + plan +
                                        "' --order program --layout llfb --alignment 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string bytes = roamtest::read_text(plan);
  ASSERT_GE(bytes.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>(bytes[1]), 0x8b);
  const json doc = roam::read_json_file(plan);
  EXPECT_EQ(doc["stats"]["theoretical_peak_bytes"], 900);
  EXPECT_EQ(doc["stats"]["arena_bytes"], 1000);
  EXPECT_TRUE(roam::validate_plan(g, doc, plan).valid);
  EXPECT_EQ(run_roam(dir, "validate '" + graph + "' '" + plan + "'").status, 0);
  // Mixed: the plain fixture with the gzip plan.
  EXPECT_EQ(run_roam(dir, "validate '" + roamtest::fixture_path("alias_output.json") + "' '" +
                              plan + "'")
                .status,
            0);
}

TEST(Cli, Issue12CasesExitCleanly) {
  roamtest::TempDir dir;
  const std::string graph = dir.file("fz.json"), plan = dir.file("fz.plan.json");
  roamtest::write_text(graph, kUpdateCycleGraph);
  RunResult r = run_roam(dir, "plan '" + graph + "' -o '" + plan + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(run_roam(dir, "validate '" + graph + "' '" + plan + "'").status, 0);
  EXPECT_EQ(run_roam(dir, "compare '" + graph + "'").status, 0);
  std::filesystem::remove(plan);
  // `"alias_of": ""` with a tensor whose id is "": both refused, exit 2, one line, no plan.
  roamtest::write_text(graph,
                       R"({"format":"roam-graph","version":1,"tensors":[{"id":"","size":64},)"
                       R"({"id":"a","size":64,"alias_of":""}],"ops":[{"id":"n0","outputs":[""]}]})");
  r = run_roam(dir, "plan '" + graph + "' -o '" + plan + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("tensors[0].id"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(plan));
  // Sizes at the cap plan and validate (exit 0, never 3) at every alignment; just over: exit 2.
  auto at_cap = base();
  at_cap.doc["tensors"][1]["size"] = (uint64_t{1} << 61) - (uint64_t{1} << 30);
  at_cap.doc["tensors"][2]["size"] = (uint64_t{1} << 61) - (uint64_t{1} << 30) + 1;
  roamtest::write_text(graph, at_cap.doc.dump());
  for (const char* a : {"1", "64", "1048576"}) {
    r = run_roam(dir, "plan '" + graph + "' -o '" + plan + "' --alignment " + a);
    EXPECT_EQ(r.status, 0) << a << r.err;
    EXPECT_EQ(run_roam(dir, "validate '" + graph + "' '" + plan + "'").status, 0) << a;
    EXPECT_EQ(run_roam(dir, "compare '" + graph + "' --alignment " + a).status, 0) << a;
  }
  std::filesystem::remove(plan);
  at_cap.doc["tensors"][2]["size"] = (uint64_t{1} << 61) + 1;  // 2^30 more once rounded
  roamtest::write_text(graph, at_cap.doc.dump());
  r = run_roam(dir, "plan '" + graph + "' -o '" + plan + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("tensors.size"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'b'"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(plan));
  // A plan with a duplicate key is unreadable: validate exits 2.
  const std::string good = roamtest::fixture_path("diamond.json");
  ASSERT_EQ(run_roam(dir, "plan '" + good + "' -o '" + plan + "' --order program --layout llfb").status, 0);
  std::string text = roamtest::read_text(plan);
  const auto pos = text.find("\"offsets\":");
  ASSERT_NE(pos, std::string::npos) << text;
  text.insert(pos, "\"alignment\": 64,");
  roamtest::write_text(plan, text);
  r = run_roam(dir, "validate '" + good + "' '" + plan + "'");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("duplicate key 'alignment'"), std::string::npos) << r.err;
}

// --budget sizes: the grammar of roam.parse_size in Python (values by hand).
TEST(Cli, ByteSizesMeanWhatPythonMeans) {
  EXPECT_EQ(roam::parse_byte_size("6442450944"), 6442450944ull);
  EXPECT_EQ(roam::parse_byte_size("6GiB"), 6442450944ull);
  EXPECT_EQ(roam::parse_byte_size(" 1.5 gib "), 1610612736ull);
  EXPECT_EQ(roam::parse_byte_size("512MiB"), 536870912ull);
  EXPECT_EQ(roam::parse_byte_size("512mib"), 536870912ull);
  EXPECT_EQ(roam::parse_byte_size("8MB"), 8000000ull);
  EXPECT_EQ(roam::parse_byte_size("6GB"), 6000000000ull);
  EXPECT_EQ(roam::parse_byte_size("2kb"), 2000ull);
  EXPECT_EQ(roam::parse_byte_size("100 B"), 100ull);
  EXPECT_EQ(roam::parse_byte_size("5."), 5ull);
  EXPECT_EQ(roam::parse_byte_size("0.5KiB"), 512ull);
  EXPECT_EQ(roam::parse_byte_size("4611686018427387904"), 4611686018427387904ull);  // 2^62
  for (const char* bad : {"", " ", "GiB", ".5GiB", "1e7", "8M", "1.2.3", "-1", "6 GiB x",
                          "6GiBs", "4611686018427387905", "99999999999999999999", "5TiBB",
                          "4194305TiB", "inf", "nan"}) {
    EXPECT_THROW(roam::parse_byte_size(bad), std::invalid_argument) << bad;
  }
}

}  // namespace
