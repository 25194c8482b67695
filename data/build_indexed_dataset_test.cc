// The text -> MMIDIDX conversion: the document rule, the library function on the shipped
// corpus, and the build_indexed_dataset binary run as a subprocess.
#include "data/build_indexed_dataset.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/byte_tokenizer.h"
#include "data/indexed_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kCorpus[] = "tests/data/shakespeare.txt";
constexpr char kTool[] = "data/build_indexed_dataset";

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string TempPath(const std::string& name) { return absl::StrCat(TestTempDir(), "/", name); }

// Every token of the dataset at `prefix`, decoded back to bytes.
std::string DecodeAll(const IndexedDataset& dataset) {
  std::vector<int32_t> tokens(dataset.size());
  EXPECT_TRUE(dataset.Read(0, static_cast<int>(tokens.size()), tokens.data()).ok());
  absl::StatusOr<std::string> text = ByteTokenizer::Decode(tokens);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.value_or("");
}

TEST(SplitIntoDocumentsTest, CutsAfterRunsOfTheSeparator) {
  EXPECT_THAT(SplitIntoDocuments("a\n\nb\n\n\n\nc\n", "\n\n"),
              ElementsAre("a\n\n", "b\n\n\n\n", "c\n"));
  // An odd newline left after a run starts the next document; nothing is dropped.
  EXPECT_THAT(SplitIntoDocuments("a\n\n\nb", "\n\n"), ElementsAre("a\n\n", "\nb"));
  EXPECT_THAT(SplitIntoDocuments("\n\nx", "\n\n"), ElementsAre("\n\n", "x"));
  EXPECT_THAT(SplitIntoDocuments("no separator", "\n\n"), ElementsAre("no separator"));
  EXPECT_THAT(SplitIntoDocuments("a|b||c", "|"), ElementsAre("a|", "b||", "c"));
  EXPECT_THAT(SplitIntoDocuments("a\n\nb", ""), ElementsAre("a\n\nb"));
  EXPECT_TRUE(SplitIntoDocuments("", "\n\n").empty());
}

TEST(SplitIntoDocumentsTest, DocumentsOfTheCorpusConcatenateToTheFile) {
  const std::string text = ReadWholeFile(kCorpus);
  ASSERT_FALSE(text.empty());
  const std::vector<absl::string_view> documents = SplitIntoDocuments(text, "\n\n");
  EXPECT_GT(documents.size(), 1000u);
  for (absl::string_view document : documents) ASSERT_FALSE(document.empty());
  EXPECT_EQ(absl::StrJoin(documents, ""), text);
}

TEST(BuildIndexedDatasetTest, ConvertsTheCorpusLosslessly) {
  const std::string text = ReadWholeFile(kCorpus);
  const std::string prefix = TempPath("corpus_lib");
  absl::StatusOr<BuildIndexedDatasetSummary> summary =
      BuildIndexedDatasetFromText(kCorpus, prefix, kDefaultDocumentSeparator);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<absl::string_view> documents = SplitIntoDocuments(text, "\n\n");
  EXPECT_EQ(summary->documents, static_cast<int64_t>(documents.size()));
  EXPECT_EQ(summary->tokens, static_cast<int64_t>(text.size()));
  EXPECT_EQ(summary->dtype, IndexedDtype::kUint16);

  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->dtype(), IndexedDtype::kUint16);
  EXPECT_EQ((*dataset)->num_documents(), static_cast<int64_t>(documents.size()));
  EXPECT_EQ((*dataset)->num_sequences(), static_cast<int64_t>(documents.size()));
  EXPECT_EQ(DecodeAll(**dataset), text);
  // Spot-check that sequences are the documents, not just the right bytes overall.
  for (int64_t i : {int64_t{0}, int64_t{1}, static_cast<int64_t>(documents.size()) - 1}) {
    absl::StatusOr<std::vector<int32_t>> sequence = (*dataset)->Sequence(i);
    ASSERT_TRUE(sequence.ok()) << sequence.status();
    EXPECT_EQ(ByteTokenizer::Decode(*sequence).value_or(""), documents[i]);
  }
}

TEST(BuildIndexedDatasetTest, RejectsMissingAndEmptyInputs) {
  const std::string missing = TempPath("missing_input.txt");
  absl::StatusOr<BuildIndexedDatasetSummary> summary =
      BuildIndexedDatasetFromText(missing, TempPath("never"), "\n\n");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(summary.status().message(), HasSubstr(missing));

  const std::string empty = TempPath("empty_input.txt");
  std::ofstream(empty).close();
  summary = BuildIndexedDatasetFromText(empty, TempPath("never"), "\n\n");
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr(empty));
  EXPECT_FALSE(std::ifstream(TempPath("never.idx")).good());
}

// Runs the tool; returns {exit code, output}.
std::pair<int, std::string> RunTool(const std::vector<std::string>& args,
                                    const std::string& log_name) {
  std::vector<std::string> argv = {kTool};
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = ChildProcess::Start(argv, TempPath(log_name));
  if (!child.ok()) return {-1, child.status().ToString()};
  absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(60));
  return {code.ok() ? *code : -1, (*child)->Log()};
}

TEST(BuildIndexedDatasetToolTest, WritesADatasetThatReadsBackToTheText) {
  const std::string text = ReadWholeFile(kCorpus);
  const std::string prefix = TempPath("corpus_tool");
  auto [code, output] =
      RunTool({absl::StrCat("--input=", kCorpus), "--output_prefix=" + prefix}, "tool_default.log");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr(absl::StrCat(SplitIntoDocuments(text, "\n\n").size(),
                                             " documents, ", text.size(), " tokens")));
  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(DecodeAll(**dataset), text);
  EXPECT_GT((*dataset)->num_documents(), 1000);
}

TEST(BuildIndexedDatasetToolTest, SeparatorFlagTakesEscapesAndEmptyMeansOneDocument) {
  const std::string prefix = TempPath("corpus_one_doc");
  auto [code, output] = RunTool(
      {absl::StrCat("--input=", kCorpus), "--output_prefix=" + prefix, "--document_separator="},
      "tool_one_doc.log");
  ASSERT_EQ(code, 0) << output;
  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->num_documents(), 1);
  EXPECT_EQ(DecodeAll(**dataset), ReadWholeFile(kCorpus));

  // '\n' written as backslash-n on the command line: every line its own document.
  const std::string lines = TempPath("lines.txt");
  std::ofstream(lines) << "one\ntwo\nthree";
  auto [lines_code, lines_output] = RunTool(
      {"--input=" + lines, "--output_prefix=" + TempPath("lines"), "--document_separator=\\n"},
      "tool_lines.log");
  ASSERT_EQ(lines_code, 0) << lines_output;
  dataset = IndexedDataset::Open(TempPath("lines"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->num_documents(), 3);
}

TEST(BuildIndexedDatasetToolTest, FailsWithTheReasonForAMissingInput) {
  const std::string missing = TempPath("no_such_input.txt");
  auto [code, output] =
      RunTool({"--input=" + missing, "--output_prefix=" + TempPath("x")}, "tool_missing.log");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(output, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(output, HasSubstr(missing));
  auto [usage_code, usage_output] = RunTool({}, "tool_usage.log");
  EXPECT_EQ(usage_code, 1);
  EXPECT_THAT(usage_output, HasSubstr("--input"));
}

}  // namespace
}  // namespace mtrain
