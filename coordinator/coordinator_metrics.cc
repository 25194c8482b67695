#include "coordinator/coordinator_metrics.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace mtrain {
namespace {

// Step durations range from milliseconds (a tiny CPU model) to minutes (a large model with
// many microbatches on a slow interconnect). A 1-2.5-5 series from 1 ms to 1000 s covers
// that with 19 buckets, small enough to keep one histogram per rank, and its boundaries
// read naturally on a dashboard ("le=0.25").
prometheus::Histogram::BucketBoundaries StepDurationBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double decade = 1e-3; decade < 1e3; decade *= 10) {
    buckets.push_back(decade);
    buckets.push_back(decade * 2.5);
    buckets.push_back(decade * 5);
  }
  buckets.push_back(1e3);
  return buckets;
}

// The `state` label: the enum's name without its prefix, lower case ("running"). Taken
// from the proto descriptor so a state added to the proto appears here without an edit.
std::vector<std::pair<JobState, std::string>> StateLabels() {
  std::vector<std::pair<JobState, std::string>> labels;
  const google::protobuf::EnumDescriptor* descriptor = JobState_descriptor();
  for (int i = 0; i < descriptor->value_count(); ++i) {
    const auto state = static_cast<JobState>(descriptor->value(i)->number());
    if (state == JOB_STATE_UNSPECIFIED) continue;
    labels.emplace_back(state, absl::AsciiStrToLower(
                                   absl::StripPrefix(descriptor->value(i)->name(), "JOB_STATE_")));
  }
  return labels;
}

