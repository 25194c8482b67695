// Data-parallel gradient all-reduce overlapped with the backward pass on the GPU: as each
// layer's gradients become final (the last microbatch's backward has passed the layer),
// the compute stream records an event and the layer's contiguous gradient range is queued;
// a communication thread waits for each event and all-reduces the range, while the
// compute stream goes on with the layers below. The group is NCCL (device memory: reduced
// in place on NCCL's stream) or a host group such as Gloo (the range staged through host
// memory on the thread's own stream: the way when several ranks share one GPU). Ranges
// are reduced in the order they were queued, identically on every replica, so the
// collectives match up across ranks. A range queued with a root is summed into that
// member only (ZeRO-1: the replica that updates those parameters; the bytes of a
// reduce-scatter instead of an all-reduce's).
//
//   OverlappedAllReduce reducer(group, /*on_device=*/true, device);
//   reducer.Enqueue(compute_stream, grads + begin, count);  // per ready range
//   RETURN_IF_ERROR(reducer.Finish());                        // before the optimizer
#ifndef MTRAIN_WORKER_ENGINE_CUDA_OVERLAPPED_ALL_REDUCE_H_
#define MTRAIN_WORKER_ENGINE_CUDA_OVERLAPPED_ALL_REDUCE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "worker/engine/cuda/device_collectives.h"
#include "worker/parallel/communicator.h"

namespace mtrain::cuda {

class OverlappedAllReduce {
 public:
  // `group` must outlive this object: on_device, it reduces device buffers (NCCL);
  // otherwise host buffers (the ranges are staged). `device`: the CUDA device of the
  // gradients.
  OverlappedAllReduce(Communicator* group, bool on_device, int device);
  ~OverlappedAllReduce();
  OverlappedAllReduce(const OverlappedAllReduce&) = delete;
  OverlappedAllReduce& operator=(const OverlappedAllReduce&) = delete;

  // Queues the SUM all-reduce of data[0, count) (with root >= 0: the SUM reduce into
  // member `root`) once the work enqueued so far on `stream` has produced it. After a
  // failure further ranges are skipped; Finish reports it.
  absl::Status Enqueue(cudaStream_t stream, float* data, size_t count, int root = -1);
  // Waits until every queued range is reduced; the first error, if any (then the group is
  // unusable, as after any collective failure).
  absl::Status Finish();
  // Seconds the communication thread spent waiting for and in the all-reduces up to the
  // last Finish (since the Finish before it).
  double last_busy_seconds() const { return last_busy_seconds_; }

 private:
  struct Range {
    cudaEvent_t ready;
    float* data;
    size_t count;
    int root;  // -1: all-reduce
  };
  void Loop();

  const int device_;
  DeviceCollectives collectives_;  // used by the thread only
  Mutex mutex_;
  std::vector<cudaEvent_t> free_events_ ABSL_GUARDED_BY(mutex_);
  CondVar changed_;
  std::deque<Range> queue_ ABSL_GUARDED_BY(mutex_);
  int in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mutex_);
  double busy_seconds_ ABSL_GUARDED_BY(mutex_) = 0;  // written by the thread
  double last_busy_seconds_ = 0;
  std::thread thread_;
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_OVERLAPPED_ALL_REDUCE_H_
