#include "coordinator/server_token.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// A fresh directory for the current test.
std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/server-token-",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

unsigned ModeOf(const std::string& path) {
  struct stat info;
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST(ServerTokenTest, LoopbackAddressesAreRecognisedAndEverythingElseIsNot) {
  for (const std::string listen :
       {"127.0.0.1:7070", "127.0.0.1:0", "127.1.2.3:7070", "localhost:7070", "LOCALHOST:1",
        "[::1]:7070", "::1:7070", "[::ffff:127.0.0.1]:7070", "unix:/run/mtrain.sock"}) {
    EXPECT_TRUE(IsLoopbackListenAddress(listen)) << listen;
  }
  for (const std::string listen :
       {"0.0.0.0:7070", "[::]:7070", ":7070", "10.0.0.5:7070", "coordinator-host:7070",
        "[::ffff:10.0.0.1]:7070", "128.0.0.1:7070", "7070", ""}) {
    EXPECT_FALSE(IsLoopbackListenAddress(listen)) << listen;
  }
}

TEST(ServerTokenTest, ATokenFileIsOneLineOfPrintableAscii) {
  const std::string dir = TestDir();
  absl::StatusOr<std::string> token = ReadServerTokenFile(WriteFile(dir + "/t", "s3cret \n\n"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret");
  for (const std::string bad : {"", " \n", "two\nlines", "caf\xc3\xa9"}) {
    const absl::Status refused = ReadServerTokenFile(WriteFile(dir + "/bad", bad)).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.message(), HasSubstr("--auth_token_file=" + dir + "/bad"));
  }
  const absl::Status missing = ReadServerTokenFile(dir + "/none").status();
  EXPECT_THAT(missing.message(), HasSubstr("No such file"));
  EXPECT_EQ(ReadServerTokenFile(WriteFile(dir + "/huge", std::string(100000, 'x'))).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServerTokenTest, TheStateDirTokenIsCreatedOnceWithMode0600AndReused) {
  const std::string dir = TestDir();
  const ::mode_t old_umask = ::umask(0);  // the file is 0600 whatever the umask
  absl::StatusOr<StateDirToken> first = LoadOrCreateStateDirToken(dir);
  ::umask(old_umask);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  EXPECT_EQ(first->path, dir + "/auth_token");
  EXPECT_EQ(first->token.size(), 2u * kGeneratedTokenBytes);
  for (char c : first->token) EXPECT_TRUE(absl::ascii_isxdigit(c)) << first->token;
  EXPECT_EQ(ModeOf(first->path), 0600u);
  EXPECT_FALSE(std::filesystem::exists(first->path + ".tmp"));

  absl::StatusOr<StateDirToken> again = LoadOrCreateStateDirToken(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->token, first->token);
  // Another state dir gets another token.
  const std::string other_dir = dir + "/other";
  std::filesystem::create_directories(other_dir);
  absl::StatusOr<StateDirToken> other = LoadOrCreateStateDirToken(other_dir);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->token, first->token);
}

TEST(ServerTokenTest, AReadableOrDamagedStateDirTokenIsRefusedWithTheFix) {
  const std::string dir = TestDir();
  ASSERT_TRUE(LoadOrCreateStateDirToken(dir).ok());
  const std::string path = dir + "/auth_token";
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  const absl::Status readable = LoadOrCreateStateDirToken(dir).status();
  EXPECT_EQ(readable.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(readable.message(), HasSubstr("mode 0644"));
  EXPECT_THAT(readable.message(), HasSubstr("chmod 600 " + path));
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  WriteFile(path, "\n");
  const absl::Status empty = LoadOrCreateStateDirToken(dir).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr(path + ": the file is empty"));
  EXPECT_THAT(empty.message(), HasSubstr("delete the file"));
}

TEST(ServerTokenTest, TheFlagsChooseTheToken) {
  const std::string dir = TestDir();
  // A token file wins, wherever the coordinator listens; nothing is generated.
  absl::StatusOr<ServerToken> from_file =
      ChooseServerToken("0.0.0.0:7070", WriteFile(dir + "/token", "given\n"), dir);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->token, "given");
  EXPECT_FALSE(from_file->generated_path.has_value());
  // Loopback without a file: open, nothing generated.
  absl::StatusOr<ServerToken> open = ChooseServerToken("127.0.0.1:7070", "", dir);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->token, "");
  EXPECT_FALSE(std::filesystem::exists(dir + "/auth_token"));
  // Beyond loopback without a file: generated on the first start, then reused.
  absl::StatusOr<ServerToken> generated = ChooseServerToken("0.0.0.0:7070", "", dir);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_TRUE(generated->created);
  ASSERT_TRUE(generated->generated_path.has_value());
  EXPECT_EQ(*generated->generated_path, dir + "/auth_token");
  EXPECT_EQ(*ReadServerTokenFile(dir + "/auth_token"), generated->token);
  absl::StatusOr<ServerToken> reused = ChooseServerToken("[::]:7070", "", dir);
  ASSERT_TRUE(reused.ok()) << reused.status();
  EXPECT_FALSE(reused->created);
  EXPECT_EQ(reused->token, generated->token);
  // A missing --auth_token_file is an error, never a silent fall back to open.
  EXPECT_EQ(ChooseServerToken("127.0.0.1:7070", dir + "/missing", dir).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
