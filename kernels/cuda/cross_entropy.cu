#include <cstdint>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

// Combines two (max, sum relative to max) pairs of an online softmax.
__device__ __forceinline__ void Merge(float& max, float& sum, float other_max, float other_sum) {
  if (other_max == -INFINITY) return;
  if (max == -INFINITY) {
    max = other_max;
    sum = other_sum;
    return;
  }
  const float m = fmaxf(max, other_max);
  sum = sum * expf(max - m) + other_sum * expf(other_max - m);
  max = m;
}

// 16-byte vectors of logits: 8 bf16/fp16 or 4 floats. A row is read through them where its
// start is 16-byte aligned (cols a multiple of the width), its tail and odd rows scalar.
template <typename T>
constexpr int kVector = 16 / sizeof(T);

template <typename T>
__device__ __forceinline__ void LoadVector(const T* p, float (&out)[kVector<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVector<T>; ++k) out[k] = ToFloat(v[k]);
}

template <typename T>
__device__ __forceinline__ void StoreVector(T* p, const float (&in)[kVector<T>]) {
  uint4 raw;
  T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVector<T>; ++k) v[k] = FromFloat<T>(in[k]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// Columns [0, vector_end) go by vectors; none unless every row starts 16-byte aligned.
template <typename T>
__device__ __forceinline__ int VectorEnd(const VocabShard& shard, bool aligned) {
  return aligned ? shard.valid_cols / kVector<T> * kVector<T> : 0;
}

template <typename T>
bool RowsAligned(const VocabShard& shard, const T* a, const T* b) {
  auto aligned = [](const T* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return shard.cols % kVector<T> == 0 && aligned(a) && aligned(b);
}

// One block per row. Each thread keeps a running (max, sum of exp relative to it): one
// exponential per logit, plus one per vector when the max moves.
template <typename T>
__global__ void LocalStatsKernel(const T* logits, const int32_t* targets, VocabShard shard,
                                 float* local_max, float* local_sum_exp, float* target_logit,
                                 bool aligned) {
  __shared__ float scratch_max[32];
  __shared__ float scratch_sum[32];
  const size_t row = blockIdx.x;
  const T* x = logits + row * shard.cols;
  float max = -INFINITY, sum = 0;
  const int vector_end = VectorEnd<T>(shard, aligned);
  for (int c = threadIdx.x * kVector<T>; c < vector_end; c += blockDim.x * kVector<T>) {
    float v[kVector<T>];
    LoadVector(x + c, v);
    float m = max;
#pragma unroll
    for (int k = 0; k < kVector<T>; ++k) m = fmaxf(m, v[k]);
    float s = max == -INFINITY ? 0.0f : sum * expf(max - m);
#pragma unroll
    for (int k = 0; k < kVector<T>; ++k) s += expf(v[k] - m);
    max = m;
    sum = s;
  }
  for (int c = vector_end + threadIdx.x; c < shard.valid_cols; c += blockDim.x) {
    const float v = ToFloat(x[c]);
    if (v > max) {
      sum = (max == -INFINITY ? 0.0f : sum * expf(max - v)) + 1.0f;
      max = v;
    } else {
      sum += expf(v - max);
    }
  }
  // Warp, then block, merges of the (max, sum) pairs.
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    Merge(max, sum, other_max, other_sum);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    scratch_max[warp] = max;
    scratch_sum[warp] = sum;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    max = lane < warps ? scratch_max[lane] : -INFINITY;
    sum = lane < warps ? scratch_sum[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other_max = __shfl_xor_sync(0xffffffffu, max, offset);
      const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
      Merge(max, sum, other_max, other_sum);
    }
    if (lane == 0) {
      local_max[row] = max;
      local_sum_exp[row] = sum;
      const int64_t local = int64_t(targets[row]) - shard.col_start;
      target_logit[row] = (local >= 0 && local < shard.valid_cols) ? ToFloat(x[local]) : 0.0f;
    }
  }
}

__global__ void RescaleKernel(const float* local_max, const float* global_max, float* sum_exp,
                              int rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows && sum_exp[r] != 0.0f) sum_exp[r] *= expf(local_max[r] - global_max[r]);
}

__global__ void LossesKernel(const float* max, const float* sum_exp, const float* target_logit,
                             int rows, float* losses) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) losses[r] = logf(sum_exp[r]) + max[r] - target_logit[r];
}

