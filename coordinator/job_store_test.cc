#include "coordinator/job_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    const ::absl::Status assert_status_ = (expr);       \
    ASSERT_TRUE(assert_status_.ok()) << assert_status_; \
  } while (0)

#define JOB_STORE_TEST_CONCAT_INNER_(a, b) a##b
#define JOB_STORE_TEST_CONCAT_(a, b) JOB_STORE_TEST_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(JOB_STORE_TEST_CONCAT_(statusor_, __LINE__), lhs, rexpr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  ASSERT_TRUE(statusor.ok()) << statusor.status();       \
  lhs = std::move(statusor).value()

// A path in the test's private temporary directory, named after the running test and
// cleared of any file (and WAL / shared-memory companion) a previous run left there.
std::string FreshDbPath(const std::string& suffix = "") {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(
      dir != nullptr ? dir : "/tmp", "/",
      ::testing::UnitTest::GetInstance()->current_test_info()->name(), suffix, ".sqlite");
  for (const char* companion : {"", "-wal", "-shm"}) std::remove((path + companion).c_str());
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

// Runs SQL on the file directly, as an operator or a foreign program would.
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

JobSpec MakeSpec(const std::string& name, int layers) {
  JobSpec spec;
  spec.set_name(name);
  spec.mutable_model()->set_num_layers(layers);
  return spec;
}

StepMetrics MakeStep(int64_t step, double loss) {
  StepMetrics metrics;
  metrics.set_step(step);
  metrics.set_loss(loss);
  metrics.set_tokens_per_second(1000.0 + step);
  metrics.set_lr(1e-4 * step);
  metrics.set_grad_norm(0.5);
  return metrics;
}

std::string Bytes(const google::protobuf::Message& message) { return message.SerializeAsString(); }

constexpr JobState kAllStates[] = {JOB_STATE_UNSPECIFIED, JOB_STATE_PENDING,   JOB_STATE_PLACING,
                                   JOB_STATE_RUNNING,     JOB_STATE_SUCCEEDED, JOB_STATE_FAILED,
                                   JOB_STATE_CANCELLED};

// Transitions that take a new (PENDING) job to `state` along allowed edges.
std::vector<JobState> PathTo(JobState state) {
  switch (state) {
    case JOB_STATE_PENDING:
      return {};
    case JOB_STATE_PLACING:
      return {JOB_STATE_PLACING};
    case JOB_STATE_RUNNING:
      return {JOB_STATE_PLACING, JOB_STATE_RUNNING};
    case JOB_STATE_SUCCEEDED:
      return {JOB_STATE_PLACING, JOB_STATE_RUNNING, JOB_STATE_SUCCEEDED};
    case JOB_STATE_FAILED:
      return {JOB_STATE_PLACING, JOB_STATE_FAILED};
    case JOB_STATE_CANCELLED:
      return {JOB_STATE_CANCELLED};
    default:
      return {};
  }
}

// ---------------------------------------------------------------- state machine

TEST(JobStateMachineTest, AllowsExactlyTheEdgesOfTheDiagram) {
  const std::set<std::pair<JobState, JobState>> allowed = {
      {JOB_STATE_PENDING, JOB_STATE_PLACING},   {JOB_STATE_PENDING, JOB_STATE_CANCELLED},
      {JOB_STATE_PLACING, JOB_STATE_RUNNING},   {JOB_STATE_PLACING, JOB_STATE_PENDING},
      {JOB_STATE_PLACING, JOB_STATE_FAILED},    {JOB_STATE_PLACING, JOB_STATE_CANCELLED},
      {JOB_STATE_RUNNING, JOB_STATE_SUCCEEDED}, {JOB_STATE_RUNNING, JOB_STATE_FAILED},
      {JOB_STATE_RUNNING, JOB_STATE_CANCELLED}, {JOB_STATE_RUNNING, JOB_STATE_PLACING},
      {JOB_STATE_PENDING, JOB_STATE_FAILED},
  };
  for (JobState from : kAllStates) {
    for (JobState to : kAllStates) {
      EXPECT_EQ(IsAllowedJobTransition(from, to), allowed.count({from, to}) == 1)
          << JobState_Name(from) << " -> " << JobState_Name(to);
    }
  }
  // Values outside the enum never pass.
  EXPECT_FALSE(IsAllowedJobTransition(static_cast<JobState>(42), JOB_STATE_PLACING));
  EXPECT_FALSE(IsAllowedJobTransition(JOB_STATE_PENDING, static_cast<JobState>(42)));
}

TEST(JobStateMachineTest, TerminalStatesAreSucceededFailedCancelled) {
  for (JobState state : kAllStates) {
    const bool terminal =
        state == JOB_STATE_SUCCEEDED || state == JOB_STATE_FAILED || state == JOB_STATE_CANCELLED;
    EXPECT_EQ(IsTerminalJobState(state), terminal) << JobState_Name(state);
  }
}

// ---------------------------------------------------------------- jobs

TEST(JobStoreTest, CreateGetAndList) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  const JobSpec first_spec = MakeSpec("first", 4);
  const JobSpec second_spec = MakeSpec("second", 8);
  ASSERT_OK_AND_ASSIGN(const std::string first, store->CreateJob(first_spec, 1000));
  ASSERT_OK_AND_ASSIGN(const std::string second, store->CreateJob(second_spec, 2000));
  EXPECT_EQ(first, "job-1");
  EXPECT_EQ(second, "job-2");

  ASSERT_OK_AND_ASSIGN(const JobStatus job, store->GetJob(first));
  EXPECT_EQ(job.job_id(), "job-1");
  EXPECT_EQ(Bytes(job.spec()), Bytes(first_spec));
  EXPECT_EQ(job.state(), JOB_STATE_PENDING);
  EXPECT_EQ(job.submitted_unix_ms(), 1000);
  EXPECT_EQ(job.updated_unix_ms(), 1000);
  EXPECT_EQ(job.step(), 0);
  EXPECT_EQ(job.generation(), 0);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(job.message(), "");
  EXPECT_FALSE(job.has_latest());
  EXPECT_EQ(job.workers_size(), 0);

  ASSERT_OK_AND_ASSIGN(const std::vector<JobStatus> jobs, store->ListJobs());
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job_id(), "job-1");
  EXPECT_EQ(jobs[1].job_id(), "job-2");
  EXPECT_EQ(Bytes(jobs[0]), Bytes(job));
  EXPECT_EQ(Bytes(jobs[1].spec()), Bytes(second_spec));
  EXPECT_EQ(jobs[1].submitted_unix_ms(), 2000);
}

