// Layer normalization over the last dimension (GPT-2: eps 1e-5, affine).
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_LAYERNORM_H_
#define MTRAIN_KERNELS_LAYERNORM_H_

namespace mtrain::cpu {

// For each of `rows` rows of length C:
//   y = (x - mean) * rstd * gamma + beta,   rstd = 1 / sqrt(var + eps)  (biased variance)
// Saves mean[rows] and rstd[rows] for the backward pass. `y` is overwritten.
template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int rows,
                      int C, T eps);

// Accumulates d_x[rows, C], d_gamma[C], d_beta[C] from d_y, using the saved statistics.
template <typename T>
void LayerNormBackward(const T* d_y, const T* x, const T* gamma, const T* mean, const T* rstd,
                       T* d_x, T* d_gamma, T* d_beta, int rows, int C);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_LAYERNORM_H_
