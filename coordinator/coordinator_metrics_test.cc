#include "coordinator/coordinator_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The value of the sample whose name-and-labels part is exactly `series` (labels in the
// order prometheus-cpp writes them: sorted by name), or nullopt if absent.
std::optional<double> SampleValue(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
    double value;
    if (absl::SimpleAtod(line, &value)) return value;
  }
  return std::nullopt;
}

// The step histogram of one pipeline stage of job-1.
std::string StepSeries(int pp, const std::string& suffix) {
  return absl::StrCat("mtrain_step_duration_seconds", suffix, "{job=\"job-1\",pp_stage=\"", pp,
                      "\"}");
}

std::string StageSeries(const std::string& name, int pp, const std::string& extra = "") {
  return absl::StrCat(name, "{job=\"job-1\",pp_stage=\"", pp, "\"", extra, "}");
}

RankCoordinates Coordinates(int rank, int tp, int pp, int dp) {
  RankCoordinates coordinates;
  coordinates.set_global_rank(rank);
  coordinates.set_world_size(8);
  coordinates.set_tp_rank(tp);
  coordinates.set_pp_rank(pp);
  coordinates.set_dp_rank(dp);
  return coordinates;
}

StepMetrics Step(int64_t step, double seconds, std::optional<double> loss = std::nullopt,
                 double pipeline_wait = 0) {
  StepMetrics metrics;
  metrics.set_job_id("job-1");
  metrics.set_generation(1);
  metrics.set_step(step);
  metrics.set_step_seconds(seconds);
  if (loss) metrics.set_loss(*loss);
  metrics.set_tokens_per_second(12345);
  metrics.set_model_tflops(87.5);
  metrics.set_mfu(0.25);
  metrics.set_loss_scale(65536);
  metrics.set_skipped_steps(2);
  metrics.set_pipeline_wait_seconds(pipeline_wait);
  return metrics;
}

std::unique_ptr<CoordinatorMetrics> StartOnLoopback() {
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics =
      CoordinatorMetrics::Start("127.0.0.1:0");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  if (!metrics.ok()) return nullptr;
  EXPECT_GT((*metrics)->port(), 0);
  return std::move(metrics).value();
}

// Feeds one job through a realistic life: two ranks of the last pipeline stage carry the
// loss, two of the first do not (and wait longer on their peers); workers, a missed
// heartbeat, RPC errors and a failed generation.
void FeedJob(CoordinatorMetrics& metrics) {
  metrics.SetJobState("job-1", JOB_STATE_PENDING);
  metrics.SetJobState("job-1", JOB_STATE_RUNNING);
  metrics.SetWorkers(4, 3);
  metrics.AddMissedHeartbeat();
  metrics.AddRpcError("SubmitJob", "INVALID_ARGUMENT");
  metrics.AddRpcError("SubmitJob", "INVALID_ARGUMENT");
  metrics.AddRpcError("Heartbeat", "NOT_FOUND");
  // t=2, p=2, d=1: ranks 0,1 on stage 0; ranks 2,3 on stage 1 (the loss).
  for (int64_t step = 1; step <= 3; ++step) {
    metrics.ObserveStep("job-1", Step(step, 0.3, std::nullopt, 0.15), Coordinates(0, 0, 0, 0));
    metrics.ObserveStep("job-1", Step(step, 0.3, std::nullopt, 0.15), Coordinates(1, 1, 0, 0));
    metrics.ObserveStep("job-1", Step(step, 0.3, 2.0 + 0.25 * step, 0.06), Coordinates(2, 0, 1, 0));
    metrics.ObserveStep("job-1", Step(step, 0.3, 2.0 + 0.25 * step, 0.06), Coordinates(3, 1, 1, 0));
  }
  // Rank 3 reports a fourth step with a different duration, and an evaluation.
  StepMetrics evaluated = Step(4, 7.0, 2.5, 0.7);
  evaluated.set_validation_loss(2.75);
  metrics.ObserveStep("job-1", evaluated, Coordinates(3, 1, 1, 0));
  metrics.AddGenerationFailure("job-1");
  metrics.SetJobRestarts("job-1", 1);
  metrics.AddStoreWriteFailure("transition");
}

