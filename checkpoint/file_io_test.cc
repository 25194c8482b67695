#include "checkpoint/file_io.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/file_io_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(FileIoTest, CommittedFileAppearsWithItsContents) {
  const std::string dir = FreshDir("commit");
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(dir + "/f");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->Append("hello ").ok());
  ASSERT_TRUE(writer->Append("world").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/f"));  // not before Commit
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/f.tmp"));
  std::ifstream in(dir + "/f");
  std::stringstream contents;
  contents << in.rdbuf();
  EXPECT_EQ(contents.str(), "hello world");
}

TEST(FileIoTest, AbandonedWriterLeavesNothing) {
  const std::string dir = FreshDir("abandon");
  {
    absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(dir + "/f");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->Append("partial").ok());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(FileIoTest, CreateInAMissingDirectoryFails) {
  EXPECT_FALSE(AtomicFileWriter::Create(FreshDir("missing") + "/no/such/f").ok());
}

TEST(FileIoTest, ReadsAtOffsetsAndReportsShortFiles) {
  const std::string dir = FreshDir("read");
  std::ofstream(dir + "/f") << "0123456789";
  absl::StatusOr<RandomAccessFile> file = RandomAccessFile::Open(dir + "/f");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file->Size(), 10u);
  char buffer[4];
  ASSERT_TRUE(file->Read(3, 4, buffer).ok());
  EXPECT_EQ(std::string(buffer, 4), "3456");
  const absl::Status past_end = file->Read(8, 4, buffer);
  EXPECT_EQ(past_end.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(past_end.message().find(dir + "/f"), std::string::npos);
  EXPECT_EQ(RandomAccessFile::Open(dir + "/absent").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mtrain