TEST(JobStoreTest, EmptyStoreListsNothing) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  ASSERT_OK_AND_ASSIGN(const std::vector<JobStatus> jobs, store->ListJobs());
  EXPECT_TRUE(jobs.empty());
}

TEST(JobStoreTest, UnknownJobIsNotFoundNamingTheId) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("a", 2), 1));
  ASSERT_EQ(id, "job-1");
  // "job-01" and "job-+1" must not alias job-1; the rest are plain nonsense.
  for (const std::string& unknown : std::vector<std::string>{
           "job-2", "job-01", "job-+1", "job-", "job-0", "job--1", "1", "", "nonsense",
           "job-99999999999999999999999", std::string("job-1\0x", 7)}) {
    SCOPED_TRACE(unknown);
    const std::vector<absl::Status> statuses = {
        store->GetJob(unknown).status(),
        store->Transition(unknown, JOB_STATE_PLACING, "", 2),
        store->SetPlacement(unknown, 1, 0, {"w"}, 2),
        store->RecordStep(unknown, MakeStep(1, 1.0), 2),
        store->Steps(unknown).status(),
        store->AppendEvent(unknown, "placed", "", 2),
        store->Events(unknown).status(),
    };
    for (const absl::Status& status : statuses) {
      EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
      if (!unknown.empty() && unknown.find('\0') == std::string::npos) {
        EXPECT_NE(status.message().find(absl::StrCat("'", unknown, "'")), absl::string_view::npos)
            << status;
      }
    }
  }
  // Nothing above touched job-1.
  ASSERT_OK_AND_ASSIGN(const JobStatus job, store->GetJob("job-1"));
  EXPECT_EQ(job.state(), JOB_STATE_PENDING);
  EXPECT_EQ(job.step(), 0);
  ASSERT_OK_AND_ASSIGN(const std::vector<JobEvent> events, store->Events("job-1"));
  EXPECT_EQ(events.size(), 1u);
}

TEST(JobStoreTest, IdsCountUpAndAreNeverReusedAcrossReopen) {
  const std::string path = FreshDbPath();
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
    for (int i = 1; i <= 3; ++i) {
      ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("a", 2), i));
      EXPECT_EQ(id, absl::StrCat("job-", i));
    }
  }
  // Even if the newest rows disappeared (an operator's hand edit), their ids stay used: a
  // max(id)+1 counter would hand out job-3 again and mix up two jobs' histories.
  RawExec(path, "DELETE FROM events WHERE job_id = 3; DELETE FROM jobs WHERE id = 3;");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
    ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("b", 2), 10));
    EXPECT_EQ(id, "job-4");
    ASSERT_OK_AND_ASSIGN(const std::vector<JobStatus> jobs, store->ListJobs());
    ASSERT_EQ(jobs.size(), 3u);
    EXPECT_EQ(jobs[2].job_id(), "job-4");
  }
}

// ---------------------------------------------------------------- transitions

TEST(JobStoreTest, EveryAllowedTransitionSucceeds) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  int64_t now = 100;
  for (JobState from : kAllStates) {
    for (JobState to : kAllStates) {
      if (!IsAllowedJobTransition(from, to)) continue;
      SCOPED_TRACE(absl::StrCat(JobState_Name(from), " -> ", JobState_Name(to)));
      ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("t", 2), ++now));
      for (JobState step : PathTo(from)) ASSERT_OK(store->Transition(id, step, "", ++now));
      const std::string why = absl::StrCat("why ", now);
      ASSERT_OK(store->Transition(id, to, why, ++now));
      ASSERT_OK_AND_ASSIGN(const JobStatus job, store->GetJob(id));
      EXPECT_EQ(job.state(), to);
      EXPECT_EQ(job.updated_unix_ms(), now);
      // The reason is kept only where JobStatus.message is documented to hold it.
      const bool keeps_message =
          to == JOB_STATE_FAILED || to == JOB_STATE_CANCELLED || to == JOB_STATE_PENDING;
      EXPECT_EQ(job.message(), keeps_message ? why : "");
    }
  }
}

TEST(JobStoreTest, FailedAndCancelledKeepTheirMessage) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  ASSERT_OK_AND_ASSIGN(const std::string failed, store->CreateJob(MakeSpec("f", 2), 1));
  ASSERT_OK(store->Transition(failed, JOB_STATE_PLACING, "", 2));
  ASSERT_OK(store->Transition(failed, JOB_STATE_RUNNING, "", 3));
  ASSERT_OK(
      store->Transition(failed, JOB_STATE_FAILED, "rank 3: NCCL timeout; no restarts left", 4));
  ASSERT_OK_AND_ASSIGN(const std::string cancelled, store->CreateJob(MakeSpec("c", 2), 5));
  ASSERT_OK(store->Transition(cancelled, JOB_STATE_CANCELLED, "cancelled by alice", 6));

  ASSERT_OK_AND_ASSIGN(const JobStatus f, store->GetJob(failed));
  EXPECT_EQ(f.state(), JOB_STATE_FAILED);
  EXPECT_EQ(f.message(), "rank 3: NCCL timeout; no restarts left");
  ASSERT_OK_AND_ASSIGN(const JobStatus c, store->GetJob(cancelled));
  EXPECT_EQ(c.state(), JOB_STATE_CANCELLED);
  EXPECT_EQ(c.message(), "cancelled by alice");
}

