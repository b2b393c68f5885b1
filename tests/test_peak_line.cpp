// `roam plan` says what is live at the plan's peak (issue 14): the op index it names is the step
// of the most live bytes, and the storage count and the largest storage are those live there,
// recounted here from the written plan with the brute-force model of testing.h.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "testing.h"

namespace {

TEST(PeakLine, PlanNamesTheStepAndStoragesAtItsPeak) {
  roamtest::TempDir dir;
  for (const char* name : {"diamond.json", "two_branches.json", "pytorch_pools.json", "chain.json"}) {
    const std::string graph = roamtest::fixture_path(name), plan = dir.file("plan.json");
    const std::string out = dir.file("out.txt");
    ASSERT_EQ(std::system((std::string(ROAM_BIN) + " plan " + graph + " -q -o " + plan + " > " + out).c_str()), 0);
    const std::string text = roamtest::read_text(out);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex("at the peak    op index (\\d+) \\(([^ ]+) .*: (\\d+) storages; largest ([^ ]+) ")))
        << name << "\n" << text;
    // Recount: the plan's order and the brute model's intervals.
    const roam::Graph g = roam::load_graph(graph);
    const roamtest::BruteModel bm = roamtest::brute_model(g);
    const nlohmann::json doc = roam::read_json_file(plan);
    std::vector<int> order;
    for (const auto& id : doc["order"]) order.push_back(g.op_index.at(id.get<std::string>()));
    const uint64_t alignment = doc["alignment"];
    const std::vector<uint64_t> live = roamtest::brute_live_bytes(bm, order, alignment);
    const auto peak = static_cast<int>(std::max_element(live.begin(), live.end()) - live.begin());
    EXPECT_EQ(std::stoi(m[1]), peak) << name;
    EXPECT_EQ(m[2].str(), g.ops[order[peak]].id) << name;
    const auto iv = roamtest::brute_intervals(bm, order);
    int count = 0;
    for (const auto& [first, last] : iv) count += first <= peak && peak <= last;
    EXPECT_EQ(std::stoi(m[3]), count) << name;
  }
}

}  // namespace
