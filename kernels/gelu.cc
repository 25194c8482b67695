#include "kernels/gelu.h"

#include <cmath>
#include <cstddef>

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the tanh it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

// Overloads so float stays in single precision (tanhf) and double in double.
inline float Tanh(float x) { return tanhf(x); }
inline double Tanh(double x) { return std::tanh(x); }

template <typename T>
constexpr T kSqrtTwoOverPi = static_cast<T>(0.79788456080286535587989211986876);
template <typename T>
constexpr T kCubicCoefficient = static_cast<T>(0.044715);

}  // namespace

template <typename T>
void GeluForward(const T* x, T* y, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T inner = kSqrtTwoOverPi<T> * (v + kCubicCoefficient<T> * v * v * v);
    y[i] = T(0.5) * v * (T(1) + Tanh(inner));
  }
}

template <typename T>
void GeluBackward(const T* d_y, const T* x, T* d_x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T inner = kSqrtTwoOverPi<T> * (v + kCubicCoefficient<T> * v * v * v);
    const T t = Tanh(inner);
    const T d_inner = kSqrtTwoOverPi<T> * (T(1) + T(3) * kCubicCoefficient<T> * v * v);
    // d/dv [0.5 v (1 + tanh(u))] = 0.5 (1 + tanh u) + 0.5 v (1 - tanh^2 u) du/dv.
    const T derivative = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * d_inner;
    d_x[i] += d_y[i] * derivative;
  }
}

template void GeluForward<float>(const float*, float*, size_t);
template void GeluForward<double>(const double*, double*, size_t);
template void GeluBackward<float>(const float*, const float*, float*, size_t);
template void GeluBackward<double>(const double*, const double*, double*, size_t);

}  // namespace mtrain::cpu
