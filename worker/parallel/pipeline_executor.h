// Executes one rank's pipeline schedule (coordinator/plan/pipeline_schedule.h) for one
// optimizer step: forwards and backwards of its model chunks, activations and gradients
// exchanged with the neighbouring stages point to point. The executor decides nothing:
// it runs the list it was handed, in order.
//
// Sends are posted without waiting (the data stays owned by the pending send); receives
// block. All sends are completed before RunStep returns, so nothing of a step leaks into
// the next.
//
//   PipelineExecutor executor(&model, assignment.schedule(), stage, pipeline, world.get());
//   ASSIGN_OR_RETURN(double loss_sum, executor.RunStep(microbatches, 1.0f / tokens, &hook));
#ifndef MTRAIN_WORKER_PARALLEL_PIPELINE_EXECUTOR_H_
#define MTRAIN_WORKER_PARALLEL_PIPELINE_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/assignment.pb.h"
#include "worker/engine/rank_model.h"
#include "worker/parallel/communicator.h"

namespace mtrain {

// One microbatch of this data-parallel replica.
struct Microbatch {
  MicrobatchId id;               // id.first_sample: index in the GLOBAL batch (dropout)
  std::vector<int32_t> tokens;   // [B, S]; read on the first virtual stage
  std::vector<int32_t> targets;  // [B, S]; read on the last virtual stage
};

// Where the last step's time went on this rank.
struct PipelineTimings {
  double compute_seconds = 0;  // forwards and backwards
  double wait_seconds = 0;     // blocked receiving, or completing sends
};

class PipelineExecutor {
 public:
  // `p2p` is the world group (group rank == global rank, as PipelineAction::peer_rank);
  // unused with one stage. `model` and `p2p` must outlive the executor.
  PipelineExecutor(RankModel* model, PipelineSchedule schedule, int stage, int pipeline,
                   Communicator* p2p);

  // Runs every action of the schedule over `microbatches` (indexed by
  // PipelineAction::microbatch). Returns the sum of per-token losses on the rank holding the
  // last virtual stage, 0 elsewhere. `on_final_grads` is passed to each chunk's LAST
  // backward of the step (its gradients are final then). Gradients accumulate into the
  // model's buffer; the caller zeroes them.
  absl::StatusOr<double> RunStep(const std::vector<Microbatch>& microbatches,
                                 float d_loss_per_token, const GradReadyHook* on_final_grads);

  const PipelineTimings& last_timings() const { return timings_; }

 private:
  // The state of one (microbatch, chunk) in flight.
  struct InFlight {
    std::unique_ptr<Activations<float>> acts;
    std::vector<float> input, output, d_output, d_input;
  };
  struct Send {
    std::unique_ptr<PendingSend> pending;
    std::vector<float> data;  // kept alive until the send completes
  };

  absl::Status Execute(size_t index, const std::vector<Microbatch>& microbatches,
                       float d_loss_per_token, const GradReadyHook* on_final_grads,
                       double* loss_sum);
  absl::Status StartSend(const PipelineAction& action, std::vector<float>* data);
  absl::Status Receive(const PipelineAction& action, std::vector<float>* data);
  absl::Status CompleteSends();

  RankModel* const model_;
  const PipelineSchedule schedule_;
  const int stage_;
  const int pipeline_;
  Communicator* const p2p_;
  const int num_chunks_;
  const size_t activation_elements_;   // B * S * C
  std::vector<size_t> last_backward_;  // per chunk: index of its last BACKWARD action
  std::vector<std::vector<std::unique_ptr<Activations<float>>>> free_acts_;  // per chunk
  std::vector<std::unique_ptr<InFlight>> in_flight_;  // by microbatch * chunks + chunk
  std::vector<Send> sends_;
  PipelineTimings timings_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_PIPELINE_EXECUTOR_H_
