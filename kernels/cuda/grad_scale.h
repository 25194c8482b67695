// Gradient scaling on the GPU: the sum of squares for global-norm clipping (kernels/
// grad_norm.h) and loss-scale unscaling, both detecting inf/NaN (an fp16 overflow makes
// the step be skipped; see worker/engine/loss_scaler.h). T is float, __nv_bfloat16 or
// __half.
#ifndef MTRAIN_KERNELS_CUDA_GRAD_SCALE_H_
#define MTRAIN_KERNELS_CUDA_GRAD_SCALE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"

namespace mtrain::cuda {

// *sum_of_squares (device) = sum of x[i]^2, accumulated in double over a fixed partition
// (deterministic for a given n); *found_nonfinite (device) is set to 1 if any x[i] is inf
// or NaN and otherwise left as it is, so one flag can cover several buffers.
template <typename T>
absl::Status SumOfSquaresAndNonFinite(const T* x, size_t n, double* sum_of_squares,
                                      int* found_nonfinite, cudaStream_t stream);

// x[i] *= factor (e.g. 1 / loss scale); *found_nonfinite set to 1 if any result, as stored
// in T, is inf or NaN: for __half that includes a finite float product beyond fp16's range
// (|x * factor| >= 65520 rounds to inf).
template <typename T>
absl::Status ScaleAndCheckFinite(T* x, size_t n, float factor, int* found_nonfinite,
                                 cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_GRAD_SCALE_H_
