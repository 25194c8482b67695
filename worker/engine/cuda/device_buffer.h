// Device memory owned by one object: allocated with cudaMalloc, freed on destruction.
// Allocation failures come back as RESOURCE_EXHAUSTED naming what the memory was for, so
// a model that does not fit says which buffer did not.
//
//   ASSIGN_OR_RETURN(DeviceBuffer<float> grads, DeviceBuffer<float>::Create(n, "gradients"));
//   cudaMemsetAsync(grads.get(), 0, grads.bytes(), stream);
#ifndef MTRAIN_WORKER_ENGINE_CUDA_DEVICE_BUFFER_H_
#define MTRAIN_WORKER_ENGINE_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace mtrain::cuda {

// Bytes held by every DeviceBuffer of the process, now and at most so far (the engine's
// own memory, reported per step; CUDA's context and library workspaces are not in it).
inline std::atomic<size_t> device_buffer_bytes{0};
inline std::atomic<size_t> device_buffer_peak_bytes{0};
inline size_t DeviceBufferPeakBytes() { return device_buffer_peak_bytes.load(); }

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Create(size_t n, const std::string& what) {
    DeviceBuffer buffer;
    if (n == 0) return buffer;
    void* data = nullptr;
    const absl::Status status = CudaStatus(
        cudaMalloc(&data, n * sizeof(T)),
        absl::StrCat("allocating ", n * sizeof(T), " bytes of device memory for ", what));
    if (!status.ok()) return status;
    buffer.data_ = static_cast<T*>(data);
    buffer.size_ = n;
    const size_t now = device_buffer_bytes.fetch_add(buffer.bytes()) + buffer.bytes();
    size_t peak = device_buffer_peak_bytes.load();
    while (now > peak && !device_buffer_peak_bytes.compare_exchange_weak(peak, now)) {
    }
    return buffer;
  }
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  void Release() {
    if (data_ != nullptr) {
      cudaFree(data_);
      device_buffer_bytes.fetch_sub(bytes());
    }
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_DEVICE_BUFFER_H_
