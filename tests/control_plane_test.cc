// The control plane end to end, all real processes on loopback: a coordinator (SQLite job
// store, Prometheus exporter), worker daemons that run their ranks as `train` processes,
// and trainctl. Checks what issue 5 promises:
//   - a submitted job completes and its per-step losses equal `train` run statically;
//   - two jobs on 4 workers queue; cancel stops the running one within seconds and frees
//     its workers for the next; a scrape taken during a run passes `promtool`;
//   - a coordinator killed with SIGKILL and restarted lists every job, workers
//     re-register and the interrupted job runs again;
//   - invalid specs are rejected with INVALID_ARGUMENT naming the field, and the
//     coordinator keeps serving; unauthenticated submit and cancel change nothing.
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/metrics_jsonl.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kStartTimeout = absl::Seconds(20);

// A tiny GPT, tensor 2 x pipeline 2 (4 ranks) unless the caller overrides `parallel`.
std::string SpecJson(int steps, const std::string& parallel =
                                    R"("tensor": 2, "pipeline": 2, "global_batch_size": 8)") {
  return absl::StrCat(
      R"({"name": "cp", "model": {"num_layers": 4, "num_heads": 4, "hidden_size": 32,
          "seq_length": 16}, "parallel": {"micro_batch_size": 2, )",
      parallel, R"(}, "train": {"steps": )", steps,
      R"(, "dropout": 0.1, "seed": 3}, "device": "DEVICE_CPU"})");
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  void TearDown() override {
    workers_.clear();  // SIGKILL + reap (ChildProcess's destructor)
    coordinator_.reset();
  }

  // Each test its own directory: job database, logs, specs.
  std::string Path(const std::string& name) {
    const std::string dir = absl::StrCat(
        TestTempDir(), "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ::mkdir(dir.c_str(), 0755);
    return absl::StrCat(dir, "/", name);
  }

  void StartCoordinator(const std::string& listen = "127.0.0.1:0") {
    std::vector<std::string> argv = {"coordinator/coordinator",    "--listen=" + listen,
                                     "--http=127.0.0.1:0",         "--state_dir=" + Path("state"),
                                     "--heartbeat_interval=200ms", "--heartbeat_timeout=3s",
                                     "--lost_rank_grace=5s"};
    if (!token_file_.empty()) argv.push_back("--auth_token_file=" + token_file_);
    auto coordinator =
        ChildProcess::Start(argv, Path(absl::StrCat("coordinator-", ++coordinator_runs_, ".log")));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    absl::StatusOr<std::string> line =
        coordinator_->WaitForOutput("coordinator listening on ", kStartTimeout);
    ASSERT_TRUE(line.ok()) << line.status();
    address_ = line->substr(line->rfind(' ') + 1);
    absl::StatusOr<std::string> metrics =
        coordinator_->WaitForOutput("coordinator metrics on ", kStartTimeout);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    const std::string url = metrics->substr(metrics->rfind(' ') + 1);
    const std::string port =
        url.substr(url.rfind(':') + 1, url.find("/metrics") - url.rfind(':') - 1);
    ASSERT_TRUE(absl::SimpleAtoi(port, &metrics_port_)) << url;
  }

  void StartWorkers(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string id = absl::StrCat("w", i);
      std::vector<std::string> argv = {"worker/worker", "--coordinator=" + address_,
                                       "--device=cpu",  "--worker_id=" + id,
                                       "--threads=1",   "--log_dir=" + Path("ranks")};
      if (!token_file_.empty()) argv.push_back("--token_file=" + token_file_);
      auto worker = ChildProcess::Start(argv, Path(absl::StrCat(id, "-", ++worker_runs_, ".log")));
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
    }
    ASSERT_TRUE(WaitFor([&] { return AliveWorkers() == n; }, absl::Seconds(20)))
        << "workers did not register: " << Trainctl({"workers"}).second;
  }

  // Runs trainctl to completion; returns {exit code, output (stdout and stderr)}.
  std::pair<int, std::string> Trainctl(std::vector<std::string> args,
                                       absl::Duration timeout = absl::Seconds(60)) {
    std::vector<std::string> argv = {"coordinator/cli/trainctl", "--coordinator=" + address_};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = Path(absl::StrCat("trainctl-", ++trainctl_runs_, ".log"));
    auto child = ChildProcess::Start(argv, log);
    if (!child.ok()) return {-1, child.status().ToString()};
    absl::StatusOr<int> code = (*child)->Wait(timeout);
    return {code.ok() ? *code : -1, (*child)->Log()};
  }

  std::string WriteSpec(const std::string& name, const std::string& json) {
    const std::string path = Path(name);
    std::ofstream(path) << json;
    return path;
  }

  std::unique_ptr<Coordinator::Stub> Stub() {
    return Coordinator::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  absl::StatusOr<JobStatus> Status(const std::string& job) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    GetJobRequest request;
    request.set_job_id(job);
    JobStatus status;
    grpc::Status s = Stub()->GetJob(&context, request, &status);
    if (!s.ok())
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return status;
  }

  JobState StateOf(const std::string& job) {
    absl::StatusOr<JobStatus> status = Status(job);
    return status.ok() ? status->state() : JOB_STATE_UNSPECIFIED;
  }

  int AliveWorkers() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ListWorkersResponse response;
    if (!Stub()->ListWorkers(&context, ListWorkersRequest(), &response).ok()) return -1;
    int alive = 0;
    for (const WorkerStatus& w : response.workers()) alive += w.alive() ? 1 : 0;
    return alive;
  }

  static bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return done();
  }

  // Submits a spec file without waiting; returns the job id.
  std::string Submit(const std::string& spec_path, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"submit", "--json", spec_path};
    args.insert(args.end(), extra.begin(), extra.end());
    auto [code, output] = Trainctl(args);
    EXPECT_EQ(code, 0) << output;
    const size_t at = output.find("\"job_id\":\"");
    if (at == std::string::npos) return "";
    const size_t begin = at + 10;
    return output.substr(begin, output.find('"', begin) - begin);
  }

  std::string token_file_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::string address_;
  int metrics_port_ = 0;
  int coordinator_runs_ = 0, worker_runs_ = 0, trainctl_runs_ = 0;
};

