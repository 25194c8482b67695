#include "data/window_samples.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// Token i is i, so every sample shows where it came from.
class CountingDataset final : public TokenDataset {
 public:
  explicit CountingDataset(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  absl::Status Read(int64_t offset, int length, int32_t* out) const override {
    if (absl::Status range = CheckReadRange(*this, offset, length); !range.ok()) return range;
    for (int i = 0; i < length; ++i) out[i] = static_cast<int32_t>(offset + i);
    return absl::OkStatus();
  }
  int64_t vocab_upper_bound() const override { return int64_t{1} << 31; }
  std::string source() const override { return "counting"; }

 private:
  int64_t size_;
};

TEST(WindowSamplesTest, RandomWindowsOverTheWholeStreamAreTheSequenceSamplersDraws) {
  const CountingDataset data(5000);
  constexpr int S = 16;
  constexpr int64_t kBatch = 6;
  auto samples = RandomWindowSamples::Create(&data, {0, 5000}, SplitKind::kTrain, S, 77, kBatch);
  ASSERT_TRUE(samples.ok()) << samples.status();
  const SequenceSampler sampler = *SequenceSampler::Create(5000, S, 77);
  std::vector<int32_t> tokens(S + 1);
  for (int64_t k = 0; k < 40; ++k) {
    ASSERT_TRUE((*samples)->Fill(k, absl::MakeSpan(tokens)).ok());
    const int64_t start = sampler.SampleStart(k / kBatch + 1, k % kBatch);
    for (int i = 0; i <= S; ++i) EXPECT_EQ(tokens[i], start + i) << k;
  }
}

TEST(WindowSamplesTest, RandomWindowsStayInsideTheirRange) {
  const CountingDataset data(3000);
  constexpr int S = 32;
  auto samples = RandomWindowSamples::Create(&data, {1000, 1200}, SplitKind::kTrain, S, 1, 4);
  ASSERT_TRUE(samples.ok()) << samples.status();
  std::vector<int32_t> tokens(S + 1);
  for (int64_t k = 0; k < 500; ++k) {
    ASSERT_TRUE((*samples)->Fill(k, absl::MakeSpan(tokens)).ok());
    EXPECT_GE(tokens.front(), 1000);
    EXPECT_LT(tokens.back(), 1200);
  }
}

TEST(WindowSamplesTest, SequentialWindowsReadEveryTokenOnceBeforeRepeating) {
  const CountingDataset data(1000);
  constexpr int S = 10;
  auto samples = SequentialWindowSamples::Create(&data, {900, 1000}, SplitKind::kValidation, S);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)->windows(), 9);  // (100 - 1) / 10
  std::vector<int32_t> tokens(S + 1);
  std::set<int32_t> inputs;
  for (int64_t k = 0; k < 9; ++k) {
    ASSERT_TRUE((*samples)->Fill(k, absl::MakeSpan(tokens)).ok());
    EXPECT_EQ(tokens[0], 900 + k * S);
    for (int i = 0; i < S; ++i) EXPECT_TRUE(inputs.insert(tokens[i]).second) << tokens[i];
  }
  EXPECT_EQ(inputs.size(), 90u);
  ASSERT_TRUE((*samples)->Fill(9, absl::MakeSpan(tokens)).ok());
  EXPECT_EQ(tokens[0], 900);  // wraps
}

TEST(WindowSamplesTest, ASplitTooSmallForOneSampleNamesTheSplitAndTheSizes) {
  const CountingDataset data(1000);
  auto samples = SequentialWindowSamples::Create(&data, {990, 1000}, SplitKind::kValidation, 16);
  ASSERT_FALSE(samples.ok());
  EXPECT_THAT(std::string(samples.status().message()),
              HasSubstr("data.split: the validation split of counting (tokens [990, 1000)) holds "
                        "10 tokens, fewer than model.seq_length + 1 = 17"));
  auto train = RandomWindowSamples::Create(&data, {0, 0}, SplitKind::kTrain, 16, 1, 1);
  ASSERT_FALSE(train.ok());
  EXPECT_THAT(std::string(train.status().message()), HasSubstr("the train split"));
}

TEST(WindowSamplesTest, BadIndicesAndBuffersAreRefused) {
  const CountingDataset data(100);
  auto samples = SequentialWindowSamples::Create(&data, {0, 100}, SplitKind::kTest, 8);
  ASSERT_TRUE(samples.ok());
  std::vector<int32_t> small(8), right(9);
  EXPECT_EQ((*samples)->Fill(0, absl::MakeSpan(small)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*samples)->Fill(-1, absl::MakeSpan(right)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
