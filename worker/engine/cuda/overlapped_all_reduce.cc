#include "worker/engine/cuda/overlapped_all_reduce.h"

#include <chrono>
#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace mtrain::cuda {

OverlappedAllReduce::OverlappedAllReduce(Communicator* group, bool on_device, int device)
    : device_(device), collectives_(group, on_device), thread_([this] { Loop(); }) {}

OverlappedAllReduce::~OverlappedAllReduce() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  for (const Range& range : queue_) cudaEventDestroy(range.ready);
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
}

absl::Status OverlappedAllReduce::Enqueue(cudaStream_t stream, float* data, size_t count) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
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
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Range{event, data, count});
    ++in_flight_;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status OverlappedAllReduce::Finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return in_flight_ == 0; });
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
  std::unique_lock<std::mutex> lock(mutex_);
  status_ = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                       "creating the gradient all-reduce's stream");
  while (true) {
    changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_ and nothing left
    const Range range = queue_.front();
    queue_.pop_front();
    const bool skip = !status_.ok();
    lock.unlock();
    absl::Status status;
    if (!skip) {
      const auto start = std::chrono::steady_clock::now();
      status = CudaStatus(cudaEventSynchronize(range.ready), "waiting for gradients");
      if (status.ok()) {
        status = collectives_.AllReduce(range.data, range.count, ReduceOp::kSum, stream);
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      lock.lock();
      busy_seconds_ += seconds;
    } else {
      lock.lock();
    }
    if (!status.ok() && status_.ok()) status_ = status;
    free_events_.push_back(range.ready);
    --in_flight_;
    changed_.notify_all();
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
}

}  // namespace mtrain::cuda