TEST(JobStoreTest, ForbiddenTransitionsAreRejectedNamingBothStates) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  const std::vector<std::tuple<JobState, JobState, std::string, std::string>> forbidden = {
      {JOB_STATE_PENDING, JOB_STATE_RUNNING, "PENDING", "RUNNING"},
      {JOB_STATE_PENDING, JOB_STATE_SUCCEEDED, "PENDING", "SUCCEEDED"},
      {JOB_STATE_PENDING, JOB_STATE_PENDING, "PENDING", "PENDING"},
      {JOB_STATE_PLACING, JOB_STATE_SUCCEEDED, "PLACING", "SUCCEEDED"},
      {JOB_STATE_PLACING, JOB_STATE_PLACING, "PLACING", "PLACING"},
      {JOB_STATE_RUNNING, JOB_STATE_PENDING, "RUNNING", "PENDING"},
      {JOB_STATE_RUNNING, JOB_STATE_RUNNING, "RUNNING", "RUNNING"},
      {JOB_STATE_SUCCEEDED, JOB_STATE_RUNNING, "SUCCEEDED", "RUNNING"},
      {JOB_STATE_SUCCEEDED, JOB_STATE_FAILED, "SUCCEEDED", "FAILED"},
      {JOB_STATE_SUCCEEDED, JOB_STATE_CANCELLED, "SUCCEEDED", "CANCELLED"},
      {JOB_STATE_FAILED, JOB_STATE_PLACING, "FAILED", "PLACING"},
      {JOB_STATE_FAILED, JOB_STATE_PENDING, "FAILED", "PENDING"},
      {JOB_STATE_FAILED, JOB_STATE_CANCELLED, "FAILED", "CANCELLED"},
      {JOB_STATE_CANCELLED, JOB_STATE_RUNNING, "CANCELLED", "RUNNING"},
      {JOB_STATE_CANCELLED, JOB_STATE_PENDING, "CANCELLED", "PENDING"},
      {JOB_STATE_CANCELLED, JOB_STATE_FAILED, "CANCELLED", "FAILED"},
  };
  int64_t now = 0;
  for (const auto& [from, to, from_name, to_name] : forbidden) {
    SCOPED_TRACE(absl::StrCat(from_name, " -> ", to_name));
    ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("x", 2), ++now));
    for (JobState step : PathTo(from)) ASSERT_OK(store->Transition(id, step, "original", ++now));
    ASSERT_OK_AND_ASSIGN(const JobStatus before, store->GetJob(id));
    ASSERT_OK_AND_ASSIGN(const std::vector<JobEvent> events_before, store->Events(id));

    const absl::Status status = store->Transition(id, to, "not allowed", ++now);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find(absl::StrCat("from ", from_name, " to ", to_name)),
              absl::string_view::npos)
        << status;
    EXPECT_NE(status.message().find(id), absl::string_view::npos) << status;

    // A refused transition changes nothing, not even the event log.
    ASSERT_OK_AND_ASSIGN(const JobStatus after, store->GetJob(id));
    EXPECT_EQ(Bytes(after), Bytes(before));
    ASSERT_OK_AND_ASSIGN(const std::vector<JobEvent> events_after, store->Events(id));
    EXPECT_EQ(events_after.size(), events_before.size());
  }
}

TEST(JobStoreTest, TransitionToANonStateIsInvalidArgument) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("x", 2), 1));
  EXPECT_EQ(store->Transition(id, JOB_STATE_UNSPECIFIED, "", 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Transition(id, static_cast<JobState>(42), "", 2).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(const JobStatus job, store->GetJob(id));
  EXPECT_EQ(job.state(), JOB_STATE_PENDING);
}

// ---------------------------------------------------------------- events

TEST(JobStoreTest, EventsAreKeptInOrderWithTheAutomaticOnes) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("gpt-small", 2), 100));
  ASSERT_OK_AND_ASSIGN(const std::string other, store->CreateJob(MakeSpec("other", 2), 150));
  ASSERT_OK(store->Transition(id, JOB_STATE_PLACING, "placed on 2 workers", 200));
  ASSERT_OK(store->AppendEvent(id, "placed", "w0, w1", 210));
  ASSERT_OK(store->AppendEvent(other, "placed", "w2", 215));
  ASSERT_OK(store->Transition(id, JOB_STATE_RUNNING, "", 220));
  // Timestamps need not be monotonic (clocks step); the order is the order appended.
  ASSERT_OK(store->AppendEvent(id, "rank_failed", "rank 1: heartbeat lost", 205));
  ASSERT_OK(store->Transition(id, JOB_STATE_PLACING, "restart 1 of 3", 230));
  EXPECT_EQ(store->AppendEvent(id, "", "no kind", 240).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_OK_AND_ASSIGN(const std::vector<JobEvent> events, store->Events(id));
  const std::vector<std::tuple<int64_t, std::string, std::string>> expected = {
      {100, "submitted", "gpt-small"},
      {200, "state", "PENDING -> PLACING: placed on 2 workers"},
      {210, "placed", "w0, w1"},
      {220, "state", "PLACING -> RUNNING"},
      {205, "rank_failed", "rank 1: heartbeat lost"},
      {230, "state", "RUNNING -> PLACING: restart 1 of 3"},
  };
  ASSERT_EQ(events.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(events[i].unix_ms(), std::get<0>(expected[i]));
    EXPECT_EQ(events[i].kind(), std::get<1>(expected[i]));
    EXPECT_EQ(events[i].message(), std::get<2>(expected[i]));
  }

  ASSERT_OK_AND_ASSIGN(const std::vector<JobEvent> other_events, store->Events(other));
  ASSERT_EQ(other_events.size(), 2u);
  EXPECT_EQ(other_events[0].kind(), "submitted");
  EXPECT_EQ(other_events[1].message(), "w2");
}

// ---------------------------------------------------------------- steps and placement

