#include "kernels/grad_norm.h"

#include <algorithm>
#include <cstddef>

namespace mtrain::cpu {

template <typename T>
double SumOfSquares(const T* x, size_t n) {
  // A fixed number of interleaved partial sums, combined in a fixed order: the compiler can
  // keep them in vector registers, and the summation order never varies (no threads).
  constexpr size_t kLanes = 8;
  double lanes[kLanes] = {};
  const size_t whole = n - n % kLanes;
  for (size_t i = 0; i < whole; i += kLanes) {
    for (size_t lane = 0; lane < kLanes; ++lane) {
      const double value = static_cast<double>(x[i + lane]);
      lanes[lane] += value * value;
    }
  }
  for (size_t i = whole; i < n; ++i) {
    const double value = static_cast<double>(x[i]);
    lanes[i - whole] += value * value;
  }
  double total = 0;
  for (size_t lane = 0; lane < kLanes; ++lane) total += lanes[lane];
  return total;
}

double ClipCoefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

template double SumOfSquares<float>(const float*, size_t);
template double SumOfSquares<double>(const double*, size_t);

}  // namespace mtrain::cpu
