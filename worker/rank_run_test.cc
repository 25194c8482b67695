// A rank's lifecycle on a world of one: every group is a SoloCommunicator, so the run
// needs no network and no other process. The sinks collect what `train` would print and
// append; checkpoints go to a real directory.
#include "worker/rank_run.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/step_metrics_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Collects everything a run reports.
class CollectingSinks : public RankRunSinks {
 public:
  absl::Status Open(bool computes_loss) override {
    opened = true;
    opened_computing_loss = computes_loss;
    return absl::OkStatus();
  }
  void Log(const std::string& line) override { log.push_back(line); }
  void StepMetricsDone(const StepMetrics& metrics) override { steps.push_back(metrics); }
  void StageTimings(const StageTimingsRecord& record) override { timings.push_back(record); }

  std::vector<double> Losses() const {
    std::vector<double> losses;
    for (const StepMetrics& m : steps) losses.push_back(m.loss());
    return losses;
  }

  bool opened = false;
  bool opened_computing_loss = false;
  std::vector<std::string> log;
  std::vector<StepMetrics> steps;
  std::vector<StageTimingsRecord> timings;
};

// A fresh directory under the test's temporary directory.
std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/rank_run_test/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A two-layer model on the shipped corpus, with dropout so that resuming must restore the
// RNG position too.
RankRunOptions TinyRun(const std::string& name, int steps, int checkpoint_every = 0) {
  const std::string spec_path = TestDir(name) + "/spec.json";
  std::ofstream(spec_path) << absl::StrCat(
      R"({"name": "rank-run-test",
          "model": {"num_layers": 2, "num_heads": 2, "hidden_size": 32, "seq_length": 16},
          "parallel": {"micro_batch_size": 2, "global_batch_size": 4},
          "optimizer": {"lr": 3e-3, "warmup_steps": 2},
          "train": {"steps": )",
      steps, R"(, "seed": 7, "dropout": 0.1, "checkpoint_every": )", checkpoint_every,
      R"(}, "device": "DEVICE_CPU"})");
  RankRunOptions options;
  options.spec_path = spec_path;
  options.threads = 1;
  return options;
}

// SetUpRank and RunRank, as `train` calls them.
absl::Status RunTinyRank(const RankRunOptions& options, CollectingSinks& sinks,
                         RankAbort* abort = nullptr) {
  absl::StatusOr<RankSetup> setup = SetUpRank(options);
  if (!setup.ok()) return setup.status();
  return RunRank(*setup, options, sinks, abort);
}

// The directory TinyRun made for the run.
std::string DirOf(const RankRunOptions& options) {
  return std::filesystem::path(options.spec_path).parent_path().string();
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(RankRunTest, EveryStepReachesTheSinks) {
  CollectingSinks sinks;
  ASSERT_EQ(RunTinyRank(TinyRun("steps", 3), sinks), absl::OkStatus());

  EXPECT_TRUE(sinks.opened);
  EXPECT_TRUE(sinks.opened_computing_loss);  // one rank: it holds the head
  ASSERT_EQ(sinks.steps.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sinks.steps[i].step(), i + 1);
    EXPECT_TRUE(std::isfinite(sinks.steps[i].loss()));
    EXPECT_GT(sinks.steps[i].loss(), 0);
  }
  ASSERT_EQ(sinks.timings.size(), 3u);
  EXPECT_EQ(sinks.timings[2].step, 3);
  EXPECT_EQ(sinks.timings[2].rank, 0);
  EXPECT_EQ(sinks.timings[2].pp_stage, 0);
  EXPECT_DOUBLE_EQ(sinks.timings[2].step_seconds, sinks.steps[2].step_seconds());

  // Rank 0's engine, data and memory notes, then the narrator's header and one progress
  // line per step.
  ASSERT_EQ(sinks.log.size(), 7u);
  EXPECT_THAT(sinks.log[1], StartsWith("data: "));
  EXPECT_THAT(sinks.log[1], HasSubstr("shakespeare.txt train tokens [0, "));
  EXPECT_THAT(sinks.log[2], StartsWith("memory: about "));
  EXPECT_EQ(sinks.log[3],
            "train: rank-run-test, 2 layers, hidden 32, 2 heads, seq 16, (t,p,d)=(1,1,1) "
            "SCHEDULE_1F1B, 3 steps");
  EXPECT_EQ(sinks.log[6], StepProgressLine(sinks.steps[2], 3));
}

