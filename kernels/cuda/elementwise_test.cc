#include "kernels/cuda/elementwise.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

size_t BitMismatches(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t count = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return count;
}

// a + b out of place and in place (into a, and into b) against the host's float sum,
// rounded once to bf16 or fp16 for 16-bit storage: the same arithmetic, so the bits must
// agree.
template <typename T>
void CheckAdd(double tolerance) {
  const size_t n = 100003;
  const std::vector<float> a = testing::RoundedTo<T>(testing::RandomFloats(n, 81, -4, 4));
  const std::vector<float> b = testing::RoundedTo<T>(testing::RandomFloats(n, 82, -4, 4));
  DeviceArray<T> da(a), db(b), dout(n), da_in_place(a), db_in_place(b);
  absl::Status s = AddTensors<T>(da.get(), db.get(), dout.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = AddTensors<T>(da_in_place.get(), db.get(), da_in_place.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = AddTensors<T>(da.get(), db_in_place.get(), db_in_place.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = testing::RoundTo<T>(a[i] + b[i]);
  }
  const std::vector<float> out = dout.Download();
  const size_t mismatches = BitMismatches(out, want);
  const size_t into_a = BitMismatches(da_in_place.Download(), want);
  const size_t into_b = BitMismatches(db_in_place.Download(), want);
  const double error = testing::RelativeError(out, testing::ToDouble(want));
  std::printf("add %s: error %.2e, bits differ out %zu, into a %zu, into b %zu\n",
              testing::TypeName<T>(), error, mismatches, into_a, into_b);
  EXPECT_LT(error, tolerance);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(into_a, 0u);
  EXPECT_EQ(into_b, 0u);
}

TEST(CudaElementwiseTest, Fp32AddMatchesTheHost) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAdd<float>(testing::kFp32Tolerance);
}

TEST(CudaElementwiseTest, Bf16AddMatchesTheHost) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAdd<__nv_bfloat16>(testing::kBf16Tolerance);
}

TEST(CudaElementwiseTest, Fp16AddMatchesTheHost) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAdd<__half>(testing::kFp16Tolerance);
}

constexpr size_t kRandomInputs = 100003;

// kRandomInputs random values, then the cases rounding gets wrong most easily: exact ties
// (to even, both ways), signed zeros, infinities, overflow to infinity, subnormals; NaN last.
std::vector<float> ConversionInputs() {
  std::vector<float> x = testing::RandomFloats(kRandomInputs, 83, -100, 100);
  const uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u,   // ties
                           0x3f808001u, 0x3f807fffu,                             // near ties
                           0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,   // 0, inf
                           0x7f7fffffu, 0xff7fffffu,                             // overflow
                           0x00000001u, 0x00012345u, 0x80408000u, 0x007fffffu};  // subnormal
  for (uint32_t b : bits) {
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  x.push_back(std::numeric_limits<float>::quiet_NaN());  // last
  return x;
}

