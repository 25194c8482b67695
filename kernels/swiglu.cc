#include "kernels/swiglu.h"

#include <cmath>
#include <cstddef>

#include "kernels/cpu_isa.h"
#include "kernels/fast_exp.h"

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the work it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

// Branch-free and without a libm call, so that the row loops vectorise (with glibc's
// scalar expf the SwiGLU passes were 12% of a Llama training step). FastExp clamps its
// argument to where exp is finite: 1 / (1 + e) has no overflow or cancellation in either
// tail.
template <typename T>
__attribute__((always_inline)) inline T Sigmoid(T g) {
  return T(1) / (T(1) + FastExp(-g));
}

// One row of each pass, inlined into a baseline and an AVX2 build of the row loops
// (cpu_isa.h; AVX2 without FMA contraction gives the same bits). The OpenMP loops sit in the
// builds themselves: a region outlined from an AVX2 function is compiled for AVX2 too.
template <typename T>
__attribute__((always_inline)) inline void ForwardRow(const T* gate_up, T* y, int row, int F) {
  const T* gate = gate_up + static_cast<size_t>(row) * 2 * F;
  const T* up = gate + F;
  T* y_row = y + static_cast<size_t>(row) * F;
#pragma omp simd
  for (int c = 0; c < F; ++c) y_row[c] = gate[c] * Sigmoid(gate[c]) * up[c];
}

// d up = d_y silu(g); d gate = d_y up silu'(g), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
template <typename T>
__attribute__((always_inline)) inline void BackwardRow(const T* d_y, const T* gate_up, T* d_gate_up,
                                                       int row, int F) {
  const size_t offset = static_cast<size_t>(row) * 2 * F;
  const T* gate = gate_up + offset;
  const T* up = gate + F;
  T* d_gate = d_gate_up + offset;
  T* d_up = d_gate + F;
  const T* d_y_row = d_y + static_cast<size_t>(row) * F;
#pragma omp simd
  for (int c = 0; c < F; ++c) {
    const T s = Sigmoid(gate[c]);
    d_up[c] += d_y_row[c] * gate[c] * s;
    d_gate[c] += d_y_row[c] * up[c] * s * (T(1) + gate[c] * (T(1) - s));
  }
}

bool Parallel(int rows, int F) { return static_cast<size_t>(rows) * F >= kParallelThreshold; }

// Each loop three times: for the project's baseline, AVX2 and AVX-512 (cpu_isa.h).
#define MTRAIN_SWIGLU_LOOPS(Forward, Backward, ATTRIBUTES)                                        \
  template <typename T>                                                                           \
  ATTRIBUTES void Forward(const T* gate_up, T* y, int rows, int F) {                              \
    _Pragma("omp parallel for schedule(static) if (Parallel(rows, F))") for (int row = 0;         \
                                                                             row < rows; ++row) { \
      ForwardRow(gate_up, y, row, F);                                                             \
    }                                                                                             \
  }                                                                                               \
  template <typename T>                                                                           \
  ATTRIBUTES void Backward(const T* d_y, const T* gate_up, T* d_gate_up, int rows, int F) {       \
    _Pragma("omp parallel for schedule(static) if (Parallel(rows, F))") for (int row = 0;         \
                                                                             row < rows; ++row) { \
      BackwardRow(d_y, gate_up, d_gate_up, row, F);                                               \
    }                                                                                             \
  }

MTRAIN_SWIGLU_LOOPS(ForwardBaseline, BackwardBaseline, )
MTRAIN_SWIGLU_LOOPS(ForwardAvx2, BackwardAvx2, MTRAIN_TARGET_AVX2)
MTRAIN_SWIGLU_LOOPS(ForwardAvx512, BackwardAvx512, MTRAIN_TARGET_AVX512)
#undef MTRAIN_SWIGLU_LOOPS

}  // namespace

template <typename T>
void SwiGluForward(const T* gate_up, T* y, int rows, int F) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return ForwardAvx512(gate_up, y, rows, F);
    case KernelIsa::kAvx2:
      return ForwardAvx2(gate_up, y, rows, F);
    case KernelIsa::kGeneric:
      return ForwardBaseline(gate_up, y, rows, F);
  }
}

template <typename T>
void SwiGluBackward(const T* d_y, const T* gate_up, T* d_gate_up, int rows, int F) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return BackwardAvx512(d_y, gate_up, d_gate_up, rows, F);
    case KernelIsa::kAvx2:
      return BackwardAvx2(d_y, gate_up, d_gate_up, rows, F);
    case KernelIsa::kGeneric:
      return BackwardBaseline(d_y, gate_up, d_gate_up, rows, F);
  }
}

template void SwiGluForward<float>(const float*, float*, int, int);
template void SwiGluForward<double>(const double*, double*, int, int);
template void SwiGluBackward<float>(const float*, const float*, float*, int, int);
template void SwiGluBackward<double>(const double*, const double*, double*, int, int);

}  // namespace mtrain::cpu
