#include "data/data_roots.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test's temporary directory, resolved.
std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : "/tmp") / ("data_roots_test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return fs::canonical(dir).string();
}

void Touch(const std::string& path) { std::ofstream(path) << "hello"; }

void ExpectRefused(const absl::Status& status, const std::string& needle) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(needle), absl::string_view::npos) << status;
}

TEST(DataRootsTest, ParsesAndResolvesRoots) {
  const std::string a = FreshDir("parse-a");
  const std::string b = FreshDir("parse-b");
  fs::create_directory_symlink(b, a + "/link");
  absl::StatusOr<std::vector<std::string>> roots =
      ParseDataRoots(a + ", " + a + "/link ," + a + "/../" + fs::path(a).filename().string());
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_EQ(*roots, (std::vector<std::string>{a, b}));
  EXPECT_TRUE(ParseDataRoots("")->empty());

  Touch(a + "/file");
  ExpectRefused(ParseDataRoots(a + "/file").status(), a + "/file is not a directory");
  ExpectRefused(ParseDataRoots(a + "/missing").status(), "--data_root: " + a + "/missing");
}

TEST(DataRootsTest, AcceptsFilesInsideAndReturnsTheResolvedPath) {
  const std::string root = FreshDir("inside");
  fs::create_directories(root + "/sub");
  Touch(root + "/sub/corpus.txt");
  absl::StatusOr<std::string> path =
      ConfineToDataRoots("data.path", root + "/sub/../sub/./corpus.txt", {root});
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, root + "/sub/corpus.txt");
  // A symlink that stays inside is fine.
  fs::create_symlink(root + "/sub/corpus.txt", root + "/alias.txt");
  EXPECT_EQ(*ConfineToDataRoots("data.path", root + "/alias.txt", {root}),
            root + "/sub/corpus.txt");
}

TEST(DataRootsTest, RefusesPathsThatLeaveTheRoots) {
  const std::string root = FreshDir("outside");
  const std::string other = FreshDir("outside-other");
  Touch(other + "/secret");
  const std::vector<std::string> roots = {root};
  // Dot-dot, an absolute path, a symlink pointing out, a sibling sharing the prefix.
  ExpectRefused(
      ConfineToDataRoots("data.path", root + "/../data_roots_test-outside-other/secret", roots)
          .status(),
      "is outside the data roots [" + root + "]");
  ExpectRefused(ConfineToDataRoots("data.path", "/etc/passwd", roots).status(),
                "data.path: /etc/passwd is outside");
  fs::create_symlink(other + "/secret", root + "/escape");
  ExpectRefused(ConfineToDataRoots("train.init_from", root + "/escape", roots).status(),
                "train.init_from: " + root + "/escape (resolved: " + other + "/secret)");
  const std::string sibling = root + "-sibling";
  fs::create_directories(sibling);
  Touch(sibling + "/file");
  ExpectRefused(ConfineToDataRoots("data.path", sibling + "/file", roots).status(), "outside");
  // Missing: refused without saying more than that it cannot be resolved.
  ExpectRefused(ConfineToDataRoots("data.path", root + "/missing", roots).status(),
                "cannot be resolved");
  // No roots at all: the message says how to configure them.
  ExpectRefused(ConfineToDataRoots("data.path", other + "/secret", {}).status(), "--data_root");
}

TEST(DataRootsTest, ConfinesDataSpecs) {
  const std::string root = FreshDir("spec");
  const std::string other = FreshDir("spec-other");
  DataSpec data;
  EXPECT_TRUE(ConfineDataSpec(data, {}).ok()) << "the shipped corpus needs no root";

  Touch(root + "/c.txt");
  data.set_path(root + "/./c.txt");
  EXPECT_EQ(ConfineDataSpec(data, {root})->path(), root + "/c.txt");

  data.set_format(DATA_FORMAT_MMIDIDX);
  data.set_path(root + "/ds");
  Touch(root + "/ds.idx");
  Touch(other + "/ds.bin");
  fs::create_symlink(other + "/ds.bin", root + "/ds.bin");
  ExpectRefused(ConfineDataSpec(data, {root}).status(), "ds.bin (resolved: " + other);
  fs::remove(root + "/ds.bin");
  Touch(root + "/ds.bin");
  EXPECT_EQ(ConfineDataSpec(data, {root})->path(), root + "/ds");

  // Every prefix of a blend is confined the same way, naming data.paths.
  DataSpec blend;
  blend.set_format(DATA_FORMAT_MMIDIDX);
  blend.add_paths()->set_path(root + "/./ds");
  blend.add_paths()->set_path(other + "/ds");
  ExpectRefused(ConfineDataSpec(blend, {root}).status(), "data.paths");
  blend.mutable_paths(1)->set_path(root + "/ds");
  absl::StatusOr<DataSpec> confined = ConfineDataSpec(blend, {root});
  ASSERT_TRUE(confined.ok()) << confined.status();
  EXPECT_EQ(confined->paths(0).path(), root + "/ds");
}

TEST(DataRootsTest, DefaultRootsHoldTheShippedCorpusAndNotTheSystem) {
  const std::vector<std::string> roots = DefaultDataRoots();
  ASSERT_FALSE(roots.empty()) << "the shipped corpus is a data dependency of this test";
  bool corpus_inside = false;
  for (const std::string& root : roots) {
    corpus_inside |= fs::exists(root + "/shakespeare.txt");
  }
  EXPECT_TRUE(corpus_inside);
  ExpectRefused(ConfineToDataRoots("data.path", "/etc/passwd", roots).status(), "outside");
  // Relative to the current directory, enough ".." to reach "/" from any depth.
  std::string up;
  for (int i = 0; i < 64; ++i) up += "../";
  ExpectRefused(ConfineToDataRoots("data.path", up + "etc/passwd", roots).status(), "outside");
}

}  // namespace
}  // namespace mtrain
