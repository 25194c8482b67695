#include "kernels/cuda/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/test_support.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;

// GPT-2's vocabulary padded for 2 tensor-parallel ranks, split in two shards; the
// all-reduces between the ranks are done on the host. Compared with the CPU kernels run
// on the whole (unsplit) vocabulary in double. Logits in [-logit_limit, logit_limit].
// Shards of a multiple of 8 columns go through 16-byte vectors (and their tails scalar);
// `padded` 50258 gives shards of 25129 columns, read element by element. With
// `overwrite`, the gradient starts as NaNs that the backward must replace.
template <typename T>
void CheckVocabParallel(float logit_limit, double tolerance, int padded = 50432,
                        bool overwrite = false) {
  constexpr int kRows = 48, kVocab = 50257, kShards = 2;
  const int kPadded = padded;
  const int kCols = kPadded / kShards;
  const std::vector<float> logits = testing::RoundedTo<T>(
      testing::RandomFloats(size_t(kRows) * kPadded, 71, -logit_limit, logit_limit));
  std::vector<int32_t> targets(kRows);
  for (int r = 0; r < kRows; ++r) targets[r] = (r * 7919 + 13) % kVocab;
  targets[0] = kVocab - 1;  // in the second shard, next to the padding
  const float d_loss = 1.0f / kRows;

  std::vector<float> max(kRows, -INFINITY), sum(kRows, 0), target_logit(kRows, 0);
  std::vector<float> local_max[kShards], local_sum[kShards], local_target[kShards];
  std::vector<float> shard_logits[kShards];
  VocabShard shards[kShards];
  int32_t* dtargets = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dtargets), kRows * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dtargets, targets.data(), kRows * 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (int s = 0; s < kShards; ++s) {
    shards[s] = {kRows, kCols, std::min(kCols, kVocab - s * kCols), s * kCols};
    shard_logits[s].resize(size_t(kRows) * kCols);
    for (int r = 0; r < kRows; ++r) {
      std::copy_n(logits.begin() + size_t(r) * kPadded + s * kCols, kCols,
                  shard_logits[s].begin() + size_t(r) * kCols);
    }
    DeviceArray<T> dlogits(shard_logits[s]);
    DeviceArray<float> dmax(kRows), dsum(kRows), dtarget(kRows);
    ASSERT_TRUE(CrossEntropyLocalStats<T>(dlogits.get(), dtargets, shards[s], dmax.get(),
                                          dsum.get(), dtarget.get(), nullptr)
                    .ok());
    local_max[s] = dmax.Download();
    local_sum[s] = dsum.Download();
    local_target[s] = dtarget.Download();
    for (int r = 0; r < kRows; ++r) max[r] = std::max(max[r], local_max[s][r]);
  }
  DeviceArray<float> dglobal_max(max), dlosses(kRows), dglobal_sum(kRows), dglobal_target(kRows);
  for (int s = 0; s < kShards; ++s) {
    DeviceArray<float> dlocal_max(local_max[s]), dlocal_sum(local_sum[s]);
    ASSERT_TRUE(CrossEntropyRescaleSums(dlocal_max.get(), dglobal_max.get(), dlocal_sum.get(),
                                        kRows, nullptr)
                    .ok());
    const std::vector<float> rescaled = dlocal_sum.Download();
    for (int r = 0; r < kRows; ++r) {
      sum[r] += rescaled[r];
      target_logit[r] += local_target[s][r];
    }
  }
  dglobal_sum.Upload(sum);
  dglobal_target.Upload(target_logit);
  ASSERT_TRUE(CrossEntropyLosses(dglobal_max.get(), dglobal_sum.get(), dglobal_target.get(), kRows,
                                 dlosses.get(), nullptr)
                  .ok());
  std::vector<float> d_logits(size_t(kRows) * kPadded, 0.0f);
  for (int s = 0; s < kShards; ++s) {
    DeviceArray<T> dlogits(shard_logits[s]);
    DeviceArray<T> dgrad(
        std::vector<float>(size_t(kRows) * kCols, overwrite ? std::nanf("") : 0.0f));
    ASSERT_TRUE(CrossEntropyBackward<T>(dlogits.get(), dtargets, dglobal_max.get(),
                                        dglobal_sum.get(), shards[s], d_loss, dgrad.get(), nullptr,
                                        /*accumulate=*/!overwrite)
                    .ok());
    const std::vector<float> g = dgrad.Download();
    for (int r = 0; r < kRows; ++r) {
      std::copy_n(g.begin() + size_t(r) * kCols, kCols,
                  d_logits.begin() + size_t(r) * kPadded + s * kCols);
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(dtargets);

  // The reference: the CPU kernels in double on the whole padded vocabulary.
  const std::vector<double> ld = testing::ToDouble(logits);
  const VocabShard whole{kRows, kPadded, kVocab, 0};
  std::vector<double> rmax(kRows), rsum(kRows), rtarget(kRows), rloss(kRows),
      rgrad(size_t(kRows) * kPadded, 0.0);
  cpu::CrossEntropyLocalMax<double>(ld.data(), whole, rmax.data());
  cpu::CrossEntropyLocalSums<double>(ld.data(), targets.data(), rmax.data(), whole, rsum.data(),
                                     rtarget.data());
  cpu::CrossEntropyLosses<double>(rmax.data(), rsum.data(), rtarget.data(), kRows, rloss.data());
  cpu::CrossEntropyBackward<double>(ld.data(), targets.data(), rmax.data(), rsum.data(), whole,
                                    d_loss, rgrad.data());
  const double loss_error = testing::RelativeError(dlosses.Download(), rloss);
  const double grad_error = testing::RelativeError(d_logits, rgrad);
  std::printf(
      "cross-entropy %s, 2 shards of GPT-2's vocabulary padded to %d%s: losses %.2e, d_logits "
      "%.2e\n",
      testing::TypeName<T>(), kPadded, overwrite ? " (overwritten)" : "", loss_error, grad_error);
  // Losses are computed in float from the (exact) inputs whatever T is.
  EXPECT_LT(loss_error, testing::kFp32Tolerance);
  EXPECT_LT(grad_error, tolerance);
  // Padding columns got no gradient.
  for (int r = 0; r < kRows; ++r) {
    for (int c = kVocab; c < kPadded; ++c) ASSERT_EQ(d_logits[size_t(r) * kPadded + c], 0.0f);
  }
}

TEST(CudaCrossEntropyTest, Fp32VocabParallelMatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckVocabParallel<float>(6, testing::kFp32Tolerance);
}

TEST(CudaCrossEntropyTest, Bf16VocabParallelMatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckVocabParallel<__nv_bfloat16>(6, testing::kBf16Tolerance);
  CheckVocabParallel<__nv_bfloat16>(6, testing::kBf16Tolerance, 50432, /*overwrite=*/true);
}

TEST(CudaCrossEntropyTest, UnalignedShardsMatchTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckVocabParallel<float>(6, testing::kFp32Tolerance, 50258);
  CheckVocabParallel<__nv_bfloat16>(6, testing::kBf16Tolerance, 50258, /*overwrite=*/true);
}

// Most of fp16's d_logits (softmax / rows, about 1e-6 here) are subnormal: they lose
// relative precision, but stay far below the tolerance measured against the data's scale
// (the target entries' -1 / rows). Loss scaling lifts them in training.
TEST(CudaCrossEntropyTest, Fp16VocabParallelMatchesTheCpu) {
  MTRAIN_SKIP_WITHOUT_GPU();
  CheckVocabParallel<__half>(4, testing::kFp16Tolerance);
}

}  // namespace
}  // namespace mtrain::cuda
