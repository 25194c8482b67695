#include "coordinator/cli/job_table.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

JobStatus Job(const std::string& id, JobState state, int64_t step) {
  JobStatus status;
  status.set_job_id(id);
  status.mutable_spec()->set_name("gpt-small");
  status.mutable_spec()->mutable_train()->set_steps(200);
  status.set_state(state);
  status.set_step(step);
  if (step > 0) {
    status.set_loss(2.63514);
    status.set_tokens_per_second(2124.4);
  }
  status.set_submitted_unix_ms(absl::ToUnixMillis(kNow - absl::Seconds(192)));
  return status;
}

TEST(JobTableTest, OneRowPerJobWithProgressAndAge) {
  ListJobsResponse jobs;
  *jobs.add_jobs() = Job("job-0001", JOB_STATE_RUNNING, 120);
  *jobs.add_jobs() = Job("job-0002", JOB_STATE_PENDING, 0);
  const std::string table = FormatJobTable(jobs, kNow);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);
  EXPECT_THAT(table, HasSubstr("JOB"));
  EXPECT_THAT(table, HasSubstr("TOK/S"));
  EXPECT_THAT(table, HasSubstr("AGE"));
  const std::string running = table.substr(table.find("job-0001"));
  EXPECT_THAT(
      running.substr(0, running.find('\n')),
      ::testing::MatchesRegex("job-0001 +gpt-small +RUNNING +120/200 +2.6351 +2124 +3m12s"));
  const std::string pending = table.substr(table.find("job-0002"));
  EXPECT_THAT(pending.substr(0, pending.find('\n')),
              ::testing::MatchesRegex("job-0002 +gpt-small +PENDING +0/200 +- +- +3m12s"));
}

TEST(JobTableTest, EmptyListIsJustTheHeader) {
  const std::string table = FormatJobTable(ListJobsResponse(), kNow);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 1);
}

TEST(JobTableTest, StatusShowsEveryField) {
  JobStatus status = Job("job-0001", JOB_STATE_RUNNING, 120);
  status.set_generation(2);
  status.set_restarts(1);
  status.set_message("rank 3: worker w3 stopped heartbeating");
  status.add_workers("w0");
  status.add_workers("w1");
  const std::string text = FormatJobStatus(status, kNow);
  EXPECT_THAT(text, HasSubstr("job         job-0001\n"));
  EXPECT_THAT(text, HasSubstr("name        gpt-small\n"));
  EXPECT_THAT(text, HasSubstr("state       RUNNING\n"));
  EXPECT_THAT(text, HasSubstr("step        120/200 (60%)\n"));
  EXPECT_THAT(text, HasSubstr("loss        2.6351\n"));
  EXPECT_THAT(text, HasSubstr("tokens/s    2124\n"));
  EXPECT_THAT(text, HasSubstr("generation  2\n"));
  EXPECT_THAT(text, HasSubstr("restarts    1\n"));
  EXPECT_THAT(text, HasSubstr("workers     2 (0:w0 1:w1)\n"));
  EXPECT_THAT(text, HasSubstr("age         3m12s\n"));
  EXPECT_THAT(text, HasSubstr("message     rank 3: worker w3 stopped heartbeating\n"));
}

TEST(JobTableTest, StatusBeforeTheFirstStepHasNoNumbers) {
  const std::string text = FormatJobStatus(Job("job-0002", JOB_STATE_PENDING, 0), kNow);
  EXPECT_THAT(text, HasSubstr("loss        -\n"));
  EXPECT_THAT(text, HasSubstr("tokens/s    -\n"));
  EXPECT_THAT(text, HasSubstr("workers     -\n"));
  EXPECT_THAT(text, Not(HasSubstr("message")));
}

}  // namespace
}  // namespace mtrain
