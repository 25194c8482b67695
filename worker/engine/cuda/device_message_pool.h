// Device memory for the hidden states a PipelineExecutor moves between stages over NCCL
// (PipelineStages::NewMessage of the CUDA engine). The executor takes a buffer per
// message and drops it once it is sent or consumed, dozens of times a step; cudaMalloc
// and cudaFree (which waits for the whole device) each time would stall the pipeline, so
// dropped buffers go back to a free list by size and are handed out again.
//
// Reuse is ordered with the compute stream: dropping a buffer records an event there
// (the engine may still be copying out of it), and Take waits for that event before a
// buffer is handed out again (NCCL may write into it at once, on its own stream).
//
//   auto pool = DeviceMessagePool::Create(stream);
//   ASSIGN_OR_RETURN(std::unique_ptr<MessageBuffer> message, pool->Take(elements));
//
// One thread at a time (the executor's). Buffers keep the pool alive.
#ifndef MTRAIN_WORKER_ENGINE_CUDA_DEVICE_MESSAGE_POOL_H_
#define MTRAIN_WORKER_ENGINE_CUDA_DEVICE_MESSAGE_POOL_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/cuda/device_buffer.h"
#include "worker/parallel/pipeline_stages.h"

namespace mtrain::cuda {

class DeviceMessagePool : public std::enable_shared_from_this<DeviceMessagePool> {
 public:
  // `stream`: the compute stream that reads and writes the messages; must outlive the
  // pool's buffers.
  static std::shared_ptr<DeviceMessagePool> Create(cudaStream_t stream);
  ~DeviceMessagePool();
  DeviceMessagePool(const DeviceMessagePool&) = delete;
  DeviceMessagePool& operator=(const DeviceMessagePool&) = delete;

  // A buffer of `elements` floats on the current device, reused when one of that size is
  // free. RESOURCE_EXHAUSTED when the device has no memory left.
  absl::StatusOr<std::unique_ptr<MessageBuffer>> Take(size_t elements);

 private:
  // A buffer and the event after the compute stream's last use of it.
  struct Slot {
    DeviceBuffer<float> memory;
    cudaEvent_t released = nullptr;
  };
  class Message;
  explicit DeviceMessagePool(cudaStream_t stream) : stream_(stream) {}
  void Return(Slot slot);

  const cudaStream_t stream_;
  std::multimap<size_t, Slot> free_;
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_DEVICE_MESSAGE_POOL_H_
