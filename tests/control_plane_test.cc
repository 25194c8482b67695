// The control plane end to end, all real processes on loopback: a coordinator (SQLite job
// store, Prometheus exporter), worker daemons that run their ranks as `train` processes,
// and trainctl. Checks what issue 5 promises:
//   - a submitted job completes and its per-step losses equal `train` run statically;
//   - two jobs on 4 workers queue; cancel stops the running one within seconds and frees
//     its workers for the next; a scrape taken during a run passes `promtool`;
//   - a coordinator killed with SIGKILL and restarted lists every job, workers
//     re-register and the interrupted job runs again;
//   - invalid specs are rejected with INVALID_ARGUMENT naming the field, and the
//     coordinator keeps serving; unauthenticated submit and cancel change nothing, and
//     with a token reads need it too.
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
#include "tests/cluster_fixture.h"
#include "tests/metrics_jsonl.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// A tiny GPT, tensor 2 x pipeline 2 (4 ranks) unless the caller overrides `parallel`,
// with a validation loss every 3 steps on 5% of the corpus.
std::string SpecJson(int steps, const std::string& parallel =
                                    R"("tensor": 2, "pipeline": 2, "global_batch_size": 8)") {
  return absl::StrCat(
      R"({"name": "cp", "model": {"num_layers": 4, "num_heads": 4, "hidden_size": 32,
          "seq_length": 16}, "parallel": {"micro_batch_size": 2, )",
      parallel, R"(}, "train": {"steps": )", steps,
      R"(, "dropout": 0.1, "seed": 3, "eval_interval": 3, "eval_iters": 1},
          "data": {"split": "95,5,0"}, "device": "DEVICE_CPU"})");
}

// The validation losses `rank` reported, by step.
std::map<int, double> ValidationLosses(const std::vector<MetricsLine>& lines, int rank) {
  std::map<int, double> out;
  for (const MetricsLine& line : lines) {
    if (static_cast<int>(line.at("rank")) == rank && line.count("validation_loss") != 0) {
      out[static_cast<int>(line.at("step"))] = line.at("validation_loss");
    }
  }
  return out;
}

class ControlPlaneTest : public ClusterTest {};

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
  // The validation losses (steps 3 and 6) too, through the coordinator's watch stream.
  const std::map<int, double> job_validation = ValidationLosses(*job_lines, 2);
  EXPECT_EQ(job_validation.size(), 2u) << output;
  EXPECT_EQ(job_validation, ValidationLosses(*static_lines, 2));
  // Prometheus carries the last evaluation.
  absl::StatusOr<HttpResponse> scrape = HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  ASSERT_FALSE(job_validation.empty());
  EXPECT_THAT(scrape->body, HasSubstr(absl::StrCat("mtrain_job_validation_loss{job=\"job-1\"} ")));
  double gauge = 0;
  const size_t at = scrape->body.find("mtrain_job_validation_loss{job=\"job-1\"} ");
  ASSERT_NE(at, std::string::npos);
  const size_t begin = scrape->body.find(' ', at) + 1;
  ASSERT_TRUE(
      absl::SimpleAtod(scrape->body.substr(begin, scrape->body.find('\n', begin) - begin), &gauge));
  EXPECT_NEAR(gauge, job_validation.rbegin()->second, 1e-6 * gauge);
  EXPECT_EQ(StateOf("job-1"), JOB_STATE_SUCCEEDED);
  // Rank 0 told the coordinator which engine trained (the CPU engine: no GPU here).
  EXPECT_THAT(Trainctl({"events", "job-1"}).second,
              HasSubstr("generation 1, rank 0: engine: CPU (device: DEVICE_CPU)"));
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
  // Removing a worker is mutating too; with the token a live worker is still refused.
  auto [remove_refused, remove_out] = Trainctl({"remove-worker", "w0"});
  EXPECT_NE(remove_refused, 0);
  EXPECT_THAT(remove_out, HasSubstr("UNAUTHENTICATED"));
  auto [remove_alive, alive_out] = Trainctl({"remove-worker", "--token_file=" + token_file_, "w0"});
  EXPECT_NE(remove_alive, 0);
  EXPECT_THAT(alive_out, HasSubstr("is alive"));
}

