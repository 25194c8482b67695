#include "data/preprocess.h"

#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/build_indexed_dataset.h"
#include "data/indexed_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_json_for_test.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

std::string Tmp(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string Write(const std::string& name, const std::string& content) {
  const std::string path = Tmp(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string JsonLine(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped.push_back('\\');
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped.push_back(c);
  }
  return absl::StrCat(R"({"id": 1, "text": ")", escaped, "\"}\n");
}

std::string Words(std::mt19937_64& rng, int n) {
  std::string text;
  for (int i = 0; i < n; ++i) absl::StrAppend(&text, i ? " " : "", "w", rng() % 50000);
  return text;
}

std::vector<std::vector<int32_t>> Documents(const std::string& prefix) {
  absl::StatusOr<std::unique_ptr<IndexedDataset>> data = IndexedDataset::Open(prefix);
  EXPECT_TRUE(data.ok()) << data.status();
  std::vector<std::vector<int32_t>> docs;
  if (!data.ok()) return docs;
  EXPECT_EQ((*data)->num_documents(), (*data)->num_sequences());
  for (int64_t i = 0; i < (*data)->num_sequences(); ++i) docs.push_back(*(*data)->Sequence(i));
  return docs;
}

// A byte-level tokenizer.json whose <|endoftext|> is id 256.
std::string TokenizerJson() {
  return Write("tokenizer.json", TokenizerJsonForTest({}, {{"<|endoftext|>", 256}}));
}

TEST(PreprocessTest, JsonlBecomesAnIndexedDatasetWithTheFiltersCounted) {
  std::mt19937_64 rng(3);
  std::vector<std::string> kept;
  std::string jsonl;
  for (int i = 0; i < 40; ++i) {
    kept.push_back(Words(rng, 60));
    jsonl += JsonLine(kept.back());
  }
  jsonl += JsonLine("short");  // fewer than min_tokens
  jsonl += JsonLine(kept[3]);  // an exact duplicate
  std::string near = kept[5];
  near.replace(near.find(' '), 1, " CHANGED ");  // one word added: Jaccard ~0.9
  jsonl += JsonLine(near);
  jsonl += "\n";  // blank lines are skipped
  PreprocessOptions options;
  options.inputs = {Write("in.jsonl", jsonl)};
  options.output_prefix = Tmp("out");
  options.tokenizer = PreprocessTokenizer::kHuggingFaceJson;
  options.tokenizer_json = TokenizerJson();
  options.append_eod = true;
  options.min_tokens = 50;
  std::tie(options.minhash.bands, options.minhash.rows) = OptimalBandsAndRows(0.7, 128);
  options.dropped_log = Tmp("dropped.tsv");
  absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(ReadAll(Tmp("dropped.tsv")),
            absl::StrCat("40\t", Tmp("in.jsonl"), ":41\ttoo_short\n41\t", Tmp("in.jsonl"),
                         ":42\texact_duplicate\n42\t", Tmp("in.jsonl"), ":43\tnear_duplicate\n"));
  EXPECT_EQ(summary->progress.documents, 43);
  EXPECT_EQ(summary->progress.kept, 40);
  EXPECT_EQ(summary->too_short, 1);
  EXPECT_EQ(summary->exact_duplicates, 1);
  EXPECT_EQ(summary->near_duplicates, 1);
  EXPECT_EQ(summary->dtype, IndexedDtype::kUint16);
  ASSERT_EQ(summary->outputs, std::vector<std::string>{Tmp("out_text_document")});
  // Every kept document, in input order, as the tokenizer encodes it, then the EOD id.
  absl::StatusOr<BpeTokenizer> tokenizer =
      BpeTokenizer::FromHuggingFaceJson(options.tokenizer_json);
  ASSERT_TRUE(tokenizer.ok());
  const std::vector<std::vector<int32_t>> docs = Documents(Tmp("out_text_document"));
  ASSERT_EQ(docs.size(), kept.size());
  int64_t tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<int32_t> expected = tokenizer->Encode(kept[d]);
    expected.push_back(256);
    EXPECT_EQ(docs[d], expected) << "document " << d;
    tokens += static_cast<int64_t>(docs[d].size());
  }
  EXPECT_EQ(summary->tokens_written, tokens);
}

