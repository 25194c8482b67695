// Collectives on float device buffers for the CUDA engine's tensor-parallel layers and
// gradient exchanges, over either kind of group the worker has:
//   - an NCCL group (device memory): called directly;
//   - a host group (Gloo): staged through host memory (copy out, reduce, copy back).
// NCCL is the fast path; staging lets several ranks share one GPU (NCCL refuses two ranks
// of one communicator on the same device) and runs wherever Gloo does.
//
// Each call first waits for the work already enqueued on `stream` (the data's producer)
// and returns once the result is in place: the stream's later work sees it.
//
//   DeviceCollectives tensor(groups.tensor.get(), /*device_memory=*/false);
//   RETURN_IF_ERROR(tensor.AllReduce(partial_sums, n, ReduceOp::kSum, stream));
#ifndef MTRAIN_WORKER_ENGINE_CUDA_DEVICE_COLLECTIVES_H_
#define MTRAIN_WORKER_ENGINE_CUDA_DEVICE_COLLECTIVES_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "worker/parallel/communicator.h"
#include "worker/parallel/reduce_op.h"

namespace mtrain::cuda {

class DeviceCollectives {
 public:
  // No group (or one of size 1): every call is a no-op. `group` must outlive this.
  DeviceCollectives() = default;
  DeviceCollectives(Communicator* group, bool device_memory)
      : group_(group), device_memory_(device_memory) {}

  int size() const { return group_ != nullptr ? group_->size() : 1; }
  int rank() const { return group_ != nullptr ? group_->rank() : 0; }

  // In place: data[n] (device) reduced over the group.
  absl::Status AllReduce(float* data, size_t n, ReduceOp op, cudaStream_t stream);
  // In place: data[n] (device) summed over the group into member `root`'s; the others'
  // data is left unspecified (Communicator::Reduce).
  absl::Status Reduce(float* data, size_t n, int root, cudaStream_t stream);
  // out[size() * n] (device) receives every member's in[n] (device), in group-rank order
  // (sequence parallelism's all-gather). The bits are moved, never interpreted: callers
  // may pass any data of 4-byte words. `in` and `out` must not overlap.
  absl::Status AllGather(const float* in, float* out, size_t n, cudaStream_t stream);
  // in[size() * n] (device) summed over the group; this member receives its block in
  // out[n] (device). `in` and `out` must not overlap.
  absl::Status ReduceScatter(const float* in, float* out, size_t n, cudaStream_t stream);

 private:
  Communicator* group_ = nullptr;
  bool device_memory_ = false;
  std::vector<float> host_, host_in_;  // staging for a host group
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_DEVICE_COLLECTIVES_H_
