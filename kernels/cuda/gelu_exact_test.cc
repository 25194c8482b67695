// The exact (erf) GeLU on the GPU against the CPU's in double (tagged `gpu`; skipped,
// visibly, without one): forward, accumulated and overwritten backward, both tails and the
// curved part, in fp32, bf16 and fp16.
#include "kernels/cuda/gelu_exact.h"

#include <cmath>
#include <cstdio>

#include "kernels/cuda/test_support.h"
#include "kernels/gelu_exact.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

template <typename T>
void CheckGeluExact(float x_limit, double tolerance, bool overwrite) {
  constexpr size_t n = 100003;
  const std::vector<float> x =
      testing::RoundedTo<T>(testing::RandomFloats(n, 21, -x_limit, x_limit));
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 22, -1, 1));
  const std::vector<float> d_x0 = overwrite
                                      ? std::vector<float>(n, 0.0f)
                                      : testing::RoundedTo<T>(testing::RandomFloats(n, 23, -1, 1));
  DeviceArray<T> dx(x), dy(n), ddy(d_y), ddx(overwrite ? std::vector<float>(n, NAN) : d_x0);
  ASSERT_TRUE(GeluExactForward<T>(dx.get(), dy.get(), n, nullptr).ok());
  ASSERT_TRUE(GeluExactBackward<T>(ddy.get(), dx.get(), ddx.get(), n, nullptr, !overwrite).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<double> xd = testing::ToDouble(x), d_yd = testing::ToDouble(d_y);
  std::vector<double> y_ref(n), d_x_ref = testing::ToDouble(d_x0);
  cpu::GeluExactForward<double>(xd.data(), y_ref.data(), n);
  cpu::GeluExactBackward<double>(d_yd.data(), xd.data(), d_x_ref.data(), n);
  const double forward_error = testing::RelativeError(dy.Download(), y_ref);
  const double backward_error = testing::RelativeError(ddx.Download(), d_x_ref);
  std::printf("exact gelu %s%s: forward %.2e, backward %.2e\n", testing::TypeName<T>(),
              overwrite ? " (overwritten)" : "", forward_error, backward_error);
  EXPECT_LT(forward_error, tolerance);
  EXPECT_LT(backward_error, tolerance);
}

TEST(CudaGeluExactTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckGeluExact<float>(6, testing::kFp32Tolerance, false);
  CheckGeluExact<float>(6, testing::kFp32Tolerance, true);
}

TEST(CudaGeluExactTest, Bf16AndFp16MatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckGeluExact<__nv_bfloat16>(6, testing::kBf16Tolerance, false);
  CheckGeluExact<__half>(4, testing::kFp16Tolerance, true);
}

}  // namespace
}  // namespace mtrain::cuda