TEST(CoordinatorMetricsTest, ServesJobMetricsOverHttpOnAPickedPort) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  FeedJob(*metrics);

  absl::StatusOr<HttpResponse> response = HttpGet(metrics->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  const std::string& text = response->body;
  // /metrics is Scrape() behind the Exposer's own exposer_* series (nothing changed since,
  // and the text format carries no timestamps).
  EXPECT_TRUE(absl::EndsWith(text, metrics->Scrape())) << text;
  EXPECT_THAT(text, HasSubstr("exposer_scrapes_total"));

  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_job_state gauge"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_job_skipped_steps_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_job_restarts_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_step_duration_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_heartbeats_missed_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_rpc_errors_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_job_generation_failures_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_rank_last_step_seconds gauge"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_pipeline_bubble_ratio gauge"));

  EXPECT_THAT(text, HasSubstr("mtrain_job_loss{job=\"job-1\"} 2.5\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE mtrain_job_validation_loss gauge"));
  EXPECT_EQ(SampleValue(text, "mtrain_job_validation_loss{job=\"job-1\"}"), 2.75);
  EXPECT_EQ(SampleValue(text, "mtrain_job_step{job=\"job-1\"}"), 4);
  EXPECT_EQ(SampleValue(text, "mtrain_job_tokens_per_second{job=\"job-1\"}"), 12345);
  EXPECT_EQ(SampleValue(text, "mtrain_job_model_tflops{job=\"job-1\"}"), 87.5);
  EXPECT_EQ(SampleValue(text, "mtrain_job_mfu_ratio{job=\"job-1\"}"), 0.25);
  EXPECT_EQ(SampleValue(text, "mtrain_job_loss_scale{job=\"job-1\"}"), 65536);
  EXPECT_EQ(SampleValue(text, "mtrain_job_skipped_steps_total{job=\"job-1\"}"), 2);
  EXPECT_EQ(SampleValue(text, "mtrain_job_restarts_total{job=\"job-1\"}"), 1);
  EXPECT_EQ(SampleValue(text, "mtrain_job_generation_failures_total{job=\"job-1\"}"), 1);

  EXPECT_EQ(SampleValue(text, "mtrain_workers_registered"), 4);
  EXPECT_EQ(SampleValue(text, "mtrain_workers_alive"), 3);
  EXPECT_EQ(SampleValue(text, "mtrain_heartbeats_missed_total"), 1);
  EXPECT_EQ(
      SampleValue(text, "mtrain_rpc_errors_total{code=\"INVALID_ARGUMENT\",method=\"SubmitJob\"}"),
      2);
  EXPECT_EQ(SampleValue(text, "mtrain_rpc_errors_total{code=\"NOT_FOUND\",method=\"Heartbeat\"}"),
            1);

  // One histogram per pipeline stage: every rank of the stage observes into it.
  EXPECT_EQ(SampleValue(text, StepSeries(0, "_count")), 6);
  EXPECT_EQ(SampleValue(text, StepSeries(1, "_count")), 7);
  EXPECT_NEAR(*SampleValue(text, StepSeries(1, "_sum")), 6 * 0.3 + 7.0, 1e-9);
  EXPECT_EQ(SampleValue(text, StepSeries(1, "_bucket")), std::nullopt);
  // Buckets are cumulative: the 7 s step is above 5 s and within 10 s.
  EXPECT_EQ(SampleValue(text,
                        "mtrain_step_duration_seconds_bucket{job=\"job-1\",pp_stage=\"1\","
                        "le=\"5\"}"),
            6);
  EXPECT_EQ(SampleValue(text,
                        "mtrain_step_duration_seconds_bucket{job=\"job-1\",pp_stage=\"1\","
                        "le=\"10\"}"),
            7);
  EXPECT_EQ(SampleValue(text,
                        "mtrain_step_duration_seconds_bucket{job=\"job-1\",pp_stage=\"1\","
                        "le=\"+Inf\"}"),
            7);
  // Each stage's last steps: stage 1's ranks last took 0.3 and 7 s (lower median 0.3).
  EXPECT_EQ(SampleValue(text, StageSeries("mtrain_stage_last_step_seconds", 1, ",stat=\"max\"")),
            7.0);
  EXPECT_EQ(SampleValue(text, StageSeries("mtrain_stage_last_step_seconds", 1, ",stat=\"median\"")),
            0.3);
  EXPECT_NEAR(*SampleValue(text, StageSeries("mtrain_stage_pipeline_bubble_ratio", 0)), 0.5, 1e-12);
  EXPECT_NEAR(*SampleValue(text, StageSeries("mtrain_stage_pipeline_bubble_ratio", 1)),
              (0.2 + 0.1) / 2, 1e-12);
  EXPECT_EQ(SampleValue(text, "mtrain_job_ranks_reporting{job=\"job-1\"}"), 4);
}

