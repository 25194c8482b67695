#include "tokenizer/gpt2_pretokenizer.h"

#include "tokenizer/unicode_text.h"

namespace mtrain {

const char kGpt2SplitPattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass ClassOf(char32_t c) {
  if (IsUnicodeLetter(c)) return CharClass::kLetter;
  if (IsUnicodeNumber(c)) return CharClass::kNumber;
  if (IsUnicodeWhiteSpace(c)) return CharClass::kSpace;
  return CharClass::kOther;
}

// The length of the contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
size_t Contraction(const std::u32string& text, size_t i, size_t end) {
  if (text[i] != U'\'' || i + 1 >= end) return 0;
  const char32_t a = text[i + 1];
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= end) return 0;
  const char32_t b = text[i + 2];
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

}  // namespace

void SplitLikeGpt2(const std::u32string& text, size_t begin, size_t end,
                   std::vector<TextPiece>* pieces) {
  size_t i = begin;
  while (i < end) {
    if (const size_t n = Contraction(text, i, end); n > 0) {
      pieces->push_back({i, i + n});
      i += n;
      continue;
    }
    const CharClass here = ClassOf(text[i]);
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a run of
    // one class.
    size_t start = i;
    CharClass run = here;
    if (text[i] == U' ' && i + 1 < end) {
      const CharClass next = ClassOf(text[i + 1]);
      if (next != CharClass::kSpace) {
        run = next;
        start = i + 1;
      }
    }
    if (run != CharClass::kSpace) {
      size_t j = start + 1;
      while (j < end && ClassOf(text[j]) == run) ++j;
      pieces->push_back({i, j});
      i = j;
      continue;
    }
    // White space: `\s+(?!\S)` takes the run but, when a non-space follows, gives its last
    // character back to the next piece; a single space before a non-space is `\s+` alone.
    size_t j = i + 1;
    while (j < end && ClassOf(text[j]) == CharClass::kSpace) ++j;
    if (j < end && j - i > 1) --j;
    pieces->push_back({i, j});
    i = j;
  }
}

}  // namespace mtrain