TEST(JobStoreTest, RecordStepUpdatesProgressAndARepeatedStepReplacesItsRow) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("s", 2), 1));
  ASSERT_OK_AND_ASSIGN(const std::string other, store->CreateJob(MakeSpec("o", 2), 1));
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_OK(store->RecordStep(id, MakeStep(step, 10.0 - step), 100 + step));
  }
  ASSERT_OK(store->RecordStep(other, MakeStep(1, 42.0), 100));
  ASSERT_OK_AND_ASSIGN(JobStatus job, store->GetJob(id));
  EXPECT_EQ(job.step(), 3);
  EXPECT_EQ(job.loss(), 7.0);
  EXPECT_EQ(job.tokens_per_second(), 1003.0);
  EXPECT_EQ(Bytes(job.latest()), Bytes(MakeStep(3, 7.0)));
  EXPECT_EQ(job.updated_unix_ms(), 103);

  // A restart from the step-1 checkpoint runs step 2 again: its row is replaced, and the
  // job reports the step it is at now.
  const StepMetrics rerun = MakeStep(2, 7.5);
  ASSERT_OK(store->RecordStep(id, rerun, 200));
  ASSERT_OK_AND_ASSIGN(job, store->GetJob(id));
  EXPECT_EQ(job.step(), 2);
  EXPECT_EQ(job.loss(), 7.5);
  EXPECT_EQ(Bytes(job.latest()), Bytes(rerun));

  ASSERT_OK_AND_ASSIGN(const std::vector<StepMetrics> steps, store->Steps(id));
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(Bytes(steps[0]), Bytes(MakeStep(1, 9.0)));
  EXPECT_EQ(Bytes(steps[1]), Bytes(rerun));
  EXPECT_EQ(Bytes(steps[2]), Bytes(MakeStep(3, 7.0)));
  // A poller asks only for what is new, a page at a time.
  ASSERT_OK_AND_ASSIGN(const std::vector<StepMetrics> after_one, store->Steps(id, 1));
  ASSERT_EQ(after_one.size(), 2u);
  EXPECT_EQ(after_one[0].step(), 2);
  ASSERT_OK_AND_ASSIGN(const std::vector<StepMetrics> first_two, store->Steps(id, 0, 2));
  ASSERT_EQ(first_two.size(), 2u);
  EXPECT_EQ(first_two[1].step(), 2);
  ASSERT_OK_AND_ASSIGN(const std::vector<StepMetrics> none, store->Steps(id, 3));
  EXPECT_TRUE(none.empty());

  // A step without a loss keeps the last one.
  StepMetrics no_loss = MakeStep(3, 0.0);
  no_loss.clear_loss();
  ASSERT_OK(store->RecordStep(id, no_loss, 300));
  ASSERT_OK_AND_ASSIGN(job, store->GetJob(id));
  EXPECT_EQ(job.step(), 3);
  EXPECT_EQ(job.loss(), 7.5);
  EXPECT_FALSE(job.latest().has_loss());

  ASSERT_OK_AND_ASSIGN(const std::vector<StepMetrics> other_steps, store->Steps(other));
  ASSERT_EQ(other_steps.size(), 1u);
  EXPECT_EQ(other_steps[0].loss(), 42.0);
}

TEST(JobStoreTest, SetPlacementRecordsGenerationRestartsAndWorkersByRank) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("p", 2), 1));
  ASSERT_OK(store->SetPlacement(id, 1, 0, {"w3", "w1", "w2", "w0"}, 50));
  ASSERT_OK_AND_ASSIGN(JobStatus job, store->GetJob(id));
  EXPECT_EQ(job.generation(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(std::vector<std::string>(job.workers().begin(), job.workers().end()),
            (std::vector<std::string>{"w3", "w1", "w2", "w0"}));
  EXPECT_EQ(job.updated_unix_ms(), 50);

  // The next generation replaces the workers (here fewer of them: data parallel shrank).
  ASSERT_OK(store->SetPlacement(id, 2, 1, {"w5", "w1"}, 60));
  ASSERT_OK_AND_ASSIGN(job, store->GetJob(id));
  EXPECT_EQ(job.generation(), 2);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(std::vector<std::string>(job.workers().begin(), job.workers().end()),
            (std::vector<std::string>{"w5", "w1"}));
  ASSERT_OK_AND_ASSIGN(const std::vector<JobStatus> jobs, store->ListJobs());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(Bytes(jobs[0]), Bytes(job));
  // A listing without workers (the job manager's periodic reads) has everything else.
  JobListQuery without_workers;
  without_workers.with_workers = false;
  ASSERT_OK_AND_ASSIGN(const JobListPage lean, store->ListJobs(without_workers));
  ASSERT_EQ(lean.jobs.size(), 1u);
  EXPECT_EQ(lean.jobs[0].workers_size(), 0);
  JobStatus expected = job;
  expected.clear_workers();
  EXPECT_EQ(Bytes(lean.jobs[0]), Bytes(expected));

  EXPECT_EQ(store->SetPlacement(id, -1, 0, {}, 70).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->SetPlacement(id, 3, -1, {}, 70).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_OK(store->SetPlacement(id, 3, 2, {}, 80));
  ASSERT_OK_AND_ASSIGN(job, store->GetJob(id));
  EXPECT_EQ(job.workers_size(), 0);
}

// ---------------------------------------------------------------- durability

// Everything a test can observe about a store, as bytes, for before/after comparisons.
std::string Snapshot(const JobStore& store) {
  std::string out;
  absl::StatusOr<std::vector<JobStatus>> jobs = store.ListJobs();
  if (!jobs.ok()) return jobs.status().ToString();
  for (const JobStatus& job : *jobs) {
    absl::StrAppend(&out, job.job_id(), ":", job.SerializeAsString(), "\n");
    absl::StatusOr<std::vector<JobEvent>> events = store.Events(job.job_id());
    if (!events.ok()) return events.status().ToString();
    for (const JobEvent& e : *events) {
      absl::StrAppend(&out, " event ", e.unix_ms(), " ", e.kind(), " ", e.message(), "\n");
    }
    absl::StatusOr<std::vector<StepMetrics>> steps = store.Steps(job.job_id());
    if (!steps.ok()) return steps.status().ToString();
    for (const StepMetrics& s : *steps)
      absl::StrAppend(&out, " step ", s.SerializeAsString(), "\n");
  }
  return out;
}

// The same history, written by the test itself or by a child process about to be killed.
absl::Status WriteHistory(JobStore& store) {
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> id = store.CreateJob(MakeSpec(absl::StrCat("job", i), 2), 10 * i);
    if (!id.ok()) return id.status();
  }
  for (absl::Status s : {
           store.Transition("job-1", JOB_STATE_PLACING, "", 100),
           store.SetPlacement("job-1", 1, 0, {"a", "b"}, 101),
           store.Transition("job-1", JOB_STATE_RUNNING, "", 102),
           store.RecordStep("job-1", MakeStep(1, 5.5), 103),
           store.RecordStep("job-1", MakeStep(2, 5.25), 104),
           store.AppendEvent("job-1", "checkpoint", "step 2", 105),
           store.Transition("job-2", JOB_STATE_CANCELLED, "by bob", 106),
           store.Transition("job-1", JOB_STATE_PLACING, "restart", 107),
           store.SetPlacement("job-1", 2, 1, {"c", "b"}, 108),
           store.RecordStep("job-1", MakeStep(2, 5.0), 109),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void ExpectHistory(const JobStore& store) {
  ASSERT_OK_AND_ASSIGN(const std::vector<JobStatus> jobs, store.ListJobs());
  ASSERT_EQ(jobs.size(), 3u);
  const JobStatus& job = jobs[0];
  EXPECT_EQ(job.job_id(), "job-1");
  EXPECT_EQ(job.spec().name(), "job0");
  EXPECT_EQ(job.state(), JOB_STATE_PLACING);
  EXPECT_EQ(job.generation(), 2);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(std::vector<std::string>(job.workers().begin(), job.workers().end()),
            (std::vector<std::string>{"c", "b"}));
  EXPECT_EQ(job.step(), 2);
  EXPECT_EQ(job.loss(), 5.0);
  EXPECT_EQ(job.updated_unix_ms(), 109);
  EXPECT_EQ(jobs[1].state(), JOB_STATE_CANCELLED);
  EXPECT_EQ(jobs[1].message(), "by bob");
  EXPECT_EQ(jobs[2].state(), JOB_STATE_PENDING);
  ASSERT_OK_AND_ASSIGN(const std::vector<StepMetrics> steps, store.Steps("job-1"));
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].loss(), 5.0);
  ASSERT_OK_AND_ASSIGN(const std::vector<JobEvent> events, store.Events("job-1"));
  ASSERT_EQ(events.size(), 5u);  // submitted, 3 state changes, checkpoint.
  EXPECT_EQ(events[3].kind(), "checkpoint");
  EXPECT_EQ(events[4].message(), "RUNNING -> PLACING: restart");
}

TEST(JobStoreTest, ReopenAfterCloseKeepsEverything) {
  const std::string path = FreshDbPath();
  std::string before;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
    ASSERT_OK(WriteHistory(*store));
    before = Snapshot(*store);
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
  EXPECT_EQ(Snapshot(*store), before);
  ExpectHistory(*store);
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("next", 2), 500));
  EXPECT_EQ(id, "job-4");
}

