#include "kernels/cuda/attention_decode.h"

#include "kernels/attention.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// A sequence's causal attention run as generation runs it, a prompt of S - 3 positions
// then three more over the cache, against the CPU's full causal attention (in double) of
// the same queries, keys and values.
template <typename T>
void CheckDecodeAttention(double tolerance) {
  const int S = 45, H = 3, D = 32, Cl = H * D, prompt = S - 3;
  const std::vector<float> qkv =
      testing::RoundedTo<T>(testing::RandomFloats(static_cast<size_t>(S) * 3 * Cl, 21, -1, 1));
  std::vector<float> keys(static_cast<size_t>(S) * Cl), values(keys.size());
  for (int s = 0; s < S; ++s) {
    for (int c = 0; c < Cl; ++c) {
      keys[static_cast<size_t>(s) * Cl + c] = qkv[static_cast<size_t>(s) * 3 * Cl + Cl + c];
      values[static_cast<size_t>(s) * Cl + c] = qkv[static_cast<size_t>(s) * 3 * Cl + 2 * Cl + c];
    }
  }
  DeviceArray<T> d_qkv(qkv), d_keys(keys), d_values(values), d_y(static_cast<size_t>(S) * Cl);
  DeviceArray<float> scores(static_cast<size_t>(S) * H * S);
  DecodeShape shape{0, prompt, H, D, 3 * Cl};
  ASSERT_TRUE(DecodeAttention<T>(d_qkv.get(), d_keys.get(), d_values.get(), shape, scores.get(),
                                 d_y.get(), nullptr)
                  .ok());
  shape.first = prompt;
  shape.count = S - prompt;
  const size_t offset = static_cast<size_t>(prompt);
  ASSERT_TRUE(DecodeAttention<T>(d_qkv.get() + offset * 3 * Cl, d_keys.get(), d_values.get(), shape,
                                 scores.get(), d_y.get() + offset * Cl, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<double> qkv_d = testing::ToDouble(qkv);
  std::vector<double> want(static_cast<size_t>(S) * Cl), lse(static_cast<size_t>(H) * S);
  cpu::AttentionForward<double>(qkv_d.data(), want.data(), lse.data(), {1, S, H, D}, {});
  const double error = testing::RelativeError(d_y.Download(), want);
  std::printf("decode attention %s: %.2e\n", testing::TypeName<T>(), error);
  EXPECT_LT(error, tolerance);
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
}

}  // namespace
}  // namespace mtrain::cuda
