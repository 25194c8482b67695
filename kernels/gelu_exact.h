// GeLU in its exact form, BERT's (HF's "gelu", torch.nn.functional.gelu's default):
//   gelu(x) = 0.5 x (1 + erf(x / sqrt(2))),  gelu'(x) = Phi(x) + x phi(x)
// with Phi and phi the standard normal's distribution and density. GPT-2's tanh form is
// gelu.h. Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_GELU_EXACT_H_
#define MTRAIN_KERNELS_GELU_EXACT_H_

#include <cstddef>

namespace mtrain::cpu {

// y[n] = gelu(x[n]); overwritten.
template <typename T>
void GeluExactForward(const T* x, T* y, size_t n);

// d_x[n] += d_y[n] * gelu'(x[n]).
template <typename T>
void GeluExactBackward(const T* d_y, const T* x, T* d_x, size_t n);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_GELU_EXACT_H_
