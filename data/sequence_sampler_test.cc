#include "data/sequence_sampler.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/token_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// Token i is i + 1000, so every sample shows where it came from.
class CountingDataset final : public TokenDataset {
 public:
  explicit CountingDataset(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  absl::Status Read(int64_t offset, int length, int32_t* out) const override {
    if (absl::Status range = CheckReadRange(*this, offset, length); !range.ok()) return range;
    for (int i = 0; i < length; ++i) out[i] = static_cast<int32_t>(offset + i + 1000);
    return absl::OkStatus();
  }
  int64_t vocab_upper_bound() const override { return int64_t{1} << 31; }
  std::string source() const override { return "counting"; }

 private:
  int64_t size_;
};

SequenceSampler MakeSampler(int64_t size, int seq_length, uint64_t seed) {
  absl::StatusOr<SequenceSampler> sampler = SequenceSampler::Create(size, seq_length, seed);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *sampler;
}

TEST(SequenceSamplerTest, SplitMix64MatchesTheReferenceGenerator) {
  // The first output of Vigna's splitmix64 seeded with 0.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFULL);
}

TEST(SequenceSamplerTest, StartsFollowTheDocumentedFormula) {
  // Computed independently in Python from the formula in sequence_sampler.h. Pinned because
  // resumed jobs rely on it: changing the mapping changes which data a step sees.
  const SequenceSampler sampler = MakeSampler(1151368, 128, 1234);
  EXPECT_EQ(sampler.SampleStart(1, 0), 687055);
  EXPECT_EQ(sampler.SampleStart(1, 1), 977657);
  EXPECT_EQ(sampler.SampleStart(1, 2), 617819);
  EXPECT_EQ(sampler.SampleStart(1, 3), 393237);
  EXPECT_EQ(sampler.SampleStart(2, 0), 407019);
  EXPECT_EQ(sampler.SampleStart(2, 1), 519874);
  EXPECT_EQ(MakeSampler(1151368, 128, 7).SampleStart(100, -1), 957616);
}

TEST(SequenceSamplerTest, IsAPureFunctionOfSeedStepAndIndex) {
  const SequenceSampler a = MakeSampler(1000000, 64, 99);
  const SequenceSampler b = MakeSampler(1000000, 64, 99);
  const SequenceSampler other_seed = MakeSampler(1000000, 64, 100);
  int same_as_other_seed = 0;
  for (int64_t step = 1; step <= 20; ++step) {
    for (int64_t index = 0; index < 50; ++index) {
      EXPECT_EQ(a.SampleStart(step, index), b.SampleStart(step, index));
      // Asking again, after other queries, gives the same answer (no hidden state).
      EXPECT_EQ(a.SampleStart(step, index), a.SampleStart(step, index));
      same_as_other_seed += a.SampleStart(step, index) == other_seed.SampleStart(step, index);
    }
  }
  EXPECT_LE(same_as_other_seed, 2);
}

TEST(SequenceSamplerTest, DifferentStepsAndIndicesGiveDifferentStarts) {
  const SequenceSampler sampler = MakeSampler(1000000, 128, 1234);
  int equal_across_steps = 0;
  std::set<int64_t> within_step;
  for (int64_t index = 0; index < 256; ++index) {
    equal_across_steps += sampler.SampleStart(1, index) == sampler.SampleStart(2, index);
    within_step.insert(sampler.SampleStart(1, index));
  }
  // With ~10^6 possible starts, a coincidence among 256 pairs is ~3% likely; one is allowed.
  EXPECT_LE(equal_across_steps, 1);
  EXPECT_GE(within_step.size(), 255u);
  // (step, index) pairs that a linear key would alias stay apart.
  EXPECT_NE(sampler.SampleStart(1, 8), sampler.SampleStart(2, 0));
}

TEST(SequenceSamplerTest, StartsStayInRangeAndReachBothEnds) {
  // Dataset of 10 tokens, seq_length 7: samples of 8 tokens start at 0, 1 or 2.
  const SequenceSampler tiny = MakeSampler(10, 7, 5);
  EXPECT_EQ(tiny.num_starts(), 3);
  std::set<int64_t> seen;
  for (int64_t step = 1; step <= 200; ++step) {
    for (int64_t index = 0; index < 8; ++index) seen.insert(tiny.SampleStart(step, index));
  }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2}));

  // Exactly seq_length + 1 tokens: the only sample is the whole dataset.
  const SequenceSampler exact = MakeSampler(9, 8, 5);
  for (int64_t step = 1; step <= 50; ++step) EXPECT_EQ(exact.SampleStart(step, step), 0);

  const SequenceSampler large = MakeSampler(5000, 128, 17);
  for (int64_t step = 1; step <= 100; ++step) {
    for (int64_t index = 0; index < 100; ++index) {
      const int64_t start = large.SampleStart(step, index);
      ASSERT_GE(start, 0);
      ASSERT_LE(start, 5000 - 128 - 1);
    }
  }
}

