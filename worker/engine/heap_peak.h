// The most heap memory this process has had in use at the moments a caller samples it: the
// CPU engine's memory report (its parameters, gradients, optimizer state, activations and
// workspace all live on the heap; so do the process's other, much smaller, allocations).
// OpenBLAS's own per-thread buffers are mapped outside the heap and not counted.
#ifndef MTRAIN_WORKER_ENGINE_HEAP_PEAK_H_
#define MTRAIN_WORKER_ENGINE_HEAP_PEAK_H_

#include <cstdint>

namespace mtrain {

// Bytes in use now: glibc's arenas plus its directly mapped blocks (mallinfo2). 0 where
// the allocator is not glibc's (e.g. under AddressSanitizer, which replaces it).
int64_t HeapBytesInUse();

class HeapPeak {
 public:
  // Call where the usage peaks (the CPU engine: after each microbatch's forward and
  // backward); costs microseconds.
  void Sample();
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  int64_t peak_bytes_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_HEAP_PEAK_H_