std::string RankSeries(const std::string& name, int rank, int tp, int pp, int dp) {
  return absl::StrCat(name, "{dp_rank=\"", dp, "\",job=\"job-1\",pp_stage=\"", pp, "\",rank=\"",
                      rank, "\",tp_rank=\"", tp, "\"}");
}

TEST(CoordinatorMetricsTest, RankGaugesShowTheLastStepAndItsPipelineBubble) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  FeedJob(*metrics);
  const std::string text = metrics->Scrape();
  const std::string last = "mtrain_rank_last_step_seconds";
  const std::string bubble = "mtrain_pipeline_bubble_ratio";
  EXPECT_EQ(SampleValue(text, RankSeries(last, 0, 0, 0, 0)), 0.3);
  EXPECT_EQ(SampleValue(text, RankSeries(last, 3, 1, 1, 0)), 7.0);
  EXPECT_NEAR(*SampleValue(text, RankSeries(bubble, 0, 0, 0, 0)), 0.5, 1e-12);
  EXPECT_NEAR(*SampleValue(text, RankSeries(bubble, 2, 0, 1, 0)), 0.2, 1e-12);
  EXPECT_NEAR(*SampleValue(text, RankSeries(bubble, 3, 1, 1, 0)), 0.1, 1e-12);

  // Clock noise cannot push the share outside 0..1; a zero-length step has no bubble.
  metrics->ObserveStep("job-1", Step(5, 0.2, std::nullopt, 0.25), Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), RankSeries(bubble, 0, 0, 0, 0)), 1.0);
  metrics->ObserveStep("job-1", Step(6, 0.0, std::nullopt, 0.25), Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), RankSeries(bubble, 0, 0, 0, 0)), 0.0);
  // A broken duration leaves the last good one.
  metrics->ObserveStep("job-1", Step(7, std::nan(""), std::nullopt, 0.1), Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), RankSeries(last, 0, 0, 0, 0)), 0.0);
}

