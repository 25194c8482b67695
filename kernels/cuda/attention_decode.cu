#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 128;

// One block per (new position i, head h): the scores over the visible positions into
// global scratch, their softmax, then each output column's weighted sum of the values.
// Generation runs a handful of positions at a time, so the simple form is enough: its
// cost is reading the cache once per head.
template <typename T>
__global__ void DecodeAttentionKernel(const T* q, const T* keys, const T* values, DecodeShape s,
                                      float scale, float* scores, T* y) {
  __shared__ float scratch[32];
  const int i = blockIdx.x;
  const int h = blockIdx.y;
  const int D = s.head_dim;
  const int row = s.heads * D;
  const int kv_heads = s.kv_heads > 0 ? s.kv_heads : s.heads;
  const int kv_row = kv_heads * D;
  const int g = h / (s.heads / kv_heads);
  const int visible = s.first + i + 1;
  const T* qi = q + static_cast<size_t>(i) * s.q_stride + h * D;
  float* si = scores + (static_cast<size_t>(i) * s.heads + h) * (s.first + s.count);
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) {
    const T* k = keys + static_cast<size_t>(j) * kv_row + g * D;
    float dot = 0;
    for (int d = 0; d < D; ++d) dot += ToFloat(qi[d]) * ToFloat(k[d]);
    si[j] = dot * scale;
    local_max = fmaxf(local_max, si[j]);
  }
  const float largest = BlockMax(local_max, scratch);
  float local_sum = 0;
  for (int j = threadIdx.x; j < visible; j += blockDim.x) {
    si[j] = expf(si[j] - largest);
    local_sum += si[j];
  }
  // BlockSum's barriers also make every thread's si[] writes visible to the block.
  const float sum = BlockSum(local_sum, scratch);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < visible; ++j) {
      acc += si[j] * ToFloat(values[static_cast<size_t>(j) * kv_row + g * D + d]);
    }
    y[static_cast<size_t>(i) * row + h * D + d] = FromFloat<T>(acc / sum);
  }
}

}  // namespace

template <typename T>
absl::Status DecodeAttention(const T* q, const T* keys, const T* values, const DecodeShape& shape,
                             float* scores, T* y, cudaStream_t stream) {
  if (shape.count <= 0 || shape.heads <= 0 || shape.head_dim <= 0 || shape.first < 0 ||
      shape.q_stride < shape.heads * shape.head_dim || shape.kv_heads < 0 ||
      (shape.kv_heads > 0 && shape.heads % shape.kv_heads != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeAttention: bad shape (first ", shape.first, ", count ", shape.count,
                     ", heads ", shape.heads, ", kv_heads ", shape.kv_heads, ", head_dim ",
                     shape.head_dim, ", q_stride ", shape.q_stride, ")"));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const dim3 grid(shape.count, shape.heads);
  DecodeAttentionKernel<T><<<grid, kThreads, 0, stream>>>(q, keys, values, shape, scale, scores, y);
  return LastLaunchStatus("DecodeAttention");
}

template absl::Status DecodeAttention<float>(const float*, const float*, const float*,
                                             const DecodeShape&, float*, float*, cudaStream_t);
template absl::Status DecodeAttention<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                     const __nv_bfloat16*, const DecodeShape&,
                                                     float*, __nv_bfloat16*, cudaStream_t);
template absl::Status DecodeAttention<__half>(const __half*, const __half*, const __half*,
                                              const DecodeShape&, float*, __half*, cudaStream_t);

}  // namespace mtrain::cuda
