#include "kernels/gelu.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

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

template <typename T>
void GeluForward(const T* x, T* y, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    // 0.5 (1 + tanh u) = e / (1 + e) with e = exp(2u): no cancellation in either tail.
    const T v = x[i];
    const T inner = kSqrtTwoOverPi<T> * (v + kCubicCoefficient<T> * v * v * v);
    const T e = FastExp(T(2) * inner);
    y[i] = v * (e / (T(1) + e));
  }
}

template <typename T>
void GeluBackward(const T* d_y, const T* x, T* d_x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T inner = kSqrtTwoOverPi<T> * (v + kCubicCoefficient<T> * v * v * v);
    const T e = FastExp(T(2) * inner);
    const T d_inner = kSqrtTwoOverPi<T> * (T(1) + T(3) * kCubicCoefficient<T> * v * v);
    // d/dv [0.5 v (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 v (1 - tanh^2 u) du/dv, with
    // 0.5 (1 + tanh u) = s = e / (1 + e) and 0.5 (1 - tanh^2 u) = 2 s (1 - s); computing
    // 1 - s as 1 / (1 + e) avoids the cancellation of 1 - tanh^2 in the tails.
    const T s = e / (T(1) + e);
    const T one_minus_s = T(1) / (T(1) + e);
    const T derivative = s + T(2) * v * s * one_minus_s * d_inner;
    d_x[i] += d_y[i] * derivative;
  }
}

template void GeluForward<float>(const float*, float*, size_t);
template void GeluForward<double>(const double*, double*, size_t);
template void GeluBackward<float>(const float*, const float*, float*, size_t);
template void GeluBackward<double>(const double*, const double*, double*, size_t);

}  // namespace mtrain::cpu
