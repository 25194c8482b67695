#include "coordinator/cli/job_watch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;

JobStatus Status(JobState state, int64_t step) {
  JobStatus status;
  status.set_job_id("job-1");
  status.mutable_spec()->mutable_train()->set_steps(200);
  status.set_state(state);
  status.set_generation(1);
  status.set_step(step);
  if (step > 0) status.mutable_latest()->set_step(step);
  return status;
}

TEST(JobWatchTest, FirstStatusAndStateChangesAreNoticed) {
  JobWatcher watcher("job-1");
  JobWatcher::Update first = watcher.Observe(Status(JOB_STATE_PENDING, 0));
  EXPECT_THAT(first.notices, ElementsAre("job job-1: PENDING"));
  EXPECT_FALSE(first.new_step);
  EXPECT_FALSE(first.finished);
  EXPECT_THAT(watcher.Observe(Status(JOB_STATE_PLACING, 0)).notices,
              ElementsAre("job job-1: PENDING -> PLACING"));
  EXPECT_THAT(watcher.Observe(Status(JOB_STATE_PLACING, 0)).notices, IsEmpty());
  JobWatcher::Update running = watcher.Observe(Status(JOB_STATE_RUNNING, 1));
  EXPECT_THAT(running.notices, ElementsAre("job job-1: PLACING -> RUNNING"));
  EXPECT_TRUE(running.new_step);
}

TEST(JobWatchTest, EachStepIsNewOnceEvenWhenRepeatedOrReplayed) {
  JobWatcher watcher("job-1");
  EXPECT_TRUE(watcher.Observe(Status(JOB_STATE_RUNNING, 1)).new_step);
  EXPECT_FALSE(watcher.Observe(Status(JOB_STATE_RUNNING, 1)).new_step);
  EXPECT_TRUE(watcher.Observe(Status(JOB_STATE_RUNNING, 3)).new_step);
  // A restart from the checkpoint of step 2 replays step 3.
  JobStatus replaced = Status(JOB_STATE_PLACING, 2);
  replaced.set_generation(2);
  replaced.set_restarts(1);
  replaced.set_message("rank 1 failed: DEADLINE_EXCEEDED");
  JobWatcher::Update restart = watcher.Observe(replaced);
  EXPECT_FALSE(restart.new_step);
  EXPECT_THAT(restart.notices,
              ElementsAre("job job-1: restart 1 (generation 2): rank 1 failed: DEADLINE_EXCEEDED",
                          "job job-1: RUNNING -> PLACING"));
  JobStatus replay = Status(JOB_STATE_RUNNING, 3);
  replay.set_restarts(1);
  EXPECT_FALSE(watcher.Observe(replay).new_step);
  replay.set_step(4);
  replay.mutable_latest()->set_step(4);
  EXPECT_TRUE(watcher.Observe(replay).new_step);
}

TEST(JobWatchTest, AStepWithAnEvaluationIsNoticedWithItsPerplexity) {
  JobWatcher watcher("job-1");
  watcher.Observe(Status(JOB_STATE_RUNNING, 1));
  JobStatus evaluated = Status(JOB_STATE_RUNNING, 2);
  evaluated.mutable_latest()->set_validation_loss(2.0);
  JobWatcher::Update update = watcher.Observe(evaluated);
  EXPECT_TRUE(update.new_step);
  EXPECT_THAT(update.notices,
              ElementsAre("job job-1: step 2: validation loss 2.0000, perplexity 7.39"));
  JobStatus tasks = Status(JOB_STATE_RUNNING, 3);
  EvalTaskResult* cloze = tasks.mutable_latest()->add_evals();
  cloze->set_task("cloze");
  cloze->set_data("/d/lambada.jsonl");
  cloze->set_accuracy(0.625);
  EvalTaskResult* text = tasks.mutable_latest()->add_evals();
  text->set_task("perplexity");
  text->set_data("wiki.txt");
  text->set_perplexity(12.345);
  EXPECT_THAT(watcher.Observe(tasks).notices,
              ElementsAre("job job-1: step 3: cloze accuracy 0.6250 on lambada.jsonl",
                          "job job-1: step 3: perplexity 12.35 on wiki.txt"));
  // Seen once: the stream repeating the step says nothing more.
  EXPECT_THAT(watcher.Observe(evaluated).notices, IsEmpty());
  JobStatus generated = Status(JOB_STATE_RUNNING, 4);
  GeneratedText* sample = generated.mutable_latest()->add_generations();
  sample->set_prompt("ROMEO:");
  sample->set_text(" Good night");
  EXPECT_THAT(watcher.Observe(generated).notices,
              ElementsAre(R"(job job-1: step 4: generated "ROMEO:" -> " Good night")"));
}

