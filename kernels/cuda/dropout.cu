#include <cmath>
#include <string>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/dropout_mask.cuh"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

// The CPU computes the scale in T; for float that is this expression, rounded the same way
// (and for bf16 or fp16 storage the arithmetic is float anyway).
float DropoutScale(float p) { return 1.0f / (1.0f - p); }

absl::Status CheckProbability(float p, const char* what) {
  if (!(p >= 0.0f && p <= 1.0f)) {  // also rejects NaN
    return absl::InvalidArgumentError(std::string(what) + ": drop probability " +
                                      std::to_string(p) + " is not in [0, 1]");
  }
  return absl::OkStatus();
}

template <typename T>
__global__ void DropoutForwardKernel(const T* x, T* y, size_t n, uint64_t key, uint64_t index_base,
                                     uint32_t threshold, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    y[i] = DropoutKeep(key, index_base + i, threshold) ? FromFloat<T>(ToFloat(x[i]) * scale)
                                                       : FromFloat<T>(0.0f);
  }
}

// threshold 0 with scale 1 is d_x += d_y exactly (every element kept, d_y * 1 is d_y).
template <typename T>
__global__ void DropoutBackwardKernel(const T* d_y, T* d_x, size_t n, uint64_t key,
                                      uint64_t index_base, uint32_t threshold, float scale,
                                      bool accumulate) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (!DropoutKeep(key, index_base + i, threshold)) {
      if (!accumulate) d_x[i] = FromFloat<T>(0.0f);
      continue;
    }
    // Explicit roundings: nvcc would otherwise fuse the multiply-add into one FMA, which
    // rounds once where the CPU (no FMA at -march=x86-64-v2) rounds twice.
    const float g = __fmul_rn(ToFloat(d_y[i]), scale);
    d_x[i] = FromFloat<T>(accumulate ? __fadd_rn(ToFloat(d_x[i]), g) : g);
  }
}

}  // namespace

template <typename T>
absl::Status DropoutForward(const T* x, T* y, size_t n, float p, uint64_t key, uint64_t index_base,
                            cudaStream_t stream) {
  if (absl::Status s = CheckProbability(p, "DropoutForward"); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  if (p == 0.0f) {
    if (y == x) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDeviceToDevice, stream),
                      "DropoutForward (p = 0 copy)");
  }
  DropoutForwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(
      x, y, n, key, index_base, DropoutThreshold(p), DropoutScale(p));
  return LastLaunchStatus("DropoutForward");
}

template <typename T>
absl::Status DropoutBackward(const T* d_y, T* d_x, size_t n, float p, uint64_t key,
                             uint64_t index_base, cudaStream_t stream, bool accumulate) {
  if (absl::Status s = CheckProbability(p, "DropoutBackward"); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  const uint32_t threshold = p == 0.0f ? 0 : DropoutThreshold(p);
  const float scale = p == 0.0f ? 1.0f : DropoutScale(p);
  DropoutBackwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(
      d_y, d_x, n, key, index_base, threshold, scale, accumulate);
  return LastLaunchStatus("DropoutBackward");
}

template absl::Status DropoutForward<float>(const float*, float*, size_t, float, uint64_t, uint64_t,
                                            cudaStream_t);
template absl::Status DropoutForward<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, size_t,
                                                    float, uint64_t, uint64_t, cudaStream_t);
template absl::Status DropoutForward<__half>(const __half*, __half*, size_t, float, uint64_t,
                                             uint64_t, cudaStream_t);
template absl::Status DropoutBackward<float>(const float*, float*, size_t, float, uint64_t,
                                             uint64_t, cudaStream_t, bool);
template absl::Status DropoutBackward<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, size_t,
                                                     float, uint64_t, uint64_t, cudaStream_t, bool);
template absl::Status DropoutBackward<__half>(const __half*, __half*, size_t, float, uint64_t,
                                              uint64_t, cudaStream_t, bool);

}  // namespace mtrain::cuda
