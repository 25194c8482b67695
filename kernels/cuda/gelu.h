// GeLU (tanh form, as GPT-2) on the GPU: the same functions as kernels/gelu.h, on device
// memory, enqueued on `stream`. T is float, __nv_bfloat16 or __half; arithmetic is in float.
#ifndef MTRAIN_KERNELS_CUDA_GELU_H_
#define MTRAIN_KERNELS_CUDA_GELU_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"

namespace mtrain::cuda {

// y[i] = gelu(x[i]); y may equal x.
template <typename T>
absl::Status GeluForward(const T* x, T* y, size_t n, cudaStream_t stream);

// d_x[i] += d_y[i] * gelu'(x[i]); with accumulate false, d_x[i] = d_y[i] * gelu'(x[i])
// (no need to zero d_x first).
template <typename T>
absl::Status GeluBackward(const T* d_y, const T* x, T* d_x, size_t n, cudaStream_t stream,
                          bool accumulate = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_GELU_H_
