// Runs the trainctl binary against an in-process fake coordinator: exit statuses, the
// one-line errors, the bearer token on the wire, and what watch prints for a scripted
// WatchJob stream. The coordinator's real job logic is tested in coordinator/.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/step_metrics_format.h"
#include "coordinator/checkpoint_store.h"
#include "coordinator/grpc_service.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class FakeCoordinator final : public Coordinator::Service {
 public:
  // Mutating RPCs need `authorization: Bearer <token>` when `token` is set.
  void RequireToken(std::string token) { token_ = std::move(token); }
  // What WatchJob sends, then how it ends.
  void ScriptWatch(std::vector<JobStatus> statuses, grpc::Status end) {
    watch_script_ = std::move(statuses);
    watch_end_ = std::move(end);
  }
  // Keep the stream open after the script (a coordinator that does not end it).
  void HoldWatchOpen() { hold_open_ = true; }
  void SetJob(JobStatus job) { job_ = std::move(job); }

  std::string last_authorization() {
    MutexLock lock(&mu_);
    return last_authorization_;
  }

  grpc::Status SubmitJob(grpc::ServerContext* context, const SubmitJobRequest* request,
                         SubmitJobResponse* response) override {
    grpc::Status auth = Authorize(*context);
    if (!auth.ok()) return auth;
    response->set_job_id("job-1");
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* context, const GetJobRequest* request,
                      JobStatus* response) override {
    Authorize(*context);
    if (request->job_id() != job_.job_id()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    *response = job_;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* context, const ListJobsRequest* request,
                        ListJobsResponse* response) override {
    *response->add_jobs() = job_;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext* context, const CancelJobRequest* request,
                         CancelJobResponse* response) override {
    grpc::Status auth = Authorize(*context);
    if (!auth.ok()) return auth;
    if (request->job_id() != job_.job_id()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* context, const WatchJobRequest* request,
                        grpc::ServerWriter<JobStatus>* writer) override {
    for (const JobStatus& status : watch_script_) {
      if (!writer->Write(status)) return grpc::Status::CANCELLED;
    }
    if (hold_open_) {
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (!context->IsCancelled() && absl::Now() < give_up)
        absl::SleepFor(absl::Milliseconds(5));
    }
    return watch_end_;
  }

 private:
  grpc::Status Authorize(const grpc::ServerContext& context) {
    const auto it = context.client_metadata().find("authorization");
    const std::string value = it == context.client_metadata().end()
                                  ? ""
                                  : std::string(it->second.data(), it->second.size());
    {
      MutexLock lock(&mu_);
      last_authorization_ = value;
    }
    if (token_.empty() || value == "Bearer " + token_) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong bearer token");
  }

  std::string token_;
  std::vector<JobStatus> watch_script_;
  grpc::Status watch_end_;
  bool hold_open_ = false;
  JobStatus job_;
  Mutex mu_;
  std::string last_authorization_ ABSL_GUARDED_BY(mu_);
};

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

JobStatus Status(JobState state, int64_t step, double loss = 0) {
  JobStatus status;
  status.set_job_id("job-1");
  status.mutable_spec()->set_name("tiny");
  status.mutable_spec()->mutable_train()->set_steps(4);
  status.set_state(state);
  status.set_generation(1);
  status.set_step(step);
  status.set_submitted_unix_ms(absl::ToUnixMillis(absl::Now() - absl::Seconds(75)));
  if (step > 0) {
    status.set_loss(loss);
    status.set_tokens_per_second(1000);
    StepMetrics* latest = status.mutable_latest();
    latest->set_job_id("job-1");
    latest->set_step(step);
    latest->set_loss(loss);
    latest->set_lr(1e-3);
    latest->set_tokens_per_second(1000);
    latest->set_step_seconds(0.25);
    latest->set_global_rank(3);
  }
  return status;
}

class TrainctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->Shutdown(); }

  // Runs trainctl with `args` (shell words) against the fake; stdout is a file, not a TTY.
  Result Run(const std::string& args) {
    const std::string out = TempDir() + "/stdout";
    const std::string err = TempDir() + "/stderr";
    const std::string command =
        absl::StrCat("coordinator/cli/trainctl --coordinator=127.0.0.1:", port_, " ", args, " >",
                     out, " 2>", err);
    const int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = ReadFile(out);
    result.err = ReadFile(err);
    return result;
  }

  FakeCoordinator fake_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TrainctlTest, WatchJsonPrintsEachStepOnceInTheTrainFormat) {
  fake_.ScriptWatch({Status(JOB_STATE_PLACING, 0), Status(JOB_STATE_RUNNING, 1, 5.5),
                     Status(JOB_STATE_RUNNING, 1, 5.5), Status(JOB_STATE_RUNNING, 2, 5.25),
                     Status(JOB_STATE_SUCCEEDED, 2, 5.25)},
                    grpc::Status::OK);
  const Result result = Run("--json watch job-1");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_THAT(Lines(result.out),
              ElementsAre(StepMetricsJson(Status(JOB_STATE_RUNNING, 1, 5.5).latest()),
                          StepMetricsJson(Status(JOB_STATE_RUNNING, 2, 5.25).latest())));
  EXPECT_THAT(result.out, StartsWith("{\"step\":1,\"loss\":5.5,"));
}

