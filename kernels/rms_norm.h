// Root-mean-square normalization over the last dimension (Llama-style decoders: Zhang and
// Sennrich 2019; no centring, no bias):
//   y = x * rstd * gamma,   rstd = 1 / sqrt(mean(x^2) + eps)
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_RMS_NORM_H_
#define MTRAIN_KERNELS_RMS_NORM_H_

namespace mtrain::cpu {

// For each of `rows` rows of length C. Saves rstd[rows] for the backward pass; `y` is
// overwritten.
template <typename T>
void RmsNormForward(const T* x, const T* gamma, T* y, T* rstd, int rows, int C, T eps);

// Accumulates d_x[rows, C] and d_gamma[C] from d_y, using the saved statistics. d_gamma is
// summed over rows in row order whatever the thread count (bit-identical across counts).
template <typename T>
void RmsNormBackward(const T* d_y, const T* x, const T* gamma, const T* rstd, T* d_x, T* d_gamma,
                     int rows, int C);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_RMS_NORM_H_
