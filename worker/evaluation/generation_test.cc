#include "worker/evaluation/generation.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

TEST(SampleTokenTest, GreedyTakesTheFirstLargestLogit) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(*SampleToken(logits, {}, 0), 1);
  SamplingOptions top1;
  top1.temperature = 1.0;
  top1.top_k = 1;
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(*SampleToken(logits, top1, position), 1) << "top_k 1 is greedy";
  }
}

TEST(SampleTokenTest, TemperatureSamplesTheSoftmaxAndIsAPureFunctionOfSeedAndPosition) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(5.0f)};  // 1 : 2 : 5
  SamplingOptions options;
  options.temperature = 1.0;
  options.seed = 9;
  std::vector<int> counts(3, 0);
  constexpr int kDraws = 40000;
  for (int64_t position = 0; position < kDraws; ++position) {
    const int32_t token = *SampleToken(logits, options, position);
    ++counts[token];
    EXPECT_EQ(*SampleToken(logits, options, position), token);  // same draw again
  }
  EXPECT_NEAR(counts[0] / double(kDraws), 1.0 / 8, 0.01);
  EXPECT_NEAR(counts[1] / double(kDraws), 2.0 / 8, 0.01);
  EXPECT_NEAR(counts[2] / double(kDraws), 5.0 / 8, 0.01);
  // A high temperature flattens, a low one sharpens.
  options.temperature = 0.25;  // 1 : 16 : 625
  int likeliest = 0;
  for (int64_t position = 0; position < 2000; ++position) {
    likeliest += *SampleToken(logits, options, position) == 2;
  }
  EXPECT_GT(likeliest, 1900);
}

TEST(SampleTokenTest, TopKAndTopPKeepTheMostLikelyTokens) {
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f),
                                     std::log(0.4f)};
  SamplingOptions options;
  options.temperature = 1.0;
  options.top_k = 2;  // tokens 3 and 2
  for (int64_t position = 0; position < 500; ++position) {
    EXPECT_GE(*SampleToken(logits, options, position), 2);
  }
  options.top_k = 0;
  options.top_p = 0.65;  // 0.4 + 0.3 reaches it: tokens 3 and 2
  std::vector<int> counts(4, 0);
  for (int64_t position = 0; position < 20000; ++position) {
    ++counts[*SampleToken(logits, options, position)];
  }
  EXPECT_EQ(counts[0] + counts[1], 0);
  EXPECT_NEAR(counts[3] / 20000.0, 0.4 / 0.7, 0.015);
}

TEST(SampleTokenTest, BadOptionsNameTheFlag) {
  SamplingOptions options;
  options.temperature = -1;
  EXPECT_THAT(SampleToken({1.0f}, options, 0).status().message(), HasSubstr("--temperature"));
  options = {};
  options.top_p = 0;
  EXPECT_THAT(SampleToken({1.0f}, options, 0).status().message(), HasSubstr("--top_p"));
  options = {};
  options.top_k = -2;
  EXPECT_THAT(SampleToken({1.0f}, options, 0).status().message(), HasSubstr("--top_k"));
}

}  // namespace
}  // namespace mtrain