TEST(JobStoreTest, CommittedChangesSurviveSigkillOfTheWritingProcess) {
  const std::string path = FreshDbPath();
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    // No gtest assertions here: the child reports by how it ends. Being killed by its own
    // SIGKILL means every call succeeded; the store is never closed or destroyed.
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
    if (!store.ok()) _exit(2);
    if (!WriteHistory(**store).ok()) _exit(3);
    raise(SIGKILL);
    _exit(4);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wait_status)) << "child exited with " << WEXITSTATUS(wait_status);
  ASSERT_EQ(WTERMSIG(wait_status), SIGKILL);

  // The killed process never checkpointed: the history is only in the write-ahead log,
  // so this reopen has to recover it from there.
  struct stat wal;
  ASSERT_EQ(stat((path + "-wal").c_str(), &wal), 0);
  EXPECT_GT(wal.st_size, 0);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
  ExpectHistory(*store);
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("after", 2), 500));
  EXPECT_EQ(id, "job-4");
}

// ---------------------------------------------------------------- bad files

TEST(JobStoreTest, AFileThatIsNotSqliteIsDataLossAndLeftAlone) {
  for (const std::string& contents :
       {std::string("this is a text file, not a database\n"),
        std::string("SQLite format 3") + std::string(200, '\x7f'), std::string(4096, '\0')}) {
    const std::string path = FreshDbPath();
    WriteFile(path, contents);
    const absl::Status status = JobStore::Open(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find(path), absl::string_view::npos) << status;
    EXPECT_EQ(ReadFile(path), contents) << "a foreign file was modified";
  }
}

TEST(JobStoreTest, AnotherProgramsSqliteDatabaseIsDataLoss) {
  const std::string path = FreshDbPath();
  RawExec(path, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT);");
  const std::string contents = ReadFile(path);
  const absl::Status status = JobStore::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  // Not even its journal mode was switched to WAL.
  EXPECT_EQ(ReadFile(path), contents) << "another program's database was modified";
}

TEST(JobStoreTest, AlteredSchemaIsDataLoss) {
  const std::string path = FreshDbPath();
  { ASSERT_OK(JobStore::Open(path).status()); }
  RawExec(path, "DROP TABLE steps;");
  const absl::Status status = JobStore::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
}

TEST(JobStoreTest, NewerSchemaVersionIsFailedPrecondition) {
  const std::string path = FreshDbPath();
  { ASSERT_OK(JobStore::Open(path).status()); }
  RawExec(path, "PRAGMA user_version = 3;");
  const absl::Status status = JobStore::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

TEST(JobStoreTest, AnEmptyFileBecomesANewStore) {
  const std::string path = FreshDbPath();
  WriteFile(path, "");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("e", 2), 1));
  EXPECT_EQ(id, "job-1");
}