TEST(RankRunTest, CheckpointEveryWritesItsStepsAndTheLast) {
  RankRunOptions options = TinyRun("cadence", 5, /*checkpoint_every=*/2);
  options.checkpoint_dir = DirOf(options) + "/checkpoints";
  CollectingSinks sinks;
  ASSERT_EQ(RunTinyRank(options, sinks), absl::OkStatus());

  // Steps 2 and 4 by the cadence, 5 because it is the last; nothing else (the probe for
  // writability is gone).
  EXPECT_EQ(Entries(options.checkpoint_dir),
            (std::vector<std::string>{"step-00000002", "step-00000004", "step-00000005"}));
  for (const std::string& step : Entries(options.checkpoint_dir)) {
    EXPECT_TRUE(std::filesystem::exists(options.checkpoint_dir + "/" + step + "/MANIFEST")) << step;
  }
  int saved_lines = 0;
  for (const std::string& line : sinks.log) {
    if (absl::StartsWith(line, "checkpoint: step ")) {
      ++saved_lines;
      EXPECT_THAT(line, HasSubstr(" in " + options.checkpoint_dir + "/step-0000000"));
    }
  }
  EXPECT_EQ(saved_lines, 3);
}

TEST(RankRunTest, AResumedRunContinuesExactlyWhereTheCheckpointWas) {
  CollectingSinks uninterrupted;
  ASSERT_EQ(RunTinyRank(TinyRun("whole", 4), uninterrupted), absl::OkStatus());
  ASSERT_EQ(uninterrupted.steps.size(), 4u);

  RankRunOptions first = TinyRun("resumed", 4);
  first.steps = 2;  // stops half-way, as a run that was interrupted
  first.checkpoint_dir = DirOf(first) + "/checkpoints";
  CollectingSinks first_half;
  ASSERT_EQ(RunTinyRank(first, first_half), absl::OkStatus());

  RankRunOptions second = TinyRun("resumed_second", 4);
  second.resume_from = first.checkpoint_dir + "/step-00000002";
  CollectingSinks second_half;
  ASSERT_EQ(RunTinyRank(second, second_half), absl::OkStatus());

  ASSERT_EQ(second_half.steps.size(), 2u);
  EXPECT_EQ(second_half.steps[0].step(), 3);
  EXPECT_EQ(second_half.steps[1].step(), 4);
  // Bit for bit: parameters, moments, data position and dropout all restored.
  std::vector<double> resumed = first_half.Losses();
  for (double loss : second_half.Losses()) resumed.push_back(loss);
  EXPECT_EQ(resumed, uninterrupted.Losses());
}

TEST(RankRunTest, ACheckpointAtTheLastStepLeavesNothingToDo) {
  RankRunOptions first = TinyRun("done", 2);
  first.checkpoint_dir = DirOf(first) + "/checkpoints";
  CollectingSinks sinks;
  ASSERT_EQ(RunTinyRank(first, sinks), absl::OkStatus());

  RankRunOptions again = TinyRun("done_again", 2);
  again.resume_from = first.checkpoint_dir + "/step-00000002";
  again.checkpoint_dir = first.checkpoint_dir;
  CollectingSinks nothing;
  ASSERT_EQ(RunTinyRank(again, nothing), absl::OkStatus());
  EXPECT_TRUE(nothing.steps.empty());
  EXPECT_EQ(nothing.log.back(),
            "train: the checkpoint is at step 2, train.steps is 2: nothing to do");
  // The step it resumed from is not saved again.
  EXPECT_EQ(Entries(first.checkpoint_dir), std::vector<std::string>{"step-00000002"});
}

