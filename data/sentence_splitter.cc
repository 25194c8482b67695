#include "data/sentence_splitter.h"

#include <cctype>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace mtrain {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

// The closing marks a sentence's end may carry: ASCII quotes and brackets, and the UTF-8 of
// ’ (U+2019) and ” (U+201D). Returns its length at `at`, 0 if none.
size_t ClosingMark(absl::string_view text, size_t at) {
  const char c = text[at];
  if (c == '"' || c == '\'' || c == ')' || c == ']') return 1;
  if (absl::StartsWith(text.substr(at), "\xE2\x80\x99") ||
      absl::StartsWith(text.substr(at), "\xE2\x80\x9D")) {
    return 3;
  }
  return 0;
}

// Whether the word ending right before `dot` (a '.') is an initial or an abbreviation.
bool AbbreviationBefore(absl::string_view text, size_t dot) {
  size_t begin = dot;
  while (begin > 0 && !IsSpace(text[begin - 1]) && text[begin - 1] != '(' &&
         text[begin - 1] != '"') {
    --begin;
  }
  const std::string word = absl::AsciiStrToLower(text.substr(begin, dot - begin));
  if (word.size() == 1 && std::isalpha(static_cast<unsigned char>(word[0]))) return true;
  static constexpr const char* kAbbreviations[] = {
      "mr",  "mrs", "ms", "dr",  "prof", "sr", "jr",   "st",  "mt",  "vs", "etc",
      "e.g", "i.e", "no", "inc", "ltd",  "co", "corp", "fig", "vol", "cf", "al"};
  for (const char* a : kAbbreviations) {
    if (word == a) return true;
  }
  return false;
}

}  // namespace

std::vector<absl::string_view> SplitSentences(absl::string_view text) {
  std::vector<absl::string_view> sentences;
  auto emit = [&](size_t begin, size_t end) {
    absl::string_view s = absl::StripAsciiWhitespace(text.substr(begin, end - begin));
    if (!s.empty()) sentences.push_back(s);
  };
  size_t start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      // A blank line: this break, white space, another break.
      size_t j = i + 1;
      while (j < text.size() && IsSpace(text[j]) && text[j] != '\n') ++j;
      if (j < text.size() && text[j] == '\n') {
        emit(start, i);
        while (j < text.size() && IsSpace(text[j])) ++j;
        start = i = j;
        continue;
      }
      ++i;
      continue;
    }
    if (c != '.' && c != '!' && c != '?') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && (text[end] == '.' || text[end] == '!' || text[end] == '?')) ++end;
    const bool single_dot = end == i + 1 && c == '.';
    for (size_t mark; end < text.size() && (mark = ClosingMark(text, end)) > 0;) end += mark;
    if (end < text.size() && !IsSpace(text[end])) {  // "3.14", "e.g." inside a word
      i = end;
      continue;
    }
    size_t next = end;
    while (next < text.size() && IsSpace(text[next])) ++next;
    const bool lower_next =
        next < text.size() && std::islower(static_cast<unsigned char>(text[next]));
    if (end < text.size() && (lower_next || (single_dot && AbbreviationBefore(text, i)))) {
      i = end;
      continue;
    }
    emit(start, end);
    start = i = end;
  }
  emit(start, text.size());
  return sentences;
}

}  // namespace mtrain