TEST_F(TrainctlTest, WatchOfAFailedJobFailsWithItsMessage) {
  JobStatus failed = Status(JOB_STATE_FAILED, 1, 5.5);
  failed.set_message("rank 1: DEADLINE_EXCEEDED\nin tp group 0");
  fake_.SetJob(Status(JOB_STATE_RUNNING, 1, 5.5));
  fake_.ScriptWatch({Status(JOB_STATE_RUNNING, 1, 5.5), failed}, grpc::Status::OK);
  const Result result = Run("watch job-1");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err,
            "trainctl watch: job job-1 FAILED: rank 1: DEADLINE_EXCEEDED in tp group 0\n");
  EXPECT_THAT(result.out, HasSubstr("job job-1: RUNNING\n"));
  EXPECT_THAT(result.out, HasSubstr("job job-1: RUNNING -> FAILED: rank 1"));
}

TEST_F(TrainctlTest, WatchEndsWhenTheJobEndsEvenIfTheStreamStaysOpen) {
  fake_.SetJob(Status(JOB_STATE_PENDING, 0));
  fake_.ScriptWatch({Status(JOB_STATE_CANCELLED, 0)}, grpc::Status::OK);
  fake_.HoldWatchOpen();
  const absl::Time start = absl::Now();
  const Result result = Run("watch job-1");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, "trainctl watch: job job-1 CANCELLED\n");
}

// What the real coordinator streams to a watcher that arrives after the job ended: every
// step again, each marked RUNNING, then the final status.
std::vector<JobStatus> ReplayOf(const JobStatus& finished) {
  std::vector<JobStatus> replay;
  for (int64_t step = 1; step < finished.step(); ++step) {
    JobStatus between = finished;
    between.set_state(JOB_STATE_RUNNING);
    between.set_step(step);
    between.mutable_latest()->set_step(step);
    replay.push_back(between);
  }
  replay.push_back(finished);
  return replay;
}

TEST_F(TrainctlTest, WatchOfAnEndedJobShowsOnlyHowItEnded) {
  // Submitted 75 s ago, done 60 s later: elapsed is the job's minute, not the time since.
  JobStatus succeeded = Status(JOB_STATE_SUCCEEDED, 4, 4.0);
  succeeded.set_updated_unix_ms(succeeded.submitted_unix_ms() + 60000);
  fake_.SetJob(succeeded);
  fake_.ScriptWatch(ReplayOf(succeeded), grpc::Status::OK);
  const Result result = Run("watch job-1");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_THAT(Lines(result.out),
              ElementsAre("job job-1: SUCCEEDED",
                          "SUCCEEDED [####################] step 4/4 100% | loss 4.0000 | "
                          "1000 tok/s | elapsed 1m00s"));

  // The same exit status and stderr line as a watch that saw the job fail.
  JobStatus failed = Status(JOB_STATE_FAILED, 3, 4.5);
  failed.set_updated_unix_ms(failed.submitted_unix_ms() + 30000);
  failed.set_message("restart budget spent");
  fake_.SetJob(failed);
  fake_.ScriptWatch(ReplayOf(failed), grpc::Status::OK);
  const Result failure = Run("watch job-1");
  EXPECT_EQ(failure.exit_code, 1);
  EXPECT_EQ(failure.err, "trainctl watch: job job-1 FAILED: restart budget spent\n");
  EXPECT_THAT(Lines(failure.out),
              ElementsAre("job job-1: FAILED: restart budget spent",
                          "FAILED [###############-----] step 3/4 75% | loss 4.5000 | "
                          "1000 tok/s | elapsed 30s"));

  // --json still gets every step once: the replay is the job's real metrics.
  const Result json = Run("--json watch job-1");
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_EQ(Lines(json.out).size(), 3u) << json.out;
}

