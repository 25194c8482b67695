#include "data/data_source.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/indexed_dataset_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_json_for_test.h"

namespace mtrain {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A fresh directory under the test's temporary directory.
std::string MakeDir(const std::string& name) {
  const fs::path dir = fs::path(TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& contents) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

TEST(DataSourceTest, DefaultSpecOpensTheShippedCorpus) {
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset = OpenDataset(DataSpec());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(absl::EndsWith((*dataset)->source(), "tests/data/shakespeare.txt"))
      << (*dataset)->source();
  EXPECT_EQ((*dataset)->size(), static_cast<int64_t>(fs::file_size((*dataset)->source())));
  EXPECT_GT((*dataset)->size(), 1000000);
  std::vector<int32_t> head(6);
  ASSERT_TRUE((*dataset)->Read(0, 6, head.data()).ok());
  EXPECT_THAT(head, ElementsAre('H', 'A', 'M', 'L', 'E', 'T'));
}

TEST(DataSourceTest, FindsTheCorpusFromTheExecutableAlone) {
  // Neither the working directory nor the runfiles variables: only /proc/self/exe, as for
  // a binary started from anywhere. bazel puts the test's runfiles tree beside it.
  CorpusSearchContext context;
  context.executable = CurrentCorpusSearchContext().executable;
  ASSERT_FALSE(context.executable.empty());
  absl::StatusOr<std::string> found = FindDefaultCorpus(context);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(absl::EndsWith(*found, "tests/data/shakespeare.txt")) << *found;
}

TEST(DataSourceTest, FindsTheCorpusThroughTheRunfilesVariables) {
  const CorpusSearchContext current = CurrentCorpusSearchContext();
  ASSERT_FALSE(current.test_srcdir.empty()) << "bazel test sets TEST_SRCDIR";
  CorpusSearchContext context;
  context.test_srcdir = current.test_srcdir;
  absl::StatusOr<std::string> found = FindDefaultCorpus(context);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, current.test_srcdir + "/mtrain/tests/data/shakespeare.txt");
}

TEST(DataSourceTest, CandidatesFollowTheDocumentedOrder) {
  CorpusSearchContext context;
  context.data_dir = "/data";
  context.cwd = "/home/u/repo";
  context.runfiles_dir = "/rf";
  context.test_srcdir = "/src/";
  context.executable = "/home/u/repo/bin/worker";
  EXPECT_THAT(DefaultCorpusCandidates(context),
              ElementsAre("/data/shakespeare.txt",                    //
                          "/home/u/repo/tests/data/shakespeare.txt",  //
                          "/home/u/tests/data/shakespeare.txt",       //
                          "/home/tests/data/shakespeare.txt",         //
                          "/tests/data/shakespeare.txt",              //
                          "/rf/mtrain/tests/data/shakespeare.txt",    //
                          "/src/mtrain/tests/data/shakespeare.txt",   //
                          "/home/u/repo/bin/worker.runfiles/mtrain/tests/data/shakespeare.txt",
                          "/home/u/repo/bin/tests/data/shakespeare.txt"));  // the rest: dups
}

TEST(DataSourceTest, SearchOrderDecidesBetweenCopies) {
  const std::string root = MakeDir("search_order");
  WriteFile(root + "/repo/tests/data/shakespeare.txt", "repo");
  WriteFile(root + "/data/shakespeare.txt", "data dir");
  WriteFile(root + "/exe/prog.runfiles/mtrain/tests/data/shakespeare.txt", "runfiles");
  fs::create_directories(root + "/repo/a/b");

  CorpusSearchContext context;
  context.cwd = root + "/repo/a/b";  // found two levels up
  context.executable = root + "/exe/prog";
  EXPECT_EQ(FindDefaultCorpus(context).value_or(""), root + "/repo/tests/data/shakespeare.txt");
  context.data_dir = root + "/data";  // MTRAIN_DATA_DIR comes first
  EXPECT_EQ(FindDefaultCorpus(context).value_or(""), root + "/data/shakespeare.txt");
  context.data_dir = root + "/nothing_here";  // a wrong one falls through
  context.cwd = "/";
  EXPECT_EQ(FindDefaultCorpus(context).value_or(""),
            root + "/exe/prog.runfiles/mtrain/tests/data/shakespeare.txt");
}

TEST(DataSourceTest, MtrainDataDirEnvironmentVariableIsHonoured) {
  const std::string dir = MakeDir("env_data_dir");
  WriteFile(dir + "/shakespeare.txt", "hello");
  ASSERT_EQ(setenv("MTRAIN_DATA_DIR", dir.c_str(), 1), 0);
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset = OpenDataset(DataSpec());
  unsetenv("MTRAIN_DATA_DIR");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->source(), dir + "/shakespeare.txt");
  EXPECT_EQ((*dataset)->size(), 5);
}

