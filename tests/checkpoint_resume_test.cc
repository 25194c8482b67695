// Checkpoints with real `train` processes started by `launch`: a run of (t,p,d) = (2,2,1)
// saves at step 5 and finishes at step 10. Resuming from step 5
//   - under the same layout reproduces steps 6-10 and the final weights bit for bit;
//   - under (1,1,1) and (1,4,1) (the checkpoint re-sliced) continues the losses within
//     1e-5 of the uninterrupted run;
// and a checkpoint with a flipped bit is refused with DATA_LOSS naming the file. A BERT run
// (1,2,1) resumed from its step-3 checkpoint reproduces steps 4-6 and the final weights bit
// for bit: its samples, masks included, are functions of (seed, sample index).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/metrics_jsonl.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 10;
constexpr int kSaveAt = 5;

std::string Spec(int t, int p, const std::string& schedule = "SCHEDULE_1F1B") {
  return absl::StrFormat(
      R"({"name": "resume",
          "model": {"num_layers": 8, "num_heads": 4, "hidden_size": 32, "seq_length": 16},
          "parallel": {"tensor": %d, "pipeline": %d, "micro_batch_size": 2,
                       "global_batch_size": 8, "schedule": "%s"},
          "optimizer": {"lr": 3e-3, "warmup_steps": 3},
          "train": {"steps": %d, "seed": 5, "dropout": 0.1, "checkpoint_every": %d},
          "device": "DEVICE_CPU"})",
      t, p, schedule, kSteps, kSaveAt);
}

struct RunResult {
  int exit_code = -1;
  std::string log;
  std::vector<double> losses;  // by step, from the first step this run made
  std::string weights;         // the saved safetensors path
};

RunResult Launch(const std::string& name, const std::string& spec_json,
                 const std::vector<std::string>& train_flags, int loss_rank) {
  RunResult run;
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  const std::string spec = dir + ".json";
  std::ofstream(spec) << spec_json;
  run.weights = dir + "/weights.safetensors";
  std::vector<std::string> argv = {"worker/launch",
                                   "--spec=" + spec,
                                   "--out_dir=" + dir,
                                   "--threads_per_rank=1",
                                   "--grace_period=5s",
                                   "--",
                                   "--save_weights=" + run.weights,
                                   "--collective_timeout=60s"};
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  auto launch = ChildProcess::Start(argv, dir + ".log");
  if (!launch.ok()) return run;
  absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(5));
  run.exit_code = code.ok() ? *code : -1;
  run.log = (*launch)->Log();
  absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(dir + "/metrics.jsonl");
  if (!lines.ok()) return run;
  std::map<int, double> by_step;
  for (const MetricsLine& line : *lines) {
    if (static_cast<int>(line.at("rank")) == loss_rank) by_step[line.at("step")] = line.at("loss");
  }
  for (const auto& [step, loss] : by_step) run.losses.push_back(loss);
  return run;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class CheckpointResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    checkpoints_ = new std::string(absl::StrCat(TestTempDir(), "/checkpoints"));
    // Rank 2 is the first rank of the last stage: it reports the loss.
    full_ = new RunResult(Launch("full", Spec(2, 2), {"--checkpoint_dir=" + *checkpoints_}, 2));
  }
  static void TearDownTestSuite() {
    delete full_;
    delete checkpoints_;
  }
  static std::string SavedAtFive() { return *checkpoints_ + "/step-00000005"; }

  static RunResult* full_;
  static std::string* checkpoints_;
};
RunResult* CheckpointResumeTest::full_ = nullptr;
std::string* CheckpointResumeTest::checkpoints_ = nullptr;

TEST_F(CheckpointResumeTest, TheRunSavesEveryCheckpointEverySteps) {
  ASSERT_EQ(full_->exit_code, 0) << full_->log;
  ASSERT_EQ(full_->losses.size(), static_cast<size_t>(kSteps));
  EXPECT_FALSE(ReadFile(SavedAtFive() + "/MANIFEST").empty());
  EXPECT_FALSE(ReadFile(*checkpoints_ + "/step-00000010/MANIFEST").empty());
  // Data-parallel rank 0 of each of the 4 (tensor, pipeline) positions wrote a shard file.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_FALSE(ReadFile(absl::StrFormat("%s/rank-%05d.bin", SavedAtFive(), rank)).empty());
  }
}