TEST(CudaElementwiseTest, ConversionsMatchTheHost) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const std::vector<float> x = ConversionInputs();
  const size_t n = x.size();
  std::vector<float> rounded(n);
  for (size_t i = 0; i < n; ++i) rounded[i] = testing::RoundToBf16(x[i]);
  DeviceArray<float> dx(x), dcopy(n), dback(n);
  DeviceArray<__nv_bfloat16> dbf16(n), dbf16_source(rounded), dbf16_copy(n);
  absl::Status s = ConvertTensor<float, __nv_bfloat16>(dx.get(), dbf16.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = ConvertTensor<__nv_bfloat16, float>(dbf16_source.get(), dback.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = ConvertTensor<float, float>(dx.get(), dcopy.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = ConvertTensor<__nv_bfloat16, __nv_bfloat16>(dbf16_source.get(), dbf16_copy.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // NaN (the last input) only has to stay NaN: its payload is the converter's choice.
  const std::vector<float> to_bf16 = dbf16.Download(), back = dback.Download();
  const std::vector<float> copy = dcopy.Download(), bf16_copy = dbf16_copy.Download();
  EXPECT_TRUE(std::isnan(to_bf16.back()));
  EXPECT_TRUE(std::isnan(back.back()));
  const std::vector<float> finite_rounded(rounded.begin(), rounded.end() - 1);
  const size_t to_bf16_mismatches =
      BitMismatches(std::vector<float>(to_bf16.begin(), to_bf16.end() - 1), finite_rounded);
  const size_t back_mismatches =
      BitMismatches(std::vector<float>(back.begin(), back.end() - 1), finite_rounded);
  const size_t copy_mismatches = BitMismatches(copy, x);  // a copy: NaN's bits included
  const size_t bf16_copy_mismatches = BitMismatches(bf16_copy, rounded);
  double error = 0, scale = 0;  // over the random (finite) part
  for (size_t i = 0; i < kRandomInputs; ++i) {
    error = std::max(error, std::abs(double(to_bf16[i]) - x[i]));
    scale = std::max(scale, std::abs(double(x[i])));
  }
  std::printf(
      "convert: fp32->bf16 error %.2e, bits differ fp32->bf16 %zu, bf16->fp32 %zu, "
      "fp32->fp32 %zu, bf16->bf16 %zu\n",
      error / scale, to_bf16_mismatches, back_mismatches, copy_mismatches, bf16_copy_mismatches);
  EXPECT_LT(error / scale, testing::kBf16Tolerance);
  EXPECT_EQ(to_bf16_mismatches, 0u);
  EXPECT_EQ(back_mismatches, 0u);
  EXPECT_EQ(copy_mismatches, 0u);
  EXPECT_EQ(bf16_copy_mismatches, 0u);
}

// kRandomInputs random values in fp16's comfortable range, then fp16's hard cases: exact
// ties (to even, both ways), near ties, signed zeros, infinities, its largest value and
// the overflow boundary (65520 is a tie that rounds up to inf), float's largest value, its
// subnormals (below 2^-14: 2^-24 steps, ties included, and the carry into the smallest
// normal), float subnormals (to zero); NaN last.
std::vector<float> Fp16ConversionInputs() {
  std::vector<float> x = testing::RandomFloats(kRandomInputs, 84, -4, 4);
  const uint32_t bits[] = {0x3f801000u, 0x3f803000u, 0xbf801000u, 0xbf803000u,  // ties
                           0x3f801001u, 0x3f800fffu,                            // near ties
                           0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,  // 0, inf
                           0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u,  // 65504, 65520
                           0x7f7fffffu, 0x47c35000u,                            // overflow
                           0x33800000u, 0x33000000u, 0x33400000u, 0x33c00000u,  // 2^-24 ...
                           0xb3c00000u, 0x387fffffu, 0x38800000u, 0x387fc000u,  // ... 2^-14
                           0x00000001u, 0x807fffffu};                           // subnormal
  for (uint32_t b : bits) {
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  x.push_back(std::numeric_limits<float>::quiet_NaN());  // last
  return x;
}

TEST(CudaElementwiseTest, Fp16ConversionsMatchTheHost) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const std::vector<float> x = Fp16ConversionInputs();
  const size_t n = x.size();
  const std::vector<float> rounded = testing::RoundedTo<__half>(x);
  DeviceArray<float> dx(x), dback(n);
  DeviceArray<__half> dfp16(n), dfp16_source(rounded), dfp16_copy(n);
  absl::Status s = ConvertTensor<float, __half>(dx.get(), dfp16.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = ConvertTensor<__half, float>(dfp16_source.get(), dback.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = ConvertTensor<__half, __half>(dfp16_source.get(), dfp16_copy.get(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // NaN (the last input) only has to stay NaN: its payload is the converter's choice.
  const std::vector<float> to_fp16 = dfp16.Download(), back = dback.Download();
  const std::vector<float> fp16_copy = dfp16_copy.Download();
  EXPECT_TRUE(std::isnan(to_fp16.back()));
  EXPECT_TRUE(std::isnan(back.back()));
  EXPECT_TRUE(std::isnan(fp16_copy.back()));
  const std::vector<float> finite_rounded(rounded.begin(), rounded.end() - 1);
  const size_t to_fp16_mismatches =
      BitMismatches(std::vector<float>(to_fp16.begin(), to_fp16.end() - 1), finite_rounded);
  const size_t back_mismatches =
      BitMismatches(std::vector<float>(back.begin(), back.end() - 1), finite_rounded);
  const size_t copy_mismatches =
      BitMismatches(std::vector<float>(fp16_copy.begin(), fp16_copy.end() - 1), finite_rounded);
  double error = 0, scale = 0;  // over the random part
  for (size_t i = 0; i < kRandomInputs; ++i) {
    error = std::max(error, std::abs(double(to_fp16[i]) - x[i]));
    scale = std::max(scale, std::abs(double(x[i])));
  }
  std::printf(
      "convert: fp32->fp16 error %.2e, bits differ fp32->fp16 %zu, fp16->fp32 %zu, "
      "fp16->fp16 %zu\n",
      error / scale, to_fp16_mismatches, back_mismatches, copy_mismatches);
  EXPECT_LT(error / scale, testing::kFp16Tolerance);
  EXPECT_EQ(to_fp16_mismatches, 0u);
  EXPECT_EQ(back_mismatches, 0u);
  EXPECT_EQ(copy_mismatches, 0u);
}

// Host-only: the tests' own fp16 rounding (test_support.h) is cuda_fp16.h's host one, on
// every fp16 value's neighbourhood (each upper half of a float's bits with the lower
// halves that decide a rounding: 0, ties, either side of them, all ones) and on a million
// random bit patterns; and the way back is exact for all 65536 fp16 bit patterns.
TEST(CudaElementwiseTest, HostFp16RoundingIsCudas) {
  auto same = [](float got, float want) {
    return std::isnan(want) ? std::isnan(got) : std::memcmp(&got, &want, 4) == 0;
  };
  std::vector<uint32_t> patterns;
  for (uint32_t upper = 0; upper < 0x10000u; ++upper) {
    for (uint32_t lower :
         {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x8000u, 0xffffu}) {
      patterns.push_back(upper << 16 | lower);
    }
  }
  std::mt19937 rng(85);
  for (int i = 0; i < 1000000; ++i) patterns.push_back(static_cast<uint32_t>(rng()));
  size_t mismatches = 0;
  for (uint32_t b : patterns) {
    float f;
    std::memcpy(&f, &b, 4);
    mismatches += !same(testing::RoundToHalf(f), __half2float(__float2half_rn(f)));
  }
  size_t back_mismatches = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    __half_raw raw;
    raw.x = static_cast<unsigned short>(h);
    back_mismatches +=
        !same(testing::Fp16BitsToFloat(static_cast<uint16_t>(h)), __half2float(__half(raw)));
  }
  std::printf("host fp16: %zu of %zu roundings differ from cuda_fp16.h, %zu of 65536 widenings\n",
              mismatches, patterns.size(), back_mismatches);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(back_mismatches, 0u);
}

}  // namespace
}  // namespace mtrain::cuda
