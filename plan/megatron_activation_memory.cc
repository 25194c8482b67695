#include "plan/megatron_activation_memory.h"

#include <algorithm>

namespace mtrain {

double MegatronLayerActivationBytes(const MegatronLayerShape& shape,
                                    const MegatronActivationOptions& options) {
  const double sbh = shape.seq * shape.micro_batch * shape.hidden;
  const double t = std::max(1.0, shape.tensor);
  const double e = options.element_bytes;
  const double mask = options.dropout ? 1 : 0;
  const double split = options.sequence_parallel ? t : 1;
  if (options.recompute == ActivationRecompute::kFull) return sbh * e / split;
  // LayerNorm inputs (2), the QKV and MLP inputs (2) and the two dropout masks: replicated
  // in the tensor group unless the sequence is split.
  const double replicated = sbh * (4 * e + 2 * mask) / split;
  // Q, K, V, the projection input, GeLU input and output: split by the tensor group.
  const double sharded = sbh * 12 * e / t;
  if (options.recompute == ActivationRecompute::kSelective) return replicated + sharded;
  // Softmax output, dropout output and its mask for each of a/t heads' s x s scores.
  const double scores = shape.heads * shape.seq * shape.seq * shape.micro_batch *
                        ((options.dropout ? 2 : 1) * e + mask) / t;
  return replicated + sharded + scores;
}

}  // namespace mtrain