TEST_F(CheckpointResumeTest, ResumingUnderTheSameLayoutIsBitExact) {
  ASSERT_EQ(full_->exit_code, 0) << full_->log;
  RunResult resumed = Launch("same", Spec(2, 2), {"--resume_from=" + SavedAtFive()}, 2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.log;
  ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(kSteps - kSaveAt));
  for (int i = 0; i < kSteps - kSaveAt; ++i) {
    EXPECT_EQ(resumed.losses[i], full_->losses[kSaveAt + i]) << "step " << kSaveAt + i + 1;
  }
  EXPECT_EQ(ReadFile(resumed.weights), ReadFile(full_->weights)) << "final weights differ";
}

TEST_F(CheckpointResumeTest, ResumingUnderOtherLayoutsContinuesTheLosses) {
  ASSERT_EQ(full_->exit_code, 0) << full_->log;
  struct Other {
    std::string name;
    std::string spec;
    int loss_rank;
  };
  for (const Other& other : {Other{"single", Spec(1, 1), 0}, Other{"p4", Spec(1, 4), 3}}) {
    RunResult resumed =
        Launch(other.name, other.spec, {"--resume_from=" + SavedAtFive()}, other.loss_rank);
    ASSERT_EQ(resumed.exit_code, 0) << other.name << "\n" << resumed.log;
    ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(kSteps - kSaveAt)) << other.name;
    for (int i = 0; i < kSteps - kSaveAt; ++i) {
      const double expected = full_->losses[kSaveAt + i];
      EXPECT_NEAR(resumed.losses[i], expected, 1e-5 * std::fabs(expected))
          << other.name << ", step " << kSaveAt + i + 1;
    }
  }
}

TEST_F(CheckpointResumeTest, AFlippedBitIsDataLossNamingTheFile) {
  ASSERT_EQ(full_->exit_code, 0) << full_->log;
  // A copy of the checkpoint with one bit of a shard file flipped.
  const std::string copy = absl::StrCat(TestTempDir(), "/corrupt");
  ASSERT_EQ(std::system(absl::StrCat("cp -r ", SavedAtFive(), " ", copy).c_str()), 0);
  const std::string victim = copy + "/rank-00003.bin";
  std::string bytes = ReadFile(victim);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bytes;
  RunResult resumed = Launch("corrupt", Spec(2, 2), {"--resume_from=" + copy}, 2);
  EXPECT_NE(resumed.exit_code, 0);
  EXPECT_THAT(resumed.log, HasSubstr("DATA_LOSS"));
  EXPECT_THAT(resumed.log, HasSubstr("rank-00003.bin"));
}

TEST(BertCheckpointResumeTest, ResumingDrawsTheSameMasksAndIsBitExact) {
  const std::string spec = R"({"name": "bert-resume",
      "model": {"family": "MODEL_FAMILY_BERT", "num_layers": 2, "num_heads": 4,
                "hidden_size": 32, "seq_length": 32, "vocab_size": 2048},
      "parallel": {"pipeline": 2, "micro_batch_size": 2, "global_batch_size": 8},
      "data": {"tokenizer": "TOKENIZER_WORDPIECE", "vocab_file": "tests/data/bert_vocab.txt"},
      "optimizer": {"lr": 3e-3, "warmup_steps": 2},
      "train": {"steps": 6, "seed": 7, "dropout": 0.1, "checkpoint_every": 3},
      "device": "DEVICE_CPU"})";
  const std::string checkpoints = absl::StrCat(TestTempDir(), "/bert-checkpoints");
  // Rank 1 is the last stage: it reports the loss.
  const RunResult full = Launch("bert-full", spec, {"--checkpoint_dir=" + checkpoints}, 1);
  ASSERT_EQ(full.exit_code, 0) << full.log;
  ASSERT_EQ(full.losses.size(), 6u);
  const RunResult resumed =
      Launch("bert-resumed", spec, {"--resume_from=" + checkpoints + "/step-00000003"}, 1);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.log;
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(ReadFile(resumed.weights), ReadFile(full.weights)) << "final weights differ";
}

}  // namespace
}  // namespace mtrain
