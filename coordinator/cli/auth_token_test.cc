#include "coordinator/cli/auth_token.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = TempPath(name);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr);
  std::fwrite(content.data(), 1, content.size(), file);
  std::fclose(file);
  return path;
}

TEST(AuthTokenTest, FileContentWithoutTrailingWhitespace) {
  const std::string path = WriteFile("token", "s3cret-token \n\n");
  absl::StatusOr<std::string> token = ReadTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret-token");
}

TEST(AuthTokenTest, UnreadableFileIsAClearError) {
  absl::StatusOr<std::string> missing = ReadTokenFile(TempPath("no-such-token"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("--token_file="));
  EXPECT_THAT(missing.status().message(), HasSubstr("No such file or directory"));
  absl::StatusOr<std::string> directory = ReadTokenFile(TempPath(""));
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.status().message(), HasSubstr("Is a directory"));
}

TEST(AuthTokenTest, EmptyOrMultiLineFileIsRefused) {
  EXPECT_THAT(ReadTokenFile(WriteFile("empty", " \n")).status().message(),
              HasSubstr("the file is empty"));
  EXPECT_THAT(ReadTokenFile(WriteFile("two-lines", "a\nb\n")).status().message(),
              HasSubstr("one line of printable ASCII"));
}

TEST(AuthTokenTest, ResolvesFlagOrFileButNotBoth) {
  EXPECT_EQ(*ResolveToken("", ""), "");
  EXPECT_EQ(*ResolveToken("abc", ""), "abc");
  EXPECT_EQ(*ResolveToken("", WriteFile("resolve", "xyz\n")), "xyz");
  EXPECT_EQ(ResolveToken("abc", "file").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveToken("a\tb", "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AuthTokenTest, UnauthenticatedSuggestsTheTokenFile) {
  const absl::Status missing =
      ExplainUnauthenticated(absl::UnauthenticatedError("no token"), /*sent_token=*/false);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(), HasSubstr("no token; the coordinator requires a token"));
  EXPECT_THAT(missing.message(), HasSubstr("--token_file=FILE"));
  const absl::Status refused = ExplainUnauthenticated(
      absl::UnauthenticatedError("the bearer token is not the coordinator's"), true);
  EXPECT_THAT(refused.message(), HasSubstr("refused the token: check --token_file"));
  // The coordinator's message may already name the flag: not said twice.
  const absl::Status named =
      ExplainUnauthenticated(absl::UnauthenticatedError("needs a token (--token_file)"), false);
  EXPECT_EQ(named.message(), "needs a token (--token_file)");
  const absl::Status other = absl::NotFoundError("no job");
  EXPECT_EQ(ExplainUnauthenticated(other, false), other);
}

}  // namespace
}  // namespace mtrain
