#include "coordinator/cli/job_text.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(JobTextTest, StateNamesDropThePrefix) {
  EXPECT_EQ(JobStateName(JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(JOB_STATE_CANCELLED), "CANCELLED");
  EXPECT_EQ(JobStateName(static_cast<JobState>(99)), "UNKNOWN(99)");
}

TEST(JobTextTest, OnlySucceededFailedCancelledAreFinished) {
  EXPECT_TRUE(IsFinishedJobState(JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(IsFinishedJobState(JOB_STATE_FAILED));
  EXPECT_TRUE(IsFinishedJobState(JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsFinishedJobState(JOB_STATE_PENDING));
  EXPECT_FALSE(IsFinishedJobState(JOB_STATE_PLACING));
  EXPECT_FALSE(IsFinishedJobState(JOB_STATE_RUNNING));
  EXPECT_FALSE(IsFinishedJobState(JOB_STATE_UNSPECIFIED));
}

TEST(JobTextTest, DurationsUseAtMostTwoUnits) {
  EXPECT_EQ(CompactDuration(absl::ZeroDuration()), "0s");
  EXPECT_EQ(CompactDuration(absl::Milliseconds(999)), "0s");
  EXPECT_EQ(CompactDuration(absl::Seconds(42)), "42s");
  EXPECT_EQ(CompactDuration(absl::Seconds(83)), "1m23s");
  EXPECT_EQ(CompactDuration(absl::Seconds(600)), "10m00s");
  EXPECT_EQ(CompactDuration(absl::Hours(2) + absl::Minutes(5) + absl::Seconds(59)), "2h05m");
  EXPECT_EQ(CompactDuration(absl::Hours(76)), "3d04h");
  EXPECT_EQ(CompactDuration(absl::Seconds(-5)), "0s");
  EXPECT_EQ(CompactDuration(absl::InfiniteDuration()), "--");
}

TEST(JobTextTest, StepTextOmitsAnUnknownTotal) {
  EXPECT_EQ(StepText(120, 200), "120/200");
  EXPECT_EQ(StepText(7, 0), "7");
}

TEST(JobTextTest, TotalStepsFallsBackToTheDefault) {
  JobStatus status;
  status.mutable_spec()->mutable_train()->set_steps(250);
  EXPECT_EQ(TotalSteps(status), 250);
  status.mutable_spec()->mutable_train()->clear_steps();
  EXPECT_GT(TotalSteps(status), 0);  // train.steps' documented default
}

TEST(JobTextTest, AgeAndElapsedStopWhenTheJobFinishes) {
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  JobStatus status;
  EXPECT_EQ(JobAge(status, now), absl::ZeroDuration());  // submission time unknown
  status.set_submitted_unix_ms(absl::ToUnixMillis(now - absl::Seconds(90)));
  status.set_updated_unix_ms(absl::ToUnixMillis(now - absl::Seconds(30)));
  status.set_state(JOB_STATE_RUNNING);
  EXPECT_EQ(JobAge(status, now), absl::Seconds(90));
  EXPECT_EQ(JobElapsed(status, now), absl::Seconds(90));
  status.set_state(JOB_STATE_SUCCEEDED);
  EXPECT_EQ(JobAge(status, now), absl::Seconds(90));
  EXPECT_EQ(JobElapsed(status, now), absl::Seconds(60));
  // A coordinator clock ahead of ours gives no negative age.
  status.set_submitted_unix_ms(absl::ToUnixMillis(now + absl::Seconds(5)));
  EXPECT_EQ(JobAge(status, now), absl::ZeroDuration());
}

TEST(JobTextTest, GenerationSummaryQuotesEscapesAndCutsAtCharacters) {
  GeneratedText text;
  text.set_prompt("ROMEO:");
  text.set_text(" But soft,\nwhat \"light\"");
  EXPECT_EQ(GenerationSummary(text, 100), R"("ROMEO:" -> " But soft,\nwhat \"light\"")");
  EXPECT_EQ(GenerationSummary(text, 4), R"("ROME..." -> " But...")");
  // "é" is two bytes: a cut inside it keeps the character whole or leaves it out.
  text.set_text("caf\xc3\xa9!");
  EXPECT_EQ(GenerationSummary(text, 4), "\"ROME...\" -> \"caf...\"");
  EXPECT_EQ(GenerationSummary(text, 5), "\"ROMEO...\" -> \"caf\xc3\xa9...\"");
}

}  // namespace
}  // namespace mtrain
