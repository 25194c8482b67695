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

absl::Status DeviceCollectives::Reduce(float* data, size_t n, int root, cudaStream_t stream) {
  if (size() == 1 || n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "the work before a reduce"));
  if (device_memory_) return group_->Reduce(data, n, ReduceOp::kSum, root);
  if (host_.size() < n) host_.resize(n);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host_.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
      "staging a reduce on the host"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "staging a reduce on the host"));
  RETURN_IF_ERROR(group_->Reduce(host_.data(), n, ReduceOp::kSum, root));
  if (group_->rank() != root) return absl::OkStatus();  // nothing of use came back
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(data, host_.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
      "copying a reduce's result back to the device"));
  return CudaStatus(cudaStreamSynchronize(stream), "copying a reduce's result back to the device");
}

absl::Status DeviceCollectives::AllGather(const float* in, float* out, size_t n,
                                          cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if (size() == 1) {
    return CudaStatus(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                      "an all-gather of one member");
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "the work before an all-gather"));
  if (device_memory_) return group_->AllGather(in, out, n);
  const size_t total = n * static_cast<size_t>(size());
  if (host_in_.size() < n) host_in_.resize(n);
  if (host_.size() < total) host_.resize(total);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host_in_.data(), in, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
      "staging an all-gather on the host"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "staging an all-gather on the host"));
  RETURN_IF_ERROR(group_->AllGather(host_in_.data(), host_.data(), n));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(out, host_.data(), total * sizeof(float), cudaMemcpyHostToDevice, stream),
      "copying an all-gather's result to the device"));
  return CudaStatus(cudaStreamSynchronize(stream), "copying an all-gather's result to the device");
}

absl::Status DeviceCollectives::ReduceScatter(const float* in, float* out, size_t n,
                                              cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if (size() == 1) {
    return CudaStatus(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                      "a reduce-scatter of one member");
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "the work before a reduce-scatter"));
  if (device_memory_) return group_->ReduceScatter(in, out, n, ReduceOp::kSum);
  const size_t total = n * static_cast<size_t>(size());
  if (host_in_.size() < total) host_in_.resize(total);
  if (host_.size() < n) host_.resize(n);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host_in_.data(), in, total * sizeof(float), cudaMemcpyDeviceToHost, stream),
      "staging a reduce-scatter on the host"));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream), "staging a reduce-scatter on the host"));
  RETURN_IF_ERROR(group_->ReduceScatter(host_in_.data(), host_.data(), n, ReduceOp::kSum));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(out, host_.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
      "copying a reduce-scatter's result to the device"));
  return CudaStatus(cudaStreamSynchronize(stream),
                    "copying a reduce-scatter's result to the device");
}

}  // namespace mtrain::cuda
