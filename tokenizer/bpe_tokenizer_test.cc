#include "tokenizer/bpe_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  // A Split by a pattern it does not know; a field of another JSON type (no crash).
  std::string split = TinyTokenizerJson();
  split.replace(split.find(R"("pre_tokenizer": {)"), 18,
                R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
                   "pattern": {"Regex": "[a-z]+"}, "behavior": "Isolated"},
                   {"type": "ByteLevel", "use_regex": false}]}, "unused": {)");
  EXPECT_THAT(message(split), HasSubstr("pre_tokenizer.pretokenizers[0].pattern: not supported"));
  std::string wrong_type = TinyTokenizerJson();
  wrong_type.replace(wrong_type.find(R"("type": "BPE")"), 13, R"("type": 5)");
  EXPECT_THAT(message(wrong_type), HasSubstr("t.json: a field has another JSON type"));
  // SentencePiece-style: a normalizer other than Llama 2's, a Metaspace of another mark,
  // byte fallback without the byte tokens.
  std::string nfkc = TinyTokenizerJson();
  nfkc.replace(nfkc.find("\"normalizer\": null"), 18,
               R"("normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]})");
  EXPECT_THAT(message(nfkc), HasSubstr("normalizer: not supported [rule: null, or Sequence "
                                       "[Prepend"));
  std::string metaspace = TinyTokenizerJson();
  metaspace.replace(metaspace.find("\"ByteLevel\""), 11, R"("Metaspace", "replacement": "_")");
  EXPECT_THAT(message(metaspace), HasSubstr("pre_tokenizer: not supported"));
  std::string fallback = TinyTokenizerJson();
  fallback.replace(fallback.find("\"ByteLevel\""), 11, R"("Metaspace")");
  fallback.replace(fallback.find(R"("type": "BPE")"), 13,
                   R"("type": "BPE", "byte_fallback": true)");
  EXPECT_THAT(message(fallback), HasSubstr("model.byte_fallback: the vocabulary has no <0x00>"));
}

// A SentencePiece-style vocabulary: characters, "▁" for spaces, byte fallback for the rest.
TEST(BpeTokenizerTest, SentencePieceStyleFallsBackToBytes) {
  std::string vocab = R"("<unk>": 0, "\u2581": 1, "h": 2, "i": 3, "\u2581h": 4, "\u2581hi": 5)";
  for (int b = 0; b < 256; ++b) vocab += absl::StrFormat(", \"<0x%02X>\": %d", b, 6 + b);
  const std::string json = R"({"normalizer": null, "pre_tokenizer": {"type": "Metaspace",
      "replacement": "\u2581", "prepend_scheme": "always", "split": true},
      "added_tokens": [], "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
      "vocab": {)" + vocab +
                           R"(}, "merges": ["\u2581 h", "\u2581h i"]}})";
  absl::StatusOr<BpeTokenizer> t = BpeTokenizer::ParseHuggingFaceJson(json, "sp");
  ASSERT_TRUE(t.ok()) << t.status();
  // "hi hi!" -> "▁hi", "▁hi", then "!" (0x21) by its byte token.
  EXPECT_THAT(t->Encode("hi hi!"), ElementsAre(5, 5, 6 + 0x21));
  absl::StatusOr<std::string> text = t->Decode(t->Encode("hi hi!"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hi hi!");
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
