// The most heap memory in use at the moments a caller samples it, above a baseline taken
// before the owner allocated anything: the CPU engine's memory report, i.e. its own
// allocations (parameters, gradients, optimizer state, activations, workspace), not the
// data set, code and communicator buffers the process held before it was built. Other
// threads' allocations made meanwhile are counted too. OpenBLAS's own per-thread buffers
// are mapped outside the heap and not counted.
#ifndef MTRAIN_WORKER_ENGINE_HEAP_PEAK_H_
#define MTRAIN_WORKER_ENGINE_HEAP_PEAK_H_

#include <cstdint>

namespace mtrain {

// Bytes in use now: glibc's arenas plus its directly mapped blocks (mallinfo2). 0 where
// the allocator is not glibc's (e.g. under AddressSanitizer, which replaces it).
int64_t HeapBytesInUse();

class HeapPeak {
 public:
  // `baseline`: HeapBytesInUse() before the owner's allocations.
  explicit HeapPeak(int64_t baseline = 0) : baseline_(baseline) {}
  // Call where the usage peaks (the CPU engine: after each microbatch's forward and
  // backward); costs microseconds.
  void Sample();
  // The peak less the baseline (0 before the first sample).
  int64_t peak_bytes() const { return peak_bytes_ > baseline_ ? peak_bytes_ - baseline_ : 0; }

 private:
  int64_t baseline_;
  int64_t peak_bytes_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_HEAP_PEAK_H_
