#include "kernels/cuda/dropout.h"

#include <cmath>
#include <cstring>

#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/test_support.h"
#include "kernels/dropout.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Elements whose bits differ (a kept/dropped disagreement or any rounding difference).
size_t BitMismatches(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t count = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return count;
}

// Forward (out of place and in place) and backward against the CPU in float on the same
// (rounded) inputs. fp32 must match bit for bit: same mask, same scale, same roundings.
template <typename T>
void CheckDropout(float p, uint64_t index_base, double tolerance) {
  const size_t n = 100003;  // not a multiple of any block size
  const uint64_t key = cpu::DropoutKey(1234, 5, 6);
  const std::vector<float> x = testing::RoundedTo<T>(testing::RandomFloats(n, 21, -3, 3));
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 22, -1, 1));
  const std::vector<float> d_x0 = testing::RoundedTo<T>(testing::RandomFloats(n, 23, -1, 1));
  DeviceArray<T> dx(x), dy(n), dinplace(x), ddy(d_y), ddx(d_x0);
  absl::Status s = DropoutForward<T>(dx.get(), dy.get(), n, p, key, index_base, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = DropoutForward<T>(dinplace.get(), dinplace.get(), n, p, key, index_base, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = DropoutBackward<T>(ddy.get(), ddx.get(), n, p, key, index_base, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> y_ref(n), d_x_ref = d_x0;
  cpu::DropoutForward<float>(x.data(), y_ref.data(), n, p, key, index_base);
  cpu::DropoutBackward<float>(d_y.data(), d_x_ref.data(), n, p, key, index_base);
  const std::vector<float> y = dy.Download(), y_inplace = dinplace.Download();
  const std::vector<float> d_x = ddx.Download();
  // The mask must be the CPU's exactly, whatever the storage type.
  size_t mask_mismatches = 0, dropped = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool kept = cpu::DropoutKeep(key, index_base + i, p);
    dropped += !kept;
    if (!kept && (y[i] != 0.0f || y_inplace[i] != 0.0f || d_x[i] != d_x0[i])) ++mask_mismatches;
  }
  const double forward_error = testing::RelativeError(y, testing::ToDouble(y_ref));
  const double inplace_error = testing::RelativeError(y_inplace, testing::ToDouble(y_ref));
  const double backward_error = testing::RelativeError(d_x, testing::ToDouble(d_x_ref));
  std::printf(
      "dropout %s p %.2f index_base %llu: dropped %.4f, mask mismatches %zu, forward %.2e, "
      "in place %.2e, backward %.2e\n",
      testing::TypeName<T>(), p, static_cast<unsigned long long>(index_base), double(dropped) / n,
      mask_mismatches, forward_error, inplace_error, backward_error);
  EXPECT_EQ(mask_mismatches, 0u);
  EXPECT_NEAR(double(dropped) / n, p, 0.01);
  if constexpr (sizeof(T) == 4) {
    EXPECT_EQ(BitMismatches(y, y_ref), 0u);
    EXPECT_EQ(BitMismatches(y_inplace, y_ref), 0u);
    EXPECT_EQ(BitMismatches(d_x, d_x_ref), 0u);
  }
  EXPECT_LT(forward_error, tolerance);
  EXPECT_LT(inplace_error, tolerance);
  EXPECT_LT(backward_error, tolerance);
}

// An offset past 2^32: the index arithmetic must be 64-bit on the device too.
constexpr uint64_t kIndexBase = (uint64_t{1} << 33) + 12345;

TEST(CudaDropoutTest, Fp32IsBitIdenticalToTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (float p : {0.0f, 0.1f}) {
    for (uint64_t index_base : {uint64_t{0}, kIndexBase}) {
      CheckDropout<float>(p, index_base, testing::kFp32Tolerance);
    }
  }
}

TEST(CudaDropoutTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (float p : {0.0f, 0.1f}) {
    for (uint64_t index_base : {uint64_t{0}, kIndexBase}) {
      CheckDropout<__nv_bfloat16>(p, index_base, testing::kBf16Tolerance);
    }
  }
}

TEST(CudaDropoutTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (float p : {0.0f, 0.1f}) {
    for (uint64_t index_base : {uint64_t{0}, kIndexBase}) {
      CheckDropout<__half>(p, index_base, testing::kFp16Tolerance);
    }
  }
}

// Host-only: the shared device mask (which attention uses too) is the CPU's, index for
// index, at the quantized probabilities' edges as well.
TEST(CudaDropoutTest, SharedMaskIsTheCpus) {
  const uint64_t key = cpu::DropoutKey(7, 8, 9);
  size_t mismatches = 0;
  for (float p : {0.0f, 0.1f, 0.5f, 0.999f, 1.0f, 1.0f / 16777216.0f}) {
    const uint32_t threshold = DropoutThreshold(p);
    for (uint64_t index_base : {uint64_t{0}, kIndexBase, ~uint64_t{0} - 5000}) {
      for (uint64_t i = 0; i < 5000; ++i) {
        mismatches +=
            DropoutKeep(key, index_base + i, threshold) != cpu::DropoutKeep(key, index_base + i, p);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(CudaDropoutTest, RefusesProbabilitiesOutsideZeroOne) {
  for (float p : {-0.1f, 1.5f, NAN}) {
    EXPECT_EQ(DropoutForward<float>(nullptr, nullptr, 1, p, 0, 0, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DropoutBackward<float>(nullptr, nullptr, 1, p, 0, 0, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace mtrain::cuda
