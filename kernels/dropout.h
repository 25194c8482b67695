// Dropout with a counter-based mask: whether element i is kept is a pure function of
// (key, i), computed by hashing, never stored. Consequences the engine relies on:
//  - backward and activation recomputation regenerate the exact same mask;
//  - the mask of an element depends on its GLOBAL index, not on how tensors are split
//    across tensor/pipeline/data-parallel ranks, so every parallel layout drops the same
//    elements as a single rank does.
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_DROPOUT_H_
#define MTRAIN_KERNELS_DROPOUT_H_

#include <cstddef>
#include <cstdint>

namespace mtrain::cpu {

// Mixes several words into one 64-bit key (seed, step, layer, site, sample...).
uint64_t DropoutKey(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0);

// True if the element with global index `index` is kept under `key` at drop probability p.
// Keep probability is exactly quantized to multiples of 2^-24.
bool DropoutKeep(uint64_t key, uint64_t index, float p);

// DropoutKeep's decisions for one (key, p), inline and with the threshold rounded once: for
// loops that ask element by element at scattered indices (the attention core's
// probabilities), where an out-of-line call and a rounding per element cost more than the
// hash itself, and where a branch-free inline hash lets the loop vectorise. Keep(i) ==
// DropoutKeep(key, i, p) for every i (dropout_test checks).
class DropoutMask {
 public:
  DropoutMask(uint64_t key, float p);
  bool Keep(uint64_t index) const {
    // The splitmix64 stream seeded with the key, read at `index` (dropout.cc says why).
    uint64_t z = key_ + (index + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (z >> 40) >= threshold_;
  }

 private:
  uint64_t key_;
  uint64_t threshold_;
};

// y[i] = keep(key, index_base + i) ? x[i] / (1 - p) : 0, for i in [0, n). p == 0 copies x.
// `y` may alias `x`.
template <typename T>
void DropoutForward(const T* x, T* y, size_t n, float p, uint64_t key, uint64_t index_base);

// d_x[i] += keep(key, index_base + i) ? d_y[i] / (1 - p) : 0.
template <typename T>
void DropoutBackward(const T* d_y, T* d_x, size_t n, float p, uint64_t key, uint64_t index_base);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_DROPOUT_H_
