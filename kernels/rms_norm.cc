#include "kernels/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/lane_sums.h"

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the row work it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

// d_gamma is reduced over rows; each block of this many columns is owned by one thread,
// which sums its columns over all rows in row order (thread-count independent).
constexpr int kColumnBlock = 64;

}  // namespace

template <typename T>
void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int rows, int C, T eps) {
  [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * C >= kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    const T* x_row = x + static_cast<size_t>(row) * C;
    T* y_row = y + static_cast<size_t>(row) * C;
    const T squares = SumInLanesOf<T>(C, [x_row](int c) { return x_row[c] * x_row[c]; });
    const T row_rstd = T(1) / std::sqrt(squares / C + eps);
    for (int c = 0; c < C; ++c) y_row[c] = x_row[c] * row_rstd * gamma[c];
    rstd[row] = row_rstd;
  }
}

// With xhat = x * rstd and g = d_y * gamma: d_x = rstd * (g - xhat * mean(g * xhat)).
template <typename T>
void RmsNormBackward(const T* d_y, const T* x, const T* gamma, const T* rstd, T* d_x, T* d_gamma,
                     int rows, int C) {
  [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * C >= kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    const size_t offset = static_cast<size_t>(row) * C;
    const T* d_y_row = d_y + offset;
    const T* x_row = x + offset;
    const T row_rstd = rstd[row];
    const T mean_g_xhat =
        SumInLanesOf<T>(C, [d_y_row, gamma, x_row, row_rstd](
                               int c) { return d_y_row[c] * gamma[c] * (x_row[c] * row_rstd); }) /
        C;
    T* d_x_row = d_x + offset;
    for (int c = 0; c < C; ++c) {
      const T xhat = x_row[c] * row_rstd;
      d_x_row[c] += row_rstd * (d_y_row[c] * gamma[c] - xhat * mean_g_xhat);
    }
  }
  const int num_blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int block = 0; block < num_blocks; ++block) {
    const int begin = block * kColumnBlock;
    const int width = std::min(kColumnBlock, C - begin);
    T sums[kColumnBlock] = {};
    for (int row = 0; row < rows; ++row) {
      const size_t offset = static_cast<size_t>(row) * C + begin;
      for (int c = 0; c < width; ++c) sums[c] += d_y[offset + c] * (x[offset + c] * rstd[row]);
    }
    for (int c = 0; c < width; ++c) d_gamma[begin + c] += sums[c];
  }
}

template void RmsNormForward<float>(const float*, const float*, float*, float*, int, int, float);
template void RmsNormForward<double>(const double*, const double*, double*, double*, int, int,
                                     double);
template void RmsNormBackward<float>(const float*, const float*, const float*, const float*, float*,
                                     float*, int, int);
template void RmsNormBackward<double>(const double*, const double*, const double*, const double*,
                                      double*, double*, int, int);

}  // namespace mtrain::cpu
