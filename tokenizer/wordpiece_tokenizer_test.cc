#include "tokenizer/wordpiece_tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/bert_normalizer.h"
#include "tokenizer/unicode_text.h"

namespace mtrain {
namespace {

std::string Utf8(const std::u32string& text) {
  std::string out;
  for (char32_t c : text) AppendUtf8(c, &out);
  return out;
}

std::string Normalized(const std::string& text, BertNormalizerOptions options = {}) {
  return Utf8(BertNormalize(DecodeUtf8Lossy(text), options));
}

// The cases below are what `tokenizers`' BertNormalizer (lowercase, strip_accents unset)
// returned for the same strings.
TEST(BertNormalizerTest, CleansLowercasesStripsAccentsAndSpacesOutIdeographs) {
  EXPECT_EQ(Normalized("H\xC3\xA9llo W\xC3\x96RLD"), "hello world");  // Héllo WÖRLD
  // İ decomposes to I + combining dot (dropped), then lower case; Σ stays σ at a word's end.
  EXPECT_EQ(Normalized("\xC4\xB0stanbul \xCE\xA3\xCE\x91\xCE\xA3"),
            "istanbul \xCF\x83\xCE\xB1\xCF\x83");
  // Zero-width space and soft hyphen (format characters) are dropped.
  EXPECT_EQ(Normalized("x\xE2\x80\x8BY\xC2\xADz"), "xyz");
  EXPECT_EQ(Normalized("\xE4\xB8\xAD\xE6\x96\x87"), " \xE4\xB8\xAD  \xE6\x96\x87 ");  // 中文
  EXPECT_EQ(Normalized("tab\there\xC2\xA0nb"), "tab here nb");  // NBSP is white space
  // U+FFFD and U+0000 are dropped.
  const std::string replacement_and_nul(
      "a\xEF\xBF\xBD"
      "b\0c",
      7);
  EXPECT_EQ(Normalized(replacement_and_nul), "abc");
  EXPECT_EQ(Normalized("\xEF\xAC\x81"), "\xEF\xAC\x81");  // ﬁ: not a canonical decomposition
  EXPECT_EQ(Normalized("a\xF0\x9F\xA5\xB0"
                       "b"),
            "a\xF0\x9F\xA5\xB0"
            "b");  // emoji kept
  // Cased: no lower case and (strip_accents unset) no accent stripping.
  BertNormalizerOptions cased;
  cased.lowercase = false;
  EXPECT_EQ(Normalized("H\xC3\xA9llo", cased), "H\xC3\xA9llo");
  cased.strip_accents = true;
  EXPECT_EQ(Normalized("H\xC3\xA9llo", cased), "Hello");
}

TEST(BertPreTokenizerTest, SplitsAtWhiteSpaceAndIsolatesPunctuation) {
  std::vector<std::string> words;
  for (const std::u32string& w : BertPreTokenize(
           DecodeUtf8Lossy("Hello, world! a^b ~d| don't \xC2\xBFqu\xC3\xA9? \xE2\x80\x94y"))) {
    words.push_back(Utf8(w));
  }
  EXPECT_EQ(words, (std::vector<std::string>{"Hello", ",", "world", "!", "a", "^", "b", "~", "d",
                                             "|", "don", "'", "t", "\xC2\xBF", "qu\xC3\xA9", "?",
                                             "\xE2\x80\x94", "y"}));
}

class WordPieceTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/vocab.txt";
    std::ofstream out(path_);
    for (const char* token : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able",
                              "aff", "##a", "!", "hello", ",", "world", "##s"}) {
      out << token << "\n";
    }
  }
  std::string path_;
};

TEST_F(WordPieceTokenizerTest, SplitsWordsIntoTheLongestEntriesFromTheirStart) {
  absl::StatusOr<WordPieceTokenizer> t = WordPieceTokenizer::FromVocabTxt(path_, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->vocab_size(), 15);
  EXPECT_EQ(t->cls_id(), 2);
  EXPECT_EQ(t->sep_id(), 3);
  EXPECT_EQ(t->mask_id(), 4);
  EXPECT_EQ(t->pad_id(), 0);
  // un ##aff ##able: the longest entry first at every step, not "##a" + ...
  EXPECT_EQ(t->Encode("Unaffable!"), (std::vector<int32_t>{5, 6, 7, 10}));
  // A word with an uncovered part is one [UNK]; the rest of the text goes on.
  EXPECT_EQ(t->Encode("unaffablex hello"), (std::vector<int32_t>{1, 11}));
  // Special tokens are matched in the raw text, before the normaliser lower-cases it.
  EXPECT_EQ(t->Encode("[CLS]hello,worlds[SEP][MASK]"),
            (std::vector<int32_t>{2, 11, 12, 13, 14, 3, 4}));
  EXPECT_EQ(t->Encode("[cls]"), (std::vector<int32_t>{1, 1, 1}));  // "[" "cls" "]"
  // Longer than 100 characters: [UNK] even though "##a" covers it.
  EXPECT_EQ(t->Encode("aff" + std::string(98, 'a')), (std::vector<int32_t>{1}));
  EXPECT_EQ(t->Encode("aff" + std::string(97, 'a')).size(), 98u);
  absl::StatusOr<std::string> text = t->Decode({2, 11, 12, 5, 6, 7, 10, 3});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "[CLS] hello, unaffable! [SEP]");
  EXPECT_FALSE(t->Decode({15}).ok());
}

