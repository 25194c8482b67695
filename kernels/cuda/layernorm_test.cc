#include "kernels/cuda/layernorm.h"

#include "kernels/cuda/test_support.h"
#include "kernels/layernorm.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// x in [x_lo, x_hi]: off-centre, so the mean matters.
template <typename T>
void CheckLayerNorm(int rows, int C, float x_lo, float x_hi, double tolerance) {
  const size_t n = size_t(rows) * C;
  const std::vector<float> x = testing::RoundedTo<T>(testing::RandomFloats(n, 21, x_lo, x_hi));
  const std::vector<float> gamma = testing::RoundedTo<T>(testing::RandomFloats(C, 22, 0.5, 1.5));
  const std::vector<float> beta = testing::RoundedTo<T>(testing::RandomFloats(C, 23, -0.5, 0.5));
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 24, -1, 1));
  const std::vector<float> d_x0 = testing::RoundedTo<T>(testing::RandomFloats(n, 25, -0.1, 0.1));
  const std::vector<float> d_gamma0 = testing::RandomFloats(C, 26, -1, 1);
  const std::vector<float> d_beta0 = testing::RandomFloats(C, 27, -1, 1);

  DeviceArray<T> dx(x), dgamma(gamma), dbeta(beta), dy(n), ddy(d_y), ddx(d_x0);
  DeviceArray<float> dmean(rows), drstd(rows), ddgamma(d_gamma0), ddbeta(d_beta0);
  ASSERT_TRUE(LayerNormForward<T>(dx.get(), dgamma.get(), dbeta.get(), dy.get(), dmean.get(),
                                  drstd.get(), rows, C, 1e-5f, nullptr)
                  .ok());
  ASSERT_TRUE(LayerNormBackward<T>(ddy.get(), dx.get(), dgamma.get(), dmean.get(), drstd.get(),
                                   ddx.get(), ddgamma.get(), ddbeta.get(), rows, C, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> xd = testing::ToDouble(x), gd = testing::ToDouble(gamma),
                            bd = testing::ToDouble(beta), dyd = testing::ToDouble(d_y);
  std::vector<double> y(n), mean(rows), rstd(rows), d_x = testing::ToDouble(d_x0),
                                                    d_gamma = testing::ToDouble(d_gamma0),
                                                    d_beta = testing::ToDouble(d_beta0);
  cpu::LayerNormForward<double>(xd.data(), gd.data(), bd.data(), y.data(), mean.data(), rstd.data(),
                                rows, C, 1e-5);
  cpu::LayerNormBackward<double>(dyd.data(), xd.data(), gd.data(), mean.data(), rstd.data(),
                                 d_x.data(), d_gamma.data(), d_beta.data(), rows, C);
  const double errors[] = {
      testing::RelativeError(dy.Download(), y),
      testing::RelativeError(drstd.Download(), rstd),
      testing::RelativeError(ddx.Download(), d_x),
      testing::RelativeError(ddgamma.Download(), d_gamma),
      testing::RelativeError(ddbeta.Download(), d_beta),
  };
  std::printf("layernorm %s rows %d C %d: y %.2e rstd %.2e d_x %.2e d_gamma %.2e d_beta %.2e\n",
              testing::TypeName<T>(), rows, C, errors[0], errors[1], errors[2], errors[3],
              errors[4]);
  for (double e : errors) EXPECT_LT(e, tolerance);
}

TEST(CudaLayerNormTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckLayerNorm<float>(1000, 768, -3, 5, testing::kFp32Tolerance);
  CheckLayerNorm<float>(3, 1000, -3, 5, testing::kFp32Tolerance);  // C not a multiple of 32
}

TEST(CudaLayerNormTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckLayerNorm<__nv_bfloat16>(517, 1024, -3, 5, testing::kBf16Tolerance);
}

TEST(CudaLayerNormTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckLayerNorm<__half>(517, 1024, -3, 4, testing::kFp16Tolerance);
  CheckLayerNorm<__half>(3, 1000, -3, 4, testing::kFp16Tolerance);  // C not a multiple of 32
}

}  // namespace
}  // namespace mtrain::cuda
