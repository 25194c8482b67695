#include "data/text_dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Under `bazel test` the working directory is the runfiles root, where the data dependency
// //tests/data:corpus appears at its source path.
constexpr char kCorpus[] = "tests/data/shakespeare.txt";

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteWholeFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

TEST(TextDatasetTest, ReadsTheShippedCorpusByteForByte) {
  const std::string text = ReadWholeFile(kCorpus);
  ASSERT_GT(text.size(), 1000000u) << "the corpus is missing from the runfiles";
  absl::StatusOr<std::unique_ptr<TextDataset>> dataset = TextDataset::Open(kCorpus);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->size(), static_cast<int64_t>(text.size()));
  EXPECT_EQ((*dataset)->source(), kCorpus);
  EXPECT_EQ((*dataset)->vocab_upper_bound(), 256);

  std::vector<int32_t> all(text.size());
  ASSERT_TRUE((*dataset)->Read(0, static_cast<int>(all.size()), all.data()).ok());
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_EQ(all[i], static_cast<unsigned char>(text[i])) << "token " << i;
  }
  // A window in the middle, to check Read honours its offset.
  std::vector<int32_t> window(100);
  const int64_t offset = static_cast<int64_t>(text.size()) / 2;
  ASSERT_TRUE((*dataset)->Read(offset, 100, window.data()).ok());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(window[i], all[offset + i]);
}

TEST(TextDatasetTest, TokenizesBytesAbove127AsUnsigned) {
  const std::string path = TempPath("high_bytes.txt");
  WriteWholeFile(path, "a\xff\x80z");
  absl::StatusOr<std::unique_ptr<TextDataset>> dataset = TextDataset::Open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<int32_t> tokens(4);
  ASSERT_TRUE((*dataset)->Read(0, 4, tokens.data()).ok());
  EXPECT_THAT(tokens, ElementsAre('a', 255, 128, 'z'));
}

TEST(TextDatasetTest, ReadRejectsRangesOutsideTheData) {
  const std::string path = TempPath("ten.txt");
  WriteWholeFile(path, "0123456789");
  absl::StatusOr<std::unique_ptr<TextDataset>> dataset = TextDataset::Open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<int32_t> out(20);
  EXPECT_TRUE((*dataset)->Read(0, 10, out.data()).ok());
  EXPECT_TRUE((*dataset)->Read(10, 0, out.data()).ok());
  EXPECT_TRUE((*dataset)->Read(9, 1, out.data()).ok());
  EXPECT_EQ(out[0], '9');
  for (auto [offset, length] : std::vector<std::pair<int64_t, int>>{
           {-1, 1}, {0, 11}, {9, 2}, {11, 0}, {0, -1}, {int64_t{1} << 62, 1}}) {
    absl::Status status = (*dataset)->Read(offset, length, out.data());
    EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << offset << " " << length;
    EXPECT_THAT(status.message(), HasSubstr(path));
  }
}

TEST(TextDatasetTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TempPath("no_such_file.txt");
  absl::StatusOr<std::unique_ptr<TextDataset>> dataset = TextDataset::Open(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr(path));
}

TEST(TextDatasetTest, EmptyFileIsInvalidArgumentNamingThePath) {
  const std::string path = TempPath("empty.txt");
  WriteWholeFile(path, "");
  absl::StatusOr<std::unique_ptr<TextDataset>> dataset = TextDataset::Open(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr(path));
  EXPECT_THAT(dataset.status().message(), HasSubstr("empty"));
}

TEST(TextDatasetTest, DirectoryIsInvalidArgument) {
  const std::string path = TempPath("");
  absl::StatusOr<std::unique_ptr<TextDataset>> dataset = TextDataset::Open(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr("not a regular file"));
}

TEST(TextDatasetTest, RefusesSpecialFilesAndOversizedTextByName) {
  // /dev/zero would be tokenized forever; a FIFO would block the open.
  absl::StatusOr<std::unique_ptr<TextDataset>> data = TextDataset::Open("/dev/zero");
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr("/dev/zero: not a regular file"));
  const std::string fifo = TempPath("corpus.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  data = TextDataset::Open(fifo);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr("(a FIFO)"));
  data = TextDataset::Open(TempPath(""));
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  // One byte over the limit (sparse: no disk used) would take 4 GiB of tokens.
  const std::string big = TempPath("big.txt");
  WriteWholeFile(big, "");
  ASSERT_EQ(::truncate(big.c_str(), TextDataset::kMaxTextFileBytes + 1), 0);
  data = TextDataset::Open(big);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr(big));
  EXPECT_THAT(data.status().message(), HasSubstr("DATA_FORMAT_MMIDIDX"));
}

}  // namespace
}  // namespace mtrain
