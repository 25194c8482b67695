#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/cpu_isa.h"
#include "kernels/lane_sums.h"

namespace mtrain::cpu {
namespace {

// Below this many elements the OpenMP fork/join costs more than the row work it spreads.
constexpr size_t kParallelThreshold = size_t{1} << 15;

// d_gamma and d_beta are reduced over rows; each block of this many columns is owned by one
// thread, which sums its columns over all rows in row order (thread-count independent).
constexpr int kColumnBlock = 64;

template <typename T>
MTRAIN_ALWAYS_INLINE void ForwardRow(const T* x_row, const T* gamma, const T* beta, T* y_row,
                                     T* mean, T* rstd, int C, T eps) {
  const T row_mean = SumInLanes(x_row, C) / C;
  // Two passes: the variance of centred values avoids the cancellation of E[x^2]-E[x]^2.
  const T squares = SumInLanesOf<T>(C, [x_row, row_mean](int c) MTRAIN_ALWAYS_INLINE_LAMBDA {
    const T centred = x_row[c] - row_mean;
    return centred * centred;
  });
  const T row_rstd = T(1) / std::sqrt(squares / C + eps);
  for (int c = 0; c < C; ++c) y_row[c] = (x_row[c] - row_mean) * row_rstd * gamma[c] + beta[c];
  *mean = row_mean;
  *rstd = row_rstd;
}

// d_x row by row: with xhat the normalized input and g = d_y * gamma,
//   d_x = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T>
MTRAIN_ALWAYS_INLINE void BackwardRow(const T* d_y_row, const T* x_row, const T* gamma, T row_mean,
                                      T row_rstd, T* d_x_row, int C) {
  const T mean_g =
      SumInLanesOf<T>(C, [d_y_row, gamma](int c)
                             MTRAIN_ALWAYS_INLINE_LAMBDA { return d_y_row[c] * gamma[c]; }) /
      C;
  const T mean_g_xhat =
      SumInLanesOf<T>(C,
                      [d_y_row, gamma, x_row, row_mean, row_rstd](int c)
                          MTRAIN_ALWAYS_INLINE_LAMBDA {
                            return d_y_row[c] * gamma[c] * ((x_row[c] - row_mean) * row_rstd);
                          }) /
      C;
  for (int c = 0; c < C; ++c) {
    const T xhat = (x_row[c] - row_mean) * row_rstd;
    const T g = d_y_row[c] * gamma[c];
    d_x_row[c] += row_rstd * (g - mean_g - xhat * mean_g_xhat);
  }
}

// d_gamma = sum over rows of d_y * xhat, d_beta = sum over rows of d_y, for the columns
// [begin, begin + width) of one block, summed over rows in row order.
template <typename T>
MTRAIN_ALWAYS_INLINE void ParameterGradientBlock(const T* d_y, const T* x, const T* mean,
                                                 const T* rstd, T* d_gamma, T* d_beta, int rows,
                                                 int C, int begin, int width) {
  T gamma_sums[kColumnBlock] = {};
  T beta_sums[kColumnBlock] = {};
  for (int row = 0; row < rows; ++row) {
    const size_t offset = static_cast<size_t>(row) * C + begin;
    const T row_mean = mean[row];
    const T row_rstd = rstd[row];
    for (int c = 0; c < width; ++c) {
      const T dy = d_y[offset + c];
      gamma_sums[c] += dy * ((x[offset + c] - row_mean) * row_rstd);
      beta_sums[c] += dy;
    }
  }
  for (int c = 0; c < width; ++c) {
    d_gamma[begin + c] += gamma_sums[c];
    d_beta[begin + c] += beta_sums[c];
  }
}

// Each function three times: for the project's baseline, AVX2 and AVX-512 (cpu_isa.h). `parallel`
// is read only by OpenMP pragmas, which a build without OpenMP ignores (see BUILD).
#define MTRAIN_LAYERNORM_LOOPS(Forward, Backward, ATTRIBUTES)                                      \
  template <typename T>                                                                            \
  ATTRIBUTES void Forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,       \
                          int rows, int C, T eps) {                                                \
    [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * C >= kParallelThreshold;    \
    _Pragma("omp parallel for schedule(static) if (parallel)") for (int row = 0; row < rows;       \
                                                                    ++row) {                       \
      const size_t offset = static_cast<size_t>(row) * C;                                          \
      ForwardRow(x + offset, gamma, beta, y + offset, mean + row, rstd + row, C, eps);             \
    }                                                                                              \
  }                                                                                                \
  template <typename T>                                                                            \
  ATTRIBUTES void Backward(const T* d_y, const T* x, const T* gamma, const T* mean, const T* rstd, \
                           T* d_x, T* d_gamma, T* d_beta, int rows, int C) {                       \
    [[maybe_unused]] const bool parallel = static_cast<size_t>(rows) * C >= kParallelThreshold;    \
    _Pragma("omp parallel for schedule(static) if (parallel)") for (int row = 0; row < rows;       \
                                                                    ++row) {                       \
      const size_t offset = static_cast<size_t>(row) * C;                                          \
      BackwardRow(d_y + offset, x + offset, gamma, mean[row], rstd[row], d_x + offset, C);         \
    }                                                                                              \
    const int num_blocks = (C + kColumnBlock - 1) / kColumnBlock;                                  \
    _Pragma("omp parallel for schedule(static) if (parallel)") for (int block = 0;                 \
                                                                    block < num_blocks; ++block) { \
      const int begin = block * kColumnBlock;                                                      \
      ParameterGradientBlock(d_y, x, mean, rstd, d_gamma, d_beta, rows, C, begin,                  \
                             std::min(kColumnBlock, C - begin));                                   \
    }                                                                                              \
  }

MTRAIN_LAYERNORM_LOOPS(ForwardGeneric, BackwardGeneric, )
MTRAIN_LAYERNORM_LOOPS(ForwardAvx2, BackwardAvx2, MTRAIN_TARGET_AVX2)
MTRAIN_LAYERNORM_LOOPS(ForwardAvx512, BackwardAvx512, MTRAIN_TARGET_AVX512)
#undef MTRAIN_LAYERNORM_LOOPS

}  // namespace

template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int rows,
                      int C, T eps) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return ForwardAvx512(x, gamma, beta, y, mean, rstd, rows, C, eps);
    case KernelIsa::kAvx2:
      return ForwardAvx2(x, gamma, beta, y, mean, rstd, rows, C, eps);
    case KernelIsa::kGeneric:
      return ForwardGeneric(x, gamma, beta, y, mean, rstd, rows, C, eps);
  }
}

template <typename T>
void LayerNormBackward(const T* d_y, const T* x, const T* gamma, const T* mean, const T* rstd,
                       T* d_x, T* d_gamma, T* d_beta, int rows, int C) {
  switch (CpuKernelIsa()) {
    case KernelIsa::kAvx512:
      return BackwardAvx512(d_y, x, gamma, mean, rstd, d_x, d_gamma, d_beta, rows, C);
    case KernelIsa::kAvx2:
      return BackwardAvx2(d_y, x, gamma, mean, rstd, d_x, d_gamma, d_beta, rows, C);
    case KernelIsa::kGeneric:
      return BackwardGeneric(d_y, x, gamma, mean, rstd, d_x, d_gamma, d_beta, rows, C);
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
