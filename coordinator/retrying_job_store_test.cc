#include "coordinator/retrying_job_store.h"

#include <sys/resource.h>

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "common/scratch_dir.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_store.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

// Makes every file write of this process beyond `bytes` fail (EFBIG; SIGXFSZ ignored), as
// a full disk does for SQLite, without root or a mount. Restored on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() { Lift(); }
  void Lift() {
    if (!lifted_) setrlimit(RLIMIT_FSIZE, &saved_);
    lifted_ = true;
  }

 private:
  rlimit saved_{};
  bool lifted_ = false;
};

class RetryingJobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ScratchDir> dir = ScratchDir::Create("retrying-store");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<ScratchDir>(*std::move(dir));
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_->path() + "/jobs.sqlite");
    ASSERT_TRUE(store.ok()) << store.status();
    sqlite_ = *std::move(store);
    absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics = CoordinatorMetrics::Start("");
    ASSERT_TRUE(metrics.ok());
    metrics_ = *std::move(metrics);
    store_ = std::make_unique<RetryingJobStore>(sqlite_.get(), &clock_, metrics_.get());
    absl::StatusOr<std::string> id = store_->CreateJob(JobSpec(), 1);
    ASSERT_TRUE(id.ok()) << id.status();
    job_ = *id;
    ASSERT_TRUE(store_->Transition(job_, JOB_STATE_PLACING, "placed", 2).ok());
    ASSERT_TRUE(store_->Transition(job_, JOB_STATE_RUNNING, "training", 3).ok());
  }

  // Enough retries, past every backoff, for a healthy store to take the queue.
  void FlushUntilDrained() {
    for (int i = 0; i < 10 && store_->QueuedWrites() > 0; ++i) {
      clock_.Advance(kStoreRetryMaxBackoff);
      store_->Flush();
    }
  }

  FakeClock clock_{absl::FromUnixSeconds(1000)};
  std::unique_ptr<ScratchDir> dir_;
  std::unique_ptr<JobStore> sqlite_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<RetryingJobStore> store_;
  std::string job_;
};

TEST_F(RetryingJobStoreTest, RefusedWritesStayAuthoritativeAndLandWhenTheDiskHeals) {
  FileSizeLimit full(1024);
  // The store refuses, but the manager's decision holds: the failed generation left RUNNING.
  ASSERT_TRUE(store_->AppendEvent(job_, "generation_failed", "generation 1: rank 0 died", 10).ok());
  ASSERT_TRUE(store_->SetPlacement(job_, 1, 1, {}, 11).ok());
  ASSERT_TRUE(store_->Transition(job_, JOB_STATE_PLACING, "restart 1", 12).ok());
  ASSERT_TRUE(store_->Transition(job_, JOB_STATE_PENDING, "waiting for workers", 13).ok());
  EXPECT_GT(store_->QueuedWrites(), 0);
  EXPECT_EQ(sqlite_->GetJob(job_)->state(), JOB_STATE_RUNNING);  // what a plain store holds

  absl::StatusOr<JobStatus> job = store_->GetJob(job_);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), JOB_STATE_PENDING);
  EXPECT_EQ(job->restarts(), 1);
  EXPECT_TRUE(absl::StrContains(job->message(), "waiting for workers")) << job->message();
  EXPECT_TRUE(absl::StrContains(job->message(), "state dir refuses writes")) << job->message();
  absl::StatusOr<std::vector<JobStatus>> listed = store_->ListJobs();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].state(), JOB_STATE_PENDING);
  // The state machine still holds against the in-memory state.
  EXPECT_EQ(store_->Transition(job_, JOB_STATE_SUCCEEDED, "", 14).code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::vector<JobEvent>> events = store_->Events(job_);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().message(), "PLACING -> PENDING: waiting for workers");
  EXPECT_TRUE(absl::StrContains(metrics_->Scrape(),
                                "mtrain_state_dir_write_failures_total{store=\"jobs\"} 1"))
      << metrics_->Scrape();

  // Still full: a retry fails and the queue stays.
  clock_.Advance(kStoreRetryMaxBackoff);
  store_->Flush();
  EXPECT_GT(store_->QueuedWrites(), 0);

  full.Lift();
  FlushUntilDrained();
  EXPECT_EQ(store_->QueuedWrites(), 0);
  absl::StatusOr<JobStatus> stored = sqlite_->GetJob(job_);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state(), JOB_STATE_PENDING);
  EXPECT_EQ(stored->restarts(), 1);
  EXPECT_EQ(stored->message(), "waiting for workers");  // the note went with the backlog
  absl::StatusOr<std::vector<JobEvent>> logged = sqlite_->Events(job_);
  ASSERT_TRUE(logged.ok());
  std::vector<std::string> kinds;
  for (const JobEvent& e : *logged) kinds.push_back(e.kind());
  // In the order decided, with the failure and the recovery around them.
  const std::vector<std::string> tail(kinds.end() - 5, kinds.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"state_dir_write_failed", "generation_failed", "state",
                                            "state", "state_dir_recovered"}));
  EXPECT_TRUE(absl::StrContains(metrics_->Scrape(), "mtrain_state_dir_writes_queued 0"));
}

