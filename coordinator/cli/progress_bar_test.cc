#include "coordinator/cli/progress_bar.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// 200 steps of 16 sequences x 128 tokens = 2048 tokens per step.
JobStatus RunningJob(int64_t step, double tokens_per_second) {
  JobStatus status;
  status.set_job_id("job-1");
  status.set_state(JOB_STATE_RUNNING);
  JobSpec* spec = status.mutable_spec();
  spec->mutable_train()->set_steps(200);
  spec->mutable_model()->set_seq_length(128);
  spec->mutable_parallel()->set_global_batch_size(16);
  spec->mutable_parallel()->set_micro_batch_size(8);
  status.set_step(step);
  if (step > 0) {
    status.set_loss(2.63514);
    status.set_tokens_per_second(tokens_per_second);
    status.mutable_latest()->set_step(step);
    status.mutable_latest()->set_loss(2.63514);
    status.mutable_latest()->set_tokens_per_second(tokens_per_second);
    status.mutable_latest()->set_step_seconds(2048.0 / tokens_per_second);
  }
  return status;
}

TEST(ProgressBarTest, RunningLineHasEveryField) {
  // 80 steps left x 2048 tokens / 2048 tok/s = 80 s.
  const std::string line = RenderProgressLine(RunningJob(120, 2048), 200, absl::Seconds(123));
  EXPECT_EQ(line,
            "RUNNING [############--------] step 120/200 60% | loss 2.6351 | 2048 tok/s | "
            "elapsed 2m03s | ETA 1m20s");
}

TEST(ProgressBarTest, SaysEtaDashesBeforeThereIsData) {
  JobStatus status = RunningJob(0, 0);
  status.set_state(JOB_STATE_PENDING);
  const std::string line = RenderProgressLine(status, 200, absl::Seconds(3));
  EXPECT_THAT(line, StartsWith("PENDING [--------------------] step 0/200 0%"));
  EXPECT_THAT(line, HasSubstr("loss --"));
  EXPECT_THAT(line, HasSubstr("-- tok/s"));
  EXPECT_THAT(line, EndsWith("ETA --"));
  status.set_state(JOB_STATE_RUNNING);
  EXPECT_THAT(RenderProgressLine(status, 200, absl::Seconds(3)), EndsWith("ETA --"));
}

TEST(ProgressBarTest, FinishedLineHasNoEta) {
  JobStatus status = RunningJob(200, 2048);
  status.set_state(JOB_STATE_SUCCEEDED);
  const std::string line = RenderProgressLine(status, 200, absl::Seconds(100));
  EXPECT_THAT(line, StartsWith("SUCCEEDED [####################] step 200/200 100%"));
  EXPECT_THAT(line, Not(HasSubstr("ETA")));
  EXPECT_THAT(line, EndsWith("elapsed 1m40s"));
}

TEST(ProgressBarTest, UnknownTotalShowsNoBar) {
  const std::string line = RenderProgressLine(RunningJob(7, 2048), 0, absl::Seconds(1));
  EXPECT_THAT(line, StartsWith("RUNNING step 7 | loss"));
  EXPECT_THAT(line, EndsWith("ETA --"));
}

TEST(ProgressBarTest, EstimatesFromTokensPerSecond) {
  // 100 steps left x 2048 tokens at 1024 tok/s.
  EXPECT_EQ(EstimateTimeRemaining(RunningJob(100, 1024), 200), absl::Seconds(200));
}

TEST(ProgressBarTest, EstimatesFromStepSecondsWithoutARate) {
  JobStatus status = RunningJob(150, 2048);
  status.set_tokens_per_second(0);
  status.mutable_latest()->set_tokens_per_second(0);
  status.mutable_latest()->set_step_seconds(0.5);
  EXPECT_EQ(EstimateTimeRemaining(status, 200), absl::Seconds(25));
}

TEST(ProgressBarTest, NoEstimateWhileNotRunningOrWithoutData) {
  JobStatus placing = RunningJob(100, 1024);
  placing.set_state(JOB_STATE_PLACING);  // e.g. re-placing after a failure
  EXPECT_EQ(EstimateTimeRemaining(placing, 200), absl::InfiniteDuration());
  EXPECT_EQ(EstimateTimeRemaining(RunningJob(0, 0), 200), absl::InfiniteDuration());
  EXPECT_EQ(EstimateTimeRemaining(RunningJob(100, 1024), 0), absl::InfiniteDuration());
  EXPECT_EQ(EstimateTimeRemaining(RunningJob(200, 1024), 200), absl::ZeroDuration());
}

TEST(ProgressBarTest, FitsTheTerminalWithoutWrapping) {
  EXPECT_EQ(FitToColumns("abcdef", 0), "abcdef");
  EXPECT_EQ(FitToColumns("abcdef", 7), "abcdef");
  EXPECT_EQ(FitToColumns("abcdef", 6), "abcde");
  EXPECT_EQ(FitToColumns("abcdef", 4), "abc");
}

}  // namespace
}  // namespace mtrain
