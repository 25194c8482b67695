// Dropout on the GPU: the same functions as kernels/dropout.h, on device memory, enqueued
// on `stream`. The mask is the CPU's counter-based one (dropout_mask.cuh): element i is
// kept iff keep(key, index_base + i), so the GPU drops exactly what the CPU drops and the
// backward regenerates the forward's mask. T is float, __nv_bfloat16 or __half; arithmetic
// is in float, and for float it is the CPU's (same scale, same roundings): bit-identical.
#ifndef MTRAIN_KERNELS_CUDA_DROPOUT_H_
#define MTRAIN_KERNELS_CUDA_DROPOUT_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mtrain::cuda {

// y[i] = keep(key, index_base + i) ? x[i] * (1 / (1 - p)) : 0, for i in [0, n); y may
// equal x. p == 0 copies x (nothing to do when y == x). INVALID_ARGUMENT unless
// 0 <= p <= 1.
template <typename T>
absl::Status DropoutForward(const T* x, T* y, size_t n, float p, uint64_t key, uint64_t index_base,
                            cudaStream_t stream);

// d_x[i] += keep(key, index_base + i) ? d_y[i] * (1 / (1 - p)) : 0; p == 0: d_x += d_y.
// Dropped elements of d_x are not written. With accumulate false, d_x is overwritten
// instead (dropped elements become 0): the same values as accumulating into zeros, without
// zeroing d_x first.
template <typename T>
absl::Status DropoutBackward(const T* d_y, T* d_x, size_t n, float p, uint64_t key,
                             uint64_t index_base, cudaStream_t stream, bool accumulate = true);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_DROPOUT_H_
