// RMSNorm over the last dimension on the GPU (kernels/rms_norm.h's semantics, Llama-style
// decoders): y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps). T (x, gamma, y, d_y,
// d_x) is float, __nv_bfloat16 or __half; the saved rstd and d_gamma are float, arithmetic
// is float. Deterministic: d_gamma is summed over rows in a fixed order (per-block partial
// sums, then one pass), as LayerNorm's (layernorm.h).
#ifndef MTRAIN_KERNELS_CUDA_RMS_NORM_H_
#define MTRAIN_KERNELS_CUDA_RMS_NORM_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace mtrain::cuda {

// Per row of C: y = x * rstd * gamma; rstd[rows] saved for the backward.
template <typename T>
absl::Status RmsNormForward(const T* x, const T* gamma, T* y, float* rstd, int rows, int C,
                            float eps, cudaStream_t stream);

// Accumulates d_x[rows, C] (+=) and d_gamma[C] (+=, float). Uses stream-ordered scratch
// memory (cudaMallocAsync): RESOURCE_EXHAUSTED if it cannot be had.
template <typename T>
absl::Status RmsNormBackward(const T* d_y, const T* x, const T* gamma, const float* rstd, T* d_x,
                             float* d_gamma, int rows, int C, cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_RMS_NORM_H_
