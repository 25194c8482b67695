#include "kernels/cuda/layernorm.h"

#include <cstring>

#include "kernels/cuda/test_support.h"
#include "kernels/layernorm.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Where the backward pass's d_x starts from.
enum class Residual {
  kNone,      // d_residual null: d_x += the input gradient
  kSeparate,  // d_x = d_residual + the input gradient, d_x's old contents ignored
  kAliased,   // d_residual == d_x: the same sum as kNone, through the other path
};

const char* ResidualName(Residual residual) {
  switch (residual) {
    case Residual::kNone:
      return "accumulate";
    case Residual::kSeparate:
      return "d_residual";
    case Residual::kAliased:
      return "d_residual = d_x";
  }
  return "?";
}

// x in [x_lo, x_hi]: off-centre, so the mean matters.
template <typename T>
void CheckLayerNorm(int rows, int C, float x_lo, float x_hi, double tolerance,
                    Residual residual = Residual::kNone) {
  const size_t n = size_t(rows) * C;
  const std::vector<float> x = testing::RoundedTo<T>(testing::RandomFloats(n, 21, x_lo, x_hi));
  const std::vector<float> gamma = testing::RoundedTo<T>(testing::RandomFloats(C, 22, 0.5, 1.5));
  const std::vector<float> beta = testing::RoundedTo<T>(testing::RandomFloats(C, 23, -0.5, 0.5));
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 24, -1, 1));
  const std::vector<float> d_x0 = testing::RoundedTo<T>(testing::RandomFloats(n, 25, -0.1, 0.1));
  const std::vector<float> d_gamma0 = testing::RandomFloats(C, 26, -1, 1);
  const std::vector<float> d_beta0 = testing::RandomFloats(C, 27, -1, 1);
  // With a separate d_residual, d_x starts as garbage the pass must overwrite.
  const std::vector<float> d_x_garbage =
      testing::RoundedTo<T>(testing::RandomFloats(n, 28, -100, 100));

  DeviceArray<T> dx(x), dgamma(gamma), dbeta(beta), dy(n), ddy(d_y),
      ddx(residual == Residual::kSeparate ? d_x_garbage : d_x0),
      dresidual(residual == Residual::kSeparate ? d_x0 : std::vector<float>());
  DeviceArray<float> dmean(rows), drstd(rows), ddgamma(d_gamma0), ddbeta(d_beta0);
  const T* d_residual = residual == Residual::kSeparate  ? dresidual.get()
                        : residual == Residual::kAliased ? ddx.get()
                                                         : nullptr;
  ASSERT_TRUE(LayerNormForward<T>(dx.get(), dgamma.get(), dbeta.get(), dy.get(), dmean.get(),
                                  drstd.get(), rows, C, 1e-5f, nullptr)
                  .ok());
  if (residual == Residual::kNone) {
    // The accumulating overload (no d_residual argument).
    ASSERT_TRUE(LayerNormBackward<T>(ddy.get(), dx.get(), dgamma.get(), dmean.get(), drstd.get(),
                                     ddx.get(), ddgamma.get(), ddbeta.get(), rows, C, nullptr)
                    .ok());
  } else {
    ASSERT_TRUE(LayerNormBackward<T>(ddy.get(), dx.get(), dgamma.get(), dmean.get(), drstd.get(),
                                     d_residual, ddx.get(), ddgamma.get(), ddbeta.get(), rows, C,
                                     nullptr)
                    .ok());
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // The CPU accumulates into d_x; starting it from d_x0 (the residual, in every mode) gives
  // the expected d_x.
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
  std::printf("layernorm %s rows %d C %d %s: y %.2e rstd %.2e d_x %.2e d_gamma %.2e d_beta %.2e\n",
              testing::TypeName<T>(), rows, C, ResidualName(residual), errors[0], errors[1],
              errors[2], errors[3], errors[4]);
  for (double e : errors) EXPECT_LT(e, tolerance);
  if (residual == Residual::kSeparate) {
    EXPECT_EQ(dresidual.Download(), d_x0) << "d_residual is an input: left as it was";
  }
}

