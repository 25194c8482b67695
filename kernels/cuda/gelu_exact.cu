#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gelu_exact.h"

namespace mtrain::cuda {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr int kThreads = 256;

template <typename T>
__global__ void GeluExactForwardKernel(const T* x, T* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]);
    y[i] = FromFloat<T>(0.5f * v * (1.0f + erff(v * kInvSqrt2)));
  }
}

template <typename T>
__global__ void GeluExactBackwardKernel(const T* d_y, const T* x, T* d_x, size_t n,
                                        bool accumulate) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]);
    const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    const float g = ToFloat(d_y[i]) * (cdf + v * pdf);
    d_x[i] = FromFloat<T>(accumulate ? ToFloat(d_x[i]) + g : g);
  }
}

}  // namespace

template <typename T>
absl::Status GeluExactForward(const T* x, T* y, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  GeluExactForwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  return LastLaunchStatus("GeluExactForward");
}

template <typename T>
absl::Status GeluExactBackward(const T* d_y, const T* x, T* d_x, size_t n, cudaStream_t stream,
                               bool accumulate) {
  if (n == 0) return absl::OkStatus();
  GeluExactBackwardKernel<T>
      <<<GridFor(n, kThreads), kThreads, 0, stream>>>(d_y, x, d_x, n, accumulate);
  return LastLaunchStatus("GeluExactBackward");
}

#define MTRAIN_INSTANTIATE_GELU_EXACT(T)                                         \
  template absl::Status GeluExactForward<T>(const T*, T*, size_t, cudaStream_t); \
  template absl::Status GeluExactBackward<T>(const T*, const T*, T*, size_t, cudaStream_t, bool);
MTRAIN_INSTANTIATE_GELU_EXACT(float)
MTRAIN_INSTANTIATE_GELU_EXACT(__nv_bfloat16)
MTRAIN_INSTANTIATE_GELU_EXACT(__half)
#undef MTRAIN_INSTANTIATE_GELU_EXACT

}  // namespace mtrain::cuda
