#include "kernels/cuda/matmul.h"

#include <type_traits>

#include "kernels/cuda/test_support.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Forward (plain, bias, bias + GeLU) and backward against the CPU kernels in double. The
// T outputs stay well inside fp16's range (|out|, |d_in| of a few units). The default
// shape is one row chunk of the bias gradient's two passes; the second test shape has
// several (the last one partial) and a partial column tile.
template <typename T>
void CheckMatmul(double tolerance, int M = 257, int K = 384, int N = 1152) {
  const std::vector<float> in =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(M) * K, 81, -1, 1));
  const std::vector<float> weight =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(N) * K, 82, -0.1, 0.1));
  const std::vector<float> bias = testing::RoundedTo<T>(testing::RandomFloats(N, 83, -0.5, 0.5));
  const std::vector<float> d_out =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(M) * N, 84, -1, 1));
  const std::vector<float> d_in0 =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(M) * K, 85, -1, 1));
  const std::vector<float> d_weight0 = testing::RandomFloats(size_t(N) * K, 86, -1, 1);
  const std::vector<float> d_bias0 = testing::RandomFloats(N, 87, -1, 1);
  const std::vector<float> residual =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(M) * N, 88, -2, 2));
  // A pre-activation of the layer's input (M x K) for the GeLU-derivative epilogue.
  const std::vector<float> pre_in =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(M) * K, 89, -3, 3));

  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  DeviceArray<T> din(in), dweight(weight), dbias(bias), dout(size_t(M) * N),
      dout_bias(size_t(M) * N), dgelu(size_t(M) * N), dpre(size_t(M) * N), dd_out(d_out),
      dd_in(d_in0), dresidual(residual), dout_residual(size_t(M) * N), dpre_in(pre_in),
      dd_pre(size_t(M) * K);
  DeviceArray<float> dd_weight(d_weight0), dd_bias(d_bias0);
  const CublasLt::Counters before = (*blas)->counters();
  absl::Status s =
      MatmulForward<T>(**blas, din.get(), dweight.get(), nullptr, dout.get(), M, K, N, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulForward<T>(**blas, din.get(), dweight.get(), dbias.get(), dout_bias.get(), M, K, N,
                       nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulForward<T>(**blas, din.get(), dweight.get(), dbias.get(), dgelu.get(), M, K, N, nullptr,
                       dpre.get());
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulForward<T>(**blas, din.get(), dweight.get(), dbias.get(), dout_residual.get(), M, K, N,
                       nullptr, nullptr, dresidual.get());
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulBackward<T>(**blas, dd_out.get(), din.get(), dweight.get(), dd_in.get(),
                        dd_weight.get(), dd_bias.get(), M, K, N, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  const absl::Status through_gelu = MatmulInputGradThroughGelu<T>(
      **blas, dd_out.get(), dweight.get(), dpre_in.get(), dd_pre.get(), M, K, N, nullptr);
  ASSERT_TRUE(through_gelu.ok() || absl::IsUnimplemented(through_gelu)) << through_gelu;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const CublasLt::Counters& after = (*blas)->counters();
  const long long fused = after.fused_bias_gradients - before.fused_bias_gradients;
  const long long kernels = after.kernel_bias_gradients - before.kernel_bias_gradients;
  // Visible in the log: which way this type's bias gradient and GeLU derivative ran.
  std::printf("matmul %s: bias gradient %s; GeLU derivative %s\n", testing::TypeName<T>(),
              fused == 1 ? "in the GEMM's epilogue (BGRADB)" : "by the two-pass kernels",
              through_gelu.ok() ? "in the GEMM's epilogue (DGELU)"
                                : "not offered by cuBLASLt here (the model falls back)");
  EXPECT_EQ(fused + kernels, 1);
  if (std::is_same_v<T, float>) {
    EXPECT_EQ(fused, 0) << "fp32 keeps the reference passes";
  }

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
  std::vector<double> with_residual = with_bias;
  for (size_t i = 0; i < with_residual.size(); ++i) with_residual[i] += residual[i];
  // d_pre = GeLU'(pre) * (d_out @ weight): the product into zeros, then the derivative.
  std::vector<double> d_act(size_t(M) * K, 0.0), d_pre(size_t(M) * K, 0.0);
  cpu::MatmulBackward<double>(dod.data(), ind.data(), wd.data(), d_act.data(), nullptr, nullptr, M,
                              K, N);
  const std::vector<double> pre_d = testing::ToDouble(pre_in);
  cpu::GeluBackward<double>(d_act.data(), pre_d.data(), d_pre.data(), d_pre.size());
  if (through_gelu.ok()) {
    const double e = testing::RelativeError(dd_pre.Download(), d_pre);
    std::printf("matmul %s %dx%dx%d: d_pre through GeLU %.2e\n", testing::TypeName<T>(), M, K, N,
                e);
    EXPECT_LT(e, tolerance);
  }
  EXPECT_LT(testing::RelativeError(dout_residual.Download(), with_residual), tolerance);
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
      testing::TypeName<T>(), M, K, N, errors[0], errors[1], errors[2], errors[3], errors[4],
      errors[5], errors[6]);
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

TEST(CudaMatmulTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckMatmul<__half>(testing::kFp16Tolerance);
}

TEST(CudaMatmulTest, ManyRowsAndAnOddColumnCountMatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckMatmul<float>(testing::kFp32Tolerance, /*M=*/1300, /*K=*/64, /*N=*/72);
  CheckMatmul<__nv_bfloat16>(testing::kBf16Tolerance, 1300, 64, 72);
}

// fp16 results beyond its range must come out non-finite (inf), not saturated at 65504:
// dynamic loss scaling finds overflows by looking for inf/NaN. Each product sum here is
// 64 * 64 * 64 = 262144; the fp32 weight gradient (16 * 64 * 64 = 65536) stays finite.
TEST(CudaMatmulTest, Fp16OverflowIsNotFinite) {
  MTRAIN_SKIP_WITHOUT_GPU();
  constexpr int M = 16, K = 64, N = 64;
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  DeviceArray<__half> in(std::vector<float>(M * K, 64.0f)),
      weight(std::vector<float>(N * K, 64.0f)), bias(std::vector<float>(N, 1.0f)), out(M * N),
      out_bias(M * N), gelu(M * N), pre(M * N), d_out(std::vector<float>(M * N, 64.0f)),
      d_in(std::vector<float>(M * K, 0.0f));
  DeviceArray<float> d_weight(std::vector<float>(N * K, 0.0f));
  absl::Status s =
      MatmulForward<__half>(**blas, in.get(), weight.get(), nullptr, out.get(), M, K, N, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulForward<__half>(**blas, in.get(), weight.get(), bias.get(), out_bias.get(), M, K, N,
                            nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulForward<__half>(**blas, in.get(), weight.get(), bias.get(), gelu.get(), M, K, N,
                            nullptr, pre.get());
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulBackward<__half>(**blas, d_out.get(), in.get(), weight.get(), d_in.get(),
                             d_weight.get(), nullptr, M, K, N, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto finite = [](const std::vector<float>& v) {
    size_t count = 0;
    for (float e : v) count += std::isfinite(e);
    return count;
  };
  const std::vector<float> plain = out.Download(), with_bias = out_bias.Download(),
                           gelu_out = gelu.Download(), pre_gelu = pre.Download(),
                           grad_in = d_in.Download(), grad_weight = d_weight.Download();
  std::printf(
      "fp16 matmul overflow: out[0] %g, +bias %g, gelu %g, pre-gelu %g, d_in %g, d_weight %g; "
      "finite out %zu, +bias %zu, gelu %zu, pre-gelu %zu, d_in %zu\n",
      plain[0], with_bias[0], gelu_out[0], pre_gelu[0], grad_in[0], grad_weight[0], finite(plain),
      finite(with_bias), finite(gelu_out), finite(pre_gelu), finite(grad_in));
  EXPECT_EQ(finite(plain), 0u);
  EXPECT_EQ(finite(with_bias), 0u);
  EXPECT_EQ(finite(gelu_out), 0u);
  EXPECT_EQ(finite(pre_gelu), 0u);
  EXPECT_EQ(finite(grad_in), 0u);
  for (float g : grad_weight) ASSERT_EQ(g, 65536.0f);
}

// A zero-bubble schedule runs the backward's two halves apart: the input gradient alone
// (no weight), then the weight and bias gradients alone (no input gradient) give the
// combined call's bits, in each precision (the bias gradient in the weight GEMM's epilogue
// where cuBLASLt offers it). A bias gradient without the weight's is refused.
template <typename T>
void CheckBackwardHalves() {
  MTRAIN_SKIP_WITHOUT_GPU();
  constexpr int M = 192, K = 128, N = 320;
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  const std::vector<float> in = testing::RandomFloats(size_t(M) * K, 91, -1, 1);
  const std::vector<float> weight = testing::RandomFloats(size_t(N) * K, 92, -0.1, 0.1);
  const std::vector<float> d_out = testing::RandomFloats(size_t(M) * N, 93, -1, 1);
  const std::vector<float> d_weight0 = testing::RandomFloats(size_t(N) * K, 94, -1, 1);
  const std::vector<float> d_bias0 = testing::RandomFloats(N, 95, -1, 1);
  DeviceArray<T> din(in), dweight(weight), dd_out(d_out), whole_d_in(size_t(M) * K),
      split_d_in(size_t(M) * K);
  DeviceArray<float> whole_d_weight(d_weight0), whole_d_bias(d_bias0), split_d_weight(d_weight0),
      split_d_bias(d_bias0);
  absl::Status s =
      MatmulBackward<T>(**blas, dd_out.get(), din.get(), dweight.get(), whole_d_in.get(),
                        whole_d_weight.get(), whole_d_bias.get(), M, K, N, nullptr, false);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulBackward<T>(**blas, dd_out.get(), din.get(), dweight.get(), split_d_in.get(), nullptr,
                        nullptr, M, K, N, nullptr, false);
  ASSERT_TRUE(s.ok()) << s;
  s = MatmulBackward<T>(**blas, dd_out.get(), din.get(), nullptr, nullptr, split_d_weight.get(),
                        split_d_bias.get(), M, K, N, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(split_d_in.Download(), whole_d_in.Download());
  EXPECT_EQ(split_d_weight.Download(), whole_d_weight.Download());
  EXPECT_EQ(split_d_bias.Download(), whole_d_bias.Download());
  EXPECT_NE(split_d_weight.Download(), d_weight0) << "the weight gradient must have been added";
  EXPECT_EQ(MatmulBackward<T>(**blas, dd_out.get(), din.get(), dweight.get(), split_d_in.get(),
                              nullptr, split_d_bias.get(), M, K, N, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaMatmulTest, BackwardHalvesApartEqualTheWholeFp32) { CheckBackwardHalves<float>(); }
TEST(CudaMatmulTest, BackwardHalvesApartEqualTheWholeBf16) { CheckBackwardHalves<__nv_bfloat16>(); }
TEST(CudaMatmulTest, BackwardHalvesApartEqualTheWholeFp16) { CheckBackwardHalves<__half>(); }

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