TEST_F(TrainctlTest, WatchOfARunningJobStartsAtItsCurrentStep) {
  JobStatus running = Status(JOB_STATE_RUNNING, 3, 4.5);
  fake_.SetJob(running);
  std::vector<JobStatus> script = ReplayOf(running);
  script.push_back(Status(JOB_STATE_SUCCEEDED, 4, 4.0));
  fake_.ScriptWatch(script, grpc::Status::OK);
  const Result result = Run("watch job-1");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  const std::vector<std::string> lines = Lines(result.out);
  ASSERT_EQ(lines.size(), 4u) << result.out;
  EXPECT_EQ(lines[0], "job job-1: RUNNING");
  EXPECT_THAT(lines[1], StartsWith("RUNNING [###############-----] step 3/4 75%"));
  EXPECT_EQ(lines[2], "job job-1: RUNNING -> SUCCEEDED");
  EXPECT_THAT(lines[3], StartsWith("SUCCEEDED [####################] step 4/4 100%"));
}

TEST_F(TrainctlTest, WatchOfAnUnknownJobFails) {
  const Result result = Run("watch job-9");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, "trainctl watch: NOT_FOUND: no job job-9\n");
}

TEST_F(TrainctlTest, SubmitWaitFollowsTheJobToSuccess) {
  fake_.ScriptWatch({Status(JOB_STATE_PENDING, 0), Status(JOB_STATE_RUNNING, 1, 5.5),
                     Status(JOB_STATE_RUNNING, 2, 5.0), Status(JOB_STATE_SUCCEEDED, 4, 4.0)},
                    grpc::Status::OK);
  const Result result = Run(absl::StrCat("submit ", WriteFile("spec.json", "{}"), " --wait"));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  const std::vector<std::string> lines = Lines(result.out);
  ASSERT_GE(lines.size(), 4u) << result.out;
  EXPECT_EQ(lines[0], "job-1");
  EXPECT_EQ(lines[1], "job job-1: PENDING");
  EXPECT_THAT(lines[2], StartsWith("PENDING [----"));
  EXPECT_THAT(lines[2], HasSubstr("ETA --"));
  EXPECT_THAT(result.out, HasSubstr("job job-1: PENDING -> RUNNING\n"));
  EXPECT_THAT(result.out, HasSubstr("job job-1: RUNNING -> SUCCEEDED\n"));
  EXPECT_THAT(lines.back(), StartsWith("SUCCEEDED [####################] step 4/4 100%"));
}