// Admission reads PENDING jobs through a filtered page: a job whose "-> PENDING" is queued
// (stored RUNNING) must be on it, and off a RUNNING page, or it would never be placed again.
TEST_F(RetryingJobStoreTest, FilteredPagesListQueuedJobsByTheirQueuedState) {
  absl::StatusOr<std::string> other = store_->CreateJob(JobSpec(), 4);  // PENDING, stored
  ASSERT_TRUE(other.ok()) << other.status();
  FileSizeLimit full(1024);
  ASSERT_TRUE(store_->Transition(job_, JOB_STATE_PLACING, "restart 1", 12).ok());
  ASSERT_TRUE(store_->Transition(job_, JOB_STATE_PENDING, "waiting for workers", 13).ok());
  ASSERT_GT(store_->QueuedWrites(), 0);

  JobListQuery pending;
  pending.states = {JOB_STATE_PENDING};
  absl::StatusOr<JobListPage> page = store_->ListJobs(pending);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].job_id(), job_);  // in job-number order
  EXPECT_EQ(page->jobs[1].job_id(), *other);

  JobListQuery running;
  running.states = {JOB_STATE_RUNNING};
  page = store_->ListJobs(running);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->jobs.empty()) << "stored RUNNING, but its queued state is PENDING";

  // Pages of one job each still cover both, the queued one once.
  pending.max_jobs = 1;
  page = store_->ListJobs(pending);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].job_id(), job_);
  pending.after_job = page->next_after_job;
  ASSERT_GT(pending.after_job, 0);
  page = store_->ListJobs(pending);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].job_id(), *other);
}

TEST_F(RetryingJobStoreTest, QueuedStepsReadBackAndLandInOrder) {
  {
    FileSizeLimit full(1024);
    for (int step = 1; step <= 3; ++step) {
      StepMetrics m;
      m.set_step(step);
      m.set_loss(10.0 - step);
      ASSERT_TRUE(store_->RecordStep(job_, m, 20 + step).ok());
    }
    absl::StatusOr<std::vector<StepMetrics>> steps = store_->Steps(job_, 1, 1);
    ASSERT_TRUE(steps.ok());
    ASSERT_EQ(steps->size(), 1u);
    EXPECT_EQ((*steps)[0].step(), 2);
    EXPECT_EQ(store_->GetJob(job_)->step(), 3);
  }
  FlushUntilDrained();
  absl::StatusOr<std::vector<StepMetrics>> stored = sqlite_->Steps(job_);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 3u);
  EXPECT_EQ(sqlite_->GetJob(job_)->step(), 3);
}

