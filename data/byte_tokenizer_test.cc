#include "data/byte_tokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteTokenizerTest, EncodesEachByteAsItsUnsignedValue) {
  EXPECT_THAT(ByteTokenizer::Encode("To be"), ElementsAre(84, 111, 32, 98, 101));
  // UTF-8 "é" is two bytes, both >= 128: they must not come out negative.
  EXPECT_THAT(ByteTokenizer::Encode("\xc3\xa9"), ElementsAre(195, 169));
  EXPECT_TRUE(ByteTokenizer::Encode("").empty());
}

TEST(ByteTokenizerTest, RoundTripsEveryByteValue) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  text += text;  // each value twice, in two places
  const std::vector<int32_t> ids = ByteTokenizer::Encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<int32_t>(i % 256));
  absl::StatusOr<std::string> decoded = ByteTokenizer::Decode(ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text);
}

TEST(ByteTokenizerTest, EncodeToFillsTheCallersBuffer) {
  std::vector<int32_t> out(4, -7);
  ByteTokenizer::EncodeTo("\xff\x80", out.data());
  EXPECT_THAT(out, ElementsAre(255, 128, -7, -7));
}

TEST(ByteTokenizerTest, DecodeRejectsIdsOutsideTheByteRange) {
  for (int32_t bad : {256, -1, 1 << 30}) {
    const std::vector<int32_t> ids = {65, 66, bad, 67};
    absl::StatusOr<std::string> decoded = ByteTokenizer::Decode(ids);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(decoded.status().message(), HasSubstr("token id " + std::to_string(bad)));
    EXPECT_THAT(decoded.status().message(), HasSubstr("position 2"));
  }
}

}  // namespace
}  // namespace mtrain