TEST(SequenceSamplerTest, TargetsAreInputsShiftedByOne) {
  const CountingDataset dataset(100000);
  const SequenceSampler sampler = MakeSampler(dataset.size(), 16, 3);
  const std::vector<int64_t> indices = {0, 1, 2, 7};
  std::vector<int32_t> inputs(indices.size() * 16), targets(indices.size() * 16);
  ASSERT_TRUE(
      sampler.Fill(dataset, 5, indices, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());
  for (size_t s = 0; s < indices.size(); ++s) {
    const int64_t start = sampler.SampleStart(5, indices[s]);
    for (int k = 0; k < 16; ++k) {
      EXPECT_EQ(inputs[s * 16 + k], start + k + 1000) << "sample " << s << " token " << k;
      EXPECT_EQ(targets[s * 16 + k], start + k + 1 + 1000) << "sample " << s << " token " << k;
    }
  }
}

TEST(SequenceSamplerTest, SplittingAGlobalBatchGivesTheSameSamples) {
  // Global batch 16, seq_length 8: once in one call, then as 2 data-parallel ranks x 4
  // microbatches of 2 (each rank owning a contiguous half), requested in a shuffled order.
  const CountingDataset dataset(50000);
  const SequenceSampler sampler = MakeSampler(dataset.size(), 8, 11);
  constexpr int kGlobal = 16, kSeq = 8, kMicro = 2;
  std::vector<int64_t> all(kGlobal);
  for (int i = 0; i < kGlobal; ++i) all[i] = i;
  std::vector<int32_t> inputs(kGlobal * kSeq), targets(kGlobal * kSeq);
  ASSERT_TRUE(sampler.Fill(dataset, 42, all, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());

  for (int rank : {1, 0}) {
    for (int micro : {3, 0, 2, 1}) {
      const int64_t first = rank * (kGlobal / 2) + micro * kMicro;
      const std::vector<int64_t> chunk = {first, first + 1};
      std::vector<int32_t> chunk_inputs(kMicro * kSeq), chunk_targets(kMicro * kSeq);
      ASSERT_TRUE(
          sampler
              .Fill(dataset, 42, chunk, absl::MakeSpan(chunk_inputs), absl::MakeSpan(chunk_targets))
              .ok());
      EXPECT_EQ(chunk_inputs, std::vector<int32_t>(inputs.begin() + first * kSeq,
                                                   inputs.begin() + (first + kMicro) * kSeq));
      EXPECT_EQ(chunk_targets, std::vector<int32_t>(targets.begin() + first * kSeq,
                                                    targets.begin() + (first + kMicro) * kSeq));
    }
  }
}

TEST(SequenceSamplerTest, StartsSpreadEvenlyOverTheDataset) {
  const int64_t size = 1000000;
  const SequenceSampler sampler = MakeSampler(size, 128, 1234);
  constexpr int kBins = 20;
  constexpr int kSamples = 40000;
  std::vector<int> counts(kBins, 0);
  std::set<int64_t> distinct;
  double sum = 0;
  for (int n = 0; n < kSamples; ++n) {
    const int64_t start = sampler.SampleStart(1 + n / 64, n % 64);
    ++counts[start * kBins / sampler.num_starts()];
    distinct.insert(start);
    sum += start;
  }
  // Chi-square with 19 degrees of freedom: 50 lies far beyond its 99.99th percentile (~45).
  const double expected = static_cast<double>(kSamples) / kBins;
  double chi_square = 0;
  for (int count : counts) chi_square += (count - expected) * (count - expected) / expected;
  EXPECT_LT(chi_square, 50.0) << "counts per bin: " << ::testing::PrintToString(counts);
  // The mean of a uniform start is num_starts / 2, with a standard error of ~1440 here.
  EXPECT_NEAR(sum / kSamples, sampler.num_starts() / 2.0, 10000.0);
  // ~800 repeats are expected among 40000 draws from 10^6 starts.
  EXPECT_GT(distinct.size(), 38500u);
}

TEST(SequenceSamplerTest, RejectsDatasetsTooSmallForOneSample) {
  absl::StatusOr<SequenceSampler> sampler = SequenceSampler::Create(128, 128, 1);
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sampler.status().message(), HasSubstr("128 tokens"));
  EXPECT_THAT(sampler.status().message(), HasSubstr("seq_length"));
  EXPECT_EQ(SequenceSampler::Create(0, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SequenceSampler::Create(100, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SequenceSampler::Create(129, 128, 1).ok());
}

TEST(SequenceSamplerTest, FillRejectsMismatchedBuffersAndDatasets) {
  const CountingDataset dataset(1000);
  const SequenceSampler sampler = MakeSampler(dataset.size(), 10, 1);
  const std::vector<int64_t> indices = {0, 1};
  std::vector<int32_t> right(20), wrong(19);
  EXPECT_EQ(sampler.Fill(dataset, 1, indices, absl::MakeSpan(wrong), absl::MakeSpan(right)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sampler.Fill(dataset, 1, indices, absl::MakeSpan(right), absl::MakeSpan(wrong)).code(),
            absl::StatusCode::kInvalidArgument);
  const CountingDataset other(999);
  absl::Status status =
      sampler.Fill(other, 1, indices, absl::MakeSpan(right), absl::MakeSpan(right));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("999"));
}

}  // namespace
}  // namespace mtrain