TEST_F(ControlPlaneTest, SubmittedJobReproducesStaticTrainStepForStep) {
  StartCoordinator();
  StartWorkers(4);
  const std::string spec = WriteSpec("job.json", SpecJson(6));
  // `submit --wait --json`: the job id, then one JSON line per step, as `train` writes.
  auto [code, output] = Trainctl({"submit", "--wait", "--json", spec}, absl::Minutes(3));
  ASSERT_EQ(code, 0) << output;
  const std::string watched = Path("watched.jsonl");
  {
    std::ofstream out(watched);
    for (absl::string_view line : absl::StrSplit(output, '\n')) {
      if (absl::StartsWith(line, "{\"step\"")) out << line << "\n";
    }
  }
  absl::StatusOr<std::vector<MetricsLine>> job_lines = ReadMetricsJsonl(watched);
  ASSERT_TRUE(job_lines.ok()) << job_lines.status();
  absl::StatusOr<std::vector<double>> job_losses = LossesOfRank(*job_lines, 2);
  ASSERT_TRUE(job_losses.ok()) << job_losses.status() << "\n" << output;
  ASSERT_EQ(job_losses->size(), 6u) << output;

  // The same spec as a static world of `train` processes.
  auto launch = ChildProcess::Start(
      {"worker/launch", "--spec=" + spec, "--out_dir=" + Path("static"), "--threads_per_rank=1"},
      Path("launch.log"));
  ASSERT_TRUE(launch.ok()) << launch.status();
  absl::StatusOr<int> launched = (*launch)->Wait(absl::Minutes(3));
  ASSERT_TRUE(launched.ok() && *launched == 0) << (*launch)->Log();
  absl::StatusOr<std::vector<MetricsLine>> static_lines =
      ReadMetricsJsonl(Path("static/metrics.jsonl"));
  ASSERT_TRUE(static_lines.ok());
  absl::StatusOr<std::vector<double>> static_losses = LossesOfRank(*static_lines, 2);
  ASSERT_TRUE(static_losses.ok()) << static_losses.status();
  // The same plan, data and arithmetic: equal to the printed digits.
  EXPECT_EQ(*job_losses, *static_losses);
  EXPECT_EQ(StateOf("job-1"), JOB_STATE_SUCCEEDED);
}

