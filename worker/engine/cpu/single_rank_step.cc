#include "worker/engine/cpu/single_rank_step.h"

#include <cmath>

#include "common/status_macros.h"
#include "kernels/grad_norm.h"

namespace mtrain {

absl::StatusOr<StepStats> SingleRankStep(ModelChunk<float>& model, AdamWOptimizer& optimizer,
                                         float grad_clip, int64_t step,
                                         const std::vector<TokenBatch>& microbatches) {
  if (microbatches.empty()) return absl::InvalidArgumentError("no microbatches");
  const size_t tokens_per_microbatch = microbatches.front().inputs.size();
  const size_t total_tokens = tokens_per_microbatch * microbatches.size();
  const int micro_batch =
      static_cast<int>(tokens_per_microbatch / model.layout().shape().seq_length);
  model.ZeroGrads();
  auto acts = model.NewActivations();
  double loss_sum = 0;
  for (size_t k = 0; k < microbatches.size(); ++k) {
    MicrobatchInput<float> input;
    input.id = {step, static_cast<int64_t>(k) * micro_batch};
    input.tokens = microbatches[k].inputs.data();
    input.targets = microbatches[k].targets.data();
    ASSIGN_OR_RETURN(const double sum, model.Forward(input, acts.get()));
    loss_sum += sum;
    // The step's loss is the mean over all its tokens, so each token's loss weighs 1/total.
    RETURN_IF_ERROR(model.Backward(acts.get(), nullptr, 1.0f / static_cast<float>(total_tokens)));
  }
  StepStats stats;
  stats.loss = loss_sum / static_cast<double>(total_tokens);
  stats.grad_norm = std::sqrt(cpu::SumOfSquares(model.grads(), model.num_params()));
  if (!std::isfinite(stats.grad_norm)) {
    return absl::InternalError("gradient norm is not finite: training diverged");
  }
  stats.lr = optimizer.LearningRate(step);
  optimizer.Update(model.params(), model.grads(), step, stats.lr,
                   cpu::ClipCoefficient(stats.grad_norm, grad_clip));
  return stats;
}

}  // namespace mtrain
