// Causal attention through cuDNN's fused flash attention (the cuDNN frontend's SDPA graphs),
// for bf16 and fp16 without attention dropout. Same layout as kernels/cuda/attention.h:
// qkv[B, S, (H + 2 Hkv) * D] in (grouped-query heads allowed), out[B, S, H * D],
// lse[B, H, S] (natural log-sum-exp of each row's scaled scores, cuDNN's "Stats"),
// d_qkv[B, S, (H + 2 Hkv) * D]. The backward uses cuDNN's deterministic algorithm, so a
// step is reproducible run to run as with the hand-written kernels.
//
// Graphs are built once per (device, dtype, shape) and cached for the process; the
// workspace is one buffer per stream, grown to the largest graph's need and kept. The
// first call for a shape builds both directions' graphs: if either cannot be built (an
// older cuDNN, an unsupported head size), CudnnAttentionSupports says why and the caller
// runs the hand-written kernels for that shape, forward and backward alike (their lse
// conventions must never mix).
#ifndef MTRAIN_KERNELS_CUDA_CUDNN_ATTENTION_H_
#define MTRAIN_KERNELS_CUDA_CUDNN_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "kernels/attention.h"

namespace mtrain::cuda {

enum class CudnnAttentionType { kBf16, kFp16 };

// OK if cuDNN runs this shape; otherwise why not (cached per shape: cheap after the first
// call, which builds the graphs and may take tens of milliseconds).
absl::Status CudnnAttentionSupports(const cpu::AttentionShape& shape, CudnnAttentionType type);

// The cuDNN library's version as "9.19.0", or why it could not be read.
std::string CudnnVersionText();

absl::Status CudnnAttentionForward(const void* qkv, void* out, float* lse,
                                   const cpu::AttentionShape& shape, CudnnAttentionType type,
                                   cudaStream_t stream);

// Overwrites d_qkv (every element: the query, key and value gradients).
absl::Status CudnnAttentionBackward(const void* d_out, const void* qkv, const void* out,
                                    const float* lse, void* d_qkv, const cpu::AttentionShape& shape,
                                    CudnnAttentionType type, cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_CUDNN_ATTENTION_H_
