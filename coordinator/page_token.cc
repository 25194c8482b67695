#include "coordinator/page_token.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mtrain {
namespace {

// Versioned so that a later spelling can still read (or clearly refuse) this one.
constexpr absl::string_view kPrefix = "v1:";
// Tokens are short; a long one is not ours, and is not echoed in full.
constexpr size_t kMaxTokenBytes = 64;

absl::Status NotOurs(absl::string_view token, absl::string_view field) {
  const absl::string_view shown = token.substr(0, kMaxTokenBytes);
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", absl::CEscape(shown), token.size() > shown.size() ? "..." : "",
                   "' is not a page token this coordinator handed out (pass next_page_token "
                   "of the previous page unchanged, or nothing for the first page)"));
}

}  // namespace

std::string EncodePageToken(int64_t after) {
  return absl::WebSafeBase64Escape(absl::StrCat(kPrefix, after));
}

absl::StatusOr<int64_t> DecodePageToken(absl::string_view token, absl::string_view field) {
  if (token.empty()) return 0;
  if (token.size() > kMaxTokenBytes) return NotOurs(token, field);
  std::string plain;
  if (!absl::WebSafeBase64Unescape(token, &plain)) return NotOurs(token, field);
  absl::string_view digits = plain;
  if (!absl::ConsumePrefix(&digits, kPrefix) || digits.empty()) return NotOurs(token, field);
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return NotOurs(token, field);
  }
  int64_t after = 0;
  if (!absl::SimpleAtoi(digits, &after)) return NotOurs(token, field);  // Overflow.
  return after;
}

}  // namespace mtrain
