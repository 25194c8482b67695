// Element-wise helpers the GPU model needs between the kernels proper: residual additions
// and storage-type conversions (fp32 masters to bf16 or fp16 working copies and back). On
// device memory, enqueued on `stream`; arithmetic is in float.
#ifndef MTRAIN_KERNELS_CUDA_ELEMENTWISE_H_
#define MTRAIN_KERNELS_CUDA_ELEMENTWISE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"

namespace mtrain::cuda {

// out[i] = a[i] + b[i], summed in float and rounded once to T (float, __nv_bfloat16 or
// __half). out may equal a or b.
template <typename T>
absl::Status AddTensors(const T* a, const T* b, T* out, size_t n, cudaStream_t stream);

// out[i] = in[i] converted: float -> __nv_bfloat16 and float -> __half round to nearest
// even (to __half, |in| >= 65520 becomes inf); __nv_bfloat16 -> float and __half -> float
// are exact; same-type conversions copy the bits (nothing to do when out == in). Otherwise
// in and out must not overlap. Supported: float, __nv_bfloat16 and __half each to itself
// and to and from float.
template <typename From, typename To>
absl::Status ConvertTensor(const From* in, To* out, size_t n, cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_ELEMENTWISE_H_
