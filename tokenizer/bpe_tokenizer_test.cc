#include "tokenizer/bpe_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/tokenizer_json_for_test.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Bytes are ids 0-255; merges make "he" 256, "ll" 257, "hell" 258, "hello" 259, " w" 260
// (one of them in the [left, right] form); <|endoftext|> is added as 261.
std::string TinyTokenizerJson() {
  const std::string space = ByteSymbolForTest(' ');
  std::string json =
      TokenizerJsonForTest({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {space, "w"}},
                           {{"<|endoftext|>", 261}});
  json.replace(json.find("\"he ll\""), 7, R"(["he", "ll"])");
  return json;
}

TEST(BpeTokenizerTest, MergesByRankAndCutsOutAddedTokens) {
  absl::StatusOr<BpeTokenizer> t = BpeTokenizer::ParseHuggingFaceJson(TinyTokenizerJson(), "tiny");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->vocab_size(), 262);
  EXPECT_EQ(t->end_of_document_id(), 261);
  EXPECT_THAT(t->Encode("hello<|endoftext|> world"),
              ElementsAre(259, 261, 260, 'o', 'r', 'l', 'd'));
  // "hell" without the o: h e -> he, l l -> ll, he ll -> hell.
  EXPECT_THAT(t->Encode("hell"), ElementsAre(258));
  // Bytes outside the printable range go through their stand-ins (newline is byte 10).
  EXPECT_THAT(t->Encode("\n"), ElementsAre(10));
  absl::StatusOr<std::string> text = t->Decode(t->Encode("hello<|endoftext|> world\n\xc3\xa9"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello<|endoftext|> world\n\xc3\xa9");
}

// Several added tokens: each occurrence is cut out wherever it is, whichever tokens are
// absent, and the longest wins where two start at one place.
TEST(BpeTokenizerTest, ManyAddedTokensAreFoundInOrder) {
  absl::StatusOr<BpeTokenizer> t = BpeTokenizer::ParseHuggingFaceJson(
      TokenizerJsonForTest({}, {{"<a>", 300}, {"<a><b>", 301}, {"<never>", 302}}), "added");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->Encode("x<a>y<a><b><a>"), ElementsAre('x', 300, 'y', 301, 300));
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "<a>z";
  const std::vector<int32_t> ids = t->Encode(many);
  ASSERT_EQ(ids.size(), 2000u);
  EXPECT_EQ(ids[1998], 300);
  EXPECT_EQ(ids[1999], 'z');
}

TEST(BpeTokenizerTest, InvalidUtf8ReadsAsReplacementCharacters) {
  absl::StatusOr<BpeTokenizer> t = BpeTokenizer::ParseHuggingFaceJson(TinyTokenizerJson(), "tiny");
  ASSERT_TRUE(t.ok()) << t.status();
  // 0xFF alone becomes U+FFFD, whose UTF-8 bytes EF BF BD are three byte tokens.
  EXPECT_THAT(t->Encode("\xff"), ElementsAre(0xEF, 0xBF, 0xBD));
}

TEST(BpeTokenizerTest, DecodeNamesAnIdOutsideTheVocabulary) {
  absl::StatusOr<BpeTokenizer> t = BpeTokenizer::ParseHuggingFaceJson(TinyTokenizerJson(), "tiny");
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int32_t> ids = {104, 262};
  absl::StatusOr<std::string> text = t->Decode(ids);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("token 1 is id 262"));
}

TEST(BpeTokenizerTest, RefusesWhatItCannotReproduceNamingTheField) {
  auto message = [](const std::string& json) {
    return std::string(BpeTokenizer::ParseHuggingFaceJson(json, "t.json").status().message());
  };
  EXPECT_THAT(message("{"), HasSubstr("t.json: not JSON"));
  std::string nfc = TinyTokenizerJson();
  nfc.replace(nfc.find("\"normalizer\": null"), 18, R"("normalizer": {"type": "NFC"})");
  EXPECT_THAT(message(nfc), HasSubstr("normalizer: not supported"));
  EXPECT_THAT(message(R"({"model": {"type": "WordPiece"}})"), HasSubstr("model.type"));
  std::string bad_merge = TinyTokenizerJson();
  bad_merge.replace(bad_merge.find("\"hell o\""), 8, "\"hell q\"");
  EXPECT_THAT(message(bad_merge), HasSubstr("merge 4 (\"hell q\") names a token the vocabulary"));
  std::string no_pre = TinyTokenizerJson();
  no_pre.replace(no_pre.find("ByteLevel"), 9, "Whitespace");
  EXPECT_THAT(message(no_pre), HasSubstr("pre_tokenizer: must be"));
}

TEST(BpeTokenizerTest, MissingFilesAreNotFound) {
  EXPECT_EQ(BpeTokenizer::FromVocabAndMerges("/nonexistent/vocab.json", "/nonexistent/m.txt")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(BpeTokenizer::FromHuggingFaceJson("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mtrain
