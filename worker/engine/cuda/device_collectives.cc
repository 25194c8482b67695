#include "worker/engine/cuda/device_collectives.h"

#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace mtrain::cuda {

absl::Status DeviceCollectives::AllReduce(float* data, size_t n, ReduceOp op, cudaStream_t stream) {
  if (size() == 1 || n == 0) return absl::OkStatus();
  // The group works on its own stream (NCCL) or on the host (Gloo): the data must be
  // complete first.
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "the work before an all-reduce"));
  if (device_memory_) return group_->AllReduce(data, n, op);
  if (host_.size() < n) host_.resize(n);
  // Copies on `stream` and waited for: the stream is non-blocking, so copies on the
  // legacy stream would not be ordered with its kernels.
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host_.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
      "staging an all-reduce on the host"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "staging an all-reduce on the host"));
  RETURN_IF_ERROR(group_->AllReduce(host_.data(), n, op));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(data, host_.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
      "copying an all-reduce's result back to the device"));
  // host_ is reused by the next call: the copy must be done with it.
  return CudaStatus(cudaStreamSynchronize(stream),
                    "copying an all-reduce's result back to the device");
}

}  // namespace mtrain::cuda