TEST(CoordinatorMetricsTest, RankGaugesFollowTheNewestGeneration) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  const std::string last = "mtrain_rank_last_step_seconds";
  // Generation 1 with d=2: ranks 0 and 1.
  metrics->ObserveStep("job-1", Step(1, 0.5, 3.0), Coordinates(0, 0, 0, 0));
  metrics->ObserveStep("job-1", Step(1, 0.9, 3.0), Coordinates(1, 0, 0, 1));
  EXPECT_EQ(SampleValue(metrics->Scrape(), RankSeries(last, 1, 0, 0, 1)), 0.9);

  // Generation 2 shrunk to d=1: rank 1 no longer exists and must not look like a
  // straggler; its histogram keeps its history.
  StepMetrics shrunk = Step(1, 0.4, 3.0);
  shrunk.set_generation(2);
  metrics->ObserveStep("job-1", shrunk, Coordinates(0, 0, 0, 0));
  std::string text = metrics->Scrape();
  EXPECT_EQ(SampleValue(text, RankSeries(last, 0, 0, 0, 0)), 0.4);
  EXPECT_EQ(SampleValue(text, RankSeries(last, 1, 0, 0, 1)), std::nullopt);
  EXPECT_EQ(SampleValue(text, RankSeries("mtrain_pipeline_bubble_ratio", 1, 0, 0, 1)),
            std::nullopt);
  EXPECT_EQ(SampleValue(text, StepSeries(0, "_count")), 3);

  // A late report of the old generation does not bring the rank back.
  metrics->ObserveStep("job-1", Step(2, 0.9, 3.0), Coordinates(1, 0, 0, 1));
  text = metrics->Scrape();
  EXPECT_EQ(SampleValue(text, RankSeries(last, 1, 0, 0, 1)), std::nullopt);
  EXPECT_EQ(SampleValue(text, StepSeries(0, "_count")), 4);
  // Another job's ranks are untouched by this job's generations.
  metrics->ObserveStep("job-2", Step(1, 0.25), Coordinates(0, 0, 0, 0));
  StepMetrics third = Step(2, 0.3, 3.0);
  third.set_generation(3);
  metrics->ObserveStep("job-1", third, Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(),
                        "mtrain_rank_last_step_seconds{dp_rank=\"0\",job=\"job-2\","
                        "pp_stage=\"0\",rank=\"0\",tp_rank=\"0\"}"),
            0.25);
}

// Bytes sent accumulate per stage and link (none before a link is used); the activation
// peak is the last step's, and both go with the job.
TEST(CoordinatorMetricsTest, RankBytesSentAddUpByLinkAndActivationPeaksShow) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  for (int64_t step = 1; step <= 3; ++step) {
    StepMetrics m = Step(step, 0.3, 2.0);
    m.set_tensor_bytes_sent(1000);
    m.set_pipeline_bytes_sent(250);
    m.set_activation_memory_peak_bytes(4096 * step);
    metrics->ObserveStep("job-1", m, Coordinates(2, 0, 1, 0));
  }
  const std::string text = metrics->Scrape();
  const auto sent = [](const char* link) {
    return absl::StrCat("mtrain_stage_sent_bytes_total{job=\"job-1\",link=\"", link,
                        "\",pp_stage=\"1\"}");
  };
  EXPECT_EQ(SampleValue(text, sent("tensor")), 3000);
  EXPECT_EQ(SampleValue(text, sent("pipeline")), 750);
  EXPECT_EQ(text.find(sent("data")), std::string::npos) << "no data link used";
  EXPECT_EQ(SampleValue(text, StageSeries("mtrain_stage_activation_memory_peak_bytes", 1)),
            3 * 4096);
  metrics->ForgetJob("job-1");
  EXPECT_EQ(metrics->Scrape().find("job=\"job-1\""), std::string::npos);
}

