// Sums in a fixed order that vector units can run: eight interleaved partial sums, added
// pairwise at the end. The order is part of the source, so the x86-64-v2 and AVX2 builds of
// a kernel (cpu_isa.h) get the same bits, and the compiler may vectorise the loop without
// -ffast-math (a plain `sum += x[j]` must stay one scalar chain, 3-4 cycles an element).
#ifndef MTRAIN_KERNELS_LANE_SUMS_H_
#define MTRAIN_KERNELS_LANE_SUMS_H_

namespace mtrain::cpu {

inline constexpr int kSumLanes = 8;

// sum_{j < count} term(j), term inlined.
template <typename T, typename Term>
__attribute__((always_inline)) inline T SumInLanesOf(int count, const Term& term) {
  T lanes[kSumLanes] = {};
  int j = 0;
  for (; j + kSumLanes <= count; j += kSumLanes) {
    for (int lane = 0; lane < kSumLanes; ++lane) lanes[lane] += term(j + lane);
  }
  for (; j < count; ++j) lanes[j % kSumLanes] += term(j);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

template <typename T>
__attribute__((always_inline)) inline T SumInLanes(const T* values, int count) {
  return SumInLanesOf<T>(
      count, [values](int j) __attribute__((always_inline)) { return values[j]; });
}

template <typename T>
__attribute__((always_inline)) inline T DotInLanes(const T* a, const T* b, int count) {
  return SumInLanesOf<T>(
      count, [ a, b ](int j) __attribute__((always_inline)) { return a[j] * b[j]; });
}

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_LANE_SUMS_H_
