#include "kernels/cuda/gelu.h"

#include "kernels/cuda/test_support.h"
#include "kernels/gelu.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

template <typename T>
void CheckGelu(double tolerance) {
  const size_t n = 100003;  // not a multiple of any block size
  std::vector<float> x = testing::RandomFloats(n, 11, -6, 6);
  std::vector<float> d_y = testing::RandomFloats(n, 12, -1, 1);
  std::vector<float> d_x0 = testing::RandomFloats(n, 13, -1, 1);
  if constexpr (sizeof(T) == 2) {
    for (auto* v : {&x, &d_y, &d_x0}) {
      for (float& e : *v) e = testing::RoundToBf16(e);
    }
  }
  DeviceArray<T> dx(x), dy(n), ddy(d_y), ddx(d_x0);
  ASSERT_TRUE(GeluForward<T>(dx.get(), dy.get(), n, nullptr).ok());
  ASSERT_TRUE(GeluBackward<T>(ddy.get(), dx.get(), ddx.get(), n, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> xd = testing::ToDouble(x);
  std::vector<double> y_ref(n), d_x_ref = testing::ToDouble(d_x0);
  cpu::GeluForward<double>(xd.data(), y_ref.data(), n);
  const std::vector<double> d_yd = testing::ToDouble(d_y);
  cpu::GeluBackward<double>(d_yd.data(), xd.data(), d_x_ref.data(), n);
  const double forward_error = testing::RelativeError(dy.Download(), y_ref);
  const double backward_error = testing::RelativeError(ddx.Download(), d_x_ref);
  std::printf("gelu %s: forward %.2e, backward %.2e\n", sizeof(T) == 4 ? "fp32" : "bf16",
              forward_error, backward_error);
  EXPECT_LT(forward_error, tolerance);
  EXPECT_LT(backward_error, tolerance);
}

TEST(CudaGeluTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckGelu<float>(testing::kFp32Tolerance);
}

TEST(CudaGeluTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckGelu<__nv_bfloat16>(testing::kBf16Tolerance);
}

}  // namespace
}  // namespace mtrain::cuda
