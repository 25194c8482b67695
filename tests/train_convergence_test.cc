// Trains the default-size model (4 layers, width 128, 4 heads, seq 128) on the shipped
// Shakespeare corpus with the real `train` binary and checks that learning happens: the
// first loss is ln(256) (uniform over bytes) and the loss ends below 2.5.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

// The value of "key" in a flat JSON object line, as a double.
double JsonField(const std::string& line, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = line.find(needle);
  if (at == std::string::npos) return NAN;
  const size_t begin = at + needle.size();
  const size_t end = line.find_first_of(",}", begin);
  double value = NAN;
  if (!absl::SimpleAtod(line.substr(begin, end - begin), &value)) return NAN;
  return value;
}

TEST(TrainConvergenceTest, LossFallsFromLn256ToBelow2Point5OnShakespeare) {
  const std::string dir = TestTempDir();
  const std::string spec_path = dir + "/converge.json";
  std::ofstream(spec_path) << R"({
    "name": "converge",
    "model": {"num_layers": 4, "num_heads": 4, "hidden_size": 128, "seq_length": 128},
    "parallel": {"micro_batch_size": 8, "global_batch_size": 16},
    "optimizer": {"lr": 2e-3, "warmup_steps": 20},
    "train": {"steps": 350, "dropout": 0.0, "seed": 1234},
    "device": "DEVICE_CPU"
  })";
  const std::string metrics_path = dir + "/metrics.jsonl";
  auto train = ChildProcess::Start(
      {"worker/train", "--spec=" + spec_path, "--metrics_jsonl=" + metrics_path, "--threads=2"},
      dir + "/train.log");
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<int> code = (*train)->Wait(absl::Minutes(10));
  ASSERT_TRUE(code.ok()) << code.status();
  ASSERT_EQ(*code, 0) << (*train)->Log();

  std::ifstream metrics(metrics_path);
  std::vector<double> losses;
  for (std::string line; std::getline(metrics, line);) {
    EXPECT_EQ(JsonField(line, "step"), static_cast<double>(losses.size() + 1));
    losses.push_back(JsonField(line, "loss"));
    EXPECT_GT(JsonField(line, "tokens_per_second"), 0) << line;
  }
  ASSERT_EQ(losses.size(), 350u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.1);
  // Single steps are noisy (16 random windows); judge the mean of the last 20.
  double tail = 0;
  for (size_t i = losses.size() - 20; i < losses.size(); ++i) tail += losses[i] / 20;
  EXPECT_LT(tail, 2.5) << "mean loss of the last 20 steps";
  // The progress line of every step went to stdout.
  EXPECT_NE((*train)->Log().find("step 350/350 | loss"), std::string::npos);
}

}  // namespace
}  // namespace mtrain
