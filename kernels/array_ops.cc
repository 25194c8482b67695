#include "kernels/array_ops.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace mtrain::cpu {
namespace {

// Below this many elements a fork/join costs more than the copy it spreads (a few µs).
constexpr size_t kParallelThreshold = size_t{1} << 15;

// Each thread takes one contiguous range of whole cache lines: the loops below stay plain
// memset/memcpy-like streams per thread.
template <typename Body>
void ForRanges(size_t n, Body body) {
  if (n < kParallelThreshold || omp_in_parallel() || omp_get_max_threads() == 1) {
    body(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t thread = static_cast<size_t>(omp_get_thread_num());
    constexpr size_t kLine = 16;  // elements; one 64-byte line of floats
    const size_t lines = (n + kLine - 1) / kLine;
    const size_t begin = std::min(n, lines * thread / threads * kLine);
    const size_t end = std::min(n, lines * (thread + 1) / threads * kLine);
    if (begin < end) body(begin, end);
  }
}

}  // namespace

template <typename T>
void ZeroArray(T* y, size_t n) {
  ForRanges(n, [y](size_t begin, size_t end) { std::fill(y + begin, y + end, T(0)); });
}

template <typename T>
void CopyArray(const T* x, T* y, size_t n) {
  ForRanges(n, [x, y](size_t begin, size_t end) { std::copy(x + begin, x + end, y + begin); });
}

template <typename T>
void AddToArray(const T* x, T* y, size_t n) {
  ForRanges(n, [x, y](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) y[i] += x[i];
  });
}

template <typename T>
void AddArrays(const T* a, const T* b, T* y, size_t n) {
  ForRanges(n, [a, b, y](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
  });
}

template <typename T>
void AddRowVector(const T* bias, T* out, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  const bool parallel = n >= kParallelThreshold && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    T* out_row = out + static_cast<size_t>(row) * cols;
    for (int col = 0; col < cols; ++col) out_row[col] += bias[col];
  }
}

template <typename T>
void AccumulateColumnSums(const T* x, T* sums, int rows, int cols) {
  // Blocks of 64 columns (four AVX-512 vectors of floats): a thread's block sums stay in
  // registers while it walks down the rows.
  constexpr int kBlock = 64;
  const int blocks = (cols + kBlock - 1) / kBlock;
  const bool parallel =
      static_cast<size_t>(rows) * cols >= kParallelThreshold && blocks > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
  for (int block = 0; block < blocks; ++block) {
    const int begin = block * kBlock;
    const int width = std::min(kBlock, cols - begin);
    T block_sums[kBlock] = {};
    for (int row = 0; row < rows; ++row) {
      const T* x_row = x + static_cast<size_t>(row) * cols + begin;
      for (int c = 0; c < width; ++c) block_sums[c] += x_row[c];
    }
    for (int c = 0; c < width; ++c) sums[begin + c] += block_sums[c];
  }
}

#define MTRAIN_INSTANTIATE_ARRAY_OPS(T)                       \
  template void ZeroArray<T>(T*, size_t);                     \
  template void CopyArray<T>(const T*, T*, size_t);           \
  template void AddToArray<T>(const T*, T*, size_t);          \
  template void AddArrays<T>(const T*, const T*, T*, size_t); \
  template void AddRowVector<T>(const T*, T*, int, int);      \
  template void AccumulateColumnSums<T>(const T*, T*, int, int);
MTRAIN_INSTANTIATE_ARRAY_OPS(float)
MTRAIN_INSTANTIATE_ARRAY_OPS(double)
#undef MTRAIN_INSTANTIATE_ARRAY_OPS

}  // namespace mtrain::cpu