TEST(DataSourceTest, MissingCorpusIsNotFoundListingThePlacesTried) {
  const std::string root = MakeDir("no_corpus");
  CorpusSearchContext context;
  context.data_dir = root + "/data";
  context.cwd = root;
  context.executable = root + "/bin/prog";
  absl::StatusOr<std::string> found = FindDefaultCorpus(context);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  for (const std::string& candidate : DefaultCorpusCandidates(context)) {
    EXPECT_THAT(found.status().message(), HasSubstr(candidate));
  }
  EXPECT_THAT(found.status().message(), HasSubstr("MTRAIN_DATA_DIR"));
}

TEST(DataSourceTest, MissingTextPathIsNotFoundNamingTheField) {
  DataSpec spec;
  spec.set_path(TempDir() + "/does_not_exist.txt");
  spec.set_format(DATA_FORMAT_TEXT);
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset = OpenDataset(spec);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), AllOf(HasSubstr("data.path"), HasSubstr(spec.path())));
}

TEST(DataSourceTest, OpensIndexedDatasets) {
  const std::string prefix = MakeDir("indexed") + "/corpus";
  ASSERT_TRUE(WriteIndexedDataset(prefix, {{1, 2, 3}, {4}}).ok());
  DataSpec spec;
  spec.set_path(prefix);
  spec.set_format(DATA_FORMAT_MMIDIDX);
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset = OpenDataset(spec);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->size(), 4);
  std::vector<int32_t> tokens(4);
  ASSERT_TRUE((*dataset)->Read(0, 4, tokens.data()).ok());
  EXPECT_THAT(tokens, ElementsAre(1, 2, 3, 4));

  spec.set_path(prefix + "_missing");
  EXPECT_EQ(OpenDataset(spec).status().code(), absl::StatusCode::kNotFound);
  spec.clear_path();
  absl::Status no_path = OpenDataset(spec).status();
  EXPECT_EQ(no_path.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_path.message(), HasSubstr("data.path"));
}

TEST(DataSourceTest, RejectsUnknownFormatsAndTokenizers) {
  DataSpec spec;
  spec.set_format(static_cast<DataFormat>(9));
  absl::Status format = OpenDataset(spec).status();
  EXPECT_EQ(format.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(format.message(), HasSubstr("data.format"));
  spec.set_format(DATA_FORMAT_TEXT);
  spec.set_tokenizer(static_cast<Tokenizer>(5));
  absl::Status tokenizer = OpenDataset(spec).status();
  EXPECT_EQ(tokenizer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokenizer.message(), HasSubstr("data.tokenizer"));
}

// data.tokenizer: a text file tokenized with a BPE on load, its ids the tokenizer's; a
// tokenizer file that does not load is named.
TEST(DataSourceTest, TextIsTokenizedWithTheSpecsBpe) {
  const std::string dir = MakeDir("bpe");
  const std::string text = "hello hello world<|endoftext|>hello";
  std::ofstream(dir + "/text.txt") << text;
  std::ofstream(dir + "/tokenizer.json") << TokenizerJsonForTest(
      {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}, {{"<|endoftext|>", 300}});
  DataSpec spec;
  spec.set_path(dir + "/text.txt");
  spec.set_tokenizer(TOKENIZER_HF_JSON);
  spec.set_tokenizer_json(dir + "/tokenizer.json");
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset = OpenDataset(spec);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  absl::StatusOr<BpeTokenizer> bpe = BpeTokenizer::FromHuggingFaceJson(dir + "/tokenizer.json");
  ASSERT_TRUE(bpe.ok());
  const std::vector<int32_t> expected = bpe->Encode(text);
  ASSERT_EQ((*dataset)->size(), static_cast<int64_t>(expected.size()));
  std::vector<int32_t> got(expected.size());
  ASSERT_TRUE((*dataset)->Read(0, static_cast<int>(got.size()), got.data()).ok());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got[0], 259);  // "hello"
  EXPECT_EQ((*dataset)->vocab_upper_bound(), 301);
  EXPECT_THAT(CheckTokensFitVocab(**dataset, 256).message(), HasSubstr("token id 259"));

  spec.set_tokenizer_json(dir + "/text.txt");  // not JSON
  absl::Status bad = OpenDataset(spec).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), AllOf(HasSubstr("data.tokenizer_json"), HasSubstr("not JSON")));
  spec.set_tokenizer(TOKENIZER_GPT2_BPE);
  spec.set_vocab_file(dir + "/missing.json");
  spec.set_merge_file(dir + "/missing.txt");
  EXPECT_THAT(OpenDataset(spec).status().message(), HasSubstr("data.vocab_file"));
}