TEST(PreprocessTest, TheOutputIsTheSameForAnyNumberOfWorkersAndBatches) {
  std::mt19937_64 rng(5);
  std::string jsonl;
  for (int i = 0; i < 300; ++i) {
    const std::string text = Words(rng, 20 + static_cast<int>(rng() % 80));
    jsonl += JsonLine(text);
    if (i % 7 == 0) jsonl += JsonLine(text);
  }
  const std::string input = Write("many.jsonl", jsonl);
  std::string first;
  for (const auto& [workers, batch] :
       std::vector<std::pair<int, size_t>>{{1, 1 << 20}, {3, 700}, {2, 5000}}) {
    PreprocessOptions options;
    options.inputs = {input};
    options.output_prefix = Tmp(absl::StrCat("w", workers));
    options.tokenizer = PreprocessTokenizer::kByte;
    options.workers = workers;
    options.batch_bytes = batch;
    options.min_tokens = 100;
    absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options);
    ASSERT_TRUE(summary.ok()) << summary.status();
    const std::string bytes = ReadAll(options.output_prefix + "_text_document.bin") +
                              ReadAll(options.output_prefix + "_text_document.idx");
    if (first.empty()) {
      first = bytes;
      EXPECT_GT(summary->exact_duplicates, 0);
    } else {
      EXPECT_TRUE(bytes == first) << workers << " workers, batches of " << batch << " bytes";
    }
  }
}

// `text` written to `name`, read as a text file with the byte tokenizer and no filters.
PreprocessOptions KeepEveryTextDocument(const std::string& name, const std::string& text,
                                        const std::string& prefix) {
  PreprocessOptions options;
  options.inputs = {Write(name, text)};
  options.jsonl = false;
  options.output_prefix = Tmp(prefix);
  options.tokenizer = PreprocessTokenizer::kByte;
  options.min_tokens = 0;
  options.exact_dedup = false;
  options.near_dedup = false;
  return options;
}

TEST(PreprocessTest, TextFilesAreCutIntoDocumentsAcrossReadChunks) {
  // Over 64 KiB (one read) of blank-line-separated paragraphs, some spanning a chunk edge.
  std::mt19937_64 rng(9);
  // The file ends without a separator, and some documents hold no separator for several
  // reads (one document spans more than a 64 KiB read).
  std::string text;
  while (text.size() < 200000) absl::StrAppend(&text, Words(rng, 1 + rng() % 300), "\n\n");
  absl::StrAppend(&text, Words(rng, 20000), "\n\n", Words(rng, 50), "\n\n\n", Words(rng, 9));
  PreprocessOptions options = KeepEveryTextDocument("in.txt", text, "text");
  options.batch_bytes = 10000;
  absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<absl::string_view> expected = SplitIntoDocuments(text, "\n\n");
  const std::vector<std::vector<int32_t>> docs = Documents(Tmp("text_text_document"));
  ASSERT_EQ(docs.size(), expected.size());
  for (size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(std::string(docs[d].begin(), docs[d].end()), std::string(expected[d])) << d;
  }
}

// A read that ends right after a separator, then a last document with none: the end of
// the file must still cut there.
TEST(PreprocessTest, ASeparatorAtAReadsEndStillCutsTheLastDocument) {
  const std::string text = std::string(65534, 'x') + "\n\n" + "the tail without a separator";
  const PreprocessOptions options = KeepEveryTextDocument("edge.txt", text, "edge");
  absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<std::vector<int32_t>> docs = Documents(Tmp("edge_text_document"));
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(std::string(docs[1].begin(), docs[1].end()), "the tail without a separator");
}

TEST(PreprocessTest, BadInputIsNamedAndLeavesNoOutput) {
  PreprocessOptions options;
  options.inputs = {Write("bad.jsonl", JsonLine("fine") + "{not json\n")};
  options.output_prefix = Tmp("bad");
  options.tokenizer = PreprocessTokenizer::kByte;
  options.min_tokens = 0;
  absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(summary.status().message()), HasSubstr("bad.jsonl:2: not a JSON object"));
  EXPECT_NE(::access((Tmp("bad") + "_text_document.bin").c_str(), F_OK), 0);

  options.inputs = {Write("nokey.jsonl", R"({"body": "x"})"
                                         "\n")};
  summary = RunPreprocess(options);
  EXPECT_THAT(std::string(summary.status().message()),
              HasSubstr("nokey.jsonl:1: no string \"text\""));

  options.inputs = {Tmp("missing.jsonl")};
  EXPECT_EQ(RunPreprocess(options).status().code(), absl::StatusCode::kNotFound);

  options.inputs = {Write("ok.jsonl", JsonLine("x"))};
  options.append_eod = true;  // the byte tokenizer has no <|endoftext|>
  EXPECT_THAT(std::string(RunPreprocess(options).status().message()), HasSubstr("--append-eod"));
}

