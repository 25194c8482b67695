#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/test_util.h"

namespace mtrain::cpu {
namespace {

using kernel_testing::ExpectGradientNear;
using kernel_testing::NumericalGradient;
using kernel_testing::RandomVector;

// 5 tokens over a real vocabulary of 11, padded to 16 columns.
constexpr int kRows = 5;
constexpr int kVocab = 11;
constexpr int kPadded = 16;
const std::vector<int32_t> kTargets = {0, 10, 4, 7, 10};

// Random logits with large values in the padded columns, which must be ignored.
std::vector<double> MakeLogits(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> logits = RandomVector(kRows * kPadded, rng, -3.0, 3.0);
  for (int row = 0; row < kRows; ++row) {
    for (int col = kVocab; col < kPadded; ++col) logits[row * kPadded + col] = 50.0 + col;
  }
  return logits;
}

const VocabShard kWholeVocab{kRows, kPadded, kVocab, 0};

// The four steps on one shard holding the whole vocabulary; fills max and sum_exp.
template <typename T>
std::vector<T> Losses(const std::vector<T>& logits, std::vector<T>* max, std::vector<T>* sum_exp) {
  max->assign(kRows, 0);
  sum_exp->assign(kRows, 0);
  std::vector<T> target_logit(kRows), losses(kRows);
  CrossEntropyLocalMax(logits.data(), kWholeVocab, max->data());
  CrossEntropyLocalSums(logits.data(), kTargets.data(), max->data(), kWholeVocab, sum_exp->data(),
                        target_logit.data());
  CrossEntropyLosses(max->data(), sum_exp->data(), target_logit.data(), kRows, losses.data());
  return losses;
}

TEST(CrossEntropyTest, LossesMatchNaiveLogSoftmax) {
  const std::vector<double> logits = MakeLogits(1);
  std::vector<double> max, sum_exp;
  const std::vector<double> losses = Losses(logits, &max, &sum_exp);
  for (int row = 0; row < kRows; ++row) {
    const double* l = logits.data() + row * kPadded;
    double sum = 0;
    for (int col = 0; col < kVocab; ++col) sum += std::exp(l[col]);
    EXPECT_NEAR(losses[row], std::log(sum) - l[kTargets[row]], 1e-13) << row;
    EXPECT_EQ(max[row], *std::max_element(l, l + kVocab));
  }
}

TEST(CrossEntropyTest, StableForHugeLogits) {
  // exp(1000) overflows; subtracting the max keeps the loss finite.
  std::vector<float> logits(kRows * kPadded, 0.0f);
  for (int row = 0; row < kRows; ++row) logits[row * kPadded + kTargets[row]] = 1000.0f;
  std::vector<float> max, sum_exp;
  const std::vector<float> losses = Losses(logits, &max, &sum_exp);
  for (int row = 0; row < kRows; ++row) EXPECT_NEAR(losses[row], 0.0f, 1e-6f) << row;
}

TEST(CrossEntropyTest, BackwardMatchesFiniteDifferencesAndSkipsPadding) {
  std::vector<double> logits = MakeLogits(2);
  const double d_loss = 0.37;
  std::vector<double> max, sum_exp;
  Losses(logits, &max, &sum_exp);
  std::vector<double> d_logits(logits.size(), 0.0);
  CrossEntropyBackward(logits.data(), kTargets.data(), max.data(), sum_exp.data(), kWholeVocab,
                       d_loss, d_logits.data());
  auto objective = [&] {
    std::vector<double> unused_max, unused_sum;
    double total = 0;
    for (double loss : Losses(logits, &unused_max, &unused_sum)) total += d_loss * loss;
    return total;
  };
  ExpectGradientNear(d_logits, NumericalGradient(&logits, objective), "d_logits");
  for (int row = 0; row < kRows; ++row) {
    for (int col = kVocab; col < kPadded; ++col) EXPECT_EQ(d_logits[row * kPadded + col], 0.0);
  }
}

TEST(CrossEntropyTest, BackwardAccumulates) {
  const std::vector<double> logits = MakeLogits(3);
  std::vector<double> max, sum_exp;
  Losses(logits, &max, &sum_exp);
  std::vector<double> d_logits(logits.size(), 0.0);
  auto backward = [&] {
    CrossEntropyBackward(logits.data(), kTargets.data(), max.data(), sum_exp.data(), kWholeVocab,
                         0.2, d_logits.data());
  };
  backward();
  const std::vector<double> once = d_logits;
  backward();
  for (size_t i = 0; i < d_logits.size(); ++i) EXPECT_EQ(d_logits[i], 2 * once[i]);
}

TEST(CrossEntropyTest, TwoVocabShardsEqualTheUnsplitResult) {
  const std::vector<double> logits = MakeLogits(4);
  std::vector<double> max, sum_exp;
  const std::vector<double> losses = Losses(logits, &max, &sum_exp);
  std::vector<double> d_logits(logits.size(), 0.0);
  CrossEntropyBackward(logits.data(), kTargets.data(), max.data(), sum_exp.data(), kWholeVocab, 0.5,
                       d_logits.data());

  // Two tensor-parallel ranks of 8 padded columns: rank 0 holds 8 real tokens, rank 1 the
  // remaining 3 and the 5 padding columns.
  constexpr int kLocal = kPadded / 2;
  const VocabShard shards[2] = {{kRows, kLocal, 8, 0}, {kRows, kLocal, kVocab - 8, kLocal}};
  std::vector<double> local_logits[2];
  for (int rank = 0; rank < 2; ++rank) {
    for (int row = 0; row < kRows; ++row) {
      const double* begin = logits.data() + row * kPadded + rank * kLocal;
      local_logits[rank].insert(local_logits[rank].end(), begin, begin + kLocal);
    }
  }
  // The all-reduces, simulated: MAX of the local maxima, SUM of the sums.
  std::vector<double> local_max[2], reduced_max(kRows);
  for (int rank = 0; rank < 2; ++rank) {
    local_max[rank].resize(kRows);
    CrossEntropyLocalMax(local_logits[rank].data(), shards[rank], local_max[rank].data());
  }
  for (int row = 0; row < kRows; ++row) {
    reduced_max[row] = std::max(local_max[0][row], local_max[1][row]);
  }
  std::vector<double> reduced_sum(kRows, 0.0), reduced_target(kRows, 0.0);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<double> local_sum(kRows), local_target(kRows);
    CrossEntropyLocalSums(local_logits[rank].data(), kTargets.data(), reduced_max.data(),
                          shards[rank], local_sum.data(), local_target.data());
    for (int row = 0; row < kRows; ++row) {
      reduced_sum[row] += local_sum[row];
      reduced_target[row] += local_target[row];
    }
  }
  std::vector<double> split_losses(kRows);
  CrossEntropyLosses(reduced_max.data(), reduced_sum.data(), reduced_target.data(), kRows,
                     split_losses.data());
  for (int row = 0; row < kRows; ++row) {
    EXPECT_EQ(reduced_max[row], max[row]);
    EXPECT_NEAR(split_losses[row], losses[row], 1e-14) << row;
  }
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<double> local_d(local_logits[rank].size(), 0.0);
    CrossEntropyBackward(local_logits[rank].data(), kTargets.data(), reduced_max.data(),
                         reduced_sum.data(), shards[rank], 0.5, local_d.data());
    for (int row = 0; row < kRows; ++row) {
      for (int col = 0; col < kLocal; ++col) {
        EXPECT_NEAR(local_d[row * kLocal + col], d_logits[row * kPadded + rank * kLocal + col],
                    1e-15)
            << "rank " << rank << " row " << row << " col " << col;
      }
    }
  }
}

