#include "tokenizer/llama3_pretokenizer.h"

#include "tokenizer/unicode_text.h"

namespace mtrain {

const char kLlama3SplitPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

bool IsLineBreak(char32_t c) { return c == U'\r' || c == U'\n'; }

// Not white space, a letter or a number: `[^\s\p{L}\p{N}]`.
bool IsOther(char32_t c) {
  return !IsUnicodeLetter(c) && !IsUnicodeNumber(c) && !IsUnicodeWhiteSpace(c);
}

// Lower case as `(?i:...)` folds the contractions' letters in `tokenizers` (Oniguruma):
// ASCII only (the long s U+017F does not match 's' there; measured).
char32_t Folded(char32_t c) {
  if (c >= U'A' && c <= U'Z') return c + (U'a' - U'A');
  return c;
}

// The length of the contraction ('s 't 're 've 'm 'll 'd, any case) at `i`, or 0.
size_t Contraction(const std::u32string& text, size_t i, size_t end) {
  if (text[i] != U'\'' || i + 1 >= end) return 0;
  const char32_t a = Folded(text[i + 1]);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= end) return 0;
  const char32_t b = Folded(text[i + 2]);
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

size_t LetterRunEnd(const std::u32string& text, size_t i, size_t end) {
  while (i < end && IsUnicodeLetter(text[i])) ++i;
  return i;
}

}  // namespace

void SplitLikeLlama3(const std::u32string& text, size_t begin, size_t end,
                     std::vector<TextPiece>* pieces) {
  size_t i = begin;
  while (i < end) {
    const char32_t c = text[i];
    size_t j = i;
    if (const size_t n = Contraction(text, i, end); n > 0) {
      j = i + n;
    } else if (IsUnicodeLetter(c)) {
      // `[^\r\n\p{L}\p{N}]?\p{L}+` without its optional character.
      j = LetterRunEnd(text, i, end);
    } else if (!IsLineBreak(c) && !IsUnicodeNumber(c) && i + 1 < end &&
               IsUnicodeLetter(text[i + 1])) {
      // ... with it: one character of any other kind before the letters.
      j = LetterRunEnd(text, i + 1, end);
    } else if (IsUnicodeNumber(c)) {
      // `\p{N}{1,3}`.
      j = i + 1;
      while (j < end && j < i + 3 && IsUnicodeNumber(text[j])) ++j;
    } else if (IsOther(c) || (c == U' ' && i + 1 < end && IsOther(text[i + 1]))) {
      // ` ?[^\s\p{L}\p{N}]+[\r\n]*`.
      j = c == U' ' ? i + 1 : i;
      while (j < end && IsOther(text[j])) ++j;
      while (j < end && IsLineBreak(text[j])) ++j;
    } else {
      // White space. `\s*[\r\n]+`: up to the run's last line break, when it has one;
      // otherwise `\s+(?!\S)`, which gives the run's last character back to a non-space
      // after it, or `\s+` for a single space before one.
      size_t run = i;
      size_t last_break = end;
      while (run < end && IsUnicodeWhiteSpace(text[run])) {
        if (IsLineBreak(text[run])) last_break = run;
        ++run;
      }
      if (last_break != end) {
        j = last_break + 1;
      } else if (run < end && run - i > 1) {
        j = run - 1;
      } else {
        j = run;
      }
    }
    pieces->push_back({i, j});
    i = j;
  }
}

}  // namespace mtrain
