// What a new user sees from the `roam` command when they get it wrong (issue 14): `roam` alone,
// `--version`, unknown options and commands (one line, with a suggestion), a plan for another
// graph (one line), and the help text that explains the headline and the exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <string>

#include "testing.h"

namespace {

using roamtest::CliResult;

class CliMessages : public ::testing::Test {
 protected:
  CliResult roam(const std::string& args) const { return roamtest::run_roam(dir_, args); }
  static size_t lines(const std::string& s) {
    return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
  }
  std::string graph() const { return roamtest::fixture_path("diamond.json"); }
  roamtest::TempDir dir_;
};

TEST_F(CliMessages, BareRoamPrintsHelp) {
  const CliResult r = roam("");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  for (const char* verb : {"plan", "validate", "compare", "viz", "layout"}) {
    EXPECT_NE(r.out.find(verb), std::string::npos) << verb;
  }
  EXPECT_EQ(r.out.find("A subcommand is required"), std::string::npos);
  EXPECT_EQ(r.err, "");
  // --help says so, and explains the headline figures.
  const CliResult h = roam("--help");
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("`roam` alone prints this help and exits 2"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("program order on a CPU allocator"), std::string::npos);
  EXPECT_NE(h.out.find("CUDA caching allocator (simulated)"), std::string::npos);
}

TEST_F(CliMessages, Version) {
  const CliResult r = roam("--version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("roam ", 0), 0u) << r.out;
  EXPECT_EQ(lines(r.out), 1u) << r.out;
  EXPECT_EQ(r.out.find("subcommand"), std::string::npos);
}

TEST_F(CliMessages, UnknownOptionOfAnotherCommand) {
  // CLI11 said "The following arguments were not expected: 100MiB --budget".
  const CliResult r = roam("validate " + graph() + " " + graph() + " --budget 100MiB");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("roam validate: unknown option --budget"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("an option of roam plan, roam compare"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("were not expected"), std::string::npos) << r.err;
}

TEST_F(CliMessages, MisspelledOptionGetsASuggestion) {
  const CliResult r = roam("plan " + graph() + " --buget 1GiB");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("unknown option --buget (did you mean --budget?"), std::string::npos) << r.err;
  const CliResult v = roam("viz " + graph() + " p.json -o x.html --order program");
  EXPECT_EQ(v.status, 2);
  EXPECT_EQ(lines(v.err), 1u) << v.err;
  EXPECT_NE(v.err.find("did you mean --orders?"), std::string::npos) << v.err;
  const CliResult c = roam("compare " + graph() + " --layout pytorch");
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.err.find("did you mean --layouts?"), std::string::npos) << c.err;
}

TEST_F(CliMessages, UnknownCommand) {
  const CliResult r = roam("plna " + graph());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("unknown command 'plna' (did you mean plan?)"), std::string::npos) << r.err;
}

TEST_F(CliMessages, ExtraArgument) {
  const CliResult r = roam("validate " + graph() + " " + graph() + " third.json");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("roam validate: unexpected argument 'third.json'"), std::string::npos) << r.err;
}

TEST_F(CliMessages, ValidateStopsAfterAGraphNameMismatch) {
  const std::string other = roamtest::fixture_path("chain.json");
  ASSERT_EQ(roam("plan -q " + other + " -o " + dir_.file("other.json")).status, 0);
  const CliResult r = roam("validate " + graph() + " " + dir_.file("other.json"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(lines(r.out), 1u) << r.out;
  EXPECT_NE(r.out.find("INVALID: "), std::string::npos);
  EXPECT_NE(r.out.find("plan is for graph '"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nothing else checked"), std::string::npos) << r.out;
}

TEST_F(CliMessages, PlanAndCompareHelpExplainTheHeadline) {
  for (const char* verb : {"plan", "compare"}) {
    const CliResult r = roam(std::string(verb) + " --help");
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("CPU allocator"), std::string::npos) << verb;
    EXPECT_NE(r.out.find("caching allocator"), std::string::npos) << verb;
  }
  const CliResult c = roam("compare --help");
  EXPECT_NE(c.out.find("--all"), std::string::npos);
}

}  // namespace
