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
inline float FastExp(float x) {
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

// exp(x) for float, rounded once: the reduced argument and its polynomial in double, so the
// result is within about half an ulp of the true value (FastExp's float polynomial errs by
// up to 2 ulp, unevenly across the reduction's intervals: where two parallel layouts feed
// inputs an ulp apart, that unevenness widens their difference). Still branch-free and
// vectorisable, at about twice FastExp's cost. Used by the attention softmax.
inline float AccurateExp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const double r = static_cast<double>(x) - static_cast<double>(n) * 0.6931471805599453094;
  // Taylor series to degree 8: |r| <= 0.35, so the truncation error is below 1e-9.
  double p = 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  // Exact: scale is a power of two and the result is normal.
  return static_cast<float>(p) * scale;
}

// Double precision (finite-difference tests) keeps libm's exp.
inline double FastExp(double x) { return std::exp(std::fmin(x, 700.0)); }
inline double AccurateExp(double x) { return std::exp(x); }

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_FAST_EXP_H_
