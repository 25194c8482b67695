// The coordinator's Prometheus metrics. The coordinator serves Scrape() at /metrics of its
// --http address (coordinator/http_server.h, beside the status page); Start() can also
// serve them alone through prometheus-cpp's Exposer. Names and units follow Prometheus
// conventions (`_seconds`, `_total`, ratios 0..1) and labels stay bounded: job, rank,
// tp_rank, pp_stage, dp_rank, state, method, code.
//
//   mtrain_job_state{job,state}                 1 for the job's current state, else 0
//                                               (state: pending, placing, running,
//                                               succeeded, failed, cancelled)
//   mtrain_job_step{job}                        last completed step
//   mtrain_job_loss{job}                        its loss
//   mtrain_job_tokens_per_second{job}
//   mtrain_job_model_tflops{job}                model TFLOP/s (Megatron's formula)
//   mtrain_job_mfu_ratio{job}                   model FLOPs utilisation, 0..1
//   mtrain_job_loss_scale{job}
//   mtrain_job_skipped_steps_total{job}         steps skipped by the loss scaler
//   mtrain_job_restarts_total{job}
//   mtrain_job_generation_failures_total{job}   generations that failed (a rank's error, a
//                                               lost worker); each either restarts the job
//                                               or, with the budget spent, fails it
//   mtrain_job_checkpoint_step{job}             step of the newest committed checkpoint
//   mtrain_job_checkpoints_saved_total{job}     checkpoints committed to the store
//   Per pipeline stage (bounded by the pipeline depth, not the world size; issue 37):
//   mtrain_step_duration_seconds{job,pp_stage}  histogram of every rank's steps
//   mtrain_stage_last_step_seconds{job,pp_stage,stat}   median and max (stat) over the
//                                               last step of each of the stage's ranks
//   mtrain_stage_pipeline_bubble_ratio{job,pp_stage}     mean over the stage's ranks of the
//                                               share of the last step spent waiting on
//                                               pipeline peers
//   mtrain_stage_activation_memory_peak_bytes{job,pp_stage}   the largest rank's
//   mtrain_stage_sent_bytes_total{job,pp_stage,link}     bytes sent (link: tensor,
//                                               pipeline, data)
//   mtrain_job_ranks_reporting{job}             ranks of the newest generation heard from
//   Per rank, for the job's kStragglerRanks slowest ranks only (every rank of a small job):
//   mtrain_rank_last_step_seconds{job,rank,tp_rank,pp_stage,dp_rank}  the rank's last step
//   mtrain_pipeline_bubble_ratio{job,rank,tp_rank,pp_stage,dp_rank}   its bubble share
//   (the gauges show the job's newest generation only: a restart with another layout
//   drops the stages and ranks that no longer exist; every rank's detail is RankDetails,
//   served at /api/jobs/JOB/ranks and on the status page)
//   mtrain_workers_registered, mtrain_workers_alive
//   mtrain_heartbeats_missed_total              workers declared dead for silence
//   mtrain_rpc_errors_total{method,code}        RPCs answered with an error
//   mtrain_state_dir_write_failures_total{store}   failed writes to --state_dir (store:
//                                               jobs, checkpoints)
//   mtrain_state_dir_writes_queued              job store writes held in memory until the
//                                               state dir takes them again
//   mtrain_coordinator_store_write_failures_total{operation}   job store writes the job
//                                               manager lost: refused outright, not held
//                                               for a retry (operation: transition,
//                                               placement, event, step, delete)
//   mtrain_coordinator_step_rows_total          loss-reporting ranks' step rows stored
//   mtrain_coordinator_step_transactions_total  the transactions (fsyncs) that stored them
//   mtrain_coordinator_pauses_total             times the coordinator found itself paused
//                                               and did not count the gap as silence
//
//   ASSIGN_OR_RETURN(auto metrics, CoordinatorMetrics::Start("127.0.0.1:0"));
//   metrics->ObserveStep("job-1", step_metrics, coordinates);
//
// Thread-safe. The aggregates and the stragglers are computed when scraped (once per
// scrape, O(ranks)), so a step costs O(1) whatever the world size.
#ifndef MTRAIN_COORDINATOR_COORDINATOR_METRICS_H_
#define MTRAIN_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/assignment.pb.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

// The `operation` label values of mtrain_coordinator_store_write_failures_total.
inline constexpr const char* kStoreWriteOperations[] = {"transition", "placement", "event", "step",
                                                        "delete"};

// The slowest ranks of a job that get their own series.
inline constexpr int kStragglerRanks = 16;
// Ranks a job's table holds at most (above the spec's bound on the world size, 4,096).
inline constexpr int kMaxTabledRanks = 16384;

// One rank's last report in the job's newest generation.
struct RankReport {
  RankCoordinates coordinates;
  int64_t step = -1;  // -1: not reported yet
  double last_step_seconds = 0;
  double pipeline_bubble = 0;          // 0..1
  int64_t activation_peak_bytes = -1;  // -1: not reported
};

class CoordinatorMetrics {
 public:
  // Serves /metrics on `http_address` (HOST:PORT; port 0 picks a free one).
  // UNAVAILABLE if the address cannot be bound. An empty address serves nothing (the
  // metrics are still kept, e.g. for tests through Scrape()).
  static absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> Start(const std::string& http_address);
  ~CoordinatorMetrics();

  // The bound port (0 when not serving).
  int port() const;

  void SetJobState(const std::string& job_id, JobState state);
  // Removes every series of the job (a deleted job): the job label stays bounded by the
  // jobs the coordinator still holds.
  void ForgetJob(const std::string& job_id);
  // One rank's step: the histogram and gauges for its coordinates; the job gauges when it
  // carries the loss.
  void ObserveStep(const std::string& job_id, const StepMetrics& metrics,
                   const RankCoordinates& coordinates);
  void SetJobRestarts(const std::string& job_id, int restarts);
  // A generation of the job failed.
  void AddGenerationFailure(const std::string& job_id);
  // A checkpoint of `step` was committed.
  void SetCheckpointStep(const std::string& job_id, int64_t step);
  void SetWorkers(int registered, int alive);
  void AddMissedHeartbeat();
  // A write to the state dir failed; `store` is "jobs" or "checkpoints".
  void AddStateDirWriteFailure(const std::string& store);
  void SetStateDirWritesQueued(int64_t queued);
  // A job store write the job manager lost (see the metric above); `operation` is one of
  // kStoreWriteOperations.
  void AddStoreWriteFailure(const std::string& operation);
  void AddCoordinatorPause();
  // A batch of `rows` step rows was written in one transaction (coordinator/step_writer.h).
  void AddStepWrites(int64_t rows);
  // `method` is the RPC's name ("SubmitJob"), `code` the gRPC code's name
  // ("INVALID_ARGUMENT").
  void AddRpcError(const std::string& method, const std::string& code);

  // The current exposition text (what /metrics serves).
  std::string Scrape() const;

  // Every rank of the job's newest generation that has reported, by global rank (empty
  // for a job not seen or forgotten).
  std::vector<RankReport> RankDetails(const std::string& job_id) const;

 private:
  struct Impl;
  explicit CoordinatorMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_COORDINATOR_METRICS_H_