TEST_F(TrainctlTest, SubmitWaitFailsWhenTheStreamBreaks) {
  fake_.ScriptWatch({Status(JOB_STATE_RUNNING, 3, 4.5)},
                    grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down"));
  const Result result = Run(absl::StrCat("--wait submit ", WriteFile("spec.json", "{}")));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(Lines(result.out)[0], "job-1");
  ASSERT_EQ(Lines(result.err).size(), 1u) << result.err;
  EXPECT_THAT(result.err, StartsWith("trainctl submit: the watch stream of job job-1 ended before "
                                     "the job did (last seen RUNNING at step 3/4): UNAVAILABLE: "
                                     "coordinator shutting down"));
}

TEST_F(TrainctlTest, TokenTravelsAsBearerMetadata) {
  fake_.RequireToken("s3cret");
  const std::string spec = WriteFile("spec.json", "{}");

  Result refused = Run("submit " + spec);
  EXPECT_EQ(refused.exit_code, 1);
  ASSERT_EQ(Lines(refused.err).size(), 1u) << refused.err;
  EXPECT_THAT(refused.err, StartsWith("trainctl submit: UNAUTHENTICATED: "));
  EXPECT_THAT(refused.err, HasSubstr("pass --token_file=FILE"));

  Result wrong = Run("--token=guess cancel job-1");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("check --token_file"));

  Result accepted = Run("--token_file=" + WriteFile("token", "s3cret\n") + " submit " + spec);
  EXPECT_EQ(accepted.exit_code, 0) << accepted.err;
  EXPECT_EQ(accepted.out, "job-1\n");
  EXPECT_EQ(fake_.last_authorization(), "Bearer s3cret");

  // Read-only calls carry it too.
  fake_.SetJob(Status(JOB_STATE_RUNNING, 1, 5.5));
  EXPECT_EQ(Run("--token=abc status job-1").exit_code, 0);
  EXPECT_EQ(fake_.last_authorization(), "Bearer abc");
}

TEST_F(TrainctlTest, UnreadableTokenFileIsAClearError) {
  const Result result = Run("--token_file=" + TempDir() + "/absent list");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err, absl::StrCat("trainctl list: INVALID_ARGUMENT: --token_file=", TempDir(),
                                     "/absent: cannot read: No such file or directory\n"));
}

TEST_F(TrainctlTest, StatusAndList) {
  JobStatus job = Status(JOB_STATE_RUNNING, 2, 5.25);
  job.add_workers("w0");
  fake_.SetJob(job);
  Result status = Run("status job-1");
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("state       RUNNING\n"));
  EXPECT_THAT(status.out, HasSubstr("step        2/4 (50%)\n"));
  EXPECT_THAT(status.out, HasSubstr("workers     1 (0:w0)\n"));

  Result json = Run("status job-1 --json");
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_EQ(Lines(json.out).size(), 1u);
  EXPECT_THAT(json.out, HasSubstr("\"job_id\":\"job-1\""));
  EXPECT_THAT(json.out, HasSubstr("\"state\":\"JOB_STATE_RUNNING\""));

  Result missing = Run("status job-2");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "trainctl status: NOT_FOUND: no job job-2\n");

  Result list = Run("list");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_EQ(Lines(list.out).size(), 2u);
  EXPECT_THAT(list.out, HasSubstr("tiny"));
  // 75 s old when the fake answered; a slow run (sanitizers) may take a second more.
  EXPECT_THAT(list.out, ::testing::ContainsRegex("1m1[5-7]s"));
}

TEST_F(TrainctlTest, UsageErrorsExitTwoWithOneLine) {
  for (const char* args : {"", "frobnicate", "status", "watch a b", "--wait status job-1",
                           "--token=a --token_file=b list"}) {
    const Result result = Run(args);
    EXPECT_EQ(result.exit_code, 2) << args;
    EXPECT_EQ(Lines(result.err).size(), 1u) << args << ": " << result.err;
    EXPECT_THAT(result.err, StartsWith("trainctl")) << args;
  }
  EXPECT_EQ(Run("frobnicate").err, "trainctl frobnicate: unknown command (see trainctl help)\n");
}

