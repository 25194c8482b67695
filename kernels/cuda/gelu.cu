#include <cstdint>

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

__device__ __forceinline__ float GeluGrad(float v) {
  const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
  const float t = tanhf(inner);
  const float d_inner = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * d_inner;
}

template <typename T>
__global__ void GeluBackwardKernel(const T* d_y, const T* x, T* d_x, size_t n, bool accumulate) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float g = ToFloat(d_y[i]) * GeluGrad(ToFloat(x[i]));
    d_x[i] = FromFloat<T>(accumulate ? ToFloat(d_x[i]) + g : g);
  }
}

// The same on 16-byte vectors (8 bf16/fp16 or 4 floats a load): the kernel is bound by
// memory, and wide loads reach more of the bandwidth than 2-byte ones. Same arithmetic per
// element, so the results are those of the scalar kernel.
template <typename T>
__global__ void GeluBackwardVectorKernel(const T* d_y, const T* x, T* d_x, size_t vectors,
                                         bool accumulate) {
  constexpr int kWidth = 16 / sizeof(T);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < vectors;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 xr = reinterpret_cast<const uint4*>(x)[i];
    const uint4 dyr = reinterpret_cast<const uint4*>(d_y)[i];
    uint4 out = accumulate ? reinterpret_cast<const uint4*>(d_x)[i] : uint4{};
    const T* xv = reinterpret_cast<const T*>(&xr);
    const T* dyv = reinterpret_cast<const T*>(&dyr);
    T* ov = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float g = ToFloat(dyv[k]) * GeluGrad(ToFloat(xv[k]));
      ov[k] = FromFloat<T>(accumulate ? ToFloat(ov[k]) + g : g);
    }
    reinterpret_cast<uint4*>(d_x)[i] = out;
  }
}

template <typename T>
bool Aligned16(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
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
  constexpr size_t kWidth = 16 / sizeof(T);
  if (n % kWidth == 0 && Aligned16(d_y) && Aligned16(x) && Aligned16(d_x)) {
    GeluBackwardVectorKernel<T><<<GridFor(n / kWidth, kThreads), kThreads, 0, stream>>>(
        d_y, x, d_x, n / kWidth, accumulate);
    return LastLaunchStatus("GeluBackward");
  }
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
