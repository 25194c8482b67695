#include "kernels/cuda/swiglu.h"

#include "kernels/cuda/test_support.h"
#include "kernels/swiglu.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Against the CPU kernel in double, gates over silu's curved part and both tails; the
// backward accumulates onto nonzero values, as the layers use it.
template <typename T>
void CheckSwiGlu(int rows, int F, float gate_limit, double tolerance) {
  const size_t n = size_t(rows) * F;
  std::vector<float> gate_up(2 * n);
  const std::vector<float> gates = testing::RandomFloats(n, 41, -gate_limit, gate_limit);
  const std::vector<float> ups = testing::RandomFloats(n, 42, -2, 2);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < F; ++c) {
      gate_up[size_t(r) * 2 * F + c] = gates[size_t(r) * F + c];
      gate_up[size_t(r) * 2 * F + F + c] = ups[size_t(r) * F + c];
    }
  }
  gate_up = testing::RoundedTo<T>(gate_up);
  const std::vector<float> d_y = testing::RoundedTo<T>(testing::RandomFloats(n, 43, -1, 1));
  const std::vector<float> d_gate_up0 =
      testing::RoundedTo<T>(testing::RandomFloats(2 * n, 44, -0.1, 0.1));
  DeviceArray<T> dgu(gate_up), dy(n), ddy(d_y), ddgu(d_gate_up0);
  ASSERT_TRUE(SwiGluForward<T>(dgu.get(), dy.get(), rows, F, nullptr).ok());
  ASSERT_TRUE(SwiGluBackward<T>(ddy.get(), dgu.get(), ddgu.get(), rows, F, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> gud = testing::ToDouble(gate_up), dyd = testing::ToDouble(d_y);
  std::vector<double> y(n), d_gate_up = testing::ToDouble(d_gate_up0);
  cpu::SwiGluForward<double>(gud.data(), y.data(), rows, F);
  cpu::SwiGluBackward<double>(dyd.data(), gud.data(), d_gate_up.data(), rows, F);
  const double forward_error = testing::RelativeError(dy.Download(), y);
  const double backward_error = testing::RelativeError(ddgu.Download(), d_gate_up);
  std::printf("swiglu %s rows %d F %d: forward %.2e, backward %.2e\n", testing::TypeName<T>(), rows,
              F, forward_error, backward_error);
  EXPECT_LT(forward_error, tolerance);
  EXPECT_LT(backward_error, tolerance);

  // Without accumulation the gradients are written, whatever d_gate_up held.
  DeviceArray<T> written(d_gate_up0);
  ASSERT_TRUE(SwiGluBackward<T>(ddy.get(), dgu.get(), written.get(), rows, F, nullptr,
                                /*accumulate=*/false)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<double> fresh(2 * n, 0.0);
  cpu::SwiGluBackward<double>(dyd.data(), gud.data(), fresh.data(), rows, F);
  EXPECT_LT(testing::RelativeError(written.Download(), fresh), tolerance);
}

TEST(CudaSwiGluTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckSwiGlu<float>(257, 688, 8, testing::kFp32Tolerance);
}

TEST(CudaSwiGluTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckSwiGlu<__nv_bfloat16>(257, 688, 8, testing::kBf16Tolerance);
}

TEST(CudaSwiGluTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckSwiGlu<__half>(257, 688, 6, testing::kFp16Tolerance);
}

}  // namespace
}  // namespace mtrain::cuda
