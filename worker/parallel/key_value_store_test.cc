#include "worker/parallel/key_value_store.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

// A fresh directory per test under Bazel's TEST_TMPDIR (or /tmp when run by hand).
std::string FreshDirectory() {
  const char* root = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(root != nullptr ? root : "/tmp") + "/kvs-" + test->name() + "-" +
         std::to_string(::getpid());
}

std::set<std::string> FilesIn(const std::string& directory) {
  std::set<std::string> names;
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  closedir(dir);
  return names;
}

std::unique_ptr<DirectoryStore> OpenStore(const std::string& directory) {
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(directory);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(DirectoryStoreTest, SetGetOverwrite) {
  const std::string directory = FreshDirectory() + "/nested/dir";  // created like mkdir -p
  std::unique_ptr<DirectoryStore> store = OpenStore(directory);
  ASSERT_NE(store, nullptr);

  EXPECT_EQ(store->Get("a").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Set("a", "first").ok());
  EXPECT_EQ(*store->Get("a"), "first");
  ASSERT_TRUE(store->Set("a", "second, longer value").ok());
  EXPECT_EQ(*store->Get("a"), "second, longer value");
  ASSERT_TRUE(store->Set("a", "3").ok());  // shorter than before: no stale tail
  EXPECT_EQ(*store->Get("a"), "3");

  // Binary values, including NUL bytes and an empty value.
  const std::string binary("x\0y\xff", 4);
  ASSERT_TRUE(store->Set("bin", binary).ok());
  EXPECT_EQ(*store->Get("bin"), binary);
  ASSERT_TRUE(store->Set("empty", "").ok());
  EXPECT_EQ(*store->Get("empty"), "");

  // Another store on the same directory (another process in real use) sees the values.
  std::unique_ptr<DirectoryStore> other = OpenStore(directory);
  EXPECT_EQ(*other->Get("a"), "3");

  // No temporary file left behind.
  EXPECT_EQ(FilesIn(directory), (std::set<std::string>{"a", "bin", "empty"}));
}

TEST(DirectoryStoreTest, EmptyKeyIsInvalid) {
  std::unique_ptr<DirectoryStore> store = OpenStore(FreshDirectory());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Set(std::string(300, 'k'), "v").code(), absl::StatusCode::kInvalidArgument);
}

TEST(DirectoryStoreTest, OpenFailsWhereADirectoryCannotBe) {
  const std::string directory = FreshDirectory();
  std::unique_ptr<DirectoryStore> store = OpenStore(directory);
  ASSERT_TRUE(store->Set("file", "x").ok());
  EXPECT_EQ(DirectoryStore::Open(directory + "/file").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DirectoryStore::Open(directory + "/file/below").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DirectoryStoreTest, KeysWithOddCharactersAreOneFileEach) {
  const std::string directory = FreshDirectory();
  std::unique_ptr<DirectoryStore> store = OpenStore(directory);
  ASSERT_NE(store, nullptr);
  const std::vector<std::string> keys = {"tensor-3/gloo/0",
                                         "tensor-3%2Fgloo%2F0",
                                         "a b",
                                         "a\tb",
                                         "..",
                                         ".",
                                         ".hidden",
                                         "x/../y",
                                         "ü",
                                         "plain.name_1-2",
                                         "/leading",
                                         "trailing/"};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store->Set(keys[i], "value " + std::to_string(i)).ok()) << keys[i];
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<std::string> value = store->Get(keys[i]);
    ASSERT_TRUE(value.ok()) << keys[i] << ": " << value.status();
    EXPECT_EQ(*value, "value " + std::to_string(i)) << keys[i];
  }
  // Distinct keys never share a file, nothing escapes the directory, and every name is
  // plain (no '/', never "." or "..", no hidden file).
  const std::set<std::string> files = FilesIn(directory);
  EXPECT_EQ(files.size(), keys.size());
  for (const std::string& file : files) {
    EXPECT_EQ(file.find('/'), std::string::npos) << file;
    EXPECT_NE(file[0], '.') << file;
  }
  EXPECT_EQ(files.count("plain.name_1-2"), 1u);  // plain keys stay readable
  EXPECT_EQ(FilesIn(directory + "/..").count("y"), 0u);
}

TEST(DirectoryStoreTest, WaitReturnsOnceAnotherThreadSetsTheKeys) {
  std::unique_ptr<DirectoryStore> store = OpenStore(FreshDirectory());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("early", "1").ok());
  std::thread writer([&store] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(store->Set("late/1", "1").ok());
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(store->Set("late/2", "2").ok());
  });
  const absl::Time start = absl::Now();
  const absl::Status status = store->Wait({"early", "late/1", "late/2"}, absl::Seconds(10));
  const absl::Duration waited = absl::Now() - start;
  writer.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_GE(waited, absl::Milliseconds(140));
  EXPECT_LT(waited, absl::Seconds(5));
  EXPECT_EQ(*store->Get("late/2"), "2");
}

TEST(DirectoryStoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  std::unique_ptr<DirectoryStore> store = OpenStore(FreshDirectory());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("present", "1").ok());
  const absl::Time start = absl::Now();
  const absl::Status status =
      store->Wait({"present", "group/missing-1", "missing-2"}, absl::Milliseconds(200));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("group/missing-1"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("missing-2"), absl::string_view::npos) << status;
  EXPECT_EQ(status.message().find("present"), absl::string_view::npos) << status;
  EXPECT_GE(waited, absl::Milliseconds(200));
  EXPECT_LT(waited, absl::Seconds(3));
}

TEST(DirectoryStoreTest, ConcurrentWritersOfOneKeyLeaveOneWholeValue) {
  std::unique_ptr<DirectoryStore> store = OpenStore(FreshDirectory());
  ASSERT_NE(store, nullptr);
  const std::string a(100000, 'a');
  const std::string b(100000, 'b');
  std::thread writer_a([&] {
    for (int i = 0; i < 50; ++i) EXPECT_TRUE(store->Set("k", a).ok());
  });
  std::thread writer_b([&] {
    for (int i = 0; i < 50; ++i) EXPECT_TRUE(store->Set("k", b).ok());
  });
  // Readers never see a torn value while the writers race.
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::string> value = store->Get("k");
    if (value.ok()) {
      EXPECT_TRUE(*value == a || *value == b);
    }
  }
  writer_a.join();
  writer_b.join();
  const std::string value = *store->Get("k");
  EXPECT_TRUE(value == a || value == b);
}

}  // namespace
}  // namespace mtrain
