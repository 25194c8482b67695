// One optimizer step of a rank that holds the whole model: gradients accumulated over the
// microbatches, the global gradient norm clipped, AdamW with the scheduled learning rate.
// The multi-rank step (pipeline schedule, tensor and data parallel reductions) builds on the
// same pieces.
#ifndef MTRAIN_WORKER_ENGINE_CPU_SINGLE_RANK_STEP_H_
#define MTRAIN_WORKER_ENGINE_CPU_SINGLE_RANK_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/cpu/model_chunk.h"
#include "worker/engine/optimizer.h"

namespace mtrain {

struct TokenBatch {
  std::vector<int32_t> inputs;   // [B, S]
  std::vector<int32_t> targets;  // [B, S]
};

struct StepStats {
  double loss = 0;       // mean over every token of the step
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

// Runs step `step` (1-based) over `microbatches` (each holding micro_batch sequences).
// `first_sample` of microbatch k is k * micro_batch (dropout masks depend on it).
absl::StatusOr<StepStats> SingleRankStep(ModelChunk<float>& model, AdamWOptimizer& optimizer,
                                         float grad_clip, int64_t step,
                                         const std::vector<TokenBatch>& microbatches);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_SINGLE_RANK_STEP_H_
