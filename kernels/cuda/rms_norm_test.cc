#include "kernels/cuda/rms_norm.h"

#include "kernels/cuda/test_support.h"
#include "kernels/rms_norm.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Against the CPU kernel in double: y, the saved rstd, d_x and d_gamma (both accumulated
// onto nonzero starting values, as the layers use them).
template <typename T>
void CheckRmsNorm(int rows, int C, float x_lo, float x_hi, double tolerance) {
  const size_t n = size_t(rows) * C;
  const std::vector<float> x = testing::RoundedTo<T>(testing::RandomFloats(n, 31, x_lo, x_hi));
  const std::vector<float> gamma = testing::RoundedTo<T>(testing::RandomFloats(C, 32, 0.5, 1.5));
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 33, -1, 1));
  const std::vector<float> d_x0 = testing::RoundedTo<T>(testing::RandomFloats(n, 34, -0.1, 0.1));
  const std::vector<float> d_gamma0 = testing::RandomFloats(C, 35, -1, 1);

  DeviceArray<T> dx(x), dgamma(gamma), dy(n), ddy(d_y), ddx(d_x0);
  DeviceArray<float> drstd(rows), ddgamma(d_gamma0);
  ASSERT_TRUE(
      RmsNormForward<T>(dx.get(), dgamma.get(), dy.get(), drstd.get(), rows, C, 1e-5f, nullptr)
          .ok());
  ASSERT_TRUE(RmsNormBackward<T>(ddy.get(), dx.get(), dgamma.get(), drstd.get(), ddx.get(),
                                 ddgamma.get(), rows, C, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> xd = testing::ToDouble(x), gd = testing::ToDouble(gamma),
                            dyd = testing::ToDouble(d_y);
  std::vector<double> y(n), rstd(rows), d_x = testing::ToDouble(d_x0),
                                        d_gamma = testing::ToDouble(d_gamma0);
  cpu::RmsNormForward<double>(xd.data(), gd.data(), y.data(), rstd.data(), rows, C, 1e-5);
  cpu::RmsNormBackward<double>(dyd.data(), xd.data(), gd.data(), rstd.data(), d_x.data(),
                               d_gamma.data(), rows, C);
  const double errors[] = {
      testing::RelativeError(dy.Download(), y),
      testing::RelativeError(drstd.Download(), rstd),
      testing::RelativeError(ddx.Download(), d_x),
      testing::RelativeError(ddgamma.Download(), d_gamma),
  };
  std::printf("rms_norm %s rows %d C %d: y %.2e rstd %.2e d_x %.2e d_gamma %.2e\n",
              testing::TypeName<T>(), rows, C, errors[0], errors[1], errors[2], errors[3]);
  for (double e : errors) EXPECT_LT(e, tolerance);
}

TEST(CudaRmsNormTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckRmsNorm<float>(1000, 768, -3, 5, testing::kFp32Tolerance);
  CheckRmsNorm<float>(3, 1000, -3, 5, testing::kFp32Tolerance);  // C not a multiple of 32
}

TEST(CudaRmsNormTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckRmsNorm<__nv_bfloat16>(517, 1024, -3, 5, testing::kBf16Tolerance);
}

TEST(CudaRmsNormTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckRmsNorm<__half>(517, 1024, -3, 4, testing::kFp16Tolerance);
}

TEST(CudaRmsNormTest, RefusesAnEmptyRow) {
  MTRAIN_SKIP_WITHOUT_GPU();
  EXPECT_FALSE(
      RmsNormForward<float>(nullptr, nullptr, nullptr, nullptr, 4, 0, 1e-5f, nullptr).ok());
}

}  // namespace
}  // namespace mtrain::cuda