TEST_F(ControlPlaneTest, JobsQueueAndCancelFreesWorkersWithinSeconds) {
  StartCoordinator();
  StartWorkers(4);
  const std::string long_job = Submit(WriteSpec("long.json", SpecJson(100000)));
  ASSERT_FALSE(long_job.empty());
  ASSERT_TRUE(WaitFor([&] { return StateOf(long_job) == JOB_STATE_RUNNING; }, absl::Seconds(60)))
      << Trainctl({"status", long_job}).second;
  // A scrape taken during the run is valid Prometheus exposition with the job's series.
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<HttpResponse> r = HttpGet(metrics_port_, "/metrics");
        return r.ok() && absl::StrContains(r->body, "mtrain_job_loss{job=\"" + long_job + "\"}");
      },
      absl::Seconds(20)));
  absl::StatusOr<HttpResponse> scrape = HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  std::string lint;
  EXPECT_EQ(RunPromtool(scrape->body, &lint), 0) << lint;
  EXPECT_EQ(lint, "");
  EXPECT_THAT(scrape->body, HasSubstr("mtrain_step_duration_seconds_bucket"));
  EXPECT_THAT(scrape->body, HasSubstr("mtrain_workers_alive 4"));

  // The second job needs the same 4 workers: it waits.
  const std::string short_job = Submit(WriteSpec("short.json", SpecJson(3)));
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(StateOf(short_job), JOB_STATE_PENDING);
  EXPECT_THAT(Trainctl({"list"}).second, HasSubstr("PENDING"));

  const absl::Time cancelled_at = absl::Now();
  auto [code, output] = Trainctl({"cancel", long_job});
  ASSERT_EQ(code, 0) << output;
  EXPECT_EQ(StateOf(long_job), JOB_STATE_CANCELLED);
  ASSERT_TRUE(WaitFor([&] { return StateOf(short_job) != JOB_STATE_PENDING; }, absl::Seconds(15)));
  std::printf("the next job left PENDING %.1f s after the cancel\n",
              absl::ToDoubleSeconds(absl::Now() - cancelled_at));
  auto [wait_code, wait_output] = Trainctl({"watch", short_job}, absl::Minutes(2));
  EXPECT_EQ(wait_code, 0) << wait_output;
  EXPECT_EQ(StateOf(short_job), JOB_STATE_SUCCEEDED);
  // The event log tells the story, in order.
  auto [events_code, events] = Trainctl({"events", long_job});
  EXPECT_EQ(events_code, 0) << events;
  EXPECT_THAT(events, HasSubstr("submitted"));
  EXPECT_THAT(events, HasSubstr("PENDING -> PLACING"));
  EXPECT_THAT(events, HasSubstr("RUNNING -> CANCELLED: cancelled by a user"));
  EXPECT_LT(events.find("PLACING -> RUNNING"), events.find("RUNNING -> CANCELLED"));
  // Cancelling a finished job is refused and says why.
  auto [again, again_output] = Trainctl({"cancel", short_job});
  EXPECT_NE(again, 0);
  EXPECT_THAT(again_output, HasSubstr("FAILED_PRECONDITION"));
}

TEST_F(ControlPlaneTest, CoordinatorSurvivesSigkillWithEveryJobAndItsWorkers) {
  StartCoordinator();
  StartWorkers(2);
  const std::string parallel = R"("pipeline": 2, "global_batch_size": 4)";
  const std::string done = Submit(WriteSpec("done.json", SpecJson(2, parallel)));
  ASSERT_TRUE(WaitFor([&] { return StateOf(done) == JOB_STATE_SUCCEEDED; }, absl::Seconds(60)));
  const std::string running = Submit(WriteSpec("running.json", SpecJson(100000, parallel)));
  ASSERT_TRUE(WaitFor([&] { return StateOf(running) == JOB_STATE_RUNNING; }, absl::Seconds(60)));
  const std::string port = address_.substr(address_.rfind(':') + 1);

  coordinator_->Signal(SIGKILL);
  ASSERT_TRUE(coordinator_->Wait(absl::Seconds(10)).ok());
  StartCoordinator("127.0.0.1:" + port);

  // Every job is listed with its state; the interrupted one is queued again.
  auto [code, list] = Trainctl({"list"});
  ASSERT_EQ(code, 0) << list;
  EXPECT_THAT(list, HasSubstr(done));
  EXPECT_THAT(list, HasSubstr(running));
  EXPECT_EQ(StateOf(done), JOB_STATE_SUCCEEDED);
  // The workers notice, register again, stop the orphaned ranks and run the new generation.
  ASSERT_TRUE(WaitFor([&] { return AliveWorkers() == 2; }, absl::Seconds(20)));
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<JobStatus> s = Status(running);
        return s.ok() && s->state() == JOB_STATE_RUNNING && s->generation() == 2;
      },
      absl::Seconds(60)))
      << Trainctl({"status", running}).second;
  EXPECT_EQ(Trainctl({"cancel", running}).first, 0);
}

