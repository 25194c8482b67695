// BERT's bidirectional attention on the GPU against the CPU's in double (tagged `gpu`;
// skipped, visibly, without one): outputs, log-sum-exp and d_qkv (accumulated and
// overwritten) over sequences of different real lengths (the whole sequence, partial tiles,
// one position), grouped-query heads, each head dim, the CPU's dropout masks at a tensor
// rank's head offset, in fp32, bf16 and fp16; padded queries give zeros and take no gradient.
#include "kernels/cuda/bidirectional_attention.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/bidirectional_attention.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

template <typename T>
void CheckBidirectional(const AttentionShape& shape, const std::vector<int32_t>& lengths,
                        const AttentionDropout& dropout, double tolerance, bool overwrite) {
  const int H = shape.heads, Hkv = shape.kv_head_count(), D = shape.head_dim, S = shape.seq;
  const size_t qkv_size = size_t(shape.batch) * S * (H + 2 * Hkv) * D;
  const size_t out_size = size_t(shape.batch) * S * H * D;
  const size_t lse_size = size_t(shape.batch) * H * S;
  auto round = [](std::vector<float> v) { return testing::RoundedTo<T>(std::move(v)); };
  const std::vector<float> qkv = round(testing::RandomFloats(qkv_size, 71, -2, 2));
  const std::vector<float> d_out = round(testing::RandomFloats(out_size, 72, -1, 1));
  const std::vector<float> d_qkv0 = overwrite
                                        ? std::vector<float>(qkv_size, 0.0f)
                                        : round(testing::RandomFloats(qkv_size, 73, -0.1, 0.1));
  // Overwriting starts from NaN: every element must be written (padded rows with zeros).
  const std::vector<float> d_qkv_start =
      overwrite ? std::vector<float>(qkv_size, std::nanf("")) : d_qkv0;
  DeviceArray<T> dqkv(qkv), dout(std::vector<float>(out_size, std::nanf(""))), ddout(d_out),
      ddqkv(d_qkv_start);
  DeviceArray<float> dlse(std::vector<float>(lse_size, std::nanf("")));
  int32_t* dlengths = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dlengths), lengths.size() * sizeof(int32_t)),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dlengths, lengths.data(), lengths.size() * sizeof(int32_t),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  absl::Status s = BidirectionalAttentionForward<T>(dqkv.get(), dlengths, dout.get(), dlse.get(),
                                                    shape, dropout, nullptr);
  ASSERT_TRUE(s.ok()) << s;
  s = BidirectionalAttentionBackward<T>(ddout.get(), dqkv.get(), dout.get(), dlse.get(), dlengths,
                                        ddqkv.get(), shape, dropout, nullptr, !overwrite);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(dlengths);

  const std::vector<double> qd = testing::ToDouble(qkv), dod = testing::ToDouble(d_out);
  std::vector<double> out(out_size), lse(lse_size), d_qkv = testing::ToDouble(d_qkv0);
  cpu::BidirectionalAttentionForward<double>(qd.data(), lengths.data(), out.data(), lse.data(),
                                             shape, dropout);
  cpu::BidirectionalAttentionBackward<double>(dod.data(), qd.data(), out.data(), lse.data(),
                                              lengths.data(), d_qkv.data(), shape, dropout);
  const std::vector<float> got_out = dout.Download(), got_lse = dlse.Download(),
                           got_d_qkv = ddqkv.Download();
  double lse_error = 0;
  size_t non_finite = 0;
  for (size_t i = 0; i < lse_size; ++i) {
    if (!std::isfinite(got_lse[i])) ++non_finite;
    lse_error = std::max(lse_error, std::abs(got_lse[i] - lse[i]));
  }
  for (float v : got_out) non_finite += std::isfinite(v) ? 0 : 1;
  for (float v : got_d_qkv) non_finite += std::isfinite(v) ? 0 : 1;
  const double out_error = testing::RelativeError(got_out, out);
  const double grad_error = testing::RelativeError(got_d_qkv, d_qkv);
  std::printf(
      "bidirectional %s B%d S%d H%d Hkv%d D%d dropout %.2f%s: out %.2e, lse %.2e (abs), "
      "d_qkv %.2e\n",
      testing::TypeName<T>(), shape.batch, S, H, Hkv, D, dropout.p,
      overwrite ? " (gradient overwritten)" : "", out_error, lse_error, grad_error);
  EXPECT_EQ(non_finite, 0u);
  EXPECT_LT(out_error, tolerance);
  EXPECT_LT(lse_error, 1e-3);
  EXPECT_LT(grad_error, tolerance);
  // Padded queries: zero outputs and lse exactly; their d_q rows as they were.
  for (int b = 0; b < shape.batch; ++b) {
    for (int i = lengths[b]; i < S; ++i) {
      for (int h = 0; h < H; ++h) {
        ASSERT_EQ(got_lse[(size_t(b) * H + h) * S + i], 0.0f) << "b " << b << " i " << i;
        for (int d = 0; d < D; ++d) {
          ASSERT_EQ(got_out[((size_t(b) * S + i) * H + h) * D + d], 0.0f);
        }
      }
      const size_t row = (size_t(b) * S + i) * (H + 2 * Hkv) * D;
      for (size_t e = 0; e < size_t(H + 2 * Hkv) * D; ++e) {
        ASSERT_EQ(got_d_qkv[row + e], d_qkv0[row + e])
            << "padded row " << i << " of sequence " << b;
      }
    }
  }
}

AttentionDropout Dropout(float p, int head_offset, int total_heads) {
  AttentionDropout dropout;
  dropout.p = p;
  dropout.key = 0x5eed;
  dropout.head_offset = head_offset;
  dropout.total_heads = total_heads;
  return dropout;
}

TEST(CudaBidirectionalAttentionTest, Fp32MatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  for (int head_dim : {32, 64, 128}) {
    // Lengths: the whole sequence, partial tiles, one position.
    CheckBidirectional<float>({3, 130, 2, head_dim}, {130, 77, 1}, {}, testing::kFp32Tolerance,
                              false);
  }
}

TEST(CudaBidirectionalAttentionTest, Fp32GroupedQueryHeadsWithTheCpuDropoutMasks) {
  MTRAIN_SKIP_WITHOUT_GPU();
  // 4 query heads reading 2 key-value heads; heads 4..7 of 8, as tensor rank 1 of 2 holds them.
  CheckBidirectional<float>({2, 96, 4, 64, 2}, {96, 40}, Dropout(0.1f, 4, 8),
                            testing::kFp32Tolerance, false);
}

TEST(CudaBidirectionalAttentionTest, Fp32OverwritesTheGradient) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckBidirectional<float>({2, 70, 2, 32}, {70, 33}, Dropout(0.2f, 0, 2), testing::kFp32Tolerance,
                            true);
}

TEST(CudaBidirectionalAttentionTest, Bf16AndFp16StayWithinTheirPrecision) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckBidirectional<__nv_bfloat16>({2, 128, 4, 64}, {128, 65}, {}, testing::kBf16Tolerance, false);
  CheckBidirectional<__half>({2, 128, 4, 64, 1}, {100, 128}, Dropout(0.1f, 0, 4),
                             testing::kFp16Tolerance, false);
}

TEST(CudaBidirectionalAttentionTest, RefusesUnsupportedHeadDims) {
  MTRAIN_SKIP_WITHOUT_GPU();
  DeviceArray<float> qkv(3 * 48), out(48), lse(1);
  EXPECT_EQ(BidirectionalAttentionForward<float>(qkv.get(), nullptr, out.get(), lse.get(),
                                                 {1, 1, 1, 48}, {}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain::cuda
