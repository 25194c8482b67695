#include "worker/engine/cuda/overlapped_all_reduce.h"

#include <chrono>
#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace mtrain::cuda {

OverlappedAllReduce::OverlappedAllReduce(Communicator* group, bool on_device, int device)
    : device_(device), collectives_(group, on_device), thread_([this] { Loop(); }) {}

OverlappedAllReduce::~OverlappedAllReduce() {
  {
    MutexLock lock(&mutex_);
    stop_ = true;
  }
  changed_.SignalAll();
  thread_.join();
  for (const Range& range : queue_) cudaEventDestroy(range.ready);
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
}

absl::Status OverlappedAllReduce::Enqueue(cudaStream_t stream, float* data, size_t count,
                                          int root) {
  cudaEvent_t event = nullptr;
  {
    MutexLock lock(&mutex_);
    if (!status_.ok()) return absl::OkStatus();  // Finish reports the first failure
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (event == nullptr) {
    // Timing off: the event only orders work, and a timing event costs more to record.
    absl::Status created =
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "creating an event");
    if (!created.ok()) return created;
  }
  absl::Status recorded = CudaStatus(cudaEventRecord(event, stream), "recording gradients ready");
  if (!recorded.ok()) {
    cudaEventDestroy(event);
    return recorded;
  }
  {
    MutexLock lock(&mutex_);
    queue_.push_back(Range{event, data, count, root});
    ++in_flight_;
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status OverlappedAllReduce::Finish() {
  MutexLock lock(&mutex_);
  while (in_flight_ != 0) changed_.Wait(&mutex_);
  last_busy_seconds_ = busy_seconds_;
  busy_seconds_ = 0;
  return status_;
}

void OverlappedAllReduce::Loop() {
  // This thread's CUDA calls (event waits, staging copies, NCCL's stream) go to the
  // buffers' device. Its own non-blocking stream carries the staging copies, so they
  // overlap the compute stream's kernels.
  cudaSetDevice(device_);
  cudaStream_t stream = nullptr;
  MutexLock lock(&mutex_);
  status_ = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                       "creating the gradient all-reduce's stream");
  while (true) {
    while (!stop_ && queue_.empty()) changed_.Wait(&mutex_);
    if (queue_.empty()) break;  // stop_ and nothing left
    const Range range = queue_.front();
    queue_.pop_front();
    const bool skip = !status_.ok();
    // Unlocked while it waits and reduces, so that Enqueue can go on queueing ranges.
    mutex_.Unlock();
    absl::Status status;
    if (!skip) {
      const auto start = std::chrono::steady_clock::now();
      status = CudaStatus(cudaEventSynchronize(range.ready), "waiting for gradients");
      if (status.ok()) {
        status = range.root < 0
                     ? collectives_.AllReduce(range.data, range.count, ReduceOp::kSum, stream)
                     : collectives_.Reduce(range.data, range.count, range.root, stream);
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      mutex_.Lock();
      busy_seconds_ += seconds;
    } else {
      mutex_.Lock();
    }
    if (!status.ok() && status_.ok()) status_ = status;
    free_events_.push_back(range.ready);
    --in_flight_;
    changed_.SignalAll();
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
}

}  // namespace mtrain::cuda
