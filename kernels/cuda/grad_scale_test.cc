#include "kernels/cuda/grad_scale.h"

#include <limits>

#include "kernels/cuda/test_support.h"
#include "kernels/grad_norm.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

struct Flags {
  Flags() {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&sum), sizeof(double)), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
  }
  ~Flags() {
    cudaFree(sum);
    cudaFree(flag);
  }
  double Sum() const {
    double out = 0;
    EXPECT_EQ(cudaMemcpy(&out, sum, sizeof(double), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  int Flag() const {
    int out = 0;
    EXPECT_EQ(cudaMemcpy(&out, flag, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  double* sum = nullptr;
  int* flag = nullptr;
};

template <typename T>
void CheckSumOfSquares(double tolerance) {
  const size_t n = 3000001;
  std::vector<float> x = testing::RoundedTo<T>(testing::RandomFloats(n, 51, -3, 3));
  DeviceArray<T> dx(x);
  Flags flags;
  ASSERT_TRUE(SumOfSquaresAndNonFinite<T>(dx.get(), n, flags.sum, flags.flag, nullptr).ok());
  const double first = flags.Sum();
  const double want = cpu::SumOfSquares<float>(x.data(), n);
  std::printf("sum of squares %s: %.17g vs %.17g (rel %.2e)\n", testing::TypeName<T>(), first, want,
              std::abs(first - want) / want);
  // The inputs are exact in both; only the summation order differs.
  EXPECT_NEAR(first, want, tolerance * want);
  EXPECT_EQ(flags.Flag(), 0);
  // Deterministic: the same bits again.
  ASSERT_TRUE(SumOfSquaresAndNonFinite<T>(dx.get(), n, flags.sum, flags.flag, nullptr).ok());
  EXPECT_EQ(flags.Sum(), first);
  // One NaN anywhere raises the flag.
  x[n - 7] = std::numeric_limits<float>::quiet_NaN();
  dx.Upload(x);
  ASSERT_TRUE(SumOfSquaresAndNonFinite<T>(dx.get(), n, flags.sum, flags.flag, nullptr).ok());
  EXPECT_EQ(flags.Flag(), 1);
  // So does one inf (an overflowed fp16 gradient is one).
  x[n - 7] = x[0];
  x[5] = -std::numeric_limits<float>::infinity();
  dx.Upload(x);
  Flags inf_flags;
  ASSERT_TRUE(
      SumOfSquaresAndNonFinite<T>(dx.get(), n, inf_flags.sum, inf_flags.flag, nullptr).ok());
  EXPECT_EQ(inf_flags.Flag(), 1);
}

TEST(CudaGradScaleTest, SumOfSquaresMatchesTheCpuAndFlagsNaN) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckSumOfSquares<float>(1e-12);
  CheckSumOfSquares<__nv_bfloat16>(1e-12);
  CheckSumOfSquares<__half>(1e-12);
}

TEST(CudaGradScaleTest, UnscalingMultipliesAndFlagsOverflow) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const size_t n = 100000;
  const std::vector<float> x = testing::RandomFloats(n, 61, -1000, 1000);
  DeviceArray<float> dx(x);
  Flags flags;
  ASSERT_TRUE(ScaleAndCheckFinite<float>(dx.get(), n, 1.0f / 1024, flags.flag, nullptr).ok());
  const std::vector<float> got = dx.Download();
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(got[i], x[i] / 1024) << i;  // exact: power of 2
  EXPECT_EQ(flags.Flag(), 0);
  std::vector<float> with_inf = x;
  with_inf[12345] = std::numeric_limits<float>::infinity();
  dx.Upload(with_inf);
  ASSERT_TRUE(ScaleAndCheckFinite<float>(dx.get(), n, 0.5f, flags.flag, nullptr).ok());
  EXPECT_EQ(flags.Flag(), 1);
}

// fp16 gradients under dynamic loss scaling: unscaling rounds once to fp16 (exactly the
// host's rounding, subnormal results included), and the flag catches what overflows fp16
// (a product finite in float but beyond 65504 once stored) as well as an inf input.
TEST(CudaGradScaleTest, Fp16UnscalingRoundsOnceAndFlagsOverflow) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const size_t n = 100000;
  const std::vector<float> x =
      testing::RoundedTo<__half>(testing::RandomFloats(n, 62, -1000, 1000));
  DeviceArray<__half> dx(x);
  {
    Flags flags;
    ASSERT_TRUE(ScaleAndCheckFinite<__half>(dx.get(), n, 1.0f / 1024, flags.flag, nullptr).ok());
    const std::vector<float> got = dx.Download();
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) mismatches += got[i] != testing::RoundToHalf(x[i] / 1024);
    std::printf("fp16 unscale by 1/1024: %zu of %zu values differ from the host's rounding\n",
                mismatches, n);
    EXPECT_EQ(mismatches, 0u);
    EXPECT_EQ(flags.Flag(), 0);
  }
  // 65504 * 1.0001 = 65510.55: past fp16's largest value, but it rounds back to it (inf
  // starts at 65520), so nothing is flagged.
  std::vector<float> near_max = x;
  near_max[777] = 65504.0f;
  dx.Upload(near_max);
  {
    Flags flags;
    ASSERT_TRUE(ScaleAndCheckFinite<__half>(dx.get(), n, 1.0001f, flags.flag, nullptr).ok());
    EXPECT_EQ(dx.Download()[777], 65504.0f);
    EXPECT_EQ(flags.Flag(), 0);
  }
  // 40000 * 2 = 80000: finite in float, inf in fp16: flagged.
  std::vector<float> overflowing = x;
  overflowing[4321] = 40000.0f;  // exact in fp16
  dx.Upload(overflowing);
  {
    Flags flags;
    ASSERT_TRUE(ScaleAndCheckFinite<__half>(dx.get(), n, 2.0f, flags.flag, nullptr).ok());
    const std::vector<float> got = dx.Download();
    std::printf("fp16 40000 * 2 stored as %g, flag %d\n", got[4321], flags.Flag());
    EXPECT_TRUE(std::isinf(got[4321]));
    EXPECT_EQ(flags.Flag(), 1);
  }
  // An inf input (an fp16 gradient that overflowed in the backward), shrunk: still flagged.
  std::vector<float> with_inf = x;
  with_inf[12345] = std::numeric_limits<float>::infinity();
  dx.Upload(with_inf);
  {
    Flags flags;
    ASSERT_TRUE(ScaleAndCheckFinite<__half>(dx.get(), n, 1.0f / 1024, flags.flag, nullptr).ok());
    EXPECT_EQ(flags.Flag(), 1);
  }
}

}  // namespace
}  // namespace mtrain::cuda
