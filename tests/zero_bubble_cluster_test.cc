// The zero-bubble schedules through the coordinator (issue 36): the same job submitted with
// SCHEDULE_1F1B, SCHEDULE_ZB_H1 and SCHEDULE_ZB_V to two CPU workers (pipeline 2). ZB-H1's
// losses equal 1F1B's bit for bit (its weight gradients are the same GEMMs in the same
// order, only later). ZB-V's equal them to 1e-6: the same layers, but stage 0 holds the
// embedding and the head and sums the tied embedding's two gradients in one copy, in
// another order; its loss comes from stage 0, which the coordinator reports.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"

namespace mtrain {
namespace {

// The losses of the step lines `trainctl submit --wait --json` printed.
std::vector<double> PrintedLosses(const std::string& output) {
  std::vector<double> losses;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, "{\"step\"")) continue;
    google::protobuf::Struct parsed;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &parsed).ok());
    const auto it = parsed.fields().find("loss");
    if (it != parsed.fields().end()) losses.push_back(it->second.number_value());
  }
  return losses;
}

class ZeroBubbleClusterTest : public ClusterTest {};

TEST_F(ZeroBubbleClusterTest, ZeroBubbleSchedulesTrainLikeOneFOneB) {
  StartCoordinator();
  StartWorkers(2);
  std::vector<std::vector<double>> runs;
  for (const char* schedule : {"SCHEDULE_1F1B", "SCHEDULE_ZB_H1", "SCHEDULE_ZB_V"}) {
    const int virtual_stages = absl::string_view(schedule) == "SCHEDULE_ZB_V" ? 2 : 1;
    const std::string spec =
        WriteSpec(absl::StrCat(schedule, ".json"),
                  absl::StrCat(R"({"name": "zb", "model": {"num_layers": 4, "num_heads": 4,
                         "hidden_size": 64, "seq_length": 32},
                         "parallel": {"pipeline": 2, "micro_batch_size": 2,
                                      "global_batch_size": 16, "virtual_stages": )",
                               virtual_stages, R"(, "schedule": ")", schedule, R"("},
                         "train": {"steps": 6, "dropout": 0.1, "seed": 5},
                         "device": "DEVICE_CPU"})"));
    auto [code, output] = Trainctl({"submit", "--wait", "--json", spec}, absl::Minutes(4));
    ASSERT_EQ(code, 0) << output;
    runs.push_back(PrintedLosses(output));
    ASSERT_EQ(runs.back().size(), 6u) << output;
  }
  EXPECT_EQ(runs[1], runs[0]);
  for (size_t step = 0; step < runs[0].size(); ++step) {
    EXPECT_NEAR(runs[2][step], runs[0][step], 1e-6 * runs[0][step]) << "ZB-V, step " << step + 1;
  }
  EXPECT_LT(runs[0].back(), runs[0].front());
}

}  // namespace
}  // namespace mtrain
