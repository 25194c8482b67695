#include "kernels/gelu.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu_isa.h"
#include "kernels/fast_exp.h"

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the tanh it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

template <typename T>
constexpr T kSqrtTwoOverPi = static_cast<T>(0.79788456080286535587989211986876);
template <typename T>
constexpr T kCubicCoefficient = static_cast<T>(0.044715);

}  // namespace

namespace {

template <typename T>
MTRAIN_ALWAYS_INLINE T GeluOf(T v) {
  // 0.5 (1 + tanh u) = e / (1 + e) with e = exp(2u): no cancellation in either tail.
  const T inner = kSqrtTwoOverPi<T> * (v + kCubicCoefficient<T> * v * v * v);
  const T e = FastExp(T(2) * inner);
  return v * (e / (T(1) + e));
}

template <typename T>
MTRAIN_ALWAYS_INLINE T GeluDerivativeOf(T v) {
  const T inner = kSqrtTwoOverPi<T> * (v + kCubicCoefficient<T> * v * v * v);
  const T e = FastExp(T(2) * inner);
  const T d_inner = kSqrtTwoOverPi<T> * (T(1) + T(3) * kCubicCoefficient<T> * v * v);
  // d/dv [0.5 v (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 v (1 - tanh^2 u) du/dv, with
  // 0.5 (1 + tanh u) = s = e / (1 + e) and 0.5 (1 - tanh^2 u) = 2 s (1 - s); computing
  // 1 - s as 1 / (1 + e) avoids the cancellation of 1 - tanh^2 in the tails.
  const T s = e / (T(1) + e);
  const T one_minus_s = T(1) / (T(1) + e);
  return s + T(2) * v * s * one_minus_s * d_inner;
}

// Each loop three times: for the project's baseline, AVX2 and AVX-512 (cpu_isa.h).
#define MTRAIN_GELU_LOOPS(Forward, Backward, ATTRIBUTES)                                          \
  template <typename T>                                                                           \
  ATTRIBUTES void Forward(const T* x, T* y, size_t n) {                                           \
    _Pragma(                                                                                      \
        "omp parallel for simd schedule(static) if (n >= kParallelThreshold)") for (size_t i = 0; \
                                                                                    i < n; ++i) { \
      y[i] = GeluOf(x[i]);                                                                        \
    }                                                                                             \
  }                                                                                               \
  template <typename T>                                                                           \
  ATTRIBUTES void Backward(const T* d_y, const T* x, T* d_x, size_t n) {                          \
    _Pragma(                                                                                      \
        "omp parallel for simd schedule(static) if (n >= kParallelThreshold)") for (size_t i = 0; \
                                                                                    i < n; ++i) { \
      d_x[i] += d_y[i] * GeluDerivativeOf(x[i]);                                                  \
    }                                                                                             \
  }

MTRAIN_GELU_LOOPS(ForwardLoop, BackwardLoop, )
MTRAIN_GELU_LOOPS(ForwardLoopAvx2, BackwardLoopAvx2, MTRAIN_TARGET_AVX2)
MTRAIN_GELU_LOOPS(ForwardLoopAvx512, BackwardLoopAvx512, MTRAIN_TARGET_AVX512)
#undef MTRAIN_GELU_LOOPS

}  // namespace

template <typename T>
void GeluForward(const T* x, T* y, size_t n) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return ForwardLoopAvx512(x, y, n);
    case KernelIsa::kAvx2:
      return ForwardLoopAvx2(x, y, n);
    case KernelIsa::kGeneric:
      return ForwardLoop(x, y, n);
  }
}

template <typename T>
void GeluBackward(const T* d_y, const T* x, T* d_x, size_t n) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return BackwardLoopAvx512(d_y, x, d_x, n);
    case KernelIsa::kAvx2:
      return BackwardLoopAvx2(d_y, x, d_x, n);
    case KernelIsa::kGeneric:
      return BackwardLoop(d_y, x, d_x, n);
  }
}

template void GeluForward<float>(const float*, float*, size_t);
template void GeluForward<double>(const double*, double*, size_t);
template void GeluBackward<float>(const float*, const float*, float*, size_t);
template void GeluBackward<double>(const double*, const double*, double*, size_t);

}  // namespace mtrain::cpu
