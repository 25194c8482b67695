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
// rounded once to bf16 for bf16 storage: the same arithmetic, so the bits must agree.
template <typename T>
void CheckAdd(double tolerance) {
  const size_t n = 100003;
  auto round = [](std::vector<float> v) {
    if constexpr (sizeof(T) == 2) {
      for (float& e : v) e = testing::RoundToBf16(e);
    }
    return v;
  };
  const std::vector<float> a = round(testing::RandomFloats(n, 81, -4, 4));
  const std::vector<float> b = round(testing::RandomFloats(n, 82, -4, 4));
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
    want[i] = a[i] + b[i];
    if constexpr (sizeof(T) == 2) want[i] = testing::RoundToBf16(want[i]);
  }
  const std::vector<float> out = dout.Download();
  const size_t mismatches = BitMismatches(out, want);
  const size_t into_a = BitMismatches(da_in_place.Download(), want);
  const size_t into_b = BitMismatches(db_in_place.Download(), want);
  const double error = testing::RelativeError(out, testing::ToDouble(want));
  std::printf("add %s: error %.2e, bits differ out %zu, into a %zu, into b %zu\n",
              sizeof(T) == 4 ? "fp32" : "bf16", error, mismatches, into_a, into_b);
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

}  // namespace
}  // namespace mtrain::cuda