TEST(JobStoreTest, UnopenablePathIsInvalidArgument) {
  const std::string dir = FreshDbPath("_dir");
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  for (const std::string& path : {dir + "/missing/dir/jobs.sqlite", dir, std::string()}) {
    SCOPED_TRACE(path);
    const absl::Status status = JobStore::Open(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
}

// ---------------------------------------------------------------- threads

TEST(JobStoreTest, ConcurrentUseFromSeveralThreadsKeepsIdsUnique) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  constexpr int kThreads = 4;
  constexpr int kJobsPerThread = 50;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, &ids, &errors, t] {
      for (int i = 0; i < kJobsPerThread; ++i) {
        absl::StatusOr<std::string> id = store->CreateJob(MakeSpec(absl::StrCat("t", t), 2), i);
        if (!id.ok()) {
          errors[t] = id.status().ToString();
          return;
        }
        ids[t].push_back(*id);
        for (absl::Status s :
             {store->RecordStep(*id, MakeStep(i + 1, t), i),
              store->Transition(*id, JOB_STATE_PLACING, "", i), store->GetJob(*id).status()}) {
          if (!s.ok()) {
            errors[t] = s.ToString();
            return;
          }
        }
        if (i % 10 == 0 && !store->ListJobs().ok()) {
          errors[t] = "ListJobs failed";
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::set<std::string> unique;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_EQ(ids[t].size(), static_cast<size_t>(kJobsPerThread)) << "thread " << t;
    unique.insert(ids[t].begin(), ids[t].end());
  }
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kJobsPerThread));

  ASSERT_OK_AND_ASSIGN(const std::vector<JobStatus> jobs, store->ListJobs());
  ASSERT_EQ(jobs.size(), static_cast<size_t>(kThreads * kJobsPerThread));
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(jobs[i].job_id(), absl::StrCat("job-", i + 1));  // Dense: no id lost or doubled.
    EXPECT_EQ(jobs[i].state(), JOB_STATE_PLACING);
    EXPECT_GE(jobs[i].step(), 1);
    ASSERT_OK_AND_ASSIGN(const std::vector<StepMetrics> steps, store->Steps(jobs[i].job_id()));
    EXPECT_EQ(steps.size(), 1u);
  }
}

// ---------------------------------------------------------------- listing, deletion

// Every job of the listing `query` selects, page after page; also counts the pages.
std::vector<JobStatus> ListAll(const JobStore& store, JobListQuery query, int* pages) {
  std::vector<JobStatus> all;
  *pages = 0;
  while (true) {
    absl::StatusOr<JobListPage> page = store.ListJobs(query);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    ++*pages;
    all.insert(all.end(), page->jobs.begin(), page->jobs.end());
    if (page->next_after_job == 0) break;
    query.after_job = page->next_after_job;
  }
  return all;
}

TEST(JobStoreListTest, PagesPastTenThousandJobsWithEveryJobOnce) {
  // In memory: no fsync per job, so 10,000 single-job transactions take well under a
  // second; the SQL is the same as on disk.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(":memory:"));
  constexpr int kJobs = 10250;
  for (int i = 1; i <= kJobs; ++i) {
    ASSERT_OK_AND_ASSIGN(const std::string id,
                         store->CreateJob(MakeSpec(i % 2 ? "odd" : "even", 2), i));
    if (i % 1000 == 0) ASSERT_OK(store->Transition(id, JOB_STATE_CANCELLED, "", i));
  }
  JobListQuery query;
  query.max_jobs = 1000;
  query.max_bytes = kMaxJobPageBytes;
  int pages = 0;
  const std::vector<JobStatus> all = ListAll(*store, query, &pages);
  ASSERT_EQ(all.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(pages, 11);
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(all[i].job_id(), absl::StrCat("job-", i + 1));  // In order, none twice.
  }

  // A filter reads only its rows, still in pages.
  query.states = {JOB_STATE_CANCELLED};
  query.max_jobs = 4;
  const std::vector<JobStatus> cancelled = ListAll(*store, query, &pages);
  ASSERT_EQ(cancelled.size(), 10u);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(cancelled.back().job_id(), "job-10000");
}

TEST(JobStoreListTest, StateAndNamePrefixFilters) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  // U+10FFFF, the highest code point: the prefix's upper bound is computed by bytes.
  for (const char* name :
       {"sweep-1", "sweep-2", "sweep", "swee", "other", "sweep-\xf4\x8f\xbf\xbf", ""}) {
    ASSERT_OK(store->CreateJob(MakeSpec(name, 2), 1).status());
  }
  ASSERT_OK(store->Transition("job-2", JOB_STATE_CANCELLED, "", 2));
  ASSERT_OK(store->Transition("job-5", JOB_STATE_PLACING, "", 2));

  const auto ids = [&](JobListQuery query) {
    std::vector<std::string> out;
    absl::StatusOr<JobListPage> page = store->ListJobs(query);
    EXPECT_TRUE(page.ok()) << page.status();
    if (page.ok()) {
      for (const JobStatus& job : page->jobs) out.push_back(job.job_id());
      EXPECT_EQ(page->next_after_job, 0);
    }
    return out;
  };
  JobListQuery query;
  query.name_prefix = "sweep";
  EXPECT_EQ(ids(query), (std::vector<std::string>{"job-1", "job-2", "job-3", "job-6"}));
  query.name_prefix = "sweep-\xf4\x8f\xbf";
  EXPECT_EQ(ids(query), (std::vector<std::string>{"job-6"}));
  query.name_prefix = "\xff\xff";  // No upper bound exists: "name >= prefix" alone.
  EXPECT_EQ(ids(query), (std::vector<std::string>{}));
  query.name_prefix = "sweep";
  query.states = {JOB_STATE_PENDING};
  EXPECT_EQ(ids(query), (std::vector<std::string>{"job-1", "job-3", "job-6"}));
  query.name_prefix = "";
  query.states = {JOB_STATE_CANCELLED, JOB_STATE_PLACING};
  EXPECT_EQ(ids(query), (std::vector<std::string>{"job-2", "job-5"}));

  query.states = {static_cast<JobState>(42)};
  const absl::Status bad = store->ListJobs(query).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("states: "), std::string::npos) << bad;
}

TEST(JobStoreListTest, KeysetPagesNeitherRepeatNorSkipUnderConcurrentInserts) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(":memory:"));
  for (int i = 0; i < 300; ++i) ASSERT_OK(store->CreateJob(MakeSpec("first", 2), i).status());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load() && i < 100000; ++i) {
      if (!store->CreateJob(MakeSpec("later", 2), i).ok()) return;
    }
  });
  JobListQuery query;
  query.max_jobs = 7;
  std::vector<std::string> seen;
  // Page through while the writer appends; every job existing before the listing started
  // must come exactly once and in order, whatever was inserted meanwhile.
  absl::Status failed;
  while (seen.size() < 300) {
    absl::StatusOr<JobListPage> page = store->ListJobs(query);
    if (!page.ok()) {
      failed = page.status();
      break;
    }
    for (const JobStatus& job : page->jobs) seen.push_back(job.job_id());
    if (page->next_after_job == 0) break;  // Caught up with the writer.
    query.after_job = page->next_after_job;
  }
  stop = true;
  writer.join();
  ASSERT_OK(failed);
  ASSERT_GE(seen.size(), 300u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], absl::StrCat("job-", i + 1));
}