TEST(DataSourceTest, ChecksTokenIdsAgainstTheVocabulary) {
  const std::string prefix = MakeDir("vocab") + "/wide";
  ASSERT_TRUE(WriteIndexedDataset(prefix, {{1, 2}, {70000, 3}}).ok());
  DataSpec spec;
  spec.set_path(prefix);
  spec.set_format(DATA_FORMAT_MMIDIDX);
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset = OpenDataset(spec);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(CheckTokensFitVocab(**dataset, 70001).ok());
  absl::Status too_small = CheckTokensFitVocab(**dataset, 65536);
  EXPECT_EQ(too_small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_small.message(),
              AllOf(HasSubstr("data.path"), HasSubstr(prefix), HasSubstr("model.vocab_size"),
                    HasSubstr("token id 70000 at token offset 2"), HasSubstr("65536")));
  EXPECT_EQ(CheckTokensFitVocab(**dataset, 0).code(), absl::StatusCode::kInvalidArgument);

  const std::string negative = MakeDir("vocab_negative") + "/negative";
  ASSERT_TRUE(WriteIndexedDataset(negative, {{5, -1}}).ok());
  spec.set_path(negative);
  dataset = OpenDataset(spec);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(CheckTokensFitVocab(**dataset, 256).message(), HasSubstr("token id -1"));
}

TEST(DataSourceTest, ByteCorpusFitsTheDefaultVocabulary) {
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset = OpenDataset(DataSpec());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(CheckTokensFitVocab(**dataset, 256).ok());
  // Below 256 the ids are actually scanned: the corpus is ASCII ('~' is 126 at most) ...
  EXPECT_TRUE(CheckTokensFitVocab(**dataset, 128).ok());
  // ... and lowercase letters reach 'z' (122).
  absl::Status status = CheckTokensFitVocab(**dataset, 100);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.vocab_size (100)"));
}

