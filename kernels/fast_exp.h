// exp(x) without a libm call, so that loops over it vectorise (glibc's expf is a scalar call
// here; in GeLU it had been a fifth of a training step, in the attention softmax a tenth).
#ifndef MTRAIN_KERNELS_FAST_EXP_H_
#define MTRAIN_KERNELS_FAST_EXP_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mtrain::cpu {

// Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 polynomial for exp(r)
// and 2^n by exponent arithmetic: about 2 ulp, branch-free. Inputs are clamped to the range
// where the result is finite and normal. Written without fused multiply-adds in mind: the
// same source gives the same bits at every vector width when contraction is off.
__attribute__((always_inline)) inline float FastExp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round to nearest by adding and subtracting 1.5 * 2^23 (vectorises; nearbyint does not).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// Double precision (finite-difference tests) keeps libm's exp.
inline double FastExp(double x) { return std::exp(std::fmin(x, 700.0)); }

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_FAST_EXP_H_