// Moves a counter up to `total` (a cumulative count reported by someone else). Counters
// must never decrease, so a lower total (e.g. a loss scaler restored from an older
// checkpoint) leaves it where it is.
void AdvanceCounterTo(prometheus::Counter& counter, double total) {
  const double delta = total - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

// What the Exposer scrapes: the registry, after the aggregates were refreshed.
class RefreshingCollectable : public prometheus::Collectable {
 public:
  explicit RefreshingCollectable(std::function<std::vector<prometheus::MetricFamily>()> collect)
      : collect_(std::move(collect)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

 private:
  const std::function<std::vector<prometheus::MetricFamily>()> collect_;
};

}  // namespace

struct CoordinatorMetrics::Impl {
  // One job's series, created when the job is first mentioned. Pointers into the
  // registry's families, valid until ForgetJob removes them with the job.
  struct JobSeries {
    std::vector<std::pair<JobState, prometheus::Gauge*>> states;
    prometheus::Counter* skipped_steps = nullptr;
    prometheus::Counter* restarts = nullptr;
    prometheus::Counter* generation_failures = nullptr;
    // Created by the first step carrying a loss, so a job that has not trained yet shows
    // no made-up zero loss.
    prometheus::Gauge* step = nullptr;
    prometheus::Gauge* loss = nullptr;
    prometheus::Gauge* tokens_per_second = nullptr;
    prometheus::Gauge* model_tflops = nullptr;
    prometheus::Gauge* mfu = nullptr;
    prometheus::Gauge* loss_scale = nullptr;
    prometheus::Gauge* validation_loss = nullptr;  // created by the first evaluation
    // BERT's validation accuracies (masked_lm, sentence_order), created by its first
    // evaluation.
    prometheus::Gauge* validation_mlm_accuracy = nullptr;
    prometheus::Gauge* validation_sop_accuracy = nullptr;
    // BERT's multiple-choice head (multiple_choice), created by its first evaluation.
    prometheus::Gauge* validation_choice_accuracy = nullptr;
    // train.eval_tasks' results by (task, data, metric), created as they come.
    std::map<std::tuple<std::string, std::string, std::string>, prometheus::Gauge*> evals;
    // train.generate's speed by prompt (its index in the spec), created as they come.
    std::map<std::string, prometheus::Gauge*> generation_speeds;
    prometheus::Gauge* checkpoint_step = nullptr;      // created by the first checkpoint
    prometheus::Counter* checkpoints_saved = nullptr;  // present from the start at 0
    // The newest (generation, step) shown in the gauges. Several ranks carry the loss and
    // their streams interleave, so an older report must not move the gauges back; a
    // restart from a checkpoint goes back in step but forward in generation.
    std::pair<int64_t, int64_t> newest{-1, -1};
    // The newest generation any rank reported: the per-rank gauges belong to it.
    int64_t gauge_generation = -1;
  };

  // What the newest generation's ranks of one job last reported, by global rank: the
  // source of the per-stage aggregates and of the stragglers' series, which Refresh()
  // computes at scrape time (O(ranks) once per scrape, not per step), and of the per-rank
  // detail the status page and /api show (RankDetails).
  struct RankTable {
    int64_t generation = -1;
    std::vector<RankReport> ranks;  // by global rank; step < 0: not reported yet
  };

  // The series of one pipeline stage of one job. The histogram and the counters are
  // cumulative and stay with the job; the gauges describe the newest generation and go
  // when a newer one reports (its layout may have other stages).
  struct StageSeries {
    prometheus::Histogram* step_duration = nullptr;
    std::array<prometheus::Counter*, 3> sent{};  // tensor, pipeline, data
    prometheus::Gauge* median_step = nullptr;
    prometheus::Gauge* max_step = nullptr;
    prometheus::Gauge* bubble = nullptr;
    prometheus::Gauge* activation_peak = nullptr;
  };

  // One straggler's two gauges (mtrain_rank_last_step_seconds, mtrain_pipeline_bubble_ratio).
  struct StragglerSeries {
    prometheus::Gauge* last_step_seconds = nullptr;
    prometheus::Gauge* bubble = nullptr;
  };

  Impl()
      : registry(std::make_shared<prometheus::Registry>()),
        state_labels(StateLabels()),
        step_buckets(StepDurationBuckets()),
        job_state(prometheus::BuildGauge()
                      .Name("mtrain_job_state")
                      .Help("1 for the job's current state, 0 for the others.")
                      .Register(*registry)),
        job_step(prometheus::BuildGauge()
                     .Name("mtrain_job_step")
                     .Help("Last completed training step of the job.")
                     .Register(*registry)),
        job_loss(prometheus::BuildGauge()
                     .Name("mtrain_job_loss")
                     .Help("Training loss of the job's last completed step.")
                     .Register(*registry)),
        job_validation_loss(prometheus::BuildGauge()
                                .Name("mtrain_job_validation_loss")
                                .Help("Validation loss (mean per-token cross-entropy over "
                                      "train.eval_iters batches of the validation split) at "
                                      "the job's last evaluation; its exp is the perplexity.")
                                .Register(*registry)),
        job_validation_accuracy(
            prometheus::BuildGauge()
                .Name("mtrain_job_validation_accuracy")
                .Help("BERT (model.family MODEL_FAMILY_BERT) at the job's last evaluation: "
                      "the share of the validation batches' masked positions whose label is "
                      "the model's argmax (head=\"masked_lm\") and of their sequences whose "
                      "order it predicts (head=\"sentence_order\").")
                .Register(*registry)),
        job_eval(prometheus::BuildGauge()
                     .Name("mtrain_job_eval")
                     .Help("Result of an evaluation task (train.eval_tasks) at the job's last "
                           "checkpoint step: task (perplexity, cloze, choice), data (the "
                           "file's name), metric (perplexity, adjusted_perplexity, accuracy, "
                           "accuracy_norm, loss).")
                     .Register(*registry)),
        job_generation_tokens_per_second(
            prometheus::BuildGauge()
                .Name("mtrain_job_generation_tokens_per_second")
                .Help("New tokens per second of a train.generate prompt (prompt: its index) at "
                      "the job's last checkpoint step, with the key-value cache, the prompt's "
                      "run included.")
                .Register(*registry)),
        job_tokens_per_second(prometheus::BuildGauge()
                                  .Name("mtrain_job_tokens_per_second")
                                  .Help("Training throughput of the job's last step in tokens "
                                        "per second.")
                                  .Register(*registry)),
        job_model_tflops(prometheus::BuildGauge()
                             .Name("mtrain_job_model_tflops")
                             .Help("Model TFLOP/s of the job's last step (Megatron's model "
                                   "FLOPs formula, without recomputation).")
                             .Register(*registry)),
        job_mfu(prometheus::BuildGauge()
                    .Name("mtrain_job_mfu_ratio")
                    .Help("Model FLOPs utilisation of the job's last step, 0..1.")
                    .Register(*registry)),
        job_loss_scale(prometheus::BuildGauge()
                           .Name("mtrain_job_loss_scale")
                           .Help("Dynamic loss scale of the job's last step.")
                           .Register(*registry)),
        job_skipped_steps(prometheus::BuildCounter()
                              .Name("mtrain_job_skipped_steps_total")
                              .Help("Steps the loss scaler skipped because gradients "
                                    "overflowed.")
                              .Register(*registry)),
        job_restarts(prometheus::BuildCounter()
                         .Name("mtrain_job_restarts_total")
                         .Help("Times the job restarted from a checkpoint after a failure.")
                         .Register(*registry)),
        job_generation_failures(prometheus::BuildCounter()
                                    .Name("mtrain_job_generation_failures_total")
                                    .Help("Generations of the job that failed (a rank's "
                                          "error, a lost worker); each restarts the job or, "
                                          "with its restart budget spent, fails it.")
                                    .Register(*registry)),
        job_checkpoint_step(prometheus::BuildGauge()
                                .Name("mtrain_job_checkpoint_step")
                                .Help("Step of the job's newest committed checkpoint.")
                                .Register(*registry)),
        job_checkpoints_saved(prometheus::BuildCounter()
                                  .Name("mtrain_job_checkpoints_saved_total")
                                  .Help("Checkpoints of the job committed to the store.")
                                  .Register(*registry)),
        step_duration(prometheus::BuildHistogram()
                          .Name("mtrain_step_duration_seconds")
                          .Help("Duration of one training step on one rank, every rank of "
                                "the pipeline stage observed.")
                          .Register(*registry)),
        stage_last_step_seconds(
            prometheus::BuildGauge()
                .Name("mtrain_stage_last_step_seconds")
                .Help("Over the last step of each rank of a pipeline stage (the job's newest "
                      "generation): stat=\"median\" or \"max\"; max / median is the stage's "
                      "straggler ratio.")
                .Register(*registry)),
        stage_bubble(prometheus::BuildGauge()
                         .Name("mtrain_stage_pipeline_bubble_ratio")
                         .Help("Share of the last step spent waiting on pipeline peers, the "
                               "mean over the stage's ranks, 0..1.")
                         .Register(*registry)),
        stage_sent_bytes(prometheus::BuildCounter()
                             .Name("mtrain_stage_sent_bytes_total")
                             .Help("Bytes the ranks of a pipeline stage sent on a kind of link "
                                   "(link: tensor, pipeline, data), as ring algorithms move "
                                   "them.")
                             .Register(*registry)),
        stage_activation_peak(prometheus::BuildGauge()
                                  .Name("mtrain_stage_activation_memory_peak_bytes")
                                  .Help("The most bytes the activations one rank of the stage "
                                        "kept for backwards have held together, the largest "
                                        "over the stage's ranks.")
                                  .Register(*registry)),
        job_ranks_reporting(prometheus::BuildGauge()
                                .Name("mtrain_job_ranks_reporting")
                                .Help("Ranks of the job's newest generation that have reported "
                                      "a step.")
                                .Register(*registry)),
        rank_last_step_seconds(prometheus::BuildGauge()
                                   .Name("mtrain_rank_last_step_seconds")
                                   .Help("Duration of the last training step of one of the "
                                         "job's slowest ranks (its newest generation; at most "
                                         "16 ranks a job, so every rank of a small job).")
                                   .Register(*registry)),
        pipeline_bubble(prometheus::BuildGauge()
                            .Name("mtrain_pipeline_bubble_ratio")
                            .Help("Share of the last step one of the job's slowest ranks "
                                  "spent waiting on its pipeline peers, 0..1.")
                            .Register(*registry)),
        workers_registered(prometheus::BuildGauge()
                               .Name("mtrain_workers_registered")
                               .Help("Workers registered with the coordinator.")
                               .Register(*registry)
                               .Add({})),
        workers_alive(prometheus::BuildGauge()
                          .Name("mtrain_workers_alive")
                          .Help("Registered workers heartbeating in time.")
                          .Register(*registry)
                          .Add({})),
        heartbeats_missed(prometheus::BuildCounter()
                              .Name("mtrain_heartbeats_missed_total")
                              .Help("Workers declared dead for missing their heartbeats.")
                              .Register(*registry)
                              .Add({})),
        state_dir_write_failures(
            prometheus::BuildCounter()
                .Name("mtrain_state_dir_write_failures_total")
                .Help("Writes to the coordinator's state dir that failed (a full disk, an I/O "
                      "error), by store: jobs (SQLite; retried until they land) or "
                      "checkpoints (the upload fails, and with it the generation).")
                .Register(*registry)),
        store_write_failures(
            prometheus::BuildCounter()
                .Name("mtrain_coordinator_store_write_failures_total")
                .Help("Job store writes the job manager lost: refused outright (the store "
                      "contradicts the manager or cannot read the job), not held for a "
                      "retry; by operation. Each is also logged.")
                .Register(*registry)),
        state_dir_writes_queued(prometheus::BuildGauge()
                                    .Name("mtrain_state_dir_writes_queued")
                                    .Help("Job store writes held in memory, waiting for the "
                                          "state dir to take them again.")
                                    .Register(*registry)
                                    .Add({})),
        coordinator_pauses(prometheus::BuildCounter()
                               .Name("mtrain_coordinator_pauses_total")
                               .Help("Times the coordinator found it had not run for a while "
                                     "(stopped, starved) and did not count that gap as "
                                     "any worker's silence.")
                               .Register(*registry)
                               .Add({})),
        step_rows(prometheus::BuildCounter()
                      .Name("mtrain_coordinator_step_rows_total")
                      .Help("Step rows of the loss-reporting ranks stored in the job store.")
                      .Register(*registry)
                      .Add({})),
        step_transactions(prometheus::BuildCounter()
                              .Name("mtrain_coordinator_step_transactions_total")
                              .Help("Transactions (one fsync each) that stored the step rows: "
                                    "rows that arrive while one is written share the next.")
                              .Register(*registry)
                              .Add({})),
        rpc_errors(prometheus::BuildCounter()
                       .Name("mtrain_rpc_errors_total")
                       .Help("RPCs the coordinator answered with an error, by method and "
                             "gRPC code.")
                       .Register(*registry)) {}

  // Removes the gauges of the job's generation (stages and stragglers); the histograms
  // and counters stay.
  void DropGenerationGauges(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    for (auto it = stages.lower_bound({job_id, INT_MIN});
         it != stages.end() && it->first.first == job_id; ++it) {
      StageSeries& series = it->second;
      for (auto [family, gauge] : {std::pair{&stage_last_step_seconds, &series.median_step},
                                   std::pair{&stage_last_step_seconds, &series.max_step},
                                   std::pair{&stage_bubble, &series.bubble},
                                   std::pair{&stage_activation_peak, &series.activation_peak}}) {
        if (*gauge != nullptr) family->Remove(*gauge);
        *gauge = nullptr;
      }
    }
    DropStragglers(job_id);
    if (const auto reporting = ranks_reporting.find(job_id); reporting != ranks_reporting.end()) {
      job_ranks_reporting.Remove(reporting->second);
      ranks_reporting.erase(reporting);
    }
  }

  void DropStragglers(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    const auto shown = stragglers.find(job_id);
    if (shown == stragglers.end()) return;
    for (auto& [rank, series] : shown->second) {
      rank_last_step_seconds.Remove(series.last_step_seconds);
      pipeline_bubble.Remove(series.bubble);
    }
    stragglers.erase(shown);
  }

  StageSeries& Stage(const std::string& job_id, int stage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    StageSeries& series = stages[{job_id, stage}];
    if (series.step_duration == nullptr) {
      series.step_duration =
          &step_duration.Add({{"job", job_id}, {"pp_stage", absl::StrCat(stage)}}, step_buckets);
    }
    return series;
  }

  // Sets the job's aggregate gauges and its stragglers' series from its rank table.
  void Refresh(const std::string& job_id, const RankTable& table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    std::map<int, std::vector<const RankReport*>> by_stage;
    std::vector<const RankReport*> reported;
    for (const RankReport& rank : table.ranks) {
      if (rank.step < 0) continue;
      reported.push_back(&rank);
      by_stage[rank.coordinates.pp_rank()].push_back(&rank);
    }
    prometheus::Gauge*& reporting = ranks_reporting[job_id];
    if (reporting == nullptr) reporting = &job_ranks_reporting.Add({{"job", job_id}});
    reporting->Set(static_cast<double>(reported.size()));
    for (auto& [stage, ranks] : by_stage) {
      StageSeries& series = Stage(job_id, stage);
      const std::string stage_label = absl::StrCat(stage);
      if (series.median_step == nullptr) {
        series.median_step = &stage_last_step_seconds.Add(
            {{"job", job_id}, {"pp_stage", stage_label}, {"stat", "median"}});
        series.max_step = &stage_last_step_seconds.Add(
            {{"job", job_id}, {"pp_stage", stage_label}, {"stat", "max"}});
        series.bubble = &stage_bubble.Add({{"job", job_id}, {"pp_stage", stage_label}});
      }
      std::vector<double> seconds;
      double bubble_sum = 0;
      int64_t activation_peak = -1;
      for (const RankReport* rank : ranks) {
        seconds.push_back(rank->last_step_seconds);
        bubble_sum += rank->pipeline_bubble;
        activation_peak = std::max(activation_peak, rank->activation_peak_bytes);
      }
      // The lower median for an even count: a value some rank really reported.
      const auto middle = seconds.begin() + (seconds.size() - 1) / 2;
      std::nth_element(seconds.begin(), middle, seconds.end());
      series.median_step->Set(*middle);
      series.max_step->Set(*std::max_element(seconds.begin(), seconds.end()));
      series.bubble->Set(bubble_sum / static_cast<double>(ranks.size()));
      if (activation_peak >= 0) {
        if (series.activation_peak == nullptr) {
          series.activation_peak =
              &stage_activation_peak.Add({{"job", job_id}, {"pp_stage", stage_label}});
        }
        series.activation_peak->Set(static_cast<double>(activation_peak));
      }
    }
    // The slowest ranks, slowest first (ties: the lower rank), as their own series; ranks
    // that left the set lose theirs, so at most kStragglerRanks series a job exist.
    const size_t shown = std::min(reported.size(), static_cast<size_t>(kStragglerRanks));
    std::partial_sort(reported.begin(), reported.begin() + shown, reported.end(),
                      [](const RankReport* a, const RankReport* b) {
                        if (a->last_step_seconds != b->last_step_seconds) {
                          return a->last_step_seconds > b->last_step_seconds;
                        }
                        return a->coordinates.global_rank() < b->coordinates.global_rank();
                      });
    std::map<int, StragglerSeries>& series = stragglers[job_id];
    std::map<int, StragglerSeries> kept;
    for (size_t i = 0; i < shown; ++i) {
      const RankReport& rank = *reported[i];
      const int global_rank = rank.coordinates.global_rank();
      StragglerSeries entry;
      if (const auto existing = series.find(global_rank); existing != series.end()) {
        entry = existing->second;
        series.erase(existing);
      } else {
        const prometheus::Labels labels{{"job", job_id},
                                        {"rank", absl::StrCat(global_rank)},
                                        {"tp_rank", absl::StrCat(rank.coordinates.tp_rank())},
                                        {"pp_stage", absl::StrCat(rank.coordinates.pp_rank())},
                                        {"dp_rank", absl::StrCat(rank.coordinates.dp_rank())}};
        entry.last_step_seconds = &rank_last_step_seconds.Add(labels);
        entry.bubble = &pipeline_bubble.Add(labels);
      }
      entry.last_step_seconds->Set(rank.last_step_seconds);
      entry.bubble->Set(rank.pipeline_bubble);
      kept[global_rank] = entry;
    }
    for (auto& [rank, gone] : series) {
      rank_last_step_seconds.Remove(gone.last_step_seconds);
      pipeline_bubble.Remove(gone.bubble);
    }
    series = std::move(kept);
  }

  // Refreshes every job's aggregates, then collects: what a scrape serves.
  std::vector<prometheus::MetricFamily> Collect() {
    {
      MutexLock lock(&mutex);
      for (const auto& [job_id, table] : tables) Refresh(job_id, table);
    }
    return registry->Collect();
  }

  // The job's series, created on first use.
  JobSeries& Job(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    auto [it, inserted] = jobs.try_emplace(job_id);
    JobSeries& series = it->second;
    if (inserted) {
      for (const auto& [state, label] : state_labels) {
        series.states.emplace_back(state, &job_state.Add({{"job", job_id}, {"state", label}}));
      }
      // Present from the start at 0, so rate() and increase() see the first increment.
      series.skipped_steps = &job_skipped_steps.Add({{"job", job_id}});
      series.restarts = &job_restarts.Add({{"job", job_id}});
      series.generation_failures = &job_generation_failures.Add({{"job", job_id}});
      series.checkpoints_saved = &job_checkpoints_saved.Add({{"job", job_id}});
    }
    return series;
  }

  const std::shared_ptr<prometheus::Registry> registry;
  const std::vector<std::pair<JobState, std::string>> state_labels;
  const prometheus::Histogram::BucketBoundaries step_buckets;

  prometheus::Family<prometheus::Gauge>& job_state;
  prometheus::Family<prometheus::Gauge>& job_step;
  prometheus::Family<prometheus::Gauge>& job_loss;
  prometheus::Family<prometheus::Gauge>& job_validation_loss;
  prometheus::Family<prometheus::Gauge>& job_validation_accuracy;
  prometheus::Family<prometheus::Gauge>& job_eval;
  prometheus::Family<prometheus::Gauge>& job_generation_tokens_per_second;
  prometheus::Family<prometheus::Gauge>& job_tokens_per_second;
  prometheus::Family<prometheus::Gauge>& job_model_tflops;
  prometheus::Family<prometheus::Gauge>& job_mfu;
  prometheus::Family<prometheus::Gauge>& job_loss_scale;
  prometheus::Family<prometheus::Counter>& job_skipped_steps;
  prometheus::Family<prometheus::Counter>& job_restarts;
  prometheus::Family<prometheus::Counter>& job_generation_failures;
  prometheus::Family<prometheus::Gauge>& job_checkpoint_step;
  prometheus::Family<prometheus::Counter>& job_checkpoints_saved;
  prometheus::Family<prometheus::Histogram>& step_duration;
  prometheus::Family<prometheus::Gauge>& stage_last_step_seconds;
  prometheus::Family<prometheus::Gauge>& stage_bubble;
  prometheus::Family<prometheus::Counter>& stage_sent_bytes;
  prometheus::Family<prometheus::Gauge>& stage_activation_peak;
  prometheus::Family<prometheus::Gauge>& job_ranks_reporting;
  prometheus::Family<prometheus::Gauge>& rank_last_step_seconds;
  prometheus::Family<prometheus::Gauge>& pipeline_bubble;
  prometheus::Gauge& workers_registered;
  prometheus::Gauge& workers_alive;
  prometheus::Counter& heartbeats_missed;
  prometheus::Family<prometheus::Counter>& state_dir_write_failures;
  prometheus::Family<prometheus::Counter>& store_write_failures;
  prometheus::Gauge& state_dir_writes_queued;
  prometheus::Counter& coordinator_pauses;
  prometheus::Counter& step_rows;
  prometheus::Counter& step_transactions;
  prometheus::Family<prometheus::Counter>& rpc_errors;

  // prometheus-cpp's metrics are thread-safe on their own; the mutex keeps the maps and
  // the read-then-write updates (one-hot state, counters advanced to a total, the newest
  // step) consistent.
  Mutex mutex;
  std::map<std::string, JobSeries> jobs ABSL_GUARDED_BY(mutex);
  std::map<std::string, RankTable> tables ABSL_GUARDED_BY(mutex);
  // Family::Add builds a histogram (and copies the buckets) before it finds the existing
  // one, so each stage's series are looked up here instead, once per step.
  std::map<std::pair<std::string, int>, StageSeries> stages ABSL_GUARDED_BY(mutex);
  // Job -> its stragglers' series by global rank.
  std::map<std::string, std::map<int, StragglerSeries>> stragglers ABSL_GUARDED_BY(mutex);
  std::map<std::string, prometheus::Gauge*> ranks_reporting ABSL_GUARDED_BY(mutex);

  // Set by Start, before anything can scrape.
  std::shared_ptr<prometheus::Collectable> collectable;
  int port = 0;
  // Last member: destroyed first, so no scrape runs while the rest is torn down.
  std::unique_ptr<prometheus::Exposer> exposer;
};

absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> CoordinatorMetrics::Start(
    const std::string& http_address) {
  auto impl = std::make_unique<Impl>();
  impl->collectable =
      std::make_shared<RefreshingCollectable>([raw = impl.get()] { return raw->Collect(); });
  // Present from the start at 0, so rate() and increase() see the first failure.
  for (const char* operation : kStoreWriteOperations) {
    impl->store_write_failures.Add({{"operation", operation}});
  }
  if (!http_address.empty()) {
    // The Exposer (civetweb underneath) reports a failed bind only by throwing; keep the
    // exception inside this module and hand callers a status they can retry on.
    try {
      impl->exposer = std::make_unique<prometheus::Exposer>(http_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", http_address, ": ", e.what()));
    }
    impl->exposer->RegisterCollectable(impl->collectable);
    const std::vector<int> ports = impl->exposer->GetListeningPorts();
    if (ports.empty()) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", http_address, ": no listening port"));
    }
    impl->port = ports.front();
  }
  return std::unique_ptr<CoordinatorMetrics>(new CoordinatorMetrics(std::move(impl)));
}

CoordinatorMetrics::CoordinatorMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CoordinatorMetrics::~CoordinatorMetrics() = default;

int CoordinatorMetrics::port() const { return impl_->port; }

void CoordinatorMetrics::SetJobState(const std::string& job_id, JobState state) {
  MutexLock lock(&impl_->mutex);
  for (auto& [gauge_state, gauge] : impl_->Job(job_id).states) {
    gauge->Set(gauge_state == state ? 1 : 0);
  }
}

void CoordinatorMetrics::ForgetJob(const std::string& job_id) {
  MutexLock lock(&impl_->mutex);
  impl_->DropGenerationGauges(job_id);
  for (auto it = impl_->stages.lower_bound({job_id, INT_MIN});
       it != impl_->stages.end() && it->first.first == job_id;) {
    impl_->step_duration.Remove(it->second.step_duration);
    for (prometheus::Counter* counter : it->second.sent) {
      if (counter != nullptr) impl_->stage_sent_bytes.Remove(counter);
    }
    it = impl_->stages.erase(it);
  }
  impl_->tables.erase(job_id);
  const auto job = impl_->jobs.find(job_id);
  if (job == impl_->jobs.end()) return;
  Impl::JobSeries& series = job->second;
  for (auto& [state, gauge] : series.states) impl_->job_state.Remove(gauge);
  for (auto& [key, gauge] : series.evals) impl_->job_eval.Remove(gauge);
  for (auto& [key, gauge] : series.generation_speeds) {
    impl_->job_generation_tokens_per_second.Remove(gauge);
  }
  for (auto [family, gauge] :
       std::initializer_list<std::pair<prometheus::Family<prometheus::Gauge>*, prometheus::Gauge*>>{
           {&impl_->job_step, series.step},
           {&impl_->job_loss, series.loss},
           {&impl_->job_validation_loss, series.validation_loss},
           {&impl_->job_validation_accuracy, series.validation_mlm_accuracy},
           {&impl_->job_validation_accuracy, series.validation_sop_accuracy},
           {&impl_->job_validation_accuracy, series.validation_choice_accuracy},
           {&impl_->job_tokens_per_second, series.tokens_per_second},
           {&impl_->job_model_tflops, series.model_tflops},
           {&impl_->job_mfu, series.mfu},
           {&impl_->job_loss_scale, series.loss_scale},
           {&impl_->job_checkpoint_step, series.checkpoint_step}}) {
    if (gauge != nullptr) family->Remove(gauge);
  }
  for (auto [family, counter] : std::initializer_list<
           std::pair<prometheus::Family<prometheus::Counter>*, prometheus::Counter*>>{
           {&impl_->job_skipped_steps, series.skipped_steps},
           {&impl_->job_restarts, series.restarts},
           {&impl_->job_generation_failures, series.generation_failures},
           {&impl_->job_checkpoints_saved, series.checkpoints_saved}}) {
    if (counter != nullptr) family->Remove(counter);
  }
  impl_->jobs.erase(job);
}

void CoordinatorMetrics::ObserveStep(const std::string& job_id, const StepMetrics& metrics,
                                     const RankCoordinates& coordinates) {
  MutexLock lock(&impl_->mutex);
  Impl::JobSeries& job = impl_->Job(job_id);

  if (metrics.generation() > job.gauge_generation) {
    // A new generation: the previous one's ranks are gone (perhaps with another layout).
    impl_->DropGenerationGauges(job_id);
    job.gauge_generation = metrics.generation();
  }
  const bool newest_generation = metrics.generation() == job.gauge_generation;
  const int stage = coordinates.pp_rank();
  Impl::StageSeries& series = impl_->Stage(job_id, stage);
  // A NaN or negative duration (a broken clock on a worker) would poison the histogram's
  // _sum for good; leave it out.
  const double seconds = metrics.step_seconds();
  const bool valid_seconds = std::isfinite(seconds) && seconds >= 0;
  if (valid_seconds) series.step_duration->Observe(seconds);
  // The job manager checked the rank against its generation's world; a world the plan's
  // bounds do not allow is not tabled (the histogram above still counts the step).
  const int world = coordinates.world_size();
  const int global_rank = coordinates.global_rank();
  if (valid_seconds && newest_generation && world > 0 && world <= kMaxTabledRanks &&
      global_rank >= 0 && global_rank < world) {
    Impl::RankTable& table = impl_->tables[job_id];
    if (table.generation != metrics.generation() ||
        table.ranks.size() != static_cast<size_t>(world)) {
      table.generation = metrics.generation();
      table.ranks.assign(world, RankReport{});
    }
    RankReport& rank = table.ranks[global_rank];
    rank.coordinates = coordinates;
    rank.step = metrics.step();
    rank.last_step_seconds = seconds;
    // Waiting happens inside the step, so the share is within 0..1 but for clock noise.
    const double wait = metrics.pipeline_wait_seconds();
    const double share = seconds > 0 && std::isfinite(wait) ? wait / seconds : 0;
    rank.pipeline_bubble = std::clamp(share, 0.0, 1.0);
    if (metrics.has_activation_memory_peak_bytes()) {
      rank.activation_peak_bytes = metrics.activation_memory_peak_bytes();
    }
  }
  const std::array<int64_t, 3> sent = {metrics.tensor_bytes_sent(), metrics.pipeline_bytes_sent(),
                                       metrics.data_bytes_sent()};
  static constexpr std::array<const char*, 3> kLinks = {"tensor", "pipeline", "data"};
  for (size_t link = 0; link < sent.size(); ++link) {
    if (sent[link] <= 0) continue;  // a counter only moves up; none until a link is used
    if (series.sent[link] == nullptr) {
      series.sent[link] = &impl_->stage_sent_bytes.Add(
          {{"job", job_id}, {"pp_stage", absl::StrCat(stage)}, {"link", kLinks[link]}});
    }
    series.sent[link]->Increment(static_cast<double>(sent[link]));
  }

  // train.eval_tasks' results come from one rank (the first of the last stage of replica
  // 0), with the loss or, for an evaluation job (`trainctl eval`), without one.
  for (const EvalTaskResult& eval : metrics.evals()) {
    const std::string data = std::filesystem::path(eval.data()).filename().string();
    std::vector<std::pair<std::string, double>> values = {{"loss", eval.loss()}};
    if (eval.task() == "perplexity") {
      values.push_back({"perplexity", eval.perplexity()});
      values.push_back({"adjusted_perplexity", eval.adjusted_perplexity()});
    } else {
      values.push_back({"accuracy", eval.accuracy()});
      if (eval.task() == "choice") values.push_back({"accuracy_norm", eval.accuracy_norm()});
    }
    for (const auto& [metric, value] : values) {
      prometheus::Gauge*& gauge = job.evals[{eval.task(), data, metric}];
      if (gauge == nullptr) {
        gauge = &impl_->job_eval.Add(
            {{"job", job_id}, {"task", eval.task()}, {"data", data}, {"metric", metric}});
      }
      gauge->Set(value);
    }
  }
  for (int i = 0; i < metrics.generations_size(); ++i) {
    const std::string prompt = std::to_string(i);
    prometheus::Gauge*& gauge = job.generation_speeds[prompt];
    if (gauge == nullptr) {
      gauge = &impl_->job_generation_tokens_per_second.Add({{"job", job_id}, {"prompt", prompt}});
    }
    gauge->Set(metrics.generations(i).tokens_per_second());
  }
  // The job's gauges follow the ranks that compute the loss (as JobStatus.latest does):
  // the other ranks' throughput figures are partial views of the same step.
  if (!metrics.has_loss()) return;
  const std::pair<int64_t, int64_t> report{metrics.generation(), metrics.step()};
  if (report < job.newest) return;
  job.newest = report;
  if (job.step == nullptr) {
    const prometheus::Labels labels{{"job", job_id}};
    job.step = &impl_->job_step.Add(labels);
    job.loss = &impl_->job_loss.Add(labels);
    job.tokens_per_second = &impl_->job_tokens_per_second.Add(labels);
    job.model_tflops = &impl_->job_model_tflops.Add(labels);
    job.mfu = &impl_->job_mfu.Add(labels);
    job.loss_scale = &impl_->job_loss_scale.Add(labels);
  }
  job.step->Set(static_cast<double>(metrics.step()));
  job.loss->Set(metrics.loss());
  job.tokens_per_second->Set(metrics.tokens_per_second());
  job.model_tflops->Set(metrics.model_tflops());
  job.mfu->Set(metrics.mfu());
  job.loss_scale->Set(metrics.loss_scale());
  if (metrics.has_validation_loss()) {
    if (job.validation_loss == nullptr) {
      job.validation_loss = &impl_->job_validation_loss.Add({{"job", job_id}});
    }
    job.validation_loss->Set(metrics.validation_loss());
  }
  if (metrics.has_validation_mlm_accuracy()) {
    if (job.validation_mlm_accuracy == nullptr) {
      job.validation_mlm_accuracy =
          &impl_->job_validation_accuracy.Add({{"job", job_id}, {"head", "masked_lm"}});
      job.validation_sop_accuracy =
          &impl_->job_validation_accuracy.Add({{"job", job_id}, {"head", "sentence_order"}});
    }
    job.validation_mlm_accuracy->Set(metrics.validation_mlm_accuracy());
    job.validation_sop_accuracy->Set(metrics.validation_sop_accuracy());
  }
  if (metrics.has_validation_choice_accuracy()) {
    if (job.validation_choice_accuracy == nullptr) {
      job.validation_choice_accuracy =
          &impl_->job_validation_accuracy.Add({{"job", job_id}, {"head", "multiple_choice"}});
    }
    job.validation_choice_accuracy->Set(metrics.validation_choice_accuracy());
  }
  AdvanceCounterTo(*job.skipped_steps, static_cast<double>(metrics.skipped_steps()));
}

void CoordinatorMetrics::SetJobRestarts(const std::string& job_id, int restarts) {
  MutexLock lock(&impl_->mutex);
  AdvanceCounterTo(*impl_->Job(job_id).restarts, restarts);
}

void CoordinatorMetrics::AddGenerationFailure(const std::string& job_id) {
  MutexLock lock(&impl_->mutex);
  impl_->Job(job_id).generation_failures->Increment();
}

void CoordinatorMetrics::SetCheckpointStep(const std::string& job_id, int64_t step) {
  MutexLock lock(&impl_->mutex);
  Impl::JobSeries& job = impl_->Job(job_id);
  if (job.checkpoint_step == nullptr) {
    job.checkpoint_step = &impl_->job_checkpoint_step.Add({{"job", job_id}});
  }
  job.checkpoint_step->Set(static_cast<double>(step));
  job.checkpoints_saved->Increment();
}

void CoordinatorMetrics::SetWorkers(int registered, int alive) {
  impl_->workers_registered.Set(registered);
  impl_->workers_alive.Set(alive);
}

void CoordinatorMetrics::AddMissedHeartbeat() { impl_->heartbeats_missed.Increment(); }

void CoordinatorMetrics::AddStateDirWriteFailure(const std::string& store) {
  impl_->state_dir_write_failures.Add({{"store", store}}).Increment();
}

void CoordinatorMetrics::AddStoreWriteFailure(const std::string& operation) {
  impl_->store_write_failures.Add({{"operation", operation}}).Increment();
}

void CoordinatorMetrics::SetStateDirWritesQueued(int64_t queued) {
  impl_->state_dir_writes_queued.Set(static_cast<double>(queued));
}

void CoordinatorMetrics::AddCoordinatorPause() { impl_->coordinator_pauses.Increment(); }

void CoordinatorMetrics::AddStepWrites(int64_t rows) {
  impl_->step_rows.Increment(static_cast<double>(rows));
  impl_->step_transactions.Increment();
}

void CoordinatorMetrics::AddRpcError(const std::string& method, const std::string& code) {
  // Family::Add finds the existing series under the family's own lock; errors are rare
  // enough that the throwaway counter it builds first does not matter.
  impl_->rpc_errors.Add({{"method", method}, {"code", code}}).Increment();
}

std::string CoordinatorMetrics::Scrape() const {
  return prometheus::TextSerializer().Serialize(impl_->Collect());
}

std::vector<RankReport> CoordinatorMetrics::RankDetails(const std::string& job_id) const {
  MutexLock lock(&impl_->mutex);
  const auto table = impl_->tables.find(job_id);
  if (table == impl_->tables.end()) return {};
  std::vector<RankReport> reported;
  for (const RankReport& rank : table->second.ranks) {
    if (rank.step >= 0) reported.push_back(rank);
  }
  return reported;
}

}  // namespace mtrain
