// Whole-array fills, copies and sums spread over the kernel threads (cpu_threads.h).
//
// The engine's layers move activation-sized arrays between their GEMMs: a residual add, a
// gradient copied down the residual stream, a buffer zeroed before a kernel accumulates into
// it. Written as plain loops they run on one core while the others wait at the next
// parallel region (on two cores that was 13% of a small model's step, issue 32). Each
// element is computed on its own, so the result is the same bits for any thread count.
#ifndef MTRAIN_KERNELS_ARRAY_OPS_H_
#define MTRAIN_KERNELS_ARRAY_OPS_H_

#include <cstddef>

namespace mtrain::cpu {

// y[i] = 0.
template <typename T>
void ZeroArray(T* y, size_t n);

// y[i] = x[i].
template <typename T>
void CopyArray(const T* x, T* y, size_t n);

// y[i] += x[i].
template <typename T>
void AddToArray(const T* x, T* y, size_t n);

// y[i] = a[i] + b[i] (y may be a or b).
template <typename T>
void AddArrays(const T* a, const T* b, T* y, size_t n);

// out[row, col] += bias[col] for a [rows, cols] array.
template <typename T>
void AddRowVector(const T* bias, T* out, int rows, int cols);

// sums[col] += the sum over rows of x[row, col], each column summed in row order (the
// columns are what the threads split), so any thread count gives the same bits.
template <typename T>
void AccumulateColumnSums(const T* x, T* sums, int rows, int cols);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_ARRAY_OPS_H_