// Any bytes: invalid UTF-8, NULs, control and format characters, long runs, special tokens
// cut in half. Every id is in the vocabulary, and decoding what was encoded succeeds.
TEST_F(WordPieceTokenizerTest, AnyBytesEncodeToVocabularyIds) {
  absl::StatusOr<WordPieceTokenizer> t = WordPieceTokenizer::FromVocabTxt(path_, {});
  ASSERT_TRUE(t.ok()) << t.status();
  std::mt19937_64 rng(5);
  const std::string pieces[] = {"un",
                                "aff",
                                "able",
                                "!",
                                " ",
                                "\n",
                                "[CLS",
                                "]",
                                "[SEP]",
                                "\xC3\xA9",
                                "\xE4\xB8\xAD",
                                "\xF0\x9F\xA5\xB0",
                                "\xE2\x80\x8B",
                                std::string(1, '\0'),
                                "\xFF",
                                "\xC3",
                                std::string(150, 'a')};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int parts = static_cast<int>(rng() % 12);
    for (int p = 0; p < parts; ++p) {
      if (rng() % 3 == 0) {
        text.push_back(static_cast<char>(rng() % 256));
      } else {
        text += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
      }
    }
    const std::vector<int32_t> ids = t->Encode(text);
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, t->vocab_size());
    }
    EXPECT_TRUE(t->Decode(ids).ok());
  }
}

TEST_F(WordPieceTokenizerTest, RefusesAVocabularyWithoutBertsSpecialTokens) {
  std::ofstream(path_) << "[PAD]\n[UNK]\n[CLS]\nhello\n";
  absl::StatusOr<WordPieceTokenizer> t = WordPieceTokenizer::FromVocabTxt(path_, {});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().ToString().find("no [SEP]"), std::string::npos) << t.status();
  EXPECT_EQ(WordPieceTokenizer::FromVocabTxt(path_ + ".missing", {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(WordPieceJsonTest, RefusesWhatItDoesNotRunNamingTheField) {
  const std::string vocab =
      R"("vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 5})";
  auto parse = [&](const std::string& rest) {
    return WordPieceTokenizer::ParseHuggingFaceJson(
        R"({"model": {"type": "WordPiece", )" + vocab + "}, " + rest + "}", "t.json");
  };
  EXPECT_TRUE(parse(R"("normalizer": {"type": "BertNormalizer"},
                       "pre_tokenizer": {"type": "BertPreTokenizer"})")
                  .ok());
  absl::Status s = parse(R"("normalizer": {"type": "NFKC"},
                            "pre_tokenizer": {"type": "BertPreTokenizer"})")
                       .status();
  EXPECT_NE(s.ToString().find("normalizer.type"), std::string::npos) << s;
  s = parse(R"("pre_tokenizer": {"type": "Whitespace"})").status();
  EXPECT_NE(s.ToString().find("pre_tokenizer.type"), std::string::npos) << s;
  s = parse(R"("pre_tokenizer": {"type": "BertPreTokenizer"},
               "added_tokens": [{"content": "a", "lstrip": true}])")
          .status();
  EXPECT_NE(s.ToString().find("added_tokens \"a\".lstrip"), std::string::npos) << s;
  s = WordPieceTokenizer::ParseHuggingFaceJson(R"({"model": {"type": "BPE"}})", "t.json").status();
  EXPECT_NE(s.ToString().find("model.type"), std::string::npos) << s;
  s = WordPieceTokenizer::ParseHuggingFaceJson(R"({"model": {"type": "WordPiece", "vocab": 3}})",
                                               "t.json")
          .status();
  EXPECT_NE(s.ToString().find("model.vocab"), std::string::npos) << s;
}

}  // namespace
}  // namespace mtrain
