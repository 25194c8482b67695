#include "worker/engine/cuda/device_message_pool.h"

#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace mtrain::cuda {

class DeviceMessagePool::Message : public MessageBuffer {
 public:
  Message(std::shared_ptr<DeviceMessagePool> pool, Slot slot)
      : pool_(std::move(pool)), slot_(std::move(slot)) {}
  ~Message() override { pool_->Return(std::move(slot_)); }
  float* data() override { return slot_.memory.get(); }
  size_t size() const override { return slot_.memory.size(); }

 private:
  std::shared_ptr<DeviceMessagePool> pool_;
  Slot slot_;
};

std::shared_ptr<DeviceMessagePool> DeviceMessagePool::Create(cudaStream_t stream) {
  return std::shared_ptr<DeviceMessagePool>(new DeviceMessagePool(stream));
}

DeviceMessagePool::~DeviceMessagePool() {
  for (auto& [elements, slot] : free_) {
    if (slot.released != nullptr) cudaEventDestroy(slot.released);
  }
}

absl::StatusOr<std::unique_ptr<MessageBuffer>> DeviceMessagePool::Take(size_t elements) {
  Slot slot;
  if (auto it = free_.find(elements); it != free_.end()) {
    slot = std::move(it->second);
    free_.erase(it);
    // The compute stream may still be reading the last message held here.
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(slot.released),
                               "waiting for the last use of a pipeline message buffer"));
  } else {
    ASSIGN_OR_RETURN(slot.memory, DeviceBuffer<float>::Create(elements, "a pipeline message"));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&slot.released, cudaEventDisableTiming),
                               "creating a pipeline message event"));
  }
  return std::make_unique<Message>(shared_from_this(), std::move(slot));
}

void DeviceMessagePool::Return(Slot slot) {
  // After everything enqueued on the compute stream so far: the engine's copy out of the
  // buffer, if any. Should the record fail, the stream is waited for here instead.
  if (cudaEventRecord(slot.released, stream_) != cudaSuccess) cudaStreamSynchronize(stream_);
  const size_t elements = slot.memory.size();
  free_.emplace(elements, std::move(slot));
}

}  // namespace mtrain::cuda
