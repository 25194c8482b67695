#include "kernels/rotary.h"

#include <cmath>
#include <cstddef>

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the rotations it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

}  // namespace

RotaryTable MakeRotaryTable(int positions, int head_dim, double theta) {
  RotaryTable table;
  table.positions = positions;
  table.half = head_dim / 2;
  const size_t size = static_cast<size_t>(positions) * table.half;
  table.cos.resize(size);
  table.sin.resize(size);
  for (int i = 0; i < table.half; ++i) {
    const double frequency = std::pow(theta, -2.0 * i / head_dim);
    for (int p = 0; p < positions; ++p) {
      const double angle = p * frequency;
      table.cos[static_cast<size_t>(p) * table.half + i] = static_cast<float>(std::cos(angle));
      table.sin[static_cast<size_t>(p) * table.half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

template <typename T>
void ApplyRotary(T* x, int rows, int row_stride, int heads, int seq_length, int first_position,
                 const RotaryTable& table, bool inverse) {
  const int half = table.half;
  const T direction = inverse ? T(-1) : T(1);
  [[maybe_unused]] const bool parallel =
      static_cast<size_t>(rows) * heads * half * 2 >= kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    const int position = first_position + row % seq_length;
    const float* cos = table.cos.data() + static_cast<size_t>(position) * half;
    const float* sin = table.sin.data() + static_cast<size_t>(position) * half;
    for (int h = 0; h < heads; ++h) {
      T* a = x + static_cast<size_t>(row) * row_stride + static_cast<size_t>(h) * 2 * half;
      T* b = a + half;
      for (int i = 0; i < half; ++i) {
        const T c = static_cast<T>(cos[i]);
        const T s = direction * static_cast<T>(sin[i]);
        const T first = a[i], second = b[i];
        a[i] = first * c - second * s;
        b[i] = second * c + first * s;
      }
    }
  }
}

template void ApplyRotary<float>(float*, int, int, int, int, int, const RotaryTable&, bool);
template void ApplyRotary<double>(double*, int, int, int, int, int, const RotaryTable&, bool);

}  // namespace mtrain::cpu