TEST(DataSourceTest, SpecTokenizerEncodesAndDecodesWithTheSpecsTokenizer) {
  const std::string dir = MakeDir("codec");
  std::ofstream(dir + "/tokenizer.json") << TokenizerJsonForTest(
      {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}, {{"<|endoftext|>", 300}});
  DataSpec spec;
  spec.set_tokenizer(TOKENIZER_HF_JSON);
  spec.set_tokenizer_json(dir + "/tokenizer.json");
  absl::StatusOr<SpecTokenizer> bpe = OpenSpecTokenizer(spec);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  const std::vector<int32_t> ids = bpe->encode("hello world<|endoftext|>");
  EXPECT_EQ(ids.front(), 259);  // "hello", one token
  EXPECT_EQ(ids.back(), 300);
  EXPECT_EQ(bpe->decode(ids), "hello world<|endoftext|>");
  EXPECT_EQ(bpe->end_of_document, 300);
  // The byte tokenizer: one id per byte, no end-of-document token, ids past a byte shown
  // as U+FFFD.
  absl::StatusOr<SpecTokenizer> bytes = OpenSpecTokenizer(DataSpec());
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->encode("ab"), (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(bytes->decode({'a', 299, 'b'}),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_FALSE(bytes->end_of_document.has_value());
  spec.set_tokenizer_json(dir + "/missing.json");
  EXPECT_THAT(OpenSpecTokenizer(spec).status().message(), HasSubstr("data.tokenizer_json"));
}

JobSpec SplitSpec(const std::string& split, int eval_interval) {
  JobSpec spec;
  spec.mutable_model()->set_seq_length(4);
  spec.mutable_model()->set_vocab_size(256);
  spec.mutable_parallel()->set_global_batch_size(2);
  spec.mutable_train()->set_steps(100);
  spec.mutable_train()->set_seed(3);
  spec.mutable_train()->set_eval_interval(eval_interval);
  spec.mutable_data()->set_split(split);
  return spec;
}

std::vector<int32_t> Sample(SampleSource& source, int64_t index) {
  std::vector<int32_t> tokens(source.seq_length() + 1);
  EXPECT_TRUE(source.Fill(index, absl::MakeSpan(tokens)).ok());
  return tokens;
}

TEST(DataSourceTest, TextIsSplitByTokenRanges) {
  const std::string path = MakeDir("text-split") + "/t.txt";
  WriteFile(path, std::string(100, 'a') + std::string(100, 'b'));  // 200 tokens
  JobSpec spec = SplitSpec("1,1", 1);
  spec.mutable_data()->set_path(path);
  absl::StatusOr<SplitSamples> samples = OpenSplitSamples(spec);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_NE(samples->validation, nullptr);
  for (int64_t k = 0; k < 50; ++k) {
    for (int32_t token : Sample(*samples->train, k)) EXPECT_EQ(token, 'a');
    for (int32_t token : Sample(*samples->validation, k)) EXPECT_EQ(token, 'b');
  }
  EXPECT_THAT(samples->validation->Describe(), HasSubstr("validation tokens [100, 200)"));
  // No evaluation asked for: no validation samples built.
  spec.mutable_train()->set_eval_interval(0);
  samples = OpenSplitSamples(spec);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->validation, nullptr);
}

TEST(DataSourceTest, IndexedDatasetsAreSplitByDocumentsAndBlended) {
  const std::string dir = MakeDir("indexed-split");
  // Documents of ten tokens; a's tokens are 1..99 by document, b's 101..199.
  std::vector<std::vector<int32_t>> a, b;
  for (int d = 0; d < 10; ++d) {
    a.emplace_back(10, 1 + d);
    b.emplace_back(10, 101 + d);
  }
  ASSERT_TRUE(WriteIndexedDataset(dir + "/a", a).ok());
  ASSERT_TRUE(WriteIndexedDataset(dir + "/b", b).ok());
  JobSpec spec = SplitSpec("8,2", 1);
  spec.mutable_data()->set_format(DATA_FORMAT_MMIDIDX);
  spec.mutable_data()->set_path(dir + "/a");
  absl::StatusOr<SplitSamples> one = OpenSplitSamples(spec);
  ASSERT_TRUE(one.ok()) << one.status();
  for (int64_t k = 0; k < 40; ++k) {
    for (int32_t token : Sample(*one->train, k)) EXPECT_LE(token, 8) << k;  // documents 0-7
    for (int32_t token : Sample(*one->validation, k)) EXPECT_GE(token, 9) << k;
  }

  spec.mutable_data()->clear_path();
  WeightedDataPath* first = spec.mutable_data()->add_paths();
  first->set_path(dir + "/a");
  first->set_weight(0.25);
  WeightedDataPath* second = spec.mutable_data()->add_paths();
  second->set_path(dir + "/b");
  second->set_weight(0.75);
  absl::StatusOr<SplitSamples> blend = OpenSplitSamples(spec);
  ASSERT_TRUE(blend.ok()) << blend.status();
  int from_b = 0;
  for (int64_t k = 0; k < 400; ++k) {
    const std::vector<int32_t> tokens = Sample(*blend->train, k);
    from_b += tokens[0] > 100;
    for (int32_t token : tokens) EXPECT_TRUE(token <= 8 || (token > 100 && token <= 108)) << k;
  }
  EXPECT_EQ(from_b, 300);  // Megatron's order keeps the counts on the weights
  EXPECT_THAT(blend->train->Describe(), HasSubstr(dir + "/b"));
  // 100 steps of 2: a quarter from a, ceil(ceil(200 * w) * 1.005) as Megatron's sizes.
  EXPECT_EQ(blend->blend_note, absl::StrCat("blend: 200 train samples: ", dir,
                                            "/a 50 (Megatron "
                                            "builds 51), ",
                                            dir, "/b 150 (Megatron builds 151)"));
}

TEST(DataSourceTest, SplitsTooSmallAndBadIdsNameTheField) {
  const std::string dir = MakeDir("indexed-small");
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 10; ++d) docs.emplace_back(3, 1);
  ASSERT_TRUE(WriteIndexedDataset(dir + "/a", docs).ok());
  ASSERT_TRUE(WriteIndexedDataset(dir + "/big", {{1, 2, 300, 4, 5, 6, 7}}).ok());
  JobSpec spec = SplitSpec("9,1", 1);
  spec.mutable_data()->set_format(DATA_FORMAT_MMIDIDX);
  spec.mutable_data()->set_path(dir + "/a");
  // The validation split is one document of 3 tokens: fewer than seq_length + 1 = 5.
  absl::Status small = OpenSplitSamples(spec).status();
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.message(), AllOf(HasSubstr("data.split: the validation split of"),
                                     HasSubstr("fewer than model.seq_length + 1 = 5")));
  // An id past the vocabulary in one dataset of a blend names data.paths.
  spec.mutable_data()->clear_path();
  spec.mutable_train()->set_eval_interval(0);
  for (const char* name : {"/a", "/big"}) {
    WeightedDataPath* entry = spec.mutable_data()->add_paths();
    entry->set_path(dir + name);
    entry->set_weight(1);
  }
  absl::Status ids = OpenSplitSamples(spec).status();
  EXPECT_EQ(ids.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.message(), AllOf(HasSubstr("data.paths: "), HasSubstr("token id 300"),
                                   HasSubstr("model.vocab_size (256)")));
}

}  // namespace
}  // namespace mtrain