TEST(JobStoreListTest, AHugeJobComesAloneAndAPageStaysUnderItsByteBound) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  JobSpec huge = MakeSpec("huge", 2);
  huge.mutable_data()->set_path(std::string(3 << 20, 'x'));  // 3 MB, as in issue 15.
  ASSERT_OK(store->CreateJob(MakeSpec("small", 2), 1).status());
  ASSERT_OK(store->CreateJob(huge, 1).status());
  ASSERT_OK(store->CreateJob(huge, 1).status());
  ASSERT_OK(store->CreateJob(MakeSpec("small", 2), 1).status());

  JobListQuery query;
  query.max_jobs = 100;
  query.max_bytes = kMaxJobPageBytes;
  int pages = 0;
  std::vector<JobStatus> all;
  while (true) {
    ASSERT_OK_AND_ASSIGN(const JobListPage page, store->ListJobs(query));
    ++pages;
    size_t bytes = 0;
    for (const JobStatus& job : page.jobs) bytes += job.ByteSizeLong();
    EXPECT_LE(bytes, static_cast<size_t>(kMaxJobPageBytes));
    all.insert(all.end(), page.jobs.begin(), page.jobs.end());
    if (page.next_after_job == 0) break;
    query.after_job = page.next_after_job;
  }
  ASSERT_EQ(all.size(), 4u);
  EXPECT_TRUE(all[1].listing_shortened());
  EXPECT_EQ(all[1].spec().name(), "huge");
  EXPECT_EQ(all[1].spec().data().path(), "");
  EXPECT_FALSE(all[0].listing_shortened());
  // GetJob still has all of it.
  ASSERT_OK_AND_ASSIGN(const JobStatus whole, store->GetJob("job-2"));
  EXPECT_EQ(whole.spec().data().path().size(), size_t{3} << 20);
  EXPECT_FALSE(whole.listing_shortened());

  // A page bound of a few hundred bytes closes pages early but always holds one job.
  query = JobListQuery();
  query.max_bytes = 10;
  const std::vector<JobStatus> one_by_one = ListAll(*store, query, &pages);
  EXPECT_EQ(one_by_one.size(), 4u);
  EXPECT_EQ(pages, 4);
}

TEST(JobStoreListTest, ShortenedNamesStayValidUtf8) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  std::string name;
  while (name.size() < (300 << 10)) name += "\xc3\xa9";  // "é" repeated past the bound.
  ASSERT_OK(store->CreateJob(MakeSpec("a" + name, 2), 1).status());  // Odd offset of é.
  JobListQuery query;
  query.max_bytes = kMaxJobPageBytes;
  ASSERT_OK_AND_ASSIGN(const JobListPage page, store->ListJobs(query));
  ASSERT_EQ(page.jobs.size(), 1u);
  const std::string& listed = page.jobs[0].spec().name();
  EXPECT_TRUE(page.jobs[0].listing_shortened());
  EXPECT_LE(listed.size(), kShortenedTextBytes + 3);
  ASSERT_GE(listed.size(), 5u);
  EXPECT_EQ(listed.substr(listed.size() - 3), "...");
  // Cut before a whole "é": the byte before "..." is the end of one.
  EXPECT_EQ(listed[listed.size() - 4], '\xa9');
}

TEST(JobStoreListTest, ADamagedRowFailsOnlyItselfInAUserListing) {
  const std::string path = FreshDbPath();
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
    for (int i = 0; i < 3; ++i) ASSERT_OK(store->CreateJob(MakeSpec("j", 2), 1).status());
  }
  RawExec(path, "UPDATE jobs SET spec = x'ffff' WHERE id = 2;");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
  JobListQuery query;
  EXPECT_EQ(store->ListJobs(query).status().code(), absl::StatusCode::kDataLoss);
  query.list_damaged = true;
  ASSERT_OK_AND_ASSIGN(const JobListPage page, store->ListJobs(query));
  ASSERT_EQ(page.jobs.size(), 3u);
  EXPECT_EQ(page.jobs[1].job_id(), "job-2");
  EXPECT_EQ(page.jobs[1].state(), JOB_STATE_PENDING);
  EXPECT_TRUE(page.jobs[1].listing_shortened());
  EXPECT_NE(page.jobs[1].message().find("stored spec does not parse"), std::string::npos)
      << page.jobs[1].message();
  EXPECT_EQ(page.jobs[2].spec().name(), "j");
}

TEST(JobStoreDeleteTest, DeletesAnEndedJobWithEverythingUnderIt) {
  const std::string path = FreshDbPath();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
  ASSERT_OK_AND_ASSIGN(const std::string gone, store->CreateJob(MakeSpec("gone", 2), 1));
  ASSERT_OK_AND_ASSIGN(const std::string kept, store->CreateJob(MakeSpec("kept", 2), 1));
  ASSERT_OK(store->SetPlacement(gone, 1, 0, {"w0", "w1"}, 2));
  ASSERT_OK(store->Transition(gone, JOB_STATE_PLACING, "", 2));
  ASSERT_OK(store->RecordStep(gone, MakeStep(1, 5.0), 3));
  ASSERT_OK(store->Transition(gone, JOB_STATE_RUNNING, "", 3));

  const absl::Status running = store->DeleteJob(gone);
  EXPECT_EQ(running.code(), absl::StatusCode::kFailedPrecondition) << running;
  EXPECT_NE(running.message().find("cancel it first"), std::string::npos) << running;

  ASSERT_OK(store->Transition(gone, JOB_STATE_SUCCEEDED, "", 4));
  ASSERT_OK(store->DeleteJob(gone));
  EXPECT_EQ(store->GetJob(gone).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Events(gone).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->DeleteJob(gone).code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(const std::vector<JobStatus> left, store->ListJobs());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].job_id(), kept);
  store.reset();
  // No orphan rows: foreign keys hold, and nothing of job-1 is left in any table.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  for (const char* table : {"job_workers", "events", "steps"}) {
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(
                  db, absl::StrCat("SELECT count(*) FROM ", table, " WHERE job_id = 1").c_str(), -1,
                  &stmt, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(stmt, 0), 0) << table;
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  // The number is not handed out again.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> reopened, JobStore::Open(path));
  ASSERT_OK_AND_ASSIGN(const std::string next, reopened->CreateJob(MakeSpec("next", 2), 5));
  EXPECT_EQ(next, "job-3");
}

