#include "kernels/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/array_ops.h"
#include "kernels/cpu_bf16_gemm.h"
#include "kernels/cpu_gemm_library.h"

namespace mtrain::cpu {
namespace {

// Row-major GEMM, C = alpha op(A) op(B) + beta C, dispatched on the element type so the
// templates below stay type-agnostic: fp32 through the library cpu_gemm_library.h chose
// (or in bf16 when the process trains in PRECISION_BF16, cpu_bf16_gemm.h), fp64
// (finite-difference tests) through OpenBLAS.
void Gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (CurrentGemmPrecision() == GemmPrecision::kBf16) {
    Bf16Gemm(trans_a == CblasTrans, trans_b == CblasTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
             ldc);
    return;
  }
  Sgemm(trans_a == CblasTrans, trans_b == CblasTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void Gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, double alpha,
          const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The rows of C in contiguous slices, one a thread, each a single-threaded GEMM (OpenBLAS
// and oneDNN run one thread inside a parallel region). OpenBLAS's own threading of one GEMM makes
// its threads wait for each other's packed panels; at the small models' shapes (K = 256)
// that cost 5-25% on Zen 3, and slices are never slower at the larger ones
// (docs/PERFORMANCE.md, issue 32). A thread count gives the same bits every run; another
// count may round differently in the last bits, as OpenBLAS's own threading did.
//
// A slice is at least 64 rows and 2M multiply-adds: OpenBLAS computes products of at most
// 1M (M N K) with separate "small matrix" kernels on some cores (SkylakeX), whose order of
// summation differs, so a GEMM is sliced only where every slice takes the path the whole
// GEMM takes.
constexpr int kMinRowsPerThread = 64;
constexpr double kMinMultiplyAddsPerThread = 2e6;

// C = op(A) op(B) + beta C; with `bias` (C's width), each slice first sets its rows of C to
// the bias and adds to it, so that seeding C is spread over the threads as the GEMM is.
template <typename T>
void RowSlicedGemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k,
                   const T* a, int lda, const T* b, int ldb, T beta, const T* bias, T* c, int ldc) {
  const auto gemm_rows = [&](int first, int rows) {
    T* c_rows = c + static_cast<size_t>(first) * ldc;
    if (bias != nullptr) {
      for (int row = 0; row < rows; ++row) {
        std::copy(bias, bias + n, c_rows + static_cast<size_t>(row) * ldc);
      }
    }
    // Row r of op(A) is row r of A, or column r of A when A is transposed.
    const T* a_rows = trans_a == CblasNoTrans ? a + static_cast<size_t>(first) * lda : a + first;
    Gemm(trans_a, trans_b, rows, n, k, T(1), a_rows, lda, b, ldb, bias != nullptr ? T(1) : beta,
         c_rows, ldc);
  };
  const double multiply_adds = static_cast<double>(m) * n * k;
  const int threads =
      omp_in_parallel()
          ? 1
          : std::min({omp_get_max_threads(), m / kMinRowsPerThread,
                      static_cast<int>(std::min(1e6, multiply_adds / kMinMultiplyAddsPerThread))});
  if (threads <= 1) {
    gemm_rows(0, m);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int slice = 0; slice < threads; ++slice) {
    const int first = static_cast<int>(static_cast<int64_t>(m) * slice / threads);
    const int rows = static_cast<int>(static_cast<int64_t>(m) * (slice + 1) / threads) - first;
    gemm_rows(first, rows);
  }
}

}  // namespace

template <typename T>
void MatmulForward(const T* in, const T* weight, const T* bias, T* out, int M, int K, int N) {
  if (M <= 0 || N <= 0) return;
  // BLAS rejects a zero leading dimension, and there is nothing to multiply anyway.
  if (K <= 0) {
    for (int row = 0; row < M; ++row) {
      T* out_row = out + static_cast<size_t>(row) * N;
      if (bias != nullptr) {
        std::copy(bias, bias + N, out_row);
      } else {
        std::fill(out_row, out_row + N, T(0));
      }
    }
    return;
  }
  // Seeding `out` with the bias lets the GEMM add it for free (beta = 1); without one the
  // GEMM overwrites `out` (beta = 0).
  RowSlicedGemm(CblasNoTrans, CblasTrans, M, N, K, in, K, weight, K, T(0), bias, out, N);
}

template <typename T>
void MatmulBackward(const T* d_out, const T* in, const T* weight, T* d_in, T* d_weight, T* d_bias,
                    int M, int K, int N, InputGradient input_gradient) {
  if (M <= 0 || N <= 0) {
    if (d_in != nullptr && input_gradient == InputGradient::kOverwrite && M > 0 && K > 0) {
      std::fill(d_in, d_in + static_cast<size_t>(M) * K, T(0));
    }
    return;
  }
  if (K > 0) {
    if (d_in != nullptr) {
      const T beta = input_gradient == InputGradient::kOverwrite ? T(0) : T(1);
      RowSlicedGemm(CblasNoTrans, CblasNoTrans, M, K, N, d_out, N, weight, K, beta,
                    static_cast<const T*>(nullptr), d_in, K);
    }
    if (d_weight != nullptr) {
      RowSlicedGemm(CblasTrans, CblasNoTrans, N, K, M, d_out, N, in, K, T(1),
                    static_cast<const T*>(nullptr), d_weight, K);
    }
  }
  // Each column summed in row order apart from d_bias, then added: a second call adds
  // exactly the same amount.
  if (d_bias != nullptr) AccumulateColumnSums(d_out, d_bias, M, N);
}

template void MatmulForward<float>(const float*, const float*, const float*, float*, int, int, int);
template void MatmulForward<double>(const double*, const double*, const double*, double*, int, int,
                                    int);
template void MatmulBackward<float>(const float*, const float*, const float*, float*, float*,
                                    float*, int, int, int, InputGradient);
template void MatmulBackward<double>(const double*, const double*, const double*, double*, double*,
                                     double*, int, int, int, InputGradient);

}  // namespace mtrain::cpu