TEST_F(TrainctlTest, OutOfRangeNumericFlagsAreUsageErrors) {
  // -1 once meant "the newest checkpoint"; leaving --step out says that now.
  const Result step = Run("export job-1 " + TempDir() + "/out --step=-1");
  EXPECT_EQ(step.exit_code, 2);
  EXPECT_EQ(step.err,
            "trainctl export: --step: must be >= 0, got -1; leave it out for the newest "
            "checkpoint (see trainctl help)\n");
  EXPECT_EQ(Run("export job-1 " + TempDir() + "/out --step -7").exit_code, 2);
  EXPECT_EQ(Run("--step=3 list").err,
            "trainctl list: --step applies only to export, eval and generate (see trainctl "
            "help)\n");
  // generate's flags elsewhere, and outside the spec's rules, are usage errors too.
  EXPECT_EQ(Run("--top_k=5 list").exit_code, 2);
  const Result generate = Run("generate job-1 --prompt=ROMEO: --temperature=-1");
  EXPECT_EQ(generate.exit_code, 2);
  EXPECT_EQ(generate.err,
            "trainctl generate: train.generate: entry 0 has temperature -1 [rule: finite and "
            ">= 0, where 0 is greedy] (see trainctl help)\n");
  EXPECT_EQ(Run("generate job-1").err,
            "trainctl generate: --prompt is required (see trainctl help)\n");

  const Result timeout = Run("--timeout_seconds=-5 list");
  EXPECT_EQ(timeout.exit_code, 2);
  EXPECT_EQ(timeout.err,
            "trainctl list: --timeout_seconds: must be >= 1, got -5 (see trainctl help)\n");
  EXPECT_EQ(Run("--timeout_seconds=0 status job-1").exit_code, 2);
}

// ---------------------------------------------------------------- against a real coordinator

// The coordinator's real service (job manager, SQLite job store, checkpoint store) on
// loopback with a bearer token: `list` paging and filters and `delete`, end to end.
class TrainctlRealCoordinatorTest : public ::testing::Test {
 protected:
  static constexpr char kToken[] = "real-token";