TEST(CoordinatorMetricsTest, AJobOfFourThousandRanksStaysSmallAndShowsItsStragglers) {
  // (t, p, d) = (2, 4, 512): 4096 ranks reporting every step. The exposition keeps the
  // per-stage aggregates and the kStragglerRanks slowest ranks, under 1 MB and lint-clean;
  // RankDetails keeps every rank.
  ASSERT_EQ(access(kPromtool, X_OK), 0)
      << kPromtool << " not found: run `make deps` (installs Debian's prometheus package)";
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  constexpr int kTensor = 2, kPipeline = 4, kData = 512, kWorld = kTensor * kPipeline * kData;
  const auto coordinates = [&](int rank) {
    RankCoordinates c;
    c.set_global_rank(rank);
    c.set_world_size(kWorld);
    c.set_tp_rank(rank % kTensor);
    c.set_dp_rank(rank / kTensor % kData);
    c.set_pp_rank(rank / (kTensor * kData));
    return c;
  };
  // Rank r takes 1 + r / 10000 s: the slowest are the last 16 ranks, all on stage 3.
  for (int64_t step = 1; step <= 2; ++step) {
    for (int rank = 0; rank < kWorld; ++rank) {
      StepMetrics m = Step(step, 1.0 + rank / 10000.0, std::nullopt, 0.1);
      m.set_data_bytes_sent(100);
      metrics->ObserveStep("job-1", m, coordinates(rank));
    }
  }
  std::string text = metrics->Scrape();
  std::printf("exposition of a %d-rank job: %zu bytes\n", kWorld, text.size());
  EXPECT_LT(text.size(), size_t{1} << 20);
  const auto count = [](const std::string& text, const std::string& prefix) {
    int n = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      n += absl::StartsWith(line, prefix) ? 1 : 0;
    }
    return n;
  };
  EXPECT_EQ(count(text, "mtrain_rank_last_step_seconds{"), kStragglerRanks);
  EXPECT_EQ(count(text, "mtrain_pipeline_bubble_ratio{"), kStragglerRanks);
  const auto straggler = [&](int rank) {
    const RankCoordinates c = coordinates(rank);
    return RankSeries("mtrain_rank_last_step_seconds", rank, c.tp_rank(), c.pp_rank(), c.dp_rank());
  };
  EXPECT_NEAR(*SampleValue(text, straggler(kWorld - 1)), 1.0 + (kWorld - 1) / 10000.0, 1e-12);
  EXPECT_NEAR(*SampleValue(text, straggler(kWorld - kStragglerRanks)),
              1.0 + (kWorld - kStragglerRanks) / 10000.0, 1e-12);
  EXPECT_EQ(SampleValue(text, straggler(kWorld - kStragglerRanks - 1)), std::nullopt);
  EXPECT_EQ(SampleValue(text, "mtrain_job_ranks_reporting{job=\"job-1\"}"), kWorld);
  EXPECT_EQ(SampleValue(text, StepSeries(2, "_count")), 2 * kTensor * kData);
  EXPECT_EQ(SampleValue(text,
                        "mtrain_stage_sent_bytes_total{job=\"job-1\",link=\"data\","
                        "pp_stage=\"0\"}"),
            2 * 100 * kTensor * kData);
  // Stage 0 holds ranks 0..1023: max 1.1023 s, lower median rank 511's 1.0511 s.
  EXPECT_NEAR(*SampleValue(text, StageSeries("mtrain_stage_last_step_seconds", 0, ",stat=\"max\"")),
              1.1023, 1e-12);
  EXPECT_NEAR(
      *SampleValue(text, StageSeries("mtrain_stage_last_step_seconds", 0, ",stat=\"median\"")),
      1.0511, 1e-12);
  std::string output;
  EXPECT_EQ(RunPromtool(text, &output), 0) << output;
  EXPECT_EQ(output, "");

  // Rank 7 turns slow: it becomes the slowest straggler and the sixteenth drops out.
  metrics->ObserveStep("job-1", Step(3, 9.0, std::nullopt, 0.1), coordinates(7));
  text = metrics->Scrape();
  EXPECT_EQ(count(text, "mtrain_rank_last_step_seconds{"), kStragglerRanks);
  EXPECT_EQ(SampleValue(text, straggler(7)), 9.0);
  EXPECT_EQ(SampleValue(text, straggler(kWorld - kStragglerRanks)), std::nullopt);

  const std::vector<RankReport> details = metrics->RankDetails("job-1");
  ASSERT_EQ(details.size(), static_cast<size_t>(kWorld));
  EXPECT_EQ(details[7].step, 3);
  EXPECT_EQ(details[7].last_step_seconds, 9.0);
  EXPECT_EQ(details[4095].coordinates.pp_rank(), 3);
  EXPECT_TRUE(metrics->RankDetails("job-2").empty());
}

