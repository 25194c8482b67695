// Vocab-parallel softmax cross-entropy on the GPU (kernels/cross_entropy.h's semantics,
// VocabShard included), fused: one pass over this rank's logits yields the local max, the
// sum of exponentials relative to it (online softmax) and the target logit, so the
// logits are read once forward and once backward. Only per-token scalars cross ranks:
//
//   1. CrossEntropyLocalStats      -> copy local_max, all-reduce MAX = global max
//   2. CrossEntropyRescaleSums     (local sums now relative to the global max)
//                                  -> all-reduce SUM of sum_exp and of target_logit
//   3. CrossEntropyLosses          (per-token losses; the caller averages)
//   4. CrossEntropyBackward        (d_logits += d_loss * (softmax - onehot))
//
// Logits and their gradient are T (float, __nv_bfloat16 or __half); every per-token value is
// float.
#ifndef MTRAIN_KERNELS_CUDA_CROSS_ENTROPY_H_
#define MTRAIN_KERNELS_CUDA_CROSS_ENTROPY_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cross_entropy.h"

namespace mtrain::cuda {

using cpu::VocabShard;

// Per row over this shard's valid columns: local_max (-inf if none), local_sum_exp =
// sum exp(logit - local_max) (0 if none), target_logit (0 unless this shard holds it).
template <typename T>
absl::Status CrossEntropyLocalStats(const T* logits, const int32_t* targets,
                                    const VocabShard& shard, float* local_max, float* local_sum_exp,
                                    float* target_logit, cudaStream_t stream);

// sum_exp[r] *= exp(local_max[r] - global_max[r]) (0 stays 0).
absl::Status CrossEntropyRescaleSums(const float* local_max, const float* global_max,
                                     float* sum_exp, int rows, cudaStream_t stream);

// losses[r] = log(sum_exp[r]) + max[r] - target_logit[r].
absl::Status CrossEntropyLosses(const float* max, const float* sum_exp, const float* target_logit,
                                int rows, float* losses, cudaStream_t stream);

// d_logits[r, c] += d_loss_per_token * (exp(logit - max) / sum_exp - onehot) on valid
// columns (padding columns untouched), with the global max and sum. With accumulate false,
// d_logits is overwritten (padding columns set to 0): no need to zero it first.
template <typename T>
absl::Status CrossEntropyBackward(const T* logits, const int32_t* targets, const float* max,
                                  const float* sum_exp, const VocabShard& shard,
                                  float d_loss_per_token, T* d_logits, cudaStream_t stream,
                                  bool accumulate = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_CROSS_ENTROPY_H_