TEST(PreprocessTest, LargeVocabulariesAreWrittenAsInt32) {
  PreprocessOptions options;
  options.inputs = {Write("big.jsonl", JsonLine("abc<|endoftext|>"))};
  options.output_prefix = Tmp("big");
  options.tokenizer = PreprocessTokenizer::kHuggingFaceJson;
  options.tokenizer_json = Write("big.json", TokenizerJsonForTest({}, {{"<|endoftext|>", 70000}}));
  options.min_tokens = 0;
  absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->dtype, IndexedDtype::kInt32);
  EXPECT_EQ(Documents(Tmp("big_text_document")),
            (std::vector<std::vector<int32_t>>{{'a', 'b', 'c', 70000}}));
}

}  // namespace
}  // namespace mtrain

namespace mtrain {
namespace {

// --split-sentences with BERT's WordPiece (issue 35): each document's sentences are its
// sequences, tokenized as WordPieceTokenizer does; a tokenizer.json with a WordPiece model
// works the same as its vocab.txt.
TEST(PreprocessTest, SplitSentencesWritesEachDocumentAsItsSentences) {
  std::string vocab;
  for (const char* token : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", ".",
                            "dr", "who", "came", "!", "it", "rained", "##s", "dog"}) {
    absl::StrAppend(&vocab, token, "\n");
  }
  const std::string vocab_path = Write("bert_vocab.txt", vocab);
  const std::string input =
      Write("sentences.jsonl", JsonLine("The cat sat. Dr. Who came! It rained.") +
                                   JsonLine("The dogs sat.\n\nThe cat came") + JsonLine("   ") +
                                   JsonLine("Cats sat."));
  absl::StatusOr<WordPieceTokenizer> wordpiece = WordPieceTokenizer::FromVocabTxt(vocab_path, {});
  ASSERT_TRUE(wordpiece.ok()) << wordpiece.status();
  const std::vector<std::vector<std::vector<int32_t>>> want = {
      {wordpiece->Encode("The cat sat."), wordpiece->Encode("Dr. Who came!"),
       wordpiece->Encode("It rained.")},
      {wordpiece->Encode("The dogs sat."), wordpiece->Encode("The cat came")},
      {},
      {wordpiece->Encode("Cats sat.")}};
  EXPECT_EQ(want[1][0], (std::vector<int32_t>{5, 16, 15, 7, 8}));  // the dog ##s sat .

  for (int workers : {1, 3}) {
    PreprocessOptions options;
    options.inputs = {input};
    options.output_prefix = Tmp(absl::StrCat("sentences", workers));
    options.tokenizer = PreprocessTokenizer::kBertVocab;
    options.vocab_file = vocab_path;
    options.split_sentences = true;
    options.min_tokens = 0;
    options.exact_dedup = false;
    options.near_dedup = false;
    options.workers = workers;
    options.batch_bytes = 40;  // several batches
    absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options, nullptr);
    ASSERT_TRUE(summary.ok()) << summary.status();
    ASSERT_EQ(summary->outputs.size(), 1u);
    EXPECT_THAT(summary->outputs[0], HasSubstr("_text_sentence"));
    absl::StatusOr<std::unique_ptr<IndexedDataset>> data =
        IndexedDataset::Open(summary->outputs[0]);
    ASSERT_TRUE(data.ok()) << data.status();
    ASSERT_EQ((*data)->num_documents(), 4);
    for (int d = 0; d < 4; ++d) {
      absl::StatusOr<DocumentRange> doc = (*data)->document(d);
      ASSERT_TRUE(doc.ok());
      std::vector<std::vector<int32_t>> got;
      for (int64_t s = doc->begin; s < doc->end; ++s) got.push_back(*(*data)->Sequence(s));
      EXPECT_EQ(got, want[d]) << "document " << d << " with " << workers << " workers";
    }
  }

  // The same vocabulary as a tokenizer.json (the file says WordPiece): the same sentences.
  std::string json = R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {)";
  int id = 0;
  for (absl::string_view token : absl::StrSplit(vocab, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&json, id ? ", " : "", "\"", token, "\": ", id);
    ++id;
  }
  absl::StrAppend(&json, R"(}}, "normalizer": {"type": "BertNormalizer"},
                            "pre_tokenizer": {"type": "BertPreTokenizer"}})");
  PreprocessOptions options;
  options.inputs = {input};
  options.output_prefix = Tmp("sentences_json");
  options.tokenizer = PreprocessTokenizer::kHuggingFaceJson;
  options.tokenizer_json = Write("wordpiece.json", json);
  options.split_sentences = true;
  options.min_tokens = 0;
  options.exact_dedup = false;
  options.near_dedup = false;
  absl::StatusOr<PreprocessSummary> summary = RunPreprocess(options, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(ReadAll(summary->outputs[0] + ".bin"), ReadAll(Tmp("sentences1_text_sentence.bin")));
  EXPECT_EQ(ReadAll(summary->outputs[0] + ".idx"), ReadAll(Tmp("sentences1_text_sentence.idx")));
}

}  // namespace
}  // namespace mtrain