  void SetUp() override {
    // In memory: thousands of jobs without an fsync each; the SQL is the same.
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    const std::string root = TempDir() + "/real-checkpoints";
    std::filesystem::remove_all(root);
    absl::StatusOr<std::unique_ptr<CheckpointStore>> checkpoints = CheckpointStore::Open(root, 2);
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    checkpoints_ = *std::move(checkpoints);
    absl::StatusOr<std::unique_ptr<JobManager>> jobs =
        JobManager::Create(RealClock::Get(), &registry_, store_.get(), &rendezvous_, nullptr,
                           JobManagerOptions(), checkpoints_.get());
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    jobs_ = *std::move(jobs);
    service_ = std::make_unique<CoordinatorGrpcService>(&registry_, &rendezvous_, jobs_.get(),
                                                        nullptr, kToken, checkpoints_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    token_file_ = WriteFile("real-token", std::string(kToken) + "\n");
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // With the coordinator's token unless `with_token` is false: it guards reads too.
  Result Run(const std::string& args, bool with_token = true) {
    const std::string out = TempDir() + "/real-stdout";
    const std::string err = TempDir() + "/real-stderr";
    const std::string command = absl::StrCat(
        "coordinator/cli/trainctl --coordinator=127.0.0.1:", port_,
        with_token ? " --token_file=" + token_file_ : "", " ", args, " >", out, " 2>", err);
    const int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = ReadFile(out);
    result.err = ReadFile(err);
    return result;
  }

  // Adds `n` PENDING jobs named `name`.
  void AddJobs(int n, const std::string& name) {
    JobSpec spec;
    spec.set_name(name);
    for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->CreateJob(spec, 1000).ok());
  }

  WorkerRegistry registry_{RealClock::Get(), WorkerRegistryOptions()};
  RendezvousStore rendezvous_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<CoordinatorGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string token_file_;
};

TEST_F(TrainctlRealCoordinatorTest, ListPagesThroughEveryJobAndFilters) {
  AddJobs(2400, "bulk");  // More than two of the coordinator's largest pages.
  AddJobs(3, "sweep-a");
  ASSERT_TRUE(jobs_->Cancel("job-2402").ok());

  const Result all = Run("list");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const std::vector<std::string> lines = Lines(all.out);
  ASSERT_EQ(lines.size(), 2404u);  // A header and every job, once.
  EXPECT_THAT(lines[1], StartsWith("job-1 "));
  EXPECT_THAT(lines.back(), StartsWith("job-2403 "));

  const Result json = Run("--json list --limit=1500");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::vector<std::string> json_lines = Lines(json.out);
  ASSERT_EQ(json_lines.size(), 1500u);
  EXPECT_THAT(json_lines.back(), HasSubstr("\"job_id\":\"job-1500\""));

  const Result sweep = Run("list --name=sweep-");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  EXPECT_EQ(Lines(sweep.out).size(), 4u);
  const Result cancelled = Run("list --state=cancelled,failed");
  ASSERT_EQ(cancelled.exit_code, 0) << cancelled.err;
  ASSERT_EQ(Lines(cancelled.out).size(), 2u);
  EXPECT_THAT(Lines(cancelled.out)[1], StartsWith("job-2402 "));
  EXPECT_EQ(Lines(Run("list --state=pending --name=sweep- --limit=1").out).size(), 2u);

  const Result bad = Run("list --state=runing");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--state: 'runing' is not a job state"));
  EXPECT_EQ(Run("list --limit=-1").exit_code, 2);
  EXPECT_EQ(Run("status job-1 --name=x").exit_code, 2);
}

TEST_F(TrainctlRealCoordinatorTest, JobsWithHugeSpecsDoNotBreakTheListing) {
  // Issue 15: two jobs with a 3 MB data.path took ListJobs past gRPC's 4 MB limit, and
  // `trainctl list` failed for everyone.
  JobSpec huge;
  huge.set_name("huge");
  huge.mutable_data()->set_path(std::string(3 << 20, 'p'));
  AddJobs(1, "small");
  ASSERT_TRUE(store_->CreateJob(huge, 1000).ok());
  ASSERT_TRUE(store_->CreateJob(huge, 1000).ok());
  AddJobs(1, "small");
  const Result list = Run("list");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  const std::vector<std::string> lines = Lines(list.out);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_THAT(lines[2], HasSubstr("huge"));
  EXPECT_THAT(lines[3], HasSubstr("huge"));
  const Result json = Run("--json list");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(Lines(json.out)[1], HasSubstr("\"listing_shortened\":true"));
}

TEST_F(TrainctlRealCoordinatorTest, EventsPageThroughALongLog) {
  AddJobs(1, "chatty");
  for (int i = 1; i <= 12000; ++i) {  // More than the coordinator's largest page.
    ASSERT_TRUE(store_->AppendEvent("job-1", "checkpoint", absl::StrCat("step ", i), 1000).ok());
  }
  const Result events = Run("--json events job-1");
  ASSERT_EQ(events.exit_code, 0) << events.err;
  const std::vector<std::string> lines = Lines(events.out);
  ASSERT_EQ(lines.size(), 12001u);
  EXPECT_THAT(lines[0], HasSubstr("\"kind\":\"submitted\""));
  EXPECT_THAT(lines.back(), HasSubstr("\"message\":\"step 12000\""));
}

TEST_F(TrainctlRealCoordinatorTest, DeleteNeedsTheTokenAndAnEndedJob) {
  AddJobs(2, "tiny");
  const Result anonymous = Run("delete job-1", /*with_token=*/false);
  EXPECT_EQ(anonymous.exit_code, 1);
  EXPECT_THAT(anonymous.err, StartsWith("trainctl delete: UNAUTHENTICATED"));

  const Result pending = Run("delete job-1");
  EXPECT_EQ(pending.exit_code, 1);
  EXPECT_THAT(pending.err, StartsWith("trainctl delete: FAILED_PRECONDITION: job-1 is PENDING"));
  EXPECT_THAT(pending.err, HasSubstr("cancel it first"));

  ASSERT_EQ(Run("cancel job-1").exit_code, 0);
  const Result deleted = Run("delete job-1");
  EXPECT_EQ(deleted.exit_code, 0) << deleted.err;
  EXPECT_EQ(deleted.out, "deleted job-1\n");
  EXPECT_EQ(Run("status job-1").exit_code, 1);
  EXPECT_THAT(Run("delete job-1").err, HasSubstr("NOT_FOUND"));
  const std::vector<std::string> left = Lines(Run("list").out);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_THAT(left[1], StartsWith("job-2 "));
}

}  // namespace
}  // namespace mtrain
