// BERT's head pieces on the GPU (tagged `gpu`; skipped, visibly, without one): gathering
// rows and adding their gradients back equal the host loops exactly (the rows as T holds
// them, every other row untouched); tanh and its gradient against double.
#include "kernels/cuda/bert_heads.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

template <typename T>
void CheckRows() {
  constexpr int kRows = 37, C = 300;
  const std::vector<int32_t> rows = {5, 0, 36, 17, 18};  // distinct, out of order
  const int count = static_cast<int>(rows.size());
  const std::vector<float> in = testing::RoundedTo<T>(testing::RandomFloats(kRows * C, 31, -2, 2));
  const std::vector<float> d_rows =
      testing::RoundedTo<T>(testing::RandomFloats(count * C, 32, -1, 1));
  const std::vector<float> d_full0 =
      testing::RoundedTo<T>(testing::RandomFloats(kRows * C, 33, -1, 1));
  DeviceArray<T> din(in), dout(count * C), dd_rows(d_rows), dd_full(d_full0);
  int32_t* drows = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&drows), rows.size() * sizeof(int32_t)),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(drows, rows.data(), rows.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_TRUE(GatherRows<T>(din.get(), drows, count, C, dout.get(), nullptr).ok());
  ASSERT_TRUE(ScatterAddRows<T>(dd_rows.get(), drows, count, C, dd_full.get(), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(drows);
  std::vector<float> want_out(count * C);
  std::vector<float> want_full = d_full0;
  for (int m = 0; m < count; ++m) {
    for (int c = 0; c < C; ++c) {
      want_out[m * C + c] = in[rows[m] * C + c];
      want_full[rows[m] * C + c] = testing::RoundedTo<T>(
          std::vector<float>{want_full[rows[m] * C + c] + d_rows[m * C + c]})[0];
    }
  }
  EXPECT_EQ(dout.Download(), want_out);
  EXPECT_EQ(dd_full.Download(), want_full);
  EXPECT_EQ(GatherRows<T>(din.get(), nullptr, -1, C, dout.get(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaBertHeadsTest, RowsGatherAndScatterExactly) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckRows<float>();
  CheckRows<__nv_bfloat16>();
  CheckRows<__half>();
}

TEST(CudaBertHeadsTest, TanhMatchesDouble) {
  MTRAIN_SKIP_WITHOUT_GPU();
  constexpr size_t n = 10007;
  const std::vector<float> x = testing::RandomFloats(n, 41, -4, 4);
  const std::vector<float> d_y = testing::RandomFloats(n, 42, -1, 1);
  DeviceArray<float> dx(x), dy(n), dd(d_y);
  ASSERT_TRUE(TanhForward<float>(dx.get(), dy.get(), n, nullptr).ok());
  ASSERT_TRUE(TanhBackward<float>(dd.get(), dy.get(), dd.get(), n, nullptr).ok());  // in place
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<double> y(n), d_x(n);
  for (size_t i = 0; i < n; ++i) {
    y[i] = std::tanh(double(x[i]));
    d_x[i] = d_y[i] * (1 - y[i] * y[i]);
  }
  const double forward_error = testing::RelativeError(dy.Download(), y);
  const double backward_error = testing::RelativeError(dd.Download(), d_x);
  std::printf("tanh: forward %.2e, backward %.2e\n", forward_error, backward_error);
  EXPECT_LT(forward_error, testing::kFp32Tolerance);
  EXPECT_LT(backward_error, testing::kFp32Tolerance);
}

}  // namespace
}  // namespace mtrain::cuda
