#include "dashboard/exported_metrics.h"

#include <memory>

#include "coordinator/coordinator_metrics.h"
#include "dashboard/promql_names.h"
#include "proto/assignment.pb.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

absl::StatusOr<std::set<std::string>> CoordinatorSeriesNames() {
  // No HTTP port: Scrape() gives the same text the coordinator serves (less the Exposer's
  // own exposer_* series, which no dashboard should rely on).
  absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics = CoordinatorMetrics::Start("");
  if (!metrics.ok()) return metrics.status();
  CoordinatorMetrics& m = **metrics;
  m.SetJobState("job-1", JOB_STATE_RUNNING);
  m.SetWorkers(2, 1);
  m.AddMissedHeartbeat();
  m.AddRpcError("SubmitJob", "INVALID_ARGUMENT");
  // Rank 0 on the first pipeline stage (no loss), rank 1 on the last (the loss).
  for (int rank = 0; rank < 2; ++rank) {
    RankCoordinates coordinates;
    coordinates.set_global_rank(rank);
    coordinates.set_world_size(2);
    coordinates.set_pp_rank(rank);
    StepMetrics step;
    step.set_job_id("job-1");
    step.set_generation(1);
    step.set_global_rank(rank);
    step.set_step(1);
    step.set_step_seconds(0.5);
    step.set_pipeline_wait_seconds(0.1);
    step.set_tokens_per_second(1000);
    step.set_model_tflops(1);
    step.set_mfu(0.1);
    step.set_loss_scale(1);
    step.set_pipeline_bytes_sent(1024);
    step.set_activation_memory_peak_bytes(4096);
    if (rank == 1) {
      step.set_loss(5.5);
      step.set_validation_loss(5.75);
      step.set_validation_mlm_loss(5.25);
      step.set_validation_sop_loss(0.5);
      step.set_validation_mlm_accuracy(0.125);
      step.set_validation_sop_accuracy(0.75);
    }
    m.ObserveStep("job-1", step, coordinates);
  }
  m.AddGenerationFailure("job-1");
  m.SetJobRestarts("job-1", 1);
  m.SetCheckpointStep("job-1", 1);
  return ExposedSeriesNames(m.Scrape());
}

}  // namespace mtrain
