#include "kernels/cuda/gelu.h"

#include "kernels/cuda/test_support.h"
#include "kernels/gelu.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// x in [-x_limit, x_limit]: GeLU's curved part and both tails. n 100003 (not a multiple of
// any block size or vector width) takes the scalar backward; 100000 the 16-byte vectors.
// With `overwrite` the backward replaces d_x (NaNs before) instead of adding to it.
template <typename T>
void CheckGelu(float x_limit, double tolerance, size_t n = 100003, bool overwrite = false) {
  const std::vector<float> x =
      testing::RoundedTo<T>(testing::RandomFloats(n, 11, -x_limit, x_limit));
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 12, -1, 1));
  const std::vector<float> d_x0 = overwrite
                                      ? std::vector<float>(n, 0.0f)
                                      : testing::RoundedTo<T>(testing::RandomFloats(n, 13, -1, 1));
  DeviceArray<T> dx(x), dy(n), ddy(d_y), ddx(overwrite ? std::vector<float>(n, NAN) : d_x0);
  ASSERT_TRUE(GeluForward<T>(dx.get(), dy.get(), n, nullptr).ok());
  ASSERT_TRUE(GeluBackward<T>(ddy.get(), dx.get(), ddx.get(), n, nullptr, !overwrite).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> xd = testing::ToDouble(x);
  std::vector<double> y_ref(n), d_x_ref = testing::ToDouble(d_x0);
  cpu::GeluForward<double>(xd.data(), y_ref.data(), n);
  const std::vector<double> d_yd = testing::ToDouble(d_y);
  cpu::GeluBackward<double>(d_yd.data(), xd.data(), d_x_ref.data(), n);
  const double forward_error = testing::RelativeError(dy.Download(), y_ref);
  const double backward_error = testing::RelativeError(ddx.Download(), d_x_ref);
  std::printf("gelu %s n=%zu%s: forward %.2e, backward %.2e\n", testing::TypeName<T>(), n,
              overwrite ? " (overwritten)" : "", forward_error, backward_error);
  EXPECT_LT(forward_error, tolerance);
  EXPECT_LT(backward_error, tolerance);
}

TEST(CudaGeluTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckGelu<float>(6, testing::kFp32Tolerance);
}

TEST(CudaGeluTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckGelu<__nv_bfloat16>(6, testing::kBf16Tolerance);
  CheckGelu<__nv_bfloat16>(6, testing::kBf16Tolerance, 100000);
  CheckGelu<__nv_bfloat16>(6, testing::kBf16Tolerance, 100000, /*overwrite=*/true);
  CheckGelu<float>(6, testing::kFp32Tolerance, 100000, /*overwrite=*/true);
}

TEST(CudaGeluTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckGelu<__half>(4, testing::kFp16Tolerance);
}

}  // namespace
}  // namespace mtrain::cuda
