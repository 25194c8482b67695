// What CUDA devices this process can use, and a self-test that runs a kernel on one.
//
// Compiled by nvcc (cuda_device_query.cu) on every machine; on a machine without a GPU or
// driver QueryCudaDevices() returns UNAVAILABLE with CUDA's own explanation instead of
// failing, so `--device=auto` falls back to the CPU cleanly.
#ifndef MTRAIN_KERNELS_CUDA_DEVICE_QUERY_H_
#define MTRAIN_KERNELS_CUDA_DEVICE_QUERY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtrain {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int64_t total_memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
};

// Every visible device. UNAVAILABLE (with the CUDA error text) when there is no device or
// no usable driver.
absl::StatusOr<std::vector<CudaDeviceInfo>> QueryCudaDevices();

// Launches a small kernel on `device` and checks its result: proves the driver, the
// runtime and this binary's device code agree. INTERNAL on any mismatch or CUDA error.
absl::Status RunCudaSelfTest(int device);

}  // namespace mtrain

#endif  // MTRAIN_KERNELS_CUDA_DEVICE_QUERY_H_