TEST(CoordinatorMetricsTest, ForgetJobRemovesEverySeriesOfTheJobOnly) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  for (const char* job : {"job-1", "job-2"}) {
    metrics->SetJobState(job, JOB_STATE_RUNNING);
    metrics->ObserveStep(job, Step(1, 0.5, 3.0), Coordinates(0, 0, 0, 0));
    metrics->SetCheckpointStep(job, 1);
    metrics->SetJobRestarts(job, 1);
  }
  metrics->ForgetJob("job-1");
  metrics->ForgetJob("job-9");  // Never seen: nothing to do.
  const std::string text = metrics->Scrape();
  EXPECT_EQ(text.find("job=\"job-1\""), std::string::npos) << text;
  EXPECT_NE(text.find("mtrain_job_step{job=\"job-2\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("mtrain_step_duration_seconds_count{job=\"job-2\",pp_stage=\"0\"}"),
            std::string::npos)
      << text;
  // The job may come back (a new series from zero), as after a restart of the coordinator.
  metrics->SetJobState("job-1", JOB_STATE_PENDING);
  EXPECT_EQ(SampleValue(metrics->Scrape(), "mtrain_job_restarts_total{job=\"job-1\"}"), 0);
}

TEST(CoordinatorMetricsTest, GenerationFailuresCountFromZero) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  const std::string failures = "mtrain_job_generation_failures_total{job=\"job-1\"}";
  metrics->SetJobState("job-1", JOB_STATE_PENDING);
  EXPECT_EQ(SampleValue(metrics->Scrape(), failures), 0);
  metrics->AddGenerationFailure("job-1");
  metrics->AddGenerationFailure("job-1");
  EXPECT_EQ(SampleValue(metrics->Scrape(), failures), 2);
}

TEST(CoordinatorMetricsTest, StoreWriteFailuresCountFromZeroByOperation) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  const auto series = [](const std::string& operation) {
    return absl::StrCat("mtrain_coordinator_store_write_failures_total{operation=\"", operation,
                        "\"}");
  };
  for (const char* operation : kStoreWriteOperations) {
    EXPECT_EQ(SampleValue(metrics->Scrape(), series(operation)), 0) << operation;
  }
  metrics->AddStoreWriteFailure("transition");
  metrics->AddStoreWriteFailure("transition");
  metrics->AddStoreWriteFailure("event");
  EXPECT_EQ(SampleValue(metrics->Scrape(), series("transition")), 2);
  EXPECT_EQ(SampleValue(metrics->Scrape(), series("event")), 1);
  EXPECT_EQ(SampleValue(metrics->Scrape(), series("placement")), 0);
}

TEST(CoordinatorMetricsTest, JobStateIsOneHotOverEveryState) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  const std::vector<std::string> states = {"pending",   "placing", "running",
                                           "succeeded", "failed",  "cancelled"};
  auto state_values = [&](const std::string& text) {
    std::vector<double> values;
    for (const std::string& state : states) {
      values.push_back(
          SampleValue(text, absl::StrCat("mtrain_job_state{job=\"job-1\",state=\"", state, "\"}"))
              .value_or(-1));
    }
    return values;
  };

  metrics->SetJobState("job-1", JOB_STATE_PLACING);
  EXPECT_THAT(state_values(metrics->Scrape()), testing::ElementsAre(0, 1, 0, 0, 0, 0));
  metrics->SetJobState("job-1", JOB_STATE_RUNNING);
  EXPECT_THAT(state_values(metrics->Scrape()), testing::ElementsAre(0, 0, 1, 0, 0, 0));
  metrics->SetJobState("job-1", JOB_STATE_FAILED);
  absl::StatusOr<HttpResponse> response = HttpGet(metrics->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(state_values(response->body), testing::ElementsAre(0, 0, 0, 0, 1, 0));
  EXPECT_THAT(response->body, Not(HasSubstr("unspecified")));
}

