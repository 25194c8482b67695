// CUDA runtime errors as absl::Status, for host code around the CUDA kernels.
//
//   RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(...), "copying the logits"));
#ifndef MTRAIN_KERNELS_CUDA_CUDA_STATUS_H_
#define MTRAIN_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"

namespace mtrain::cuda {

// OK for cudaSuccess; otherwise INTERNAL naming `what` and CUDA's error (name and text).
// Out-of-memory is RESOURCE_EXHAUSTED, so callers can tell it apart.
inline absl::Status CudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string text =
      what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  return error == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(text)
                                            : absl::InternalError(text);
}

// The error of the last kernel launch on this thread (launches report asynchronously).
inline absl::Status LastLaunchStatus(const std::string& kernel) {
  return CudaStatus(cudaGetLastError(), "launching " + kernel);
}

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_CUDA_STATUS_H_
