#include "kernels/dropout.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/array_ops.h"

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the hashing it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 16;

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// The splitmix64 finaliser: a bijection on 64-bit words whose every output bit depends on
// every input bit, so consecutive indices give independent-looking outputs.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Elements whose 24-bit hash is below this are dropped: round(p * 2^24).
inline uint32_t DropThreshold(float p) {
  return static_cast<uint32_t>(std::lround(static_cast<double>(p) * 16777216.0));
}

// The splitmix64 stream seeded with `key`, read at position `index`.
inline bool KeepWithThreshold(uint64_t key, uint64_t index, uint32_t threshold) {
  const uint64_t hash = Mix64(key + (index + 1) * kGoldenGamma);
  return (hash >> 40) >= threshold;
}

}  // namespace

uint64_t DropoutKey(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  // Chaining through the bijection keeps the words' order significant: (a, b) and (b, a)
  // give different keys.
  uint64_t key = Mix64(a + kGoldenGamma);
  key = Mix64(key + b + kGoldenGamma);
  key = Mix64(key + c + kGoldenGamma);
  return Mix64(key + d + kGoldenGamma);
}

bool DropoutKeep(uint64_t key, uint64_t index, float p) {
  return KeepWithThreshold(key, index, DropThreshold(p));
}

DropoutMask::DropoutMask(uint64_t key, float p) : key_(key), threshold_(DropThreshold(p)) {}

template <typename T>
void DropoutForward(const T* x, T* y, size_t n, float p, uint64_t key, uint64_t index_base) {
  if (p == 0.0f) {
    if (y != x) CopyArray(x, y, n);
    return;
  }
  const uint32_t threshold = DropThreshold(p);
  const T scale = T(1) / (T(1) - static_cast<T>(p));
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    y[i] = KeepWithThreshold(key, index_base + i, threshold) ? x[i] * scale : T(0);
  }
}

template <typename T>
void DropoutBackward(const T* d_y, T* d_x, size_t n, float p, uint64_t key, uint64_t index_base) {
  if (p == 0.0f) {
    AddToArray(d_y, d_x, n);
    return;
  }
  const uint32_t threshold = DropThreshold(p);
  const T scale = T(1) / (T(1) - static_cast<T>(p));
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    if (KeepWithThreshold(key, index_base + i, threshold)) d_x[i] += d_y[i] * scale;
  }
}

template void DropoutForward<float>(const float*, float*, size_t, float, uint64_t, uint64_t);
template void DropoutForward<double>(const double*, double*, size_t, float, uint64_t, uint64_t);
template void DropoutBackward<float>(const float*, float*, size_t, float, uint64_t, uint64_t);
template void DropoutBackward<double>(const double*, double*, size_t, float, uint64_t, uint64_t);

}  // namespace mtrain::cpu