TEST(CoordinatorMetricsTest, CumulativeCountersNeverDecrease) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  const std::string restarts = "mtrain_job_restarts_total{job=\"job-1\"}";
  const std::string skipped = "mtrain_job_skipped_steps_total{job=\"job-1\"}";

  // Present at 0 as soon as the job is known, so rate() sees the first increment.
  metrics->SetJobState("job-1", JOB_STATE_PENDING);
  EXPECT_EQ(SampleValue(metrics->Scrape(), restarts), 0);
  EXPECT_EQ(SampleValue(metrics->Scrape(), skipped), 0);

  metrics->SetJobRestarts("job-1", 2);
  EXPECT_EQ(SampleValue(metrics->Scrape(), restarts), 2);
  metrics->SetJobRestarts("job-1", 1);
  EXPECT_EQ(SampleValue(metrics->Scrape(), restarts), 2);
  metrics->SetJobRestarts("job-1", 3);
  EXPECT_EQ(SampleValue(metrics->Scrape(), restarts), 3);

  StepMetrics step = Step(10, 0.1, 3.0);
  step.set_skipped_steps(5);
  metrics->ObserveStep("job-1", step, Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), skipped), 5);
  // After a restart from an older checkpoint the scaler's own count is lower.
  step.set_generation(2);
  step.set_step(8);
  step.set_skipped_steps(4);
  metrics->ObserveStep("job-1", step, Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), skipped), 5);
  step.set_step(9);
  step.set_skipped_steps(7);
  metrics->ObserveStep("job-1", step, Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), skipped), 7);
}

TEST(CoordinatorMetricsTest, JobGaugesFollowTheNewestStepCarryingTheLoss) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  const std::string loss = "mtrain_job_loss{job=\"job-1\"}";
  const std::string step = "mtrain_job_step{job=\"job-1\"}";

  // A rank without the loss adds to its histogram but makes up no job loss.
  metrics->ObserveStep("job-1", Step(1, 0.2), Coordinates(0, 0, 0, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), loss), std::nullopt);
  EXPECT_EQ(SampleValue(metrics->Scrape(), StepSeries(0, "_count")), 1);

  metrics->ObserveStep("job-1", Step(5, 0.2, 4.0), Coordinates(1, 0, 1, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), loss), 4.0);
  EXPECT_EQ(SampleValue(metrics->Scrape(), step), 5);
  // Another loss rank's stream lags behind: the gauges keep the newest step.
  metrics->ObserveStep("job-1", Step(4, 0.2, 4.5), Coordinates(2, 0, 1, 1));
  EXPECT_EQ(SampleValue(metrics->Scrape(), loss), 4.0);
  EXPECT_EQ(SampleValue(metrics->Scrape(), step), 5);
  // A restart resumes from an older step in a newer generation.
  StepMetrics resumed = Step(3, 0.2, 4.75);
  resumed.set_generation(2);
  metrics->ObserveStep("job-1", resumed, Coordinates(1, 0, 1, 0));
  EXPECT_EQ(SampleValue(metrics->Scrape(), loss), 4.75);
  EXPECT_EQ(SampleValue(metrics->Scrape(), step), 3);
}

TEST(CoordinatorMetricsTest, ScrapePassesPromtoolCheckMetrics) {
  ASSERT_EQ(access(kPromtool, X_OK), 0)
      << kPromtool << " not found: run `make deps` (installs Debian's prometheus package)";
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  FeedJob(*metrics);
  absl::StatusOr<HttpResponse> response = HttpGet(metrics->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->status, 200);

  std::string output;
  EXPECT_EQ(RunPromtool(response->body, &output), 0) << output;
  EXPECT_EQ(output, "") << "promtool lint complaints on:\n" << response->body;

  // The check can fail: a counter without _total is a lint complaint.
  std::string bad_output;
  EXPECT_NE(RunPromtool("# HELP bad_events Events.\n# TYPE bad_events counter\nbad_events 1\n",
                        &bad_output),
            0);
  EXPECT_THAT(bad_output, HasSubstr("_total"));
}