TEST_F(ControlPlaneTest, InvalidSpecsAreRejectedNamingTheFieldAndServingGoesOn) {
  StartCoordinator();
  StartWorkers(2);
  struct Case {
    std::string json;
    std::string field;
  };
  const std::vector<Case> cases = {
      {R"({"model": {"num_heads": 6}, "parallel": {"tensor": 4}})", "model.num_heads"},
      {R"({"model": {"num_layers": 6}, "parallel": {"pipeline": 4}})", "model.num_layers"},
      {R"({"model": {"num_layers": 8}, "parallel": {"pipeline": 2, "virtual_stages": 2,
          "global_batch_size": 3, "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})",
       "parallel.global_batch_size"},
      {R"({"parallel": {"micro_batch_size": 2, "global_batch_size": 3}})",
       "parallel.global_batch_size"},
      {R"({"model": {"hidden_size": -5}})", "model.hidden_size"},
      {R"({"parallel": {"tensor": 100000}})", "parallel"},
      {R"({"model": {"vocab_size": 100}})", "model.vocab_size"},
      // More workers than exist (2 registered).
      {R"({"parallel": {"data": 4, "global_batch_size": 4}})", "parallel"},
  };
  for (const Case& c : cases) {
    SubmitJobRequest request;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(c.json, request.mutable_spec()).ok())
        << c.json;
    grpc::ClientContext context;
    SubmitJobResponse response;
    grpc::Status status = Stub()->SubmitJob(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.json;
    EXPECT_THAT(status.error_message(), HasSubstr(c.field)) << c.json;
  }
  // trainctl rejects what cannot even be parsed, with the same one-line style.
  auto [bad_json, bad_json_out] = Trainctl({"submit", WriteSpec("bad.json", "{\"model\": {")});
  EXPECT_NE(bad_json, 0);
  EXPECT_THAT(bad_json_out, HasSubstr("INVALID_ARGUMENT"));
  auto [unknown, unknown_out] =
      Trainctl({"submit", WriteSpec("unknown.json", R"({"modle": {"num_layers": 2}})")});
  EXPECT_NE(unknown, 0);
  EXPECT_THAT(unknown_out, HasSubstr("modle"));
  // Still serving, and nothing was stored.
  auto [code, list] = Trainctl({"list", "--json"});
  EXPECT_EQ(code, 0) << list;
  EXPECT_THAT(list, ::testing::Not(HasSubstr("job_id")));
  EXPECT_EQ(AliveWorkers(), 2);
}

TEST_F(ControlPlaneTest, MutatingRpcsNeedTheBearerToken) {
  token_file_ = Path("token");
  std::ofstream(token_file_) << "s3cret-token\n";
  StartCoordinator();
  StartWorkers(1);  // workers carry the token too
  const std::string spec = WriteSpec("job.json", SpecJson(100000, R"("global_batch_size": 2)"));
  auto [refused, refused_out] = Trainctl({"submit", spec});
  EXPECT_NE(refused, 0);
  EXPECT_THAT(refused_out, HasSubstr("UNAUTHENTICATED"));
  auto [wrong, wrong_out] = Trainctl({"submit", "--token=not-it", spec});
  EXPECT_THAT(wrong_out, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(Trainctl({"list", "--json"}).second, ::testing::Not(HasSubstr("job_id")));

  const std::string job = Submit(spec, {"--token_file=" + token_file_});
  ASSERT_FALSE(job.empty());
  auto [cancel_refused, cancel_out] = Trainctl({"cancel", job});
  EXPECT_NE(cancel_refused, 0);
  EXPECT_THAT(cancel_out, HasSubstr("UNAUTHENTICATED"));
  EXPECT_NE(StateOf(job), JOB_STATE_CANCELLED);
  EXPECT_EQ(Trainctl({"cancel", "--token_file=" + token_file_, job}).first, 0);
  EXPECT_EQ(StateOf(job), JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace mtrain
