#include "tokenizer/bert_normalizer.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <string>
#include <vector>

namespace mtrain {
namespace {

// UTF-32 <-> UTF-16 through ICU (its normaliser works on UTF-16). Our text is always well
// formed (DecodeUtf8Lossy replaced every invalid byte), so the conversions cannot fail; a
// failure would leave the text as it was.
std::u16string ToUtf16(std::u32string_view text) {
  std::u16string out(text.size() * 2, u'\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF32(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &length,
                 reinterpret_cast<const UChar32*>(text.data()), static_cast<int32_t>(text.size()),
                 &status);
  out.resize(U_SUCCESS(status) ? length : 0);
  return out;
}

std::u32string ToUtf32(std::u16string_view text) {
  std::u32string out(text.size(), U'\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strToUTF32(reinterpret_cast<UChar32*>(out.data()), static_cast<int32_t>(out.size()), &length,
               reinterpret_cast<const UChar*>(text.data()), static_cast<int32_t>(text.size()),
               &status);
  out.resize(U_SUCCESS(status) ? length : 0);
  return out;
}

std::u32string CanonicalDecomposition(std::u32string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* nfd = unorm2_getNFDInstance(&status);
  if (U_FAILURE(status)) return std::u32string(text);
  const std::u16string in = ToUtf16(text);
  // Three times the input is room for almost any text; when it is not, ICU says how much
  // is needed and one retry with that size covers it.
  std::u16string out(in.size() * 3 + 16, u'\0');
  int32_t length = unorm2_normalize(
      nfd, reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()),
      reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    out.assign(length, u'\0');
    length = unorm2_normalize(nfd, reinterpret_cast<const UChar*>(in.data()),
                              static_cast<int32_t>(in.size()), reinterpret_cast<UChar*>(out.data()),
                              static_cast<int32_t>(out.size()), &status);
  }
  if (U_FAILURE(status)) return std::u32string(text);
  out.resize(length);
  return ToUtf32(out);
}

// The full lower case of one character (one to three characters), with no context: what
// Rust's char::to_lowercase gives, which `tokenizers` applies character by character.
void AppendLowercase(char32_t c, std::u32string* out) {
  if (c < 0x80) {
    out->push_back(c >= U'A' && c <= U'Z' ? c + (U'a' - U'A') : c);
    return;
  }
  const std::u16string in = ToUtf16(std::u32string_view(&c, 1));
  char16_t lowered[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t length =
      u_strToLower(reinterpret_cast<UChar*>(lowered), 8, reinterpret_cast<const UChar*>(in.data()),
                   static_cast<int32_t>(in.size()), "", &status);
  if (U_FAILURE(status)) {
    out->push_back(c);
    return;
  }
  out->append(ToUtf32(std::u16string_view(lowered, length)));
}

}  // namespace

bool IsBertWhiteSpace(char32_t c) {
  return c == U'\t' || c == U'\n' || c == U'\r' || u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool IsBertControl(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_UNASSIGNED:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return true;
    default:
      return false;
  }
}

bool IsBertPunctuation(char32_t c) {
  if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
      (c >= 0x7B && c <= 0x7E)) {
    return true;  // ASCII punctuation, symbols such as $ and ^ included
  }
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

// BERT's "Chinese character" blocks: the CJK Unified Ideographs and their extensions A-E and
// the compatibility ideographs (Japanese kana and Hangul are not among them).
bool IsBertChineseCharacter(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string BertNormalize(std::u32string_view text, const BertNormalizerOptions& options) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (options.clean_text) {
      if (c == 0 || c == 0xFFFD || IsBertControl(c)) continue;
      if (IsBertWhiteSpace(c)) c = U' ';
    }
    if (options.handle_chinese_chars && IsBertChineseCharacter(c)) {
      out.push_back(U' ');
      out.push_back(c);
      out.push_back(U' ');
      continue;
    }
    out.push_back(c);
  }
  if (options.strip_accents.value_or(options.lowercase)) {
    std::u32string decomposed = CanonicalDecomposition(out);
    out.clear();
    for (char32_t c : decomposed) {
      if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) out.push_back(c);
    }
  }
  if (options.lowercase) {
    std::u32string lowered;
    lowered.reserve(out.size());
    for (char32_t c : out) AppendLowercase(c, &lowered);
    out = std::move(lowered);
  }
  return out;
}

std::vector<std::u32string> BertPreTokenize(std::u32string_view text) {
  std::vector<std::u32string> words;
  std::u32string word;
  for (char32_t c : text) {
    if (IsBertWhiteSpace(c)) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else if (IsBertPunctuation(c)) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
      words.push_back(std::u32string(1, c));
    } else {
      word.push_back(c);
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

}  // namespace mtrain
