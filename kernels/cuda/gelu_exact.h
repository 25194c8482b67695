// GeLU in its exact (erf) form on the GPU, BERT's (issue 35): the same functions as
// kernels/gelu_exact.h, on device memory, enqueued on `stream`. T is float, __nv_bfloat16 or
// __half; arithmetic is in float (erff, expf).
#ifndef MTRAIN_KERNELS_CUDA_GELU_EXACT_H_
#define MTRAIN_KERNELS_CUDA_GELU_EXACT_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"

namespace mtrain::cuda {

// y[i] = 0.5 x (1 + erf(x / sqrt(2))); y may equal x.
template <typename T>
absl::Status GeluExactForward(const T* x, T* y, size_t n, cudaStream_t stream);

// d_x[i] += d_y[i] * (Phi(x) + x phi(x)); with accumulate false d_x is overwritten (no need
// to zero it first).
template <typename T>
absl::Status GeluExactBackward(const T* d_y, const T* x, T* d_x, size_t n, cudaStream_t stream,
                               bool accumulate = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_GELU_EXACT_H_
