#include "kernels/cuda/matmul.h"

#include "kernels/cuda/test_support.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

template <typename T>
std::vector<float> Rounded(std::vector<float> v) {
  if constexpr (sizeof(T) == 2) {
    for (float& e : v) e = testing::RoundToBf16(e);
  }
  return v;
}

// Forward (plain, bias, bias + GeLU) and backward against the CPU kernels in double.
template <typename T>
void CheckMatmul(double tolerance) {
  constexpr int M = 257, K = 384, N = 1152;
  const std::vector<float> in = Rounded<T>(testing::RandomFloats(size_t(M) * K, 81, -1, 1));
  const std::vector<float> weight = Rounded<T>(testing::RandomFloats(size_t(N) * K, 82, -0.1, 0.1));
  const std::vector<float> bias = Rounded<T>(testing::RandomFloats(N, 83, -0.5, 0.5));
  const std::vector<float> d_out = Rounded<T>(testing::RandomFloats(size_t(M) * N, 84, -1, 1));
  const std::vector<float> d_in0 = Rounded<T>(testing::RandomFloats(size_t(M) * K, 85, -1, 1));
  const std::vector<float> d_weight0 = testing::RandomFloats(size_t(N) * K, 86, -1, 1);
  const std::vector<float> d_bias0 = testing::RandomFloats(N, 87, -1, 1);

  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  DeviceArray<T> din(in), dweight(weight), dbias(bias), dout(size_t(M) * N),
      dout_bias(size_t(M) * N), dgelu(size_t(M) * N), dpre(size_t(M) * N), dd_out(d_out),
      dd_in(d_in0);
  DeviceArray<float> dd_weight(d_weight0), dd_bias(d_bias0);
  absl::Status s =
      MatmulForward<T>(**blas, din.get(), dweight.get(), nullptr, dout.get(), M, K, N, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulForward<T>(**blas, din.get(), dweight.get(), dbias.get(), dout_bias.get(), M, K, N,
                       nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulForward<T>(**blas, din.get(), dweight.get(), dbias.get(), dgelu.get(), M, K, N, nullptr,
                       dpre.get());
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulBackward<T>(**blas, dd_out.get(), din.get(), dweight.get(), dd_in.get(),
                        dd_weight.get(), dd_bias.get(), M, K, N, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> ind = testing::ToDouble(in), wd = testing::ToDouble(weight),
                            bd = testing::ToDouble(bias), dod = testing::ToDouble(d_out);
  std::vector<double> plain(size_t(M) * N), with_bias(size_t(M) * N), gelu(size_t(M) * N);
  cpu::MatmulForward<double>(ind.data(), wd.data(), nullptr, plain.data(), M, K, N);
  cpu::MatmulForward<double>(ind.data(), wd.data(), bd.data(), with_bias.data(), M, K, N);
  cpu::GeluForward<double>(with_bias.data(), gelu.data(), gelu.size());
  std::vector<double> d_in = testing::ToDouble(d_in0), d_weight = testing::ToDouble(d_weight0),
                      d_bias = testing::ToDouble(d_bias0);
  cpu::MatmulBackward<double>(dod.data(), ind.data(), wd.data(), d_in.data(), d_weight.data(),
                              d_bias.data(), M, K, N);
  const double errors[] = {
      testing::RelativeError(dout.Download(), plain),
      testing::RelativeError(dout_bias.Download(), with_bias),
      testing::RelativeError(dpre.Download(), with_bias),
      testing::RelativeError(dgelu.Download(), gelu),
      testing::RelativeError(dd_in.Download(), d_in),
      testing::RelativeError(dd_weight.Download(), d_weight),
      testing::RelativeError(dd_bias.Download(), d_bias),
  };
  std::printf(
      "matmul %s %dx%dx%d: out %.2e, +bias %.2e, pre-gelu %.2e, gelu %.2e, d_in %.2e, "
      "d_weight %.2e, d_bias %.2e\n",
      sizeof(T) == 4 ? "fp32" : "bf16", M, K, N, errors[0], errors[1], errors[2], errors[3],
      errors[4], errors[5], errors[6]);
  for (double e : errors) EXPECT_LT(e, tolerance);
}

TEST(CudaMatmulTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckMatmul<float>(testing::kFp32Tolerance);
}

TEST(CudaMatmulTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckMatmul<__nv_bfloat16>(testing::kBf16Tolerance);
}

TEST(CudaMatmulTest, RefusesGeluWithoutBias) {
  MTRAIN_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  DeviceArray<float> a(64), w(64), out(64), pre(64);
  EXPECT_EQ(MatmulForward<float>(**blas, a.get(), w.get(), nullptr, out.get(), 8, 8, 8, nullptr,
                                 pre.get())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain::cuda