TEST_F(RetryingJobStoreTest, BatchedStepsQueueOnAFullDiskAndUnknownJobsAreRefused) {
  absl::StatusOr<std::string> other = store_->CreateJob(JobSpec(), 4);
  ASSERT_TRUE(other.ok());
  const auto rows = [&](int64_t step) {
    std::vector<StepRow> batch(3);
    batch[0].job_id = job_;
    batch[1].job_id = "job-99";
    batch[2].job_id = *other;
    for (StepRow& row : batch) {
      row.metrics.set_step(step);
      row.metrics.set_loss(10.0 - step);
    }
    return batch;
  };
  // A healthy store: both jobs' rows in one transaction, the unknown one refused.
  std::vector<absl::Status> stored = store_->RecordSteps(rows(1), 30);
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_TRUE(stored[0].ok()) << stored[0];
  EXPECT_EQ(stored[1].code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(stored[2].ok()) << stored[2];
  EXPECT_EQ(sqlite_->GetJob(job_)->step(), 1);
  EXPECT_EQ(sqlite_->GetJob(*other)->step(), 1);
  {
    // A full disk: the batch's transaction fails, each known job's row is queued (and
    // acknowledged), the unknown one is still refused.
    FileSizeLimit full(1024);
    stored = store_->RecordSteps(rows(2), 31);
    EXPECT_TRUE(stored[0].ok()) << stored[0];
    EXPECT_TRUE(stored[2].ok()) << stored[2];
    EXPECT_GT(store_->QueuedWrites(), 0);
    EXPECT_EQ(store_->GetJob(job_)->step(), 2);
    // Behind the queue: the next batch's row of the job queues in order.
    stored = store_->RecordSteps(rows(3), 32);
    EXPECT_TRUE(stored[0].ok()) << stored[0];
    EXPECT_EQ(sqlite_->GetJob(job_)->step(), 1);
  }
  FlushUntilDrained();
  EXPECT_EQ(store_->QueuedWrites(), 0);
  EXPECT_EQ(sqlite_->GetJob(job_)->step(), 3);
  EXPECT_EQ(sqlite_->GetJob(*other)->step(), 3);
  absl::StatusOr<std::vector<StepMetrics>> steps = sqlite_->Steps(job_);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->size(), 3u);
}

TEST_F(RetryingJobStoreTest, RequestErrorsAreNotQueued) {
  EXPECT_EQ(store_->Transition("job-99", JOB_STATE_FAILED, "", 5).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Transition(job_, JOB_STATE_SUCCEEDED, "", 5).ok(), true);
  EXPECT_EQ(store_->Transition(job_, JOB_STATE_FAILED, "", 6).code(),
            absl::StatusCode::kFailedPrecondition);
  FileSizeLimit full(1024);
  // Refused as a request even while the disk is full: nothing is queued for it.
  EXPECT_EQ(store_->Transition(job_, JOB_STATE_RUNNING, "", 7).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->QueuedWrites(), 0);
}

TEST_F(RetryingJobStoreTest, QueuedRecordsAreBounded) {
  constexpr int kBound = 20;  // small: each queued write lands in its own transaction
  store_ = std::make_unique<RetryingJobStore>(sqlite_.get(), &clock_, metrics_.get(), kBound);
  FileSizeLimit full(1024);
  for (int i = 0; i < kBound + 50; ++i) {
    ASSERT_TRUE(store_->AppendEvent(job_, "note", "x", 100 + i).ok());
  }
  ASSERT_TRUE(store_->Transition(job_, JOB_STATE_CANCELLED, "cancelled", 9000).ok());
  // The bound on records, plus the failure event and the state write (never dropped).
  EXPECT_EQ(store_->QueuedWrites(), kBound + 2);
  full.Lift();
  FlushUntilDrained();
  EXPECT_EQ(sqlite_->GetJob(job_)->state(), JOB_STATE_CANCELLED);
  absl::StatusOr<std::vector<JobEvent>> logged = sqlite_->Events(job_);
  ASSERT_TRUE(logged.ok());
  EXPECT_TRUE(absl::StrContains(logged->back().message(), "50 older events or step rows"))
      << logged->back().message();
}

}  // namespace
}  // namespace mtrain
