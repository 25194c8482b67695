// BERT's bidirectional self-attention on the GPU (issue 35), kernels/bidirectional_attention.h's
// semantics: query i of sequence b attends to every real position j < lengths[b], before
// and after it; positions from lengths[b] on are padding (as keys no weight, as queries zero
// outputs and log-sum-exp, no gradient). Layout, grouped-query heads and dropout masks as
// kernels/cuda/attention.h's (the same counter-based masks at the same global indices), so
// the GPU drops exactly what the CPU drops. T is float, __nv_bfloat16 or __half; head dims
// 32, 64 and 128. Runs the scalar flash kernels (attention_scalar.cu: float arithmetic, a
// thread per query or key row, online softmax, deterministic): correctness first; cuDNN's
// padding-masked fused attention is the fast path to add.
#ifndef MTRAIN_KERNELS_CUDA_BIDIRECTIONAL_ATTENTION_H_
#define MTRAIN_KERNELS_CUDA_BIDIRECTIONAL_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/attention.h"

namespace mtrain::cuda {

// `lengths`: device int32 [B], each in [1, S] (not checked on the device: the model checks
// them on the host). out[B, S, H*D] and lse[B, H, S] overwritten. INVALID_ARGUMENT for an
// unsupported shape.
template <typename T>
absl::Status BidirectionalAttentionForward(const T* qkv, const int32_t* lengths, T* out, float* lse,
                                           const AttentionShape& shape,
                                           const AttentionDropout& dropout, cudaStream_t stream);

// Accumulates d_qkv[B, S, (H + 2 Hkv) * D] (+=) from d_out, with the forward's out and lse,
// or overwrites it when `accumulate` is false (padded rows then hold zeros).
template <typename T>
absl::Status BidirectionalAttentionBackward(const T* d_out, const T* qkv, const T* out,
                                            const float* lse, const int32_t* lengths, T* d_qkv,
                                            const AttentionShape& shape,
                                            const AttentionDropout& dropout, cudaStream_t stream,
                                            bool accumulate = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_BIDIRECTIONAL_ATTENTION_H_
