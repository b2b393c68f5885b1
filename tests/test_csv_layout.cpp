// Tests of the MiniMalloc CSV reader/writer (src/layout/csv_layout.cpp) and of the
// `roam layout --csv` verb (src/cli/cmd_layout.cpp): bad-input rules (exit 2, one message naming
// file, line, column and id, no output file), the MiniMalloc example solved and validated.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "roam/csv_layout.h"
#include "roam/graph.h"
#include "roam/roam_layout.h"

namespace roam {
namespace {

// MiniMalloc's example benchmarks/examples/input.12.csv (google/minimalloc, Apache 2.0).
const char* kExample12 =
    "id,lower,upper,size\n"
    "b1,0,3,4\n"
    "b2,3,9,4\n"
    "b3,0,9,4\n"
    "b4,9,21,4\n"
    "b5,0,21,4\n";

class TempFiles {
 public:
  TempFiles() {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("roam_csv_tests_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  ~TempFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

 private:
  std::filesystem::path dir_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CliRun {
  int code;
  std::string out, err;
};

// Runs the roam binary with `args`, capturing stdout and stderr.
CliRun run_roam(const TempFiles& t, const std::string& args) {
  const std::string out = t.path("stdout.txt"), err = t.path("stderr.txt");
  const std::string cmd = std::string(ROAM_BIN) + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_all(out), read_all(err)};
}

// Independent check of a solution CSV against the problem: every row's offset, pairwise.
std::string check_solution_text(const std::string& text, uint64_t capacity, uint64_t* height) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  if (line != "id,lower,upper,size,offset") return "header " + line;
  struct Row {
    long long lower, upper, size, offset;
  };
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    Row r{};
    char id[64];
    if (std::sscanf(line.c_str(), "%63[^,],%lld,%lld,%lld,%lld", id, &r.lower, &r.upper, &r.size,
                    &r.offset) != 5) {
      return "bad row " + line;
    }
    rows.push_back(r);
  }
  *height = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    *height = std::max<uint64_t>(*height, rows[i].offset + rows[i].size);
    if (rows[i].offset < 0 || static_cast<uint64_t>(rows[i].offset + rows[i].size) > capacity) {
      return "row " + std::to_string(i) + " outside the capacity";
    }
    for (size_t j = 0; j < i; ++j) {
      const bool time = rows[i].lower < rows[j].upper && rows[j].lower < rows[i].upper;
      const bool space = rows[i].offset < rows[j].offset + rows[j].size &&
                         rows[j].offset < rows[i].offset + rows[i].size;
      if (time && space) return "rows " + std::to_string(j) + " and " + std::to_string(i);
    }
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Reader

TEST(CsvLayout, ReadsTheExample) {
  const CsvLayoutProblem p = parse_layout_csv(kExample12, "input.12.csv");
  ASSERT_EQ(p.ids, (std::vector<std::string>{"b1", "b2", "b3", "b4", "b5"}));
  EXPECT_EQ(p.buffers[1].lower, 3);
  EXPECT_EQ(p.buffers[1].upper, 9);
  EXPECT_EQ(p.buffers[1].size, 4u);
  EXPECT_EQ(p.buffers[1].alignment, 1u);
  EXPECT_FALSE(p.has_alignment);
  EXPECT_EQ(live_size_lower_bound(p.buffers), 12u);
}

// Columns by name in any order, aliases, the legacy inclusive `end`, alignment, ignored offset
// and hint columns, CRLF line ends, spaces, trailing empty lines.
TEST(CsvLayout, ColumnsByNameAliasesAndLegacyEnd) {
  const CsvLayoutProblem p = parse_layout_csv(
      "size, end ,buffer,start,alignment,offset,hint\r\n"
      "8,4,x,2,4,0,-1\r\n"
      "1,2,y,0,1,16,3\r\n"
      "\n\n",
      "legacy.csv");
  ASSERT_EQ(p.buffers.size(), 2u);
  EXPECT_EQ(p.ids[0], "x");
  EXPECT_EQ(p.buffers[0].lower, 2);
  EXPECT_EQ(p.buffers[0].upper, 5);  // end 4 inclusive
  EXPECT_EQ(p.buffers[0].size, 8u);
  EXPECT_EQ(p.buffers[0].alignment, 4u);
  EXPECT_TRUE(p.has_alignment);
  EXPECT_EQ(p.buffers[1].upper, 3);
}

// Each bad-input rule: InputError whose message names the file and line, the column and the id.
TEST(CsvLayout, BadInputRules) {
  struct Case {
    const char* text;
    const char* where;    // file:line
    const char* column;   // field named in the message
    const char* id;       // buffer id named ("" when none)
    const char* words;    // part of the explanation
  };
  const Case cases[] = {
      {"", "bad.csv:1", "header", "", "empty file"},
      {"id,lower,upper\nb1,0,3\n", "bad.csv:1", "size", "", "missing column 'size'"},
      {"id,upper,size\nb1,3,4\n", "bad.csv:1", "lower", "", "missing column 'lower'"},
      {"lower,upper,size\n0,3,4\n", "bad.csv:1", "id", "", "missing column 'id'"},
      {"id,lower,size\nb1,0,4\n", "bad.csv:1", "upper", "", "missing column 'upper'"},
      {"id,lower,upper,end,size\nb1,0,3,2,4\n", "bad.csv:1", "end", "", "both"},
      {"id,lower,upper,size,size\nb1,0,3,4,4\n", "bad.csv:1", "size", "", "duplicate column"},
      {"id,lower,upper,size,colour\nb1,0,3,4,red\n", "bad.csv:1", "colour", "", "unknown column"},
      {"id,lower,upper,size,gaps\nb1,0,3,4,\n", "bad.csv:1", "gaps", "", "not supported"},
      {"id,lower,upper,size\nb1,0,3,4\nb2,x,9,4\n", "bad.csv:3", "lower", "b2", "not an integer"},
      {"id,lower,upper,size\nb1,0,3,4.5\n", "bad.csv:2", "size", "b1", "not an integer"},
      {"id,lower,upper,size\nb1,0,99999999999999999999,4\n", "bad.csv:2", "upper", "b1",
       "64-bit"},
      {"id,lower,upper,size\nb1,3,3,4\n", "bad.csv:2", "upper", "b1", "lower 3 >= upper 3"},
      {"id,lower,upper,size\nb1,5,3,4\n", "bad.csv:2", "upper", "b1", ">= upper"},
      {"id,lower,end,size\nb1,5,3,4\n", "bad.csv:2", "end", "b1", "end 3 < lower 5"},
      {"id,lower,upper,size\nb1,0,3,-4\n", "bad.csv:2", "size", "b1", "negative size"},
      {"id,lower,upper,size\nb1,0,3,4\nb1,1,2,4\n", "bad.csv:3", "id", "b1", "duplicate id"},
      {"id,lower,upper,size\n,0,3,4\n", "bad.csv:2", "id", "", "empty id"},
      {"id,lower,upper,size\nb1,0,3\n", "bad.csv:2", "row", "b1", "3 fields"},
      {"id,lower,upper,size,alignment\nb1,0,3,4,0\n", "bad.csv:2", "alignment", "b1",
       "alignment 0"},
      {"id,lower,upper,size\nb1,0,3,4\n\nb2,0,3,4\n", "bad.csv:4", "row", "", "empty line 3"},
      {"id,lower,upper,size\nb1,0,3,1152921504606846976\n", "bad.csv:2", "size", "b1",
       "more than 2^60"},
  };
  for (const Case& c : cases) {
    try {
      parse_layout_csv(c.text, "bad.csv");
      ADD_FAILURE() << "no error for: " << c.text;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(std::string(c.where) + ": field " + c.column, 0), 0u)
          << what << " (case " << c.text << ")";
      if (*c.id) {
        EXPECT_NE(what.find(std::string("(id '") + c.id + "')"), std::string::npos) << what;
      }
      EXPECT_NE(what.find(c.words), std::string::npos) << what;
    }
  }
}

TEST(CsvLayout, UnreadableFile) {
  EXPECT_THROW(read_layout_csv("/nonexistent/roam/x.csv"), InputError);
}

// ---------------------------------------------------------------------------------------------
// Writer

TEST(CsvLayout, WritesSolutionAtomically) {
  TempFiles t;
  const CsvLayoutProblem p = parse_layout_csv(kExample12, "input.12.csv");
  const std::string out = t.path("out.csv");
  write_layout_csv(out, p, {8, 8, 4, 4, 0});
  EXPECT_EQ(read_all(out),
            "id,lower,upper,size,offset\nb1,0,3,4,8\nb2,3,9,4,8\nb3,0,9,4,4\nb4,9,21,4,4\n"
            "b5,0,21,4,0\n");
  EXPECT_THROW(write_layout_csv(t.path("no/such/dir/out.csv"), p, {8, 8, 4, 4, 0}),
               std::runtime_error);
  for (const auto& e : std::filesystem::directory_iterator(t.path(""))) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_THROW(layout_csv_text(p, {1, 2}), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// The CLI verb

TEST(CsvLayoutCli, ExampleAtCapacity12SolvedAndValidated) {
  TempFiles t;
  const std::string in = t.write("input.12.csv", kExample12);
  const std::string out = t.path("output.12.csv");
  const CliRun r = run_roam(t, "layout --csv " + in + " --capacity 12 -o " + out);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("height         12\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lower bound    12"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seconds"), std::string::npos) << r.out;
  uint64_t height = 0;
  EXPECT_EQ(check_solution_text(read_all(out), 12, &height), "");
  EXPECT_EQ(height, 12u);
  // The written file reads back as a problem (offset column ignored) with the same buffers.
  const CsvLayoutProblem back = read_layout_csv(out);
  EXPECT_EQ(back.ids.size(), 5u);
}

TEST(CsvLayoutCli, MinimizeSaysOptimal) {
  TempFiles t;
  const std::string in = t.write("input.12.csv", kExample12);
  const CliRun r = run_roam(t, "layout --csv " + in + " --minimize");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("height         12\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("= lower bound"), std::string::npos) << r.out;
}

TEST(CsvLayoutCli, InfeasibleCapacityExitsOne) {
  TempFiles t;
  const std::string in = t.write("input.12.csv", kExample12);
  const std::string out = t.path("out.csv");
  const CliRun r = run_roam(t, "layout --csv " + in + " --capacity 11 -o " + out);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("infeasible"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CsvLayoutCli, BadInputExitsTwoWithoutOutput) {
  TempFiles t;
  struct Case {
    const char* name;
    const char* text;
    const char* expect;  // in the one-line message, after "<file>:<line>: field "
  };
  const Case cases[] = {
      {"missing.csv", "id,lower,upper\nb1,0,3\n", ":1: field size: missing column 'size'"},
      {"nonint.csv", "id,lower,upper,size\nb1,0,3,four\n",
       ":2: field size (id 'b1'): 'four' is not an integer"},
      {"order.csv", "id,lower,upper,size\nb1,7,7,4\n",
       ":2: field upper (id 'b1'): lower 7 >= upper 7"},
      {"negative.csv", "id,lower,upper,size\nb1,0,3,-1\n",
       ":2: field size (id 'b1'): negative size -1"},
      {"dup.csv", "id,lower,upper,size\nb1,0,3,1\nb1,0,3,1\n",
       ":3: field id (id 'b1'): duplicate id (first on line 2)"},
      {"empty.csv", "", ":1: field header: empty file"},
  };
  for (const Case& c : cases) {
    const std::string in = t.write(c.name, c.text);
    const std::string out = t.path(std::string(c.name) + ".out");
    const CliRun r = run_roam(t, "layout --csv " + in + " --capacity 100 -o " + out);
    EXPECT_EQ(r.code, 2) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(in + c.expect), std::string::npos) << c.name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.name;
  }
  // A missing input file and conflicting options are bad input too.
  EXPECT_EQ(run_roam(t, "layout --csv " + t.path("nope.csv")).code, 2);
  const std::string in = t.write("ok.csv", kExample12);
  EXPECT_EQ(run_roam(t, "layout --csv " + in + " --capacity 12 --minimize").code, 2);
}

}  // namespace
}  // namespace roam
