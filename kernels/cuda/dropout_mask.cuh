// kernels/dropout.cc's counter-based mask on the device, shared by every CUDA kernel that
// drops (dropout itself, attention's probabilities). Whether an element is kept is a pure
// function of (key, global index): the GPU, the CPU and every parallel layout drop exactly
// the same elements, and the backward regenerates the forward's mask without storing it.
// Any change here must be made in kernels/dropout.cc too (the CUDA tests compare the two).
#ifndef MTRAIN_KERNELS_CUDA_DROPOUT_MASK_CUH_
#define MTRAIN_KERNELS_CUDA_DROPOUT_MASK_CUH_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

namespace mtrain::cuda {

// Elements whose 24-bit hash is below this are dropped: round(p * 2^24), the CPU's
// DropThreshold. Computed on the host, in double as the CPU does, so both round alike.
inline uint32_t DropoutThreshold(float p) {
  return static_cast<uint32_t>(std::lround(static_cast<double>(p) * 16777216.0));
}

// The splitmix64 finaliser (kernels/dropout.cc's Mix64). Host too, so that a test without
// a GPU can hold this copy of the mask to the CPU's.
__host__ __device__ __forceinline__ uint64_t DropoutMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The splitmix64 stream seeded with `key`, read at position `index`: kept iff its top 24
// bits are at or above `threshold` (kernels/dropout.cc's KeepWithThreshold).
__host__ __device__ __forceinline__ bool DropoutKeep(uint64_t key, uint64_t index,
                                                     uint32_t threshold) {
  const uint64_t hash = DropoutMix64(key + (index + 1) * 0x9e3779b97f4a7c15ULL);
  return (hash >> 40) >= threshold;
}

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_DROPOUT_MASK_CUH_