// Every way of giving d_x its residual, at widths that take each of the backward's paths:
// 16-byte chunks one or two to a thread, several rows to a block (96, 768, 2048; 4104 =
// 8 * 513 in 16 bits), single elements where C is no multiple of the chunk (33, 771, 4095:
// one, two and eight to a thread), the parameter sums in the block's global partial row
// rather than shared memory (6400 in 16 bits: 2C floats over 48 KiB), and the fallback for
// rows wider than the registers hold (8200; 4104 and 6400 in fp32). Row counts are no
// multiple of the grid or of the rows an iteration takes.
template <typename T>
void CheckResidualModes(float x_lo, float x_hi, double tolerance) {
  for (Residual residual : {Residual::kNone, Residual::kSeparate, Residual::kAliased}) {
    CheckLayerNorm<T>(1037, 768, x_lo, x_hi, tolerance, residual);
    CheckLayerNorm<T>(301, 2048, x_lo, x_hi, tolerance, residual);
    CheckLayerNorm<T>(67, 771, x_lo, x_hi, tolerance, residual);
  }
  CheckLayerNorm<T>(1, 96, x_lo, x_hi, tolerance, Residual::kSeparate);
  CheckLayerNorm<T>(7, 33, x_lo, x_hi, tolerance, Residual::kSeparate);
  CheckLayerNorm<T>(5, 4095, x_lo, x_hi, tolerance, Residual::kSeparate);
  CheckLayerNorm<T>(19, 4104, x_lo, x_hi, tolerance, Residual::kSeparate);
  CheckLayerNorm<T>(9, 6400, x_lo, x_hi, tolerance, Residual::kAliased);
  CheckLayerNorm<T>(3, 8200, x_lo, x_hi, tolerance, Residual::kSeparate);
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

TEST(CudaLayerNormTest, Fp32ResidualMatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckResidualModes<float>(-3, 5, testing::kFp32Tolerance);
}

TEST(CudaLayerNormTest, Bf16ResidualMatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckResidualModes<__nv_bfloat16>(-3, 5, testing::kBf16Tolerance);
}

TEST(CudaLayerNormTest, Fp16ResidualMatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckResidualModes<__half>(-3, 4, testing::kFp16Tolerance);
}

// A misaligned pointer takes the single-element path; the result is the same sum.
TEST(CudaLayerNormTest, MisalignedRowsMatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const int rows = 33, C = 768;
  const size_t n = size_t(rows) * C;
  const std::vector<float> x =
      testing::RoundedTo<__nv_bfloat16>(testing::RandomFloats(n, 31, -3, 5));
  const std::vector<float> gamma =
      testing::RoundedTo<__nv_bfloat16>(testing::RandomFloats(C, 32, 0.5, 1.5));
  const std::vector<float> d_y =
      testing::RoundedTo<__nv_bfloat16>(testing::RandomFloats(n, 33, -1, 1));
  const std::vector<float> d_res =
      testing::RoundedTo<__nv_bfloat16>(testing::RandomFloats(n, 34, -0.1, 0.1));
  std::vector<double> mean(rows), rstd(rows), y(n), d_x = testing::ToDouble(d_res), d_gamma(C),
                                                    d_beta(C);
  const std::vector<double> xd = testing::ToDouble(x), gd = testing::ToDouble(gamma),
                            dyd = testing::ToDouble(d_y), bd(C, 0.0);
  cpu::LayerNormForward<double>(xd.data(), gd.data(), bd.data(), y.data(), mean.data(), rstd.data(),
                                rows, C, 1e-5);
  cpu::LayerNormBackward<double>(dyd.data(), xd.data(), gd.data(), mean.data(), rstd.data(),
                                 d_x.data(), d_gamma.data(), d_beta.data(), rows, C);
  // d_x one element past an aligned start (the array holds one element more).
  std::vector<float> d_x_host(n + 1, 0.0f);
  DeviceArray<__nv_bfloat16> dx(x), dgamma(gamma), ddy(d_y), dres(d_res), ddx(d_x_host);
  std::vector<float> mean_f(mean.begin(), mean.end()), rstd_f(rstd.begin(), rstd.end());
  DeviceArray<float> dmean(mean_f), drstd(rstd_f), ddgamma(std::vector<float>(C, 0.0f)),
      ddbeta(std::vector<float>(C, 0.0f));
  ASSERT_TRUE(LayerNormBackward<__nv_bfloat16>(ddy.get(), dx.get(), dgamma.get(), dmean.get(),
                                               drstd.get(), dres.get(), ddx.get() + 1,
                                               ddgamma.get(), ddbeta.get(), rows, C, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got = ddx.Download();
  EXPECT_EQ(got[0], 0.0f) << "the element before d_x is not touched";
  got.erase(got.begin());
  EXPECT_LT(testing::RelativeError(got, d_x), testing::kBf16Tolerance);
  EXPECT_LT(testing::RelativeError(ddgamma.Download(), d_gamma), testing::kBf16Tolerance);
  EXPECT_LT(testing::RelativeError(ddbeta.Download(), d_beta), testing::kBf16Tolerance);
}

// Two runs from the same state give the same bits: d_x and the parameter gradients.
template <typename T>
void CheckDeterministic(int rows, int C) {
  const size_t n = size_t(rows) * C;
  const std::vector<float> x = testing::RoundedTo<T>(testing::RandomFloats(n, 41, -3, 5));
  const std::vector<float> gamma = testing::RoundedTo<T>(testing::RandomFloats(C, 42, 0.5, 1.5));
  const std::vector<float> beta = testing::RoundedTo<T>(testing::RandomFloats(C, 43, -0.5, 0.5));
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 44, -1, 1));
  const std::vector<float> d_res = testing::RoundedTo<T>(testing::RandomFloats(n, 45, -0.1, 0.1));
  DeviceArray<T> dx(x), dgamma(gamma), dbeta(beta), dy(n), ddy(d_y), dres(d_res), ddx(n);
  DeviceArray<float> dmean(rows), drstd(rows), ddgamma(C), ddbeta(C);
  ASSERT_TRUE(LayerNormForward<T>(dx.get(), dgamma.get(), dbeta.get(), dy.get(), dmean.get(),
                                  drstd.get(), rows, C, 1e-5f, nullptr)
                  .ok());
  std::vector<float> runs[2][3];
  for (std::vector<float>(&run)[3] : runs) {
    ddgamma.Upload(std::vector<float>(C, 0.0f));
    ddbeta.Upload(std::vector<float>(C, 0.0f));
    ASSERT_TRUE(LayerNormBackward<T>(ddy.get(), dx.get(), dgamma.get(), dmean.get(), drstd.get(),
                                     dres.get(), ddx.get(), ddgamma.get(), ddbeta.get(), rows, C,
                                     nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    run[0] = ddx.Download();
    run[1] = ddgamma.Download();
    run[2] = ddbeta.Download();
  }
  const char* names[] = {"d_x", "d_gamma", "d_beta"};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(runs[0][i].size(), runs[1][i].size());
    EXPECT_EQ(std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * sizeof(float)),
              0)
        << testing::TypeName<T>() << " rows " << rows << " C " << C << ": " << names[i]
        << " differs between two runs";
  }
}

TEST(CudaLayerNormTest, BackwardIsDeterministic) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckDeterministic<__nv_bfloat16>(4099, 768);
  CheckDeterministic<__nv_bfloat16>(1031, 2048);
  CheckDeterministic<float>(1031, 771);
  CheckDeterministic<float>(17, 8200);
}

}  // namespace
}  // namespace mtrain::cuda
