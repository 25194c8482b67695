// LayerNorm over the last dimension on the GPU (kernels/layernorm.h's semantics): fused
// forward saving per-row mean and rstd, and backward producing d_x and the parameter
// gradients. T (x, gamma, beta, y, d_y, d_x) is float, __nv_bfloat16 or __half; statistics
// and parameter gradients are float, arithmetic is float. Deterministic: the parameter
// gradients are summed over rows in a fixed order (per-block partial sums, then one pass).
#ifndef MTRAIN_KERNELS_CUDA_LAYERNORM_H_
#define MTRAIN_KERNELS_CUDA_LAYERNORM_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace mtrain::cuda {

// y = (x - mean) * rstd * gamma + beta per row of C; mean[rows], rstd[rows] saved.
template <typename T>
absl::Status LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                              float* rstd, int rows, int C, float eps, cudaStream_t stream);

// Accumulates d_x[rows, C] (+=), d_gamma[C] and d_beta[C] (+=, float). Uses stream-ordered
// scratch memory (cudaMallocAsync): RESOURCE_EXHAUSTED if it cannot be had.
template <typename T>
absl::Status LayerNormBackward(const T* d_y, const T* x, const T* gamma, const float* mean,
                               const float* rstd, T* d_x, float* d_gamma, float* d_beta, int rows,
                               int C, cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_LAYERNORM_H_