TEST(CoordinatorMetricsTest, PortInUseIsUnavailable) {
  std::unique_ptr<CoordinatorMetrics> first = StartOnLoopback();
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> second =
      CoordinatorMetrics::Start(absl::StrCat("127.0.0.1:", first->port()));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat(first->port())));
  // The first keeps serving.
  absl::StatusOr<HttpResponse> response = HttpGet(first->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
}

TEST(CoordinatorMetricsTest, UnbindableAddressIsUnavailable) {
  for (const std::string address : {"not-an-address", "127.0.0.1:99999"}) {
    EXPECT_EQ(CoordinatorMetrics::Start(address).status().code(), absl::StatusCode::kUnavailable)
        << address;
  }
}

TEST(CoordinatorMetricsTest, EmptyAddressServesNothingButKeepsMetrics) {
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics = CoordinatorMetrics::Start("");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ((*metrics)->port(), 0);
  FeedJob(**metrics);
  const std::string text = (*metrics)->Scrape();
  EXPECT_THAT(text, HasSubstr("mtrain_job_loss{job=\"job-1\"} 2.5\n"));
  EXPECT_EQ(SampleValue(text, "mtrain_heartbeats_missed_total"), 1);
}

TEST(CoordinatorMetricsTest, StopsServingWhenDestroyed) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  const int port = metrics->port();
  metrics.reset();
  EXPECT_FALSE(HttpGet(port, "/metrics").ok());
}

TEST(CoordinatorMetricsTest, ConcurrentUpdatesAndScrapesAddUp) {
  std::unique_ptr<CoordinatorMetrics> metrics = StartOnLoopback();
  ASSERT_NE(metrics, nullptr);
  constexpr int kRanks = 4;
  constexpr int kSteps = 200;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&metrics, rank] {
      for (int step = 1; step <= kSteps; ++step) {
        metrics->ObserveStep("job-1", Step(step, 0.01, 1.0), Coordinates(rank, rank, 0, 0));
        metrics->SetJobRestarts("job-1", step);
        metrics->SetJobState("job-1", step % 2 ? JOB_STATE_RUNNING : JOB_STATE_PLACING);
        metrics->AddRpcError("ReportMetrics", "ABORTED");
      }
    });
  }
  threads.emplace_back([&metrics] {
    for (int i = 0; i < 20; ++i) {
      absl::StatusOr<HttpResponse> response = HttpGet(metrics->port(), "/metrics");
      EXPECT_TRUE(response.ok()) << response.status();
    }
  });
  for (std::thread& thread : threads) thread.join();

  const std::string text = metrics->Scrape();
  // Every rank is on stage 0: one histogram counts them all.
  EXPECT_EQ(SampleValue(text, StepSeries(0, "_count")), kRanks * kSteps);
  for (const RankReport& rank : metrics->RankDetails("job-1")) EXPECT_EQ(rank.step, kSteps);
  EXPECT_EQ(metrics->RankDetails("job-1").size(), static_cast<size_t>(kRanks));
  EXPECT_EQ(SampleValue(text, "mtrain_job_restarts_total{job=\"job-1\"}"), kSteps);
  EXPECT_EQ(SampleValue(text, "mtrain_job_step{job=\"job-1\"}"), kSteps);
  EXPECT_EQ(SampleValue(text, "mtrain_rpc_errors_total{code=\"ABORTED\",method=\"ReportMetrics\"}"),
            kRanks * kSteps);
  EXPECT_EQ(SampleValue(text, "mtrain_job_state{job=\"job-1\",state=\"placing\"}").value() +
                SampleValue(text, "mtrain_job_state{job=\"job-1\",state=\"running\"}").value(),
            1);
}

}  // namespace
}  // namespace mtrain
