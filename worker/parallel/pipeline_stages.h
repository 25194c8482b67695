// The compute a pipeline executor (pipeline_executor.h) drives on one rank: forward and
// backward of one of the rank's model chunks on one microbatch. The hidden states that
// cross stage boundaries are host memory, float [B, S, C], whatever the engine computes
// in, so the executor's messages and buffers are the same for every engine.
//
// Two engines implement it: RankModelStages (the CPU engine, rank_model_stages.h) and the
// CUDA engine (worker/engine/cuda/cuda_engine.h), which copies the hidden states between
// the host and the GPU at stage boundaries.
//
// A forward keeps its activations under (chunk, microbatch) until the matching backward;
// the schedule decides how many are in flight at once.
#ifndef MTRAIN_WORKER_PARALLEL_PIPELINE_STAGES_H_
#define MTRAIN_WORKER_PARALLEL_PIPELINE_STAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/activations.h"
#include "worker/engine/model_shape.h"

namespace mtrain {

// One microbatch of this data-parallel replica.
struct Microbatch {
  MicrobatchId id;               // id.first_sample: index in the GLOBAL batch (dropout)
  std::vector<int32_t> tokens;   // [B, S]; read on the first virtual stage
  std::vector<int32_t> targets;  // [B, S]; read on the last virtual stage
};

class PipelineStages {
 public:
  virtual ~PipelineStages() = default;

  virtual int num_chunks() const = 0;
  // Which layers chunk c holds, and whether it holds the embeddings or the head.
  virtual const ModelPlacement& placement(int chunk) const = 0;
  virtual const ModelShape& shape() const = 0;

  // Forward of `microbatch` (index `index` in the step) on `chunk`. hidden_in: the
  // previous stage's output unless the chunk holds the embeddings; hidden_out receives
  // this chunk's output unless it holds the head. Returns the sum of the per-token losses
  // on the chunk holding the head, 0 elsewhere.
  virtual absl::StatusOr<double> Forward(int chunk, int index, const Microbatch& microbatch,
                                         const float* hidden_in, float* hidden_out) = 0;

  // Backward of the forward kept under (chunk, index), accumulating into the gradients.
  // The chunk holding the head seeds it with d_loss_per_token, the others take
  // d_hidden_out from the next stage; chunks without the embeddings write the gradient of
  // their input into d_hidden_in. `last_of_step`: the chunk's last backward of the step
  // (its gradients are final afterwards).
  virtual absl::Status Backward(int chunk, int index, const float* d_hidden_out,
                                float d_loss_per_token, float* d_hidden_in, bool last_of_step) = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_PARALLEL_PIPELINE_STAGES_H_
