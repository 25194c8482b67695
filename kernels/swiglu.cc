#include "kernels/swiglu.h"

#include <cmath>
#include <cstddef>

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the work it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

template <typename T>
T Sigmoid(T g) {
  // exp of a non-positive argument only: no overflow in either tail.
  if (g >= T(0)) return T(1) / (T(1) + std::exp(-g));
  const T e = std::exp(g);
  return e / (T(1) + e);
}

}  // namespace

template <typename T>
void SwiGluForward(const T* gate_up, T* y, int rows, int F) {
  [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * F >= kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    const T* gate = gate_up + static_cast<size_t>(row) * 2 * F;
    const T* up = gate + F;
    T* y_row = y + static_cast<size_t>(row) * F;
    for (int c = 0; c < F; ++c) y_row[c] = gate[c] * Sigmoid(gate[c]) * up[c];
  }
}

// d up = d_y silu(g); d gate = d_y up silu'(g), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
template <typename T>
void SwiGluBackward(const T* d_y, const T* gate_up, T* d_gate_up, int rows, int F) {
  [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * F >= kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    const size_t offset = static_cast<size_t>(row) * 2 * F;
    const T* gate = gate_up + offset;
    const T* up = gate + F;
    T* d_gate = d_gate_up + offset;
    T* d_up = d_gate + F;
    const T* d_y_row = d_y + static_cast<size_t>(row) * F;
    for (int c = 0; c < F; ++c) {
      const T s = Sigmoid(gate[c]);
      d_up[c] += d_y_row[c] * gate[c] * s;
      d_gate[c] += d_y_row[c] * up[c] * s * (T(1) + gate[c] * (T(1) - s));
    }
  }
}

template void SwiGluForward<float>(const float*, float*, int, int);
template void SwiGluForward<double>(const double*, double*, int, int);
template void SwiGluBackward<float>(const float*, const float*, float*, int, int);
template void SwiGluBackward<double>(const double*, const double*, double*, int, int);

}  // namespace mtrain::cpu
