#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/cuda_device_query.h"

namespace mtrain {
namespace {

std::string CudaErrorText(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

// out[i] = a * x[i] + i, a pattern the host can check exactly in float.
__global__ void SelfTestKernel(float a, const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + static_cast<float>(i);
}

}  // namespace

absl::StatusOr<std::vector<CudaDeviceInfo>> QueryCudaDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Clear the sticky error so later CUDA calls in this process are not poisoned.
    cudaGetLastError();
    return absl::UnavailableError("no CUDA device: " + CudaErrorText(error));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: the driver reports 0");
  std::vector<CudaDeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    const cudaError_t prop_error = cudaGetDeviceProperties(&prop, i);
    if (prop_error != cudaSuccess) {
      return absl::InternalError("cudaGetDeviceProperties(" + std::to_string(i) +
                                 "): " + CudaErrorText(prop_error));
    }
    CudaDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.compute_capability_major = prop.major;
    info.compute_capability_minor = prop.minor;
    info.multiprocessor_count = prop.multiProcessorCount;
    devices.push_back(info);
  }
  return devices;
}

absl::Status RunCudaSelfTest(int device) {
  constexpr int kN = 1000;
  constexpr float kA = 3.0f;
  std::vector<float> x(kN), out(kN, -1.0f);
  for (int i = 0; i < kN; ++i) x[i] = static_cast<float>(i % 7);
  float* d_x = nullptr;
  float* d_out = nullptr;
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) error = cudaMalloc(&d_x, kN * sizeof(float));
  if (error == cudaSuccess) error = cudaMalloc(&d_out, kN * sizeof(float));
  if (error == cudaSuccess) {
    error = cudaMemcpy(d_x, x.data(), kN * sizeof(float), cudaMemcpyHostToDevice);
  }
  if (error == cudaSuccess) {
    SelfTestKernel<<<(kN + 255) / 256, 256>>>(kA, d_x, d_out, kN);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess) {
    error = cudaMemcpy(out.data(), d_out, kN * sizeof(float), cudaMemcpyDeviceToHost);
  }
  cudaFree(d_x);
  cudaFree(d_out);
  if (error != cudaSuccess) {
    return absl::InternalError("CUDA self-test on device " + std::to_string(device) + ": " +
                               CudaErrorText(error));
  }
  for (int i = 0; i < kN; ++i) {
    if (out[i] != kA * x[i] + static_cast<float>(i)) {
      return absl::InternalError("CUDA self-test on device " + std::to_string(device) +
                                 ": wrong result at element " + std::to_string(i));
    }
  }
  return absl::OkStatus();
}

}  // namespace mtrain
