// GeLU, the tanh approximation GPT-2 uses:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_GELU_H_
#define MTRAIN_KERNELS_GELU_H_

#include <cstddef>

namespace mtrain::cpu {

// y[n] = gelu(x[n]); overwritten.
template <typename T>
void GeluForward(const T* x, T* y, size_t n);

// d_x[n] += d_y[n] * gelu'(x[n]).
template <typename T>
void GeluBackward(const T* d_y, const T* x, T* d_x, size_t n);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_GELU_H_
