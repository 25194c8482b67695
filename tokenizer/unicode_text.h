// Unicode text as GPT-2's tokenizer sees it: bytes decoded to code points the way Python's
// bytes.decode("utf-8", errors="replace") does (so text with invalid UTF-8 tokenizes as
// HuggingFace `tokenizers` does on such text read by Python), code points encoded back, and
// the three character classes its pre-tokenizer pattern uses: letters (\p{L}), numbers
// (\p{N}) and white space (\s: Unicode's White_Space property, as Oniguruma's \s matches).
//
//   std::u32string text = DecodeUtf8Lossy("caf\xc3\xa9 \xff");   // c a f é ' ' U+FFFD
#ifndef MTRAIN_TOKENIZER_UNICODE_TEXT_H_
#define MTRAIN_TOKENIZER_UNICODE_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mtrain {

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

// Each ill-formed sequence becomes one U+FFFD per maximal subpart (Unicode 15, section
// 3.9, "U+FFFD Substitution of Maximal Subparts"), as CPython's decoder does: a valid lead
// byte followed by fewer continuation bytes than it needs is one U+FFFD, any other invalid
// byte one U+FFFD each.
std::u32string DecodeUtf8Lossy(absl::string_view bytes);

// Appends the UTF-8 encoding of `code_point` (< 0x110000, not a surrogate).
void AppendUtf8(char32_t code_point, std::string* out);

bool IsUnicodeLetter(char32_t c);
bool IsUnicodeNumber(char32_t c);
bool IsUnicodeWhiteSpace(char32_t c);

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_UNICODE_TEXT_H_
