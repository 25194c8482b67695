#include "kernels/gelu_exact.h"

#include <cmath>

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the work it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

}  // namespace

template <typename T>
void GeluExactForward(const T* x, T* y, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * T(kInvSqrt2)));
  }
}

template <typename T>
void GeluExactBackward(const T* d_y, const T* x, T* d_x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (size_t i = 0; i < n; ++i) {
    const T cdf = T(0.5) * (T(1) + std::erf(x[i] * T(kInvSqrt2)));
    const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x[i] * x[i]);
    d_x[i] += d_y[i] * (cdf + x[i] * pdf);
  }
}

template void GeluExactForward<float>(const float*, float*, size_t);
template void GeluExactForward<double>(const double*, double*, size_t);
template void GeluExactBackward<float>(const float*, const float*, float*, size_t);
template void GeluExactBackward<double>(const double*, const double*, double*, size_t);

}  // namespace mtrain::cpu
