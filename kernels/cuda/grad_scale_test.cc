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
  std::vector<float> x = testing::RandomFloats(n, 51, -3, 3);
  if constexpr (sizeof(T) == 2) {
    for (float& e : x) e = testing::RoundToBf16(e);
  }
  DeviceArray<T> dx(x);
  Flags flags;
  ASSERT_TRUE(SumOfSquaresAndNonFinite<T>(dx.get(), n, flags.sum, flags.flag, nullptr).ok());
  const double first = flags.Sum();
  const double want = cpu::SumOfSquares<float>(x.data(), n);
  std::printf("sum of squares %s: %.17g vs %.17g (rel %.2e)\n", sizeof(T) == 4 ? "fp32" : "bf16",
              first, want, std::abs(first - want) / want);
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
}

TEST(CudaGradScaleTest, SumOfSquaresMatchesTheCpuAndFlagsNaN) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckSumOfSquares<float>(1e-12);
  CheckSumOfSquares<__nv_bfloat16>(1e-12);
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

}  // namespace
}  // namespace mtrain::cuda
