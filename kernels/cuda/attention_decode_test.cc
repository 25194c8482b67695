#include "kernels/cuda/attention_decode.h"

#include "kernels/attention.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// A sequence's causal attention run as generation runs it, a prompt of S - 3 positions
// then three more over the cache, against the CPU's full causal attention (in double) of
// the same queries, keys and values; `kv_heads` key-value heads (grouped-query attention
// below H).
template <typename T>
void CheckDecodeAttention(double tolerance, int kv_heads = 4) {
  const int S = 45, H = 4, D = 32, prompt = S - 3;
  const int Ql = H * D, KVl = kv_heads * D, row = Ql + 2 * KVl;
  const std::vector<float> qkv =
      testing::RoundedTo<T>(testing::RandomFloats(static_cast<size_t>(S) * row, 21, -1, 1));
  std::vector<float> keys(static_cast<size_t>(S) * KVl), values(keys.size());
  for (int s = 0; s < S; ++s) {
    for (int c = 0; c < KVl; ++c) {
      keys[static_cast<size_t>(s) * KVl + c] = qkv[static_cast<size_t>(s) * row + Ql + c];
      values[static_cast<size_t>(s) * KVl + c] = qkv[static_cast<size_t>(s) * row + Ql + KVl + c];
    }
  }
  DeviceArray<T> d_qkv(qkv), d_keys(keys), d_values(values), d_y(static_cast<size_t>(S) * Ql);
  DeviceArray<float> scores(static_cast<size_t>(S) * H * S);
  DecodeShape shape{0, prompt, H, D, row, kv_heads};
  ASSERT_TRUE(DecodeAttention<T>(d_qkv.get(), d_keys.get(), d_values.get(), shape, scores.get(),
                                 d_y.get(), nullptr)
                  .ok());
  shape.first = prompt;
  shape.count = S - prompt;
  const size_t offset = static_cast<size_t>(prompt);
  ASSERT_TRUE(DecodeAttention<T>(d_qkv.get() + offset * row, d_keys.get(), d_values.get(), shape,
                                 scores.get(), d_y.get() + offset * Ql, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> qkv_d = testing::ToDouble(qkv);
  std::vector<double> want(static_cast<size_t>(S) * Ql), lse(static_cast<size_t>(H) * S);
  cpu::AttentionForward<double>(qkv_d.data(), want.data(), lse.data(), {1, S, H, D, kv_heads}, {});
  const double error = testing::RelativeError(d_y.Download(), want);
  std::printf("decode attention %s, %d kv heads of %d: %.2e\n", testing::TypeName<T>(), kv_heads, H,
              error);
  EXPECT_LT(error, tolerance);
}

TEST(CudaDecodeAttentionTest, GroupedQueryHeadsMatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckDecodeAttention<float>(testing::kFp32Tolerance, 2);
  CheckDecodeAttention<float>(testing::kFp32Tolerance, 1);
  CheckDecodeAttention<__nv_bfloat16>(testing::kBf16Tolerance, 2);
}

TEST(CudaDecodeAttentionTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckDecodeAttention<float>(testing::kFp32Tolerance);
}

TEST(CudaDecodeAttentionTest, Bf16MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckDecodeAttention<__nv_bfloat16>(testing::kBf16Tolerance);
}

TEST(CudaDecodeAttentionTest, RefusesABadShape) {
  MTRAIN_SKIP_WITHOUT_GPU();
  EXPECT_FALSE(
      DecodeAttention<float>(nullptr, nullptr, nullptr, {0, 0, 1, 8, 8}, nullptr, nullptr, nullptr)
          .ok());
  // Three key-value heads cannot serve four query heads.
  EXPECT_FALSE(DecodeAttention<float>(nullptr, nullptr, nullptr, {0, 1, 4, 8, 80, 3}, nullptr,
                                      nullptr, nullptr)
                   .ok());
}

}  // namespace
}  // namespace mtrain::cuda
