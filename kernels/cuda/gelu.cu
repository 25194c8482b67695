#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gelu.h"

namespace mtrain::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int kThreads = 256;

template <typename T>
__global__ void GeluForwardKernel(const T* x, T* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]);
    const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
    y[i] = FromFloat<T>(0.5f * v * (1.0f + tanhf(inner)));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(const T* d_y, const T* x, T* d_x, size_t n, bool accumulate) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]);
    const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float t = tanhf(inner);
    const float d_inner = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    const float grad = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * d_inner;
    const float g = ToFloat(d_y[i]) * grad;
    d_x[i] = FromFloat<T>(accumulate ? ToFloat(d_x[i]) + g : g);
  }
}

}  // namespace

template <typename T>
absl::Status GeluForward(const T* x, T* y, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  GeluForwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, y, n);
  return LastLaunchStatus("GeluForward");
}

template <typename T>
absl::Status GeluBackward(const T* d_y, const T* x, T* d_x, size_t n, cudaStream_t stream,
                          bool accumulate) {
  if (n == 0) return absl::OkStatus();
  GeluBackwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(d_y, x, d_x, n, accumulate);
  return LastLaunchStatus("GeluBackward");
}

template absl::Status GeluForward<float>(const float*, float*, size_t, cudaStream_t);
template absl::Status GeluForward<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, size_t,
                                                 cudaStream_t);
template absl::Status GeluForward<__half>(const __half*, __half*, size_t, cudaStream_t);
template absl::Status GeluBackward<float>(const float*, const float*, float*, size_t, cudaStream_t,
                                          bool);
template absl::Status GeluBackward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                  __nv_bfloat16*, size_t, cudaStream_t, bool);
template absl::Status GeluBackward<__half>(const __half*, const __half*, __half*, size_t,
                                           cudaStream_t, bool);

}  // namespace mtrain::cuda
