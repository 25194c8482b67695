#include "kernels/cuda/attention.h"

#include "kernels/attention.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// Forward and backward against the CPU attention in double, which materialises the S x S
// probabilities: the flash kernels must give the same numbers without them.
template <typename T>
void CheckAttention(const AttentionShape& shape, const AttentionDropout& dropout,
                    double tolerance) {
  const size_t qkv_size = size_t(shape.batch) * shape.seq * 3 * shape.heads * shape.head_dim;
  const size_t out_size = qkv_size / 3;
  auto round = [](std::vector<float> v) {
    if constexpr (sizeof(T) == 2) {
      for (float& e : v) e = testing::RoundToBf16(e);
    }
    return v;
  };
  const std::vector<float> qkv = round(testing::RandomFloats(qkv_size, 91, -2, 2));
  const std::vector<float> d_out = round(testing::RandomFloats(out_size, 92, -1, 1));
  const std::vector<float> d_qkv0 = round(testing::RandomFloats(qkv_size, 93, -0.1, 0.1));
  DeviceArray<T> dqkv(qkv), dout(out_size), ddout(d_out), ddqkv(d_qkv0);
  DeviceArray<float> dlse(size_t(shape.batch) * shape.heads * shape.seq);
  absl::Status s =
      FlashAttentionForward<T>(dqkv.get(), dout.get(), dlse.get(), shape, dropout, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = FlashAttentionBackward<T>(ddout.get(), dqkv.get(), dout.get(), dlse.get(), ddqkv.get(), shape,
                                dropout, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> qd = testing::ToDouble(qkv), dod = testing::ToDouble(d_out);
  std::vector<double> out(out_size), d_qkv = testing::ToDouble(d_qkv0);
  const size_t att_size = size_t(shape.batch) * shape.heads * shape.seq * shape.seq;
  std::vector<double> att(att_size), scratch(att_size);
  cpu::AttentionForward<double>(qd.data(), out.data(), att.data(), shape, dropout);
  cpu::AttentionBackward<double>(dod.data(), qd.data(), att.data(), d_qkv.data(), scratch.data(),
                                 shape, dropout);
  const double out_error = testing::RelativeError(dout.Download(), out);
  const double grad_error = testing::RelativeError(ddqkv.Download(), d_qkv);
  std::printf("flash attention %s B%d S%d H%d D%d dropout %.2f: out %.2e, d_qkv %.2e\n",
              sizeof(T) == 4 ? "fp32" : "bf16", shape.batch, shape.seq, shape.heads, shape.head_dim,
              dropout.p, out_error, grad_error);
  EXPECT_LT(out_error, tolerance);
  EXPECT_LT(grad_error, tolerance);
}

TEST(CudaFlashAttentionTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {32, 64, 128}) {
    CheckAttention<float>({2, 200, 3, head_dim}, {}, testing::kFp32Tolerance);
  }
}

TEST(CudaFlashAttentionTest, Fp32WithTheCpuDropoutMasks) {
  MTRAIN_SKIP_WITHOUT_GPU();
  AttentionDropout dropout;
  dropout.p = 0.1f;
  dropout.key = 0x1234abcd;
  dropout.head_offset = 3;  // heads 3..5 of 6, as tensor rank 1 of 2 holds them
  dropout.total_heads = 6;
  CheckAttention<float>({2, 130, 3, 64}, dropout, testing::kFp32Tolerance);
}

TEST(CudaFlashAttentionTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckAttention<__nv_bfloat16>({2, 256, 4, 64}, {}, testing::kBf16Tolerance);
}

TEST(CudaFlashAttentionTest, RefusesUnsupportedHeadDims) {
  EXPECT_EQ(
      FlashAttentionForward<float>(nullptr, nullptr, nullptr, {1, 4, 1, 48}, {}, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain::cuda
