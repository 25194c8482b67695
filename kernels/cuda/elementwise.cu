#include <type_traits>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void AddKernel(const T* a, const T* b, T* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
  }
}

template <typename From, typename To>
__global__ void ConvertKernel(const From* in, To* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<To>(ToFloat(in[i]));
  }
}

}  // namespace

template <typename T>
absl::Status AddTensors(const T* a, const T* b, T* out, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  AddKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(a, b, out, n);
  return LastLaunchStatus("AddTensors");
}

template <typename From, typename To>
absl::Status ConvertTensor(const From* in, To* out, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if constexpr (std::is_same_v<From, To>) {
    // A copy of the bits: a round trip through float would canonicalise bf16 and fp16 NaNs.
    if (in == out) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(out, in, n * sizeof(To), cudaMemcpyDeviceToDevice, stream),
                      "ConvertTensor (copy)");
  }
  ConvertKernel<From, To><<<GridFor(n, kThreads), kThreads, 0, stream>>>(in, out, n);
  return LastLaunchStatus("ConvertTensor");
}

template absl::Status AddTensors<float>(const float*, const float*, float*, size_t, cudaStream_t);
template absl::Status AddTensors<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                __nv_bfloat16*, size_t, cudaStream_t);
template absl::Status AddTensors<__half>(const __half*, const __half*, __half*, size_t,
                                         cudaStream_t);
template absl::Status ConvertTensor<float, float>(const float*, float*, size_t, cudaStream_t);
template absl::Status ConvertTensor<float, __nv_bfloat16>(const float*, __nv_bfloat16*, size_t,
                                                          cudaStream_t);
template absl::Status ConvertTensor<__nv_bfloat16, float>(const __nv_bfloat16*, float*, size_t,
                                                          cudaStream_t);
template absl::Status ConvertTensor<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*,
                                                                  __nv_bfloat16*, size_t,
                                                                  cudaStream_t);
template absl::Status ConvertTensor<float, __half>(const float*, __half*, size_t, cudaStream_t);
template absl::Status ConvertTensor<__half, float>(const __half*, float*, size_t, cudaStream_t);
template absl::Status ConvertTensor<__half, __half>(const __half*, __half*, size_t, cudaStream_t);

}  // namespace mtrain::cuda