// `trainctl watch` observes the job as GetJob shows it before the stream, so the stream's
// replay of earlier steps (WatchJob sends a late watcher every step from the first) is
// neither news nor a state change, and a job that already ended needs no stream at all.
TEST(JobWatchTest, JobSeenFirstAfterItEndedGivesOnlyItsEnd) {
  JobWatcher watcher("job-1");
  JobWatcher::Update first = watcher.Observe(Status(JOB_STATE_SUCCEEDED, 200));
  EXPECT_THAT(first.notices, ElementsAre("job job-1: SUCCEEDED"));
  EXPECT_TRUE(first.finished);
  EXPECT_EQ(watcher.FailureReason(absl::OkStatus()), std::nullopt);

  JobWatcher failed("job-1");
  JobStatus status = Status(JOB_STATE_FAILED, 57);
  status.set_message("restart budget spent");
  EXPECT_TRUE(failed.Observe(status).finished);
  EXPECT_THAT(failed.FailureReason(absl::OkStatus()),
              Optional(std::string("job job-1 FAILED: restart budget spent")));
}

TEST(JobWatchTest, ReplayedStepsAfterTheCurrentOneAreNotNews) {
  JobWatcher watcher("job-1");
  EXPECT_THAT(watcher.Observe(Status(JOB_STATE_RUNNING, 20)).notices,
              ElementsAre("job job-1: RUNNING"));
  for (int64_t step = 1; step <= 20; ++step) {
    JobWatcher::Update replayed = watcher.Observe(Status(JOB_STATE_RUNNING, step));
    EXPECT_FALSE(replayed.new_step) << step;
    EXPECT_THAT(replayed.notices, IsEmpty()) << step;
  }
  EXPECT_TRUE(watcher.Observe(Status(JOB_STATE_RUNNING, 21)).new_step);
}

TEST(JobWatchTest, StepWithoutLatestMetricsIsNotNew) {
  JobWatcher watcher("job-1");
  JobStatus status = Status(JOB_STATE_RUNNING, 5);
  status.clear_latest();
  EXPECT_FALSE(watcher.Observe(status).new_step);
}

TEST(JobWatchTest, SucceededJobIsNoFailure) {
  JobWatcher watcher("job-1");
  watcher.Observe(Status(JOB_STATE_RUNNING, 199));
  JobWatcher::Update done = watcher.Observe(Status(JOB_STATE_SUCCEEDED, 200));
  EXPECT_TRUE(done.finished);
  EXPECT_TRUE(done.new_step);
  EXPECT_EQ(watcher.FailureReason(absl::OkStatus()), std::nullopt);
}

TEST(JobWatchTest, FailedOrCancelledJobFailsWithItsMessage) {
  JobWatcher failed("job-1");
  JobStatus status = Status(JOB_STATE_FAILED, 57);
  status.set_message("restart budget spent");
  JobWatcher::Update update = failed.Observe(status);
  EXPECT_TRUE(update.finished);
  EXPECT_THAT(update.notices, ElementsAre("job job-1: FAILED: restart budget spent"));
  EXPECT_THAT(failed.FailureReason(absl::OkStatus()),
              Optional(std::string("job job-1 FAILED: restart budget spent")));

  JobWatcher cancelled("job-1");
  cancelled.Observe(Status(JOB_STATE_RUNNING, 3));
  EXPECT_THAT(cancelled.Observe(Status(JOB_STATE_CANCELLED, 3)).notices,
              ElementsAre("job job-1: RUNNING -> CANCELLED"));
  EXPECT_THAT(cancelled.FailureReason(absl::OkStatus()),
              Optional(std::string("job job-1 CANCELLED")));
}

TEST(JobWatchTest, BrokenStreamFailsWithWhereItStopped) {
  JobWatcher watcher("job-1");
  watcher.Observe(Status(JOB_STATE_RUNNING, 120));
  const std::optional<std::string> reason =
      watcher.FailureReason(absl::UnavailableError("Socket closed"));
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("ended before the job did"));
  EXPECT_THAT(*reason, HasSubstr("RUNNING at step 120/200"));
  EXPECT_THAT(*reason, HasSubstr("UNAVAILABLE: Socket closed"));
  EXPECT_THAT(*reason, HasSubstr("trainctl watch job-1"));
  // A stream that ends cleanly without the end of the job is no success either.
  EXPECT_TRUE(watcher.FailureReason(absl::OkStatus()).has_value());
}

TEST(JobWatchTest, CallThatFailedAtOnceReportsTheError) {
  JobWatcher watcher("job-9");
  EXPECT_THAT(watcher.FailureReason(absl::NotFoundError("no job job-9")),
              Optional(std::string("NOT_FOUND: no job job-9")));
  EXPECT_TRUE(watcher.FailureReason(absl::OkStatus()).has_value());
}

}  // namespace
}  // namespace mtrain