// With a token, reads need it too (job status and events, worker list, checkpoints,
// rendezvous values, downloads), and a real job whose ranks rendezvous, report and upload
// a checkpoint through the coordinator runs with it from submit to success.
TEST_F(ControlPlaneTest, WithATokenReadsNeedItTooAndAJobRunsWithIt) {
  token_file_ = Path("token");
  std::ofstream(token_file_) << "s3cret-token\n";
  StartCoordinator();
  StartWorkers(2);  // Gloo rendezvous of 2 data-parallel ranks through KeyValue RPCs
  const std::string spec =
      WriteSpec("job.json", SpecJson(2, R"("data": 2, "global_batch_size": 4)"));
  auto [code, output] =
      Trainctl({"submit", "--wait", "--token_file=" + token_file_, spec}, absl::Minutes(3));
  ASSERT_EQ(code, 0) << output;
  const std::string job = "job-1";
  ASSERT_EQ(StateOf(job), JOB_STATE_SUCCEEDED) << output;

  for (const std::vector<std::string>& read : std::vector<std::vector<std::string>>{
           {"status", job}, {"list"}, {"events", job}, {"checkpoints", job}, {"workers"}}) {
    auto [refused, refused_out] = Trainctl(read);
    EXPECT_NE(refused, 0) << read[0] << ": " << refused_out;
    EXPECT_THAT(refused_out, HasSubstr("UNAUTHENTICATED")) << read[0];
    std::vector<std::string> with_token = read;
    with_token.insert(with_token.begin() + 1, "--token_file=" + token_file_);
    auto [allowed, allowed_out] = Trainctl(with_token);
    EXPECT_EQ(allowed, 0) << read[0] << ": " << allowed_out;
  }
  EXPECT_THAT(Trainctl({"status", "--token_file=" + token_file_, job}).second,
              HasSubstr("SUCCEEDED"));

  // Raw calls without the token: no rendezvous value, no weights, no watch.
  std::unique_ptr<Coordinator::Stub> stub = Stub();
  {
    grpc::ClientContext context;
    KeyValueGetRequest request;
    request.set_key(job + "/gen-1/world/gloo/0");
    KeyValueGetResponse response;
    EXPECT_EQ(stub->KeyValueGet(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    DownloadCheckpointRequest request;
    request.set_job_id(job);
    request.set_step(2);
    request.set_file("MANIFEST");
    auto reader = stub->DownloadCheckpoint(&context, request);
    CheckpointChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    Authorize(&context);  // with it, the same download works
    DownloadCheckpointRequest request;
    request.set_job_id(job);
    request.set_step(2);
    request.set_file("MANIFEST");
    auto reader = stub->DownloadCheckpoint(&context, request);
    CheckpointChunk chunk;
    EXPECT_TRUE(reader->Read(&chunk));
    while (reader->Read(&chunk)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
  }
  {
    grpc::ClientContext context;
    WatchJobRequest request;
    request.set_job_id(job);
    auto reader = stub->WatchJob(&context, request);
    JobStatus status;
    EXPECT_FALSE(reader->Read(&status));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }

  // A restart with the token: a rank killed after a checkpoint, the next generation's
  // ranks rendezvous under the new prefix and download the checkpoint to resume.
  const std::string resumed =
      Submit(WriteSpec("resumed.json",
                       R"({"name": "resumed", "model": {"num_layers": 2, "num_heads": 4,
                    "hidden_size": 32, "seq_length": 16},
                    "parallel": {"data": 2, "micro_batch_size": 2, "global_batch_size": 4},
                    "train": {"steps": 100000, "checkpoint_every": 2, "seed": 3},
                    "device": "DEVICE_CPU"})"),
             {"--token_file=" + token_file_});
  ASSERT_FALSE(resumed.empty());
  auto events = [&] { return Trainctl({"events", "--token_file=" + token_file_, resumed}).second; };
  ASSERT_TRUE(
      WaitFor([&] { return absl::StrContains(events(), "checkpoint of step"); }, absl::Seconds(60)))
      << events();
  const int rank_pid = RankProcessOf(Worker("w0")->pid());
  ASSERT_GT(rank_pid, 0);
  ASSERT_EQ(::kill(rank_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<JobStatus> s = Status(resumed);
        return s.ok() && s->generation() == 2 && s->state() == JOB_STATE_RUNNING;
      },
      absl::Seconds(60)))
      << events();
  EXPECT_THAT(events(), HasSubstr("generation 2 resumes from checkpoint step"));
  EXPECT_EQ(Trainctl({"cancel", "--token_file=" + token_file_, resumed}).first, 0);
}

}  // namespace
}  // namespace mtrain
