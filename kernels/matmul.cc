#include "kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace mtrain::cpu {
namespace {

// Row-major GEMM, C = alpha op(A) op(B) + beta C, dispatched on the element type so the
// templates below stay type-agnostic.
void Gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void Gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, double alpha,
          const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <typename T>
void MatmulForward(const T* in, const T* weight, const T* bias, T* out, int M, int K, int N) {
  if (M <= 0 || N <= 0) return;
  // Seeding `out` with the bias lets the GEMM add it for free (beta = 1).
  for (int row = 0; row < M; ++row) {
    T* out_row = out + static_cast<size_t>(row) * N;
    if (bias != nullptr) {
      std::copy(bias, bias + N, out_row);
    } else {
      std::fill(out_row, out_row + N, T(0));
    }
  }
  // BLAS rejects a zero leading dimension, and there is nothing to multiply anyway.
  if (K <= 0) return;
  Gemm(CblasNoTrans, CblasTrans, M, N, K, T(1), in, K, weight, K, T(1), out, N);
}

template <typename T>
void MatmulBackward(const T* d_out, const T* in, const T* weight, T* d_in, T* d_weight, T* d_bias,
                    int M, int K, int N) {
  if (M <= 0 || N <= 0) return;
  if (K > 0) {
    if (d_in != nullptr) {
      Gemm(CblasNoTrans, CblasNoTrans, M, K, N, T(1), d_out, N, weight, K, T(1), d_in, K);
    }
    Gemm(CblasTrans, CblasNoTrans, N, K, M, T(1), d_out, N, in, K, T(1), d_weight, K);
  }
  if (d_bias != nullptr) {
    // Column sums row by row (a contiguous, vectorisable inner loop), summed apart from
    // d_bias so that a second call adds exactly the same amount.
    std::vector<T> column_sums(static_cast<size_t>(N), T(0));
    for (int row = 0; row < M; ++row) {
      const T* d_out_row = d_out + static_cast<size_t>(row) * N;
      for (int col = 0; col < N; ++col) column_sums[col] += d_out_row[col];
    }
    for (int col = 0; col < N; ++col) d_bias[col] += column_sums[col];
  }
}

template void MatmulForward<float>(const float*, const float*, const float*, float*, int, int, int);
template void MatmulForward<double>(const double*, const double*, const double*, double*, int, int,
                                    int);
template void MatmulBackward<float>(const float*, const float*, const float*, float*, float*,
                                    float*, int, int, int);
template void MatmulBackward<double>(const double*, const double*, const double*, double*, double*,
                                     double*, int, int, int);

}  // namespace mtrain::cpu
