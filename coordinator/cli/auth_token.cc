#include "coordinator/cli/auth_token.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

constexpr char kTokenRule[] = "the token must be one line of printable ASCII";

// gRPC accepts only printable ASCII in a text metadata value; anything else would fail
// every call with an obscure transport error.
bool IsValidToken(const std::string& token) {
  for (const char c : token) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  // stdio rather than iostreams: its errors keep errno, so "Permission denied" or "Is a
  // directory" reaches the user instead of a generic failure.
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", path, ": cannot read: ", std::strerror(errno)));
  }
  std::string token;
  char buffer[4096];
  size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof(buffer), file)) > 0) token.append(buffer, read);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", path, ": cannot read: ", std::strerror(error)));
  }
  absl::StripTrailingAsciiWhitespace(&token);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token_file=", path, ": the file is empty"));
  }
  if (!IsValidToken(token)) {
    return absl::InvalidArgumentError(absl::StrCat("--token_file=", path, ": ", kTokenRule));
  }
  return token;
}

absl::StatusOr<std::string> ResolveToken(const std::string& token, const std::string& token_file) {
  if (!token.empty() && !token_file.empty()) {
    return absl::InvalidArgumentError("give --token or --token_file, not both");
  }
  if (!token_file.empty()) return ReadTokenFile(token_file);
  if (!IsValidToken(token))
    return absl::InvalidArgumentError(absl::StrCat("--token: ", kTokenRule));
  return token;
}

absl::Status ExplainUnauthenticated(const absl::Status& status, bool sent_token) {
  if (status.code() != absl::StatusCode::kUnauthenticated) return status;
  std::string message(status.message());
  // The coordinator's own message may already name the flag.
  if (absl::StrContains(message, "--token_file")) return status;
  if (!message.empty()) absl::StrAppend(&message, "; ");
  absl::StrAppend(&message, sent_token
                                ? "the coordinator refused the token: check --token_file=FILE"
                                : "the coordinator requires a token: pass --token_file=FILE "
                                  "(the coordinator's --auth_token_file, or the auth_token file it "
                                  "generated in its state dir)");
  return absl::UnauthenticatedError(message);
}

}  // namespace mtrain
