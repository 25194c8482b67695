#include "tokenizer/unicode_text.h"

#include <algorithm>
#include <cstdint>

namespace mtrain {
namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "tokenizer/unicode_tables.inc"

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], char32_t c) {
  const CodePointRange* end = ranges + N;
  const CodePointRange* it = std::upper_bound(
      ranges, end, c, [](char32_t value, const CodePointRange& r) { return value < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

// The range of valid second bytes after lead byte `b` (Unicode Table 3-7); {0, 0} for a byte
// that cannot lead.
struct SecondByteRange {
  uint8_t low, high;
  int length;
};

SecondByteRange AfterLead(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {0x80, 0xBF, 2};
  if (b == 0xE0) return {0xA0, 0xBF, 3};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {0x80, 0xBF, 3};
  if (b == 0xED) return {0x80, 0x9F, 3};
  if (b == 0xF0) return {0x90, 0xBF, 4};
  if (b >= 0xF1 && b <= 0xF3) return {0x80, 0xBF, 4};
  if (b == 0xF4) return {0x80, 0x8F, 4};
  return {0, 0, 0};
}

}  // namespace

std::u32string DecodeUtf8Lossy(absl::string_view bytes) {
  std::u32string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    const SecondByteRange lead = AfterLead(b);
    if (lead.length == 0) {  // a continuation byte or an impossible lead: alone
      out.push_back(kReplacementCharacter);
      ++i;
      continue;
    }
    // The longest well-formed prefix of the sequence; an incomplete one is one U+FFFD.
    char32_t cp = b & (0xFF >> (lead.length + 1));
    size_t k = 1;
    for (; k < static_cast<size_t>(lead.length) && i + k < n; ++k) {
      const uint8_t c = p[i + k];
      const bool ok = k == 1 ? (c >= lead.low && c <= lead.high) : (c >= 0x80 && c <= 0xBF);
      if (!ok) break;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (k == static_cast<size_t>(lead.length)) {
      out.push_back(cp);
    } else {
      out.push_back(kReplacementCharacter);
    }
    i += k;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsUnicodeLetter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return InRanges(kLetterRanges, c);
}

bool IsUnicodeNumber(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return InRanges(kNumberRanges, c);
}

bool IsUnicodeWhiteSpace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

}  // namespace mtrain
