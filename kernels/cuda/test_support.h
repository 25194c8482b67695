// Helpers for the CUDA kernel tests (tagged `gpu`): a visible skip without a GPU, device
// arrays, host-side bf16 and fp16 rounding and error measures. The tests compare every
// kernel with the CPU implementation (kernels/*.h) on fresh random inputs.
#ifndef MTRAIN_KERNELS_CUDA_TEST_SUPPORT_H_
#define MTRAIN_KERNELS_CUDA_TEST_SUPPORT_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda_device_query.h"

namespace mtrain::cuda::testing {

// Skips (visibly, with CUDA's reason) when this machine has no usable GPU.
#define MTRAIN_SKIP_WITHOUT_GPU()                                                     \
  do {                                                                                \
    const absl::StatusOr<std::vector<::mtrain::CudaDeviceInfo>> devices =             \
        ::mtrain::QueryCudaDevices();                                                 \
    if (!devices.ok()) {                                                              \
      std::printf("SKIPPED: needs a GPU: %s\n", devices.status().ToString().c_str()); \
      GTEST_SKIP() << "needs a GPU: " << devices.status();                            \
    }                                                                                 \
  } while (0)

// bf16 as its bits, rounded to nearest even (what __float2bfloat16_rn does on the device).
inline uint16_t Bf16Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (std::isnan(x)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}
// The float nearest in bf16 (inputs of bf16 tests are rounded first, so the CPU reference
// sees exactly what the GPU sees).
inline float RoundToBf16(float x) { return Bf16BitsToFloat(Bf16Bits(x)); }

// fp16 (IEEE binary16: 5 exponent bits, 10 stored mantissa bits) as its bits, rounded to
// nearest even (what __float2half_rn does on the device): subnormals below 2^-14, +-inf
// from 65520 on (the tie above the largest finite value, 65504, rounds to even: up).
// Written out rather than taken from cuda_fp16.h, so the tests hold the device's rounding
// to an independent one.
inline uint16_t Fp16Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7e00;  // NaN
  const uint32_t exponent = bits >> 23;          // float's, biased by 127
  if (exponent >= 143) return sign | 0x7c00;     // >= 2^16 (or inf): inf
  uint32_t half, rest, halfway;
  if (exponent >= 113) {  // >= 2^-14: normal; the rounding may carry up to inf
    half = ((exponent - 112) << 10) | ((bits & 0x7fffffu) >> 13);
    rest = bits & 0x1fffu;
    halfway = 0x1000u;
  } else {
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero
    // A subnormal: the significand (implicit bit included) in units of 2^-24.
    const uint32_t significand = (bits & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    half = significand >> shift;
    rest = significand & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  if (rest > halfway || (rest == halfway && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}
inline float Fp16BitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // exact
    return sign ? -magnitude : magnitude;
  }
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}
// The float nearest in fp16 (inputs of fp16 tests are rounded first, as for bf16).
inline float RoundToHalf(float x) { return Fp16BitsToFloat(Fp16Bits(x)); }

// The float nearest in T's storage (float, __nv_bfloat16 or __half), and a whole vector
// rounded so: what a DeviceArray<T> holds after an upload.
template <typename T>
float RoundTo(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return RoundToHalf(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return RoundToBf16(x);
  } else {
    static_assert(std::is_same_v<T, float>, "storage is float, __nv_bfloat16 or __half");
    return x;
  }
}
template <typename T>
std::vector<float> RoundedTo(std::vector<float> v) {
  for (float& e : v) e = RoundTo<T>(e);
  return v;
}

// The storage type's name, for the tests' printed measurements.
template <typename T>
const char* TypeName() {
  if constexpr (std::is_same_v<T, __half>) {
    return "fp16";
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return "bf16";
  } else {
    return "fp32";
  }
}

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Device memory holding n elements of T (float, __nv_bfloat16 or __half), filled from and
// read back into float vectors (bf16 and fp16 rounded to nearest even on the way in). The
// two 16-bit types are told apart by type, not size: their bits mean different numbers.
template <typename T>
class DeviceArray {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> ||
                    std::is_same_v<T, __half>,
                "DeviceArray holds float, __nv_bfloat16 or __half");

 public:
  explicit DeviceArray(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceArray(const std::vector<float>& values) : DeviceArray(values.size()) {
    Upload(values);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return static_cast<T*>(data_); }
  size_t size() const { return n_; }

  void Upload(const std::vector<float>& values) {
    ASSERT_EQ(values.size(), n_);
    if constexpr (sizeof(T) == 4) {
      ASSERT_EQ(cudaMemcpy(data_, values.data(), n_ * 4, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      std::vector<uint16_t> bits(n_);
      for (size_t i = 0; i < n_; ++i) {
        bits[i] = std::is_same_v<T, __half> ? Fp16Bits(values[i]) : Bf16Bits(values[i]);
      }
      ASSERT_EQ(cudaMemcpy(data_, bits.data(), n_ * 2, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<float> Download() const {
    std::vector<float> out(n_);
    if constexpr (sizeof(T) == 4) {
      EXPECT_EQ(cudaMemcpy(out.data(), data_, n_ * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    } else {
      std::vector<uint16_t> bits(n_);
      EXPECT_EQ(cudaMemcpy(bits.data(), data_, n_ * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < n_; ++i) {
        out[i] = std::is_same_v<T, __half> ? Fp16BitsToFloat(bits[i]) : Bf16BitsToFloat(bits[i]);
      }
    }
    return out;
  }

 private:
  size_t n_;
  void* data_ = nullptr;
};

// max |got - want| / max |want|: an error relative to the data's scale, which stays
// meaningful where individual values cross zero.
inline double RelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    // std::max would skip a NaN (NaN compares false): a non-finite result is the worst error.
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) {
      return std::numeric_limits<double>::infinity();
    }
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

template <typename T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// The bounds the kernels are held to (issue 7): fp32 far under 1e-4; bf16 storage keeps 8
// bits of mantissa, so about 2^-8 = 4e-3 of the scale, and never 1e-2; fp16 keeps 11, so
// about 2^-11 = 5e-4 of the scale, held to 5e-3 (on inputs with |x| <= 4, well inside
// fp16's range, away from its subnormals and its 65504 ceiling).
constexpr double kFp32Tolerance = 1e-5;
constexpr double kBf16Tolerance = 1e-2;
constexpr double kFp16Tolerance = 5e-3;

}  // namespace mtrain::cuda::testing

#endif  // MTRAIN_KERNELS_CUDA_TEST_SUPPORT_H_