TEST(CrossEntropyTest, ShardWithOnlyPaddingContributesNothing) {
  const VocabShard padding_only{kRows, 4, 0, 12};
  const std::vector<float> logits(kRows * 4, 3.0f);
  std::vector<float> max(kRows), sum_exp(kRows), target_logit(kRows, 1.0f);
  CrossEntropyLocalMax(logits.data(), padding_only, max.data());
  const std::vector<float> global_max(kRows, 2.0f);
  CrossEntropyLocalSums(logits.data(), kTargets.data(), global_max.data(), padding_only,
                        sum_exp.data(), target_logit.data());
  std::vector<float> d_logits(logits.size(), 0.0f);
  const std::vector<float> global_sum(kRows, 1.0f);
  CrossEntropyBackward(logits.data(), kTargets.data(), global_max.data(), global_sum.data(),
                       padding_only, 1.0f, d_logits.data());
  for (int row = 0; row < kRows; ++row) {
    EXPECT_EQ(max[row], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(sum_exp[row], 0.0f);
    EXPECT_EQ(target_logit[row], 0.0f);
  }
  for (float d : d_logits) EXPECT_EQ(d, 0.0f);
}

TEST(CrossEntropyTest, FloatMatchesDouble) {
  const std::vector<double> logits = MakeLogits(5);
  const std::vector<float> logits32(logits.begin(), logits.end());
  std::vector<double> max, sum_exp;
  std::vector<float> max32, sum_exp32;
  const std::vector<double> losses = Losses(logits, &max, &sum_exp);
  const std::vector<float> losses32 = Losses(logits32, &max32, &sum_exp32);
  for (int row = 0; row < kRows; ++row) EXPECT_NEAR(losses32[row], losses[row], 1e-5);
}

}  // namespace
}  // namespace mtrain::cpu
