#include "kernels/cuda/rotary.h"

#include "kernels/cuda/test_support.h"
#include "kernels/rotary.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Rotates the q and k heads of a fused [q | k | v] buffer ([B, S, H + 2 Hkv, D] rows) as the
// layers do, forward and inverse, against the CPU kernel in double with the same table.
template <typename T>
void CheckRotary(int batch, int seq, int heads, int kv_heads, int head_dim, int first_position,
                 double tolerance) {
  const int rows = batch * seq;
  const int row_stride = (heads + 2 * kv_heads) * head_dim;
  const int rotated_heads = heads + kv_heads;  // q and k, adjacent
  const cpu::RotaryTable table = cpu::MakeRotaryTable(first_position + seq, head_dim, 10000.0);
  DeviceArray<float> dcos(table.cos), dsin(table.sin);
  const RotaryDeviceTable device_table{dcos.get(), dsin.get(), table.positions, table.half};

  const std::vector<float> x =
      testing::RoundedTo<T>(testing::RandomFloats(size_t(rows) * row_stride, 51, -2, 2));
  for (bool inverse : {false, true}) {
    DeviceArray<T> dx(x);
    ASSERT_TRUE(ApplyRotary<T>(dx.get(), rows, row_stride, rotated_heads, seq, first_position,
                               device_table, inverse, nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<double> want = testing::ToDouble(x);
    cpu::ApplyRotary<double>(want.data(), rows, row_stride, rotated_heads, seq, first_position,
                             table, inverse);
    const double error = testing::RelativeError(dx.Download(), want);
    std::printf("rotary %s B %d S %d heads %d+%d D %d from %d%s: %.2e\n", testing::TypeName<T>(),
                batch, seq, heads, kv_heads, head_dim, first_position, inverse ? " inverse" : "",
                error);
    EXPECT_LT(error, tolerance);
  }
}

TEST(CudaRotaryTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckRotary<float>(3, 129, 8, 2, 64, 0, testing::kFp32Tolerance);
  CheckRotary<float>(1, 7, 4, 4, 32, 100, testing::kFp32Tolerance);  // decoding: later positions
}

TEST(CudaRotaryTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckRotary<__nv_bfloat16>(3, 129, 8, 2, 64, 0, testing::kBf16Tolerance);
}

TEST(CudaRotaryTest, Fp16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckRotary<__half>(3, 129, 8, 2, 64, 0, testing::kFp16Tolerance);
}

TEST(CudaRotaryTest, RefusesPositionsPastTheTable) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const cpu::RotaryTable table = cpu::MakeRotaryTable(16, 8, 10000.0);
  DeviceArray<float> dcos(table.cos), dsin(table.sin), dx(size_t(32) * 8);
  const RotaryDeviceTable device_table{dcos.get(), dsin.get(), table.positions, table.half};
  EXPECT_FALSE(ApplyRotary<float>(dx.get(), 32, 8, 1, 32, 0, device_table, false, nullptr).ok());
  EXPECT_TRUE(ApplyRotary<float>(dx.get(), 32, 8, 1, 16, 0, device_table, false, nullptr).ok());
}

}  // namespace
}  // namespace mtrain::cuda
