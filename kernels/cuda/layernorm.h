// LayerNorm over the last dimension on the GPU (kernels/layernorm.h's semantics): fused
// forward saving per-row mean and rstd, and backward producing d_x and the parameter
// gradients. T (x, gamma, beta, y, d_y, d_x) is float, __nv_bfloat16 or __half; statistics
// and parameter gradients are float, arithmetic is float. Deterministic: the parameter
// gradients are summed over rows in a fixed order (per-block partial sums, then one pass).
// The backward pass reads d_y, x and the residual gradient once each and can add the
// gradient that arrives through a residual connection in the same pass (d_residual).
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

// d_x[rows, C] = (d_residual != nullptr ? d_residual : d_x) + the LayerNorm's input
// gradient, element-wise: with d_residual null that accumulates (d_x +=); otherwise it
// adds the gradient arriving through a residual connection in the same pass, and
// d_residual may be d_x itself or another buffer of rows x C (any other overlap with d_x
// is undefined). d_gamma[C] and d_beta[C] accumulate (+=, float). Arithmetic is float:
//   xhat = (x - mean) * rstd,  d_xhat = d_y * gamma,
//   d_x  = rstd * (d_xhat - mean(d_xhat) - xhat * mean(d_xhat * xhat)).
// Deterministic: the same inputs give the same bits on every run and every GPU (the grid
// is a function of rows and C alone, the sums have a fixed order, there are no atomics).
// Uses stream-ordered scratch memory (cudaMallocAsync): RESOURCE_EXHAUSTED if it cannot be
// had; INVALID_ARGUMENT for rows < 0 or C <= 0.
template <typename T>
absl::Status LayerNormBackward(const T* d_y, const T* x, const T* gamma, const float* mean,
                               const float* rstd, const T* d_residual, T* d_x, float* d_gamma,
                               float* d_beta, int rows, int C, cudaStream_t stream);

// The accumulating form: d_x += the input gradient (d_residual null above).
template <typename T>
inline absl::Status LayerNormBackward(const T* d_y, const T* x, const T* gamma, const float* mean,
                                      const float* rstd, T* d_x, float* d_gamma, float* d_beta,
                                      int rows, int C, cudaStream_t stream) {
  return LayerNormBackward<T>(d_y, x, gamma, mean, rstd, /*d_residual=*/nullptr, d_x, d_gamma,
                              d_beta, rows, C, stream);
}

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_LAYERNORM_H_
