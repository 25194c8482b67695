#include "common/utf8.h"

#include <cstdint>

namespace mtrain {
namespace {

// Length of the well-formed sequence at the start of `text`, 0 if there is none. The
// ranges of the second byte follow RFC 3629's table, which rules out overlong forms and
// surrogates without decoding.
size_t SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const auto in = [](uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  size_t length;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (in(b0, 0xC2, 0xDF)) {
    length = 2;
  } else if (in(b0, 0xE0, 0xEF)) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (in(b0, 0xF0, 0xF4)) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;  // continuation byte, C0/C1 (overlong) or F5..FF
  }
  if (text.size() < length || !in(byte(1), lo, hi)) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (!in(byte(i), 0x80, 0xBF)) return 0;
  }
  return length;
}

}  // namespace

std::optional<size_t> FindInvalidUtf8(absl::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t length = SequenceLength(text.substr(at));
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

}  // namespace mtrain