TEST(RankRunTest, BadOptionsAreRefusedNamingTheFlag) {
  struct Case {
    std::string name;
    void (*change)(RankRunOptions*);
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no_spec", [](RankRunOptions* o) { o->spec_path.clear(); },
       "--spec (or --assignment) is required"},
      {"negative_steps", [](RankRunOptions* o) { o->steps = -1; }, "--steps=-1: must be >= 0"},
      {"rank_outside", [](RankRunOptions* o) { o->rank = 1; }, "--rank=1 is outside [0, 1)"},
      {"world_size", [](RankRunOptions* o) { o->world_size = 2; },
       "--world_size=2 but the spec needs tensor * pipeline * data = 1 * 1 * 1 = 1 ranks"},
      {"gpu_collectives", [](RankRunOptions* o) { o->gpu_collectives = "fast"; },
       "--gpu_collectives=fast: must be nccl or gloo"},
      {"checkpoint_dir", [](RankRunOptions* o) { o->checkpoint_dir = "/proc/no/such/dir"; },
       "--checkpoint_dir=/proc/no/such/dir: cannot write there"},
      {"metrics_jsonl", [](RankRunOptions* o) { o->metrics_jsonl = "/proc/no/such.jsonl"; },
       "--metrics_jsonl: cannot open /proc/no/such.jsonl"},
  };
  for (const Case& c : cases) {
    RankRunOptions options = TinyRun(c.name, 1);
    c.change(&options);
    absl::StatusOr<RankSetup> setup = SetUpRank(options);
    absl::Status status = setup.status();
    if (setup.ok()) {
      StdoutAndFileSinks sinks(options);
      status = RunRank(*setup, options, sinks, nullptr);
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.name;
  }
}

TEST(RankRunTest, AnAbortBeforeTrainingStopsTheRun) {
  RankAbort abort;
  abort.Abort();
  CollectingSinks sinks;
  const absl::Status status = RunTinyRank(TinyRun("abort", 2), sinks, &abort);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_TRUE(sinks.steps.empty());
}

TEST(RankRunTest, FileSinksAppendOneJsonLinePerCall) {
  const std::string dir = TestDir("files");
  RankRunOptions options;
  options.metrics_jsonl = dir + "/metrics.jsonl";
  options.stage_timings = dir + "/timings.jsonl";
  StepMetrics metrics;
  metrics.set_step(7);
  metrics.set_loss(2.5);
  StageTimingsRecord record;
  record.step = 7;
  record.rank = 3;
  record.pp_stage = 1;
  record.step_seconds = 0.5;
  record.timings.compute_seconds = 0.25;
  record.timings.wait_seconds = 0.125;
  StageTimingsRecord measured = record;
  measured.step = 8;
  measured.activation_peak_bytes = 4096;
  {
    StdoutAndFileSinks sinks(options);
    ASSERT_TRUE(sinks.Open(/*computes_loss=*/true).ok());
    sinks.StepMetricsDone(metrics);
    sinks.StageTimings(record);
    sinks.StageTimings(measured);
  }
  auto read = [](const std::string& path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  };
  EXPECT_EQ(read(options.metrics_jsonl), StepMetricsJson(metrics) + "\n");
  EXPECT_EQ(read(options.stage_timings),
            "{\"step\":7,\"rank\":3,\"pp_stage\":1,\"step_seconds\":0.500000,"
            "\"pipeline_seconds\":0.375000,\"compute_seconds\":0.250000,"
            "\"wait_seconds\":0.125000}\n"
            "{\"step\":8,\"rank\":3,\"pp_stage\":1,\"step_seconds\":0.500000,"
            "\"pipeline_seconds\":0.375000,\"compute_seconds\":0.250000,"
            "\"wait_seconds\":0.125000,\"activation_peak_bytes\":4096}\n");

  // A rank without the loss has no metrics to write: the file is not even created.
  std::filesystem::remove(options.metrics_jsonl);
  StdoutAndFileSinks no_loss(options);
  ASSERT_TRUE(no_loss.Open(/*computes_loss=*/false).ok());
  EXPECT_FALSE(std::filesystem::exists(options.metrics_jsonl));
}

}  // namespace
}  // namespace mtrain