TEST(JobStoreListTest, EventsPageInOrderAndOnlyTheirJobs) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(":memory:"));
  ASSERT_OK(store->CreateJob(MakeSpec("a", 2), 0).status());
  ASSERT_OK(store->CreateJob(MakeSpec("b", 2), 0).status());
  for (int i = 1; i <= 25; ++i) {
    ASSERT_OK(store->AppendEvent("job-1", "checkpoint", absl::StrCat("a", i), i));
    ASSERT_OK(store->AppendEvent("job-2", "checkpoint", absl::StrCat("b", i), i));
  }
  std::vector<std::string> messages;
  int64_t after = 0;
  int pages = 0;
  do {
    ASSERT_OK_AND_ASSIGN(const JobEventPage page, store->Events("job-1", after, 10, -1));
    for (const JobEvent& event : page.events) messages.push_back(event.message());
    after = page.next_after_event;
    ++pages;
  } while (after > 0);
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(messages.size(), 26u);  // "submitted" and 25 appended.
  EXPECT_EQ(messages[0], "a");
  EXPECT_EQ(messages[1], "a1");
  EXPECT_EQ(messages.back(), "a25");
  // A byte bound closes pages early but always holds one event.
  ASSERT_OK_AND_ASSIGN(const JobEventPage tiny, store->Events("job-2", 0, 100, 1));
  EXPECT_EQ(tiny.events.size(), 1u);
  EXPECT_GT(tiny.next_after_event, 0);
  EXPECT_EQ(store->Events("job-9", 0, 10, -1).status().code(), absl::StatusCode::kNotFound);
}

TEST(JobStoreDeleteTest, JobsEndedByListsEndedJobsLongestEndedFirst) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(FreshDbPath()));
  for (int i = 0; i < 4; ++i) ASSERT_OK(store->CreateJob(MakeSpec("j", 2), 0).status());
  ASSERT_OK(store->Transition("job-3", JOB_STATE_CANCELLED, "", 100));
  ASSERT_OK(store->Transition("job-1", JOB_STATE_CANCELLED, "", 200));
  ASSERT_OK(store->Transition("job-4", JOB_STATE_PLACING, "", 50));  // Not ended.
  ASSERT_OK_AND_ASSIGN(const JobStatus ended, store->GetJob("job-3"));
  EXPECT_EQ(ended.ended_unix_ms(), 100);
  ASSERT_OK_AND_ASSIGN(const JobStatus placing, store->GetJob("job-4"));
  EXPECT_EQ(placing.ended_unix_ms(), 0);

  EXPECT_EQ(*store->JobsEndedBy(99, 10), std::vector<std::string>{});
  EXPECT_EQ(*store->JobsEndedBy(150, 10), std::vector<std::string>{"job-3"});
  EXPECT_EQ(*store->JobsEndedBy(1000, 10), (std::vector<std::string>{"job-3", "job-1"}));
  EXPECT_EQ(*store->JobsEndedBy(1000, 1), std::vector<std::string>{"job-3"});
}

TEST(JobStoreUpgradeTest, AVersion1StoreGetsNamesAndEndTimes) {
  const std::string path = FreshDbPath();
  // The version 1 schema as the previous coordinator created it, with two jobs.
  RawExec(path, R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT, spec BLOB NOT NULL, state INTEGER NOT NULL,
  step INTEGER NOT NULL DEFAULT 0, loss REAL NOT NULL DEFAULT 0,
  tokens_per_second REAL NOT NULL DEFAULT 0, generation INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '',
  submitted_unix_ms INTEGER NOT NULL, updated_unix_ms INTEGER NOT NULL, latest BLOB) STRICT;
CREATE TABLE job_workers (job_id INTEGER NOT NULL REFERENCES jobs(id), rank INTEGER NOT NULL,
  worker_id TEXT NOT NULL, PRIMARY KEY (job_id, rank)) STRICT, WITHOUT ROWID;
CREATE TABLE events (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs(id),
  unix_ms INTEGER NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL) STRICT;
CREATE INDEX events_by_job ON events(job_id, id);
CREATE TABLE steps (job_id INTEGER NOT NULL REFERENCES jobs(id), step INTEGER NOT NULL,
  metrics BLOB NOT NULL, PRIMARY KEY (job_id, step)) STRICT, WITHOUT ROWID;
PRAGMA application_id = 1836348010; PRAGMA user_version = 1;
)sql");
  const std::string running = absl::BytesToHexString(Bytes(MakeSpec("alpha-run", 2)));
  const std::string done = absl::BytesToHexString(Bytes(MakeSpec("beta", 2)));
  RawExec(path, absl::StrCat("INSERT INTO jobs (spec, state, submitted_unix_ms, updated_unix_ms) "
                             "VALUES (x'",
                             running, "', 3, 10, 20), (x'", done, "', 4, 10, 30);"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, JobStore::Open(path));
  JobListQuery query;
  query.name_prefix = "alpha";
  ASSERT_OK_AND_ASSIGN(const JobListPage alpha, store->ListJobs(query));
  ASSERT_EQ(alpha.jobs.size(), 1u);
  EXPECT_EQ(alpha.jobs[0].job_id(), "job-1");
  EXPECT_EQ(alpha.jobs[0].ended_unix_ms(), 0);
  EXPECT_EQ(*store->JobsEndedBy(30, 10), std::vector<std::string>{"job-2"});
  ASSERT_OK_AND_ASSIGN(const std::string id, store->CreateJob(MakeSpec("gamma", 2), 40));
  EXPECT_EQ(id, "job-3");
  store.reset();
  // Upgraded once: a second open finds the current version.
  ASSERT_OK(JobStore::Open(path).status());
}

}  // namespace
}  // namespace mtrain
