#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the row work it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

// d_gamma and d_beta are reduced over rows; each block of this many columns is owned by one
// thread, which sums its columns over all rows in row order (thread-count independent).
constexpr int kColumnBlock = 64;

}  // namespace

template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int rows,
                      int C, T eps) {
  // Read only by OpenMP pragmas, which a build without OpenMP ignores (see BUILD).
  [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * C >= kParallelThreshold;
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    const T* x_row = x + static_cast<size_t>(row) * C;
    T* y_row = y + static_cast<size_t>(row) * C;
    T sum = 0;
    for (int c = 0; c < C; ++c) sum += x_row[c];
    const T row_mean = sum / C;
    // Two passes: the variance of centred values avoids the cancellation of E[x^2]-E[x]^2.
    T squares = 0;
    for (int c = 0; c < C; ++c) {
      const T centred = x_row[c] - row_mean;
      squares += centred * centred;
    }
    const T row_rstd = T(1) / std::sqrt(squares / C + eps);
    for (int c = 0; c < C; ++c) {
      y_row[c] = (x_row[c] - row_mean) * row_rstd * gamma[c] + beta[c];
    }
    mean[row] = row_mean;
    rstd[row] = row_rstd;
  }
}

template <typename T>
void LayerNormBackward(const T* d_y, const T* x, const T* gamma, const T* mean, const T* rstd,
                       T* d_x, T* d_gamma, T* d_beta, int rows, int C) {
  // Read only by OpenMP pragmas, which a build without OpenMP ignores (see BUILD).
  [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * C >= kParallelThreshold;
  // d_x row by row: with xhat the normalized input and g = d_y * gamma,
  //   d_x = rstd * (g - mean(g) - xhat * mean(g * xhat)).
#pragma omp parallel for schedule(static) if (parallel)
  for (int row = 0; row < rows; ++row) {
    const size_t offset = static_cast<size_t>(row) * C;
    const T* d_y_row = d_y + offset;
    const T* x_row = x + offset;
    T* d_x_row = d_x + offset;
    const T row_mean = mean[row];
    const T row_rstd = rstd[row];
    T sum_g = 0;
    T sum_g_xhat = 0;
    for (int c = 0; c < C; ++c) {
      const T g = d_y_row[c] * gamma[c];
      sum_g += g;
      sum_g_xhat += g * (x_row[c] - row_mean) * row_rstd;
    }
    const T mean_g = sum_g / C;
    const T mean_g_xhat = sum_g_xhat / C;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x_row[c] - row_mean) * row_rstd;
      const T g = d_y_row[c] * gamma[c];
      d_x_row[c] += row_rstd * (g - mean_g - xhat * mean_g_xhat);
    }
  }

  // d_gamma = sum over rows of d_y * xhat, d_beta = sum over rows of d_y.
  const int num_blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int block = 0; block < num_blocks; ++block) {
    const int begin = block * kColumnBlock;
    const int width = std::min(kColumnBlock, C - begin);
    T gamma_sums[kColumnBlock] = {};
    T beta_sums[kColumnBlock] = {};
    for (int row = 0; row < rows; ++row) {
      const size_t offset = static_cast<size_t>(row) * C + begin;
      const T row_mean = mean[row];
      const T row_rstd = rstd[row];
      for (int c = 0; c < width; ++c) {
        const T dy = d_y[offset + c];
        gamma_sums[c] += dy * (x[offset + c] - row_mean) * row_rstd;
        beta_sums[c] += dy;
      }
    }
    for (int c = 0; c < width; ++c) {
      d_gamma[begin + c] += gamma_sums[c];
      d_beta[begin + c] += beta_sums[c];
    }
  }
}

template void LayerNormForward<float>(const float*, const float*, const float*, float*, float*,
                                      float*, int, int, float);
template void LayerNormForward<double>(const double*, const double*, const double*, double*,
                                       double*, double*, int, int, double);
template void LayerNormBackward<float>(const float*, const float*, const float*, const float*,
                                       const float*, float*, float*, float*, int, int);
template void LayerNormBackward<double>(const double*, const double*, const double*, const double*,
                                        const double*, double*, double*, double*, int, int);

}  // namespace mtrain::cpu
