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

// One block per row.
template <typename T>
__global__ void LocalStatsKernel(const T* logits, const int32_t* targets, VocabShard shard,
                                 float* local_max, float* local_sum_exp, float* target_logit) {
  __shared__ float scratch_max[32];
  __shared__ float scratch_sum[32];
  const size_t row = blockIdx.x;
  const T* x = logits + row * shard.cols;
  float max = -INFINITY, sum = 0;
  for (int c = threadIdx.x; c < shard.valid_cols; c += blockDim.x) {
    Merge(max, sum, ToFloat(x[c]), 1.0f);
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
                               bool accumulate) {
  const size_t row = blockIdx.x;
  const T* x = logits + row * shard.cols;
  T* d = d_logits + row * shard.cols;
  const float m = max[row];
  const float scale = d_loss / sum_exp[row];
  const int64_t target = int64_t(targets[row]) - shard.col_start;
  for (int c = threadIdx.x; c < shard.valid_cols; c += blockDim.x) {
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
                                                           local_sum_exp, target_logit);
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
  BackwardKernel<T><<<shard.rows, kThreads, 0, stream>>>(logits, targets, max, sum_exp, shard,
                                                         d_loss_per_token, d_logits, accumulate);
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