template <typename T>
__global__ void BackwardKernel(const T* logits, const int32_t* targets, const float* max,
                               const float* sum_exp, VocabShard shard, float d_loss, T* d_logits,
                               bool accumulate, bool aligned) {
  const size_t row = blockIdx.x;
  const T* x = logits + row * shard.cols;
  T* d = d_logits + row * shard.cols;
  const float m = max[row];
  const float scale = d_loss / sum_exp[row];
  const int64_t target = int64_t(targets[row]) - shard.col_start;
  const int vector_end = VectorEnd<T>(shard, aligned);
  for (int c = threadIdx.x * kVector<T>; c < vector_end; c += blockDim.x * kVector<T>) {
    float v[kVector<T>], old[kVector<T>];
    LoadVector(x + c, v);
    if (accumulate) LoadVector(d + c, old);
#pragma unroll
    for (int k = 0; k < kVector<T>; ++k) {
      float g = expf(v[k] - m) * scale;
      if (c + k == target) g -= d_loss;
      v[k] = accumulate ? old[k] + g : g;
    }
    StoreVector(d + c, v);
  }
  for (int c = vector_end + threadIdx.x; c < shard.valid_cols; c += blockDim.x) {
    float g = expf(ToFloat(x[c]) - m) * scale;
    if (c == target) g -= d_loss;
    d[c] = FromFloat<T>(accumulate ? ToFloat(d[c]) + g : g);
  }
  // Overwriting: the padding columns' gradient is 0 (the output layer's backward reads it).
  if (!accumulate) {
    for (int c = shard.valid_cols + threadIdx.x; c < shard.cols; c += blockDim.x) {
      d[c] = FromFloat<T>(0.0f);
    }
  }
}

absl::Status CheckShard(const VocabShard& s) {
  if (s.rows < 0 || s.cols < 0 || s.valid_cols < 0 || s.valid_cols > s.cols) {
    return absl::InvalidArgumentError("VocabShard: need rows >= 0 and 0 <= valid_cols <= cols");
  }
  return absl::OkStatus();
}

}  // namespace

template <typename T>
absl::Status CrossEntropyLocalStats(const T* logits, const int32_t* targets,
                                    const VocabShard& shard, float* local_max, float* local_sum_exp,
                                    float* target_logit, cudaStream_t stream) {
  if (absl::Status s = CheckShard(shard); !s.ok() || shard.rows == 0) return s;
  LocalStatsKernel<T><<<shard.rows, kThreads, 0, stream>>>(logits, targets, shard, local_max,
                                                           local_sum_exp, target_logit,
                                                           RowsAligned(shard, logits, logits));
  return LastLaunchStatus("CrossEntropyLocalStats");
}

absl::Status CrossEntropyRescaleSums(const float* local_max, const float* global_max,
                                     float* sum_exp, int rows, cudaStream_t stream) {
  if (rows <= 0) return absl::OkStatus();
  RescaleKernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(local_max, global_max,
                                                                           sum_exp, rows);
  return LastLaunchStatus("CrossEntropyRescaleSums");
}

absl::Status CrossEntropyLosses(const float* max, const float* sum_exp, const float* target_logit,
                                int rows, float* losses, cudaStream_t stream) {
  if (rows <= 0) return absl::OkStatus();
  LossesKernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      max, sum_exp, target_logit, rows, losses);
  return LastLaunchStatus("CrossEntropyLosses");
}

template <typename T>
absl::Status CrossEntropyBackward(const T* logits, const int32_t* targets, const float* max,
                                  const float* sum_exp, const VocabShard& shard,
                                  float d_loss_per_token, T* d_logits, cudaStream_t stream,
                                  bool accumulate) {
  if (absl::Status s = CheckShard(shard); !s.ok() || shard.rows == 0) return s;
  BackwardKernel<T><<<shard.rows, kThreads, 0, stream>>>(
      logits, targets, max, sum_exp, shard, d_loss_per_token, d_logits, accumulate,
      RowsAligned(shard, logits, static_cast<const T*>(d_logits)));
  return LastLaunchStatus("CrossEntropyBackward");
}

template absl::Status CrossEntropyLocalStats<float>(const float*, const int32_t*, const VocabShard&,
                                                    float*, float*, float*, cudaStream_t);
template absl::Status CrossEntropyLocalStats<__nv_bfloat16>(const __nv_bfloat16*, const int32_t*,
                                                            const VocabShard&, float*, float*,
                                                            float*, cudaStream_t);
template absl::Status CrossEntropyLocalStats<__half>(const __half*, const int32_t*,
                                                     const VocabShard&, float*, float*, float*,
                                                     cudaStream_t);
template absl::Status CrossEntropyBackward<float>(const float*, const int32_t*, const float*,
                                                  const float*, const VocabShard&, float, float*,
                                                  cudaStream_t, bool);
template absl::Status CrossEntropyBackward<__nv_bfloat16>(const __nv_bfloat16*, const int32_t*,
                                                          const float*, const float*,
                                                          const VocabShard&, float, __nv_bfloat16*,
                                                          cudaStream_t, bool);
template absl::Status CrossEntropyBackward<__half>(const __half*, const int32_t*, const float*,
                                                   const float*, const VocabShard&, float, __half*,
                                                   cudaStream_t, bool);

}  // namespace mtrain::cuda
