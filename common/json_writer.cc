#include "common/json_writer.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace mtrain {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `text`, or 0 if it is not one
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // bounds of the second byte
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

std::string JsonNumberFormat::Format(double value) const {
  switch (style_) {
    case Style::kG:
      return absl::StrFormat("%.*g", digits_, value);
    case Style::kF:
      return absl::StrFormat("%.*f", digits_, value);
    case Style::kShortestFloat: {
      // 9 significant digits always read back (FLT_DECIMAL_DIG); fewer often do.
      const float f = static_cast<float>(value);
      for (int precision = 1; precision < digits_; ++precision) {
        std::string text = absl::StrFormat("%.*g", precision, f);
        if (std::strtof(text.c_str(), nullptr) == f) return text;
      }
      return absl::StrFormat("%.*g", digits_, f);
    }
  }
  return "null";  // unreachable: every style is handled above
}

std::string JsonString(absl::string_view text, JsonEscaping escaping) {
  const bool minimal = escaping == JsonEscaping::kMinimal;
  std::string out = "\"";
  out.reserve(text.size() + 2);
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text[0]);
    size_t consumed = 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += minimal ? "\\u000a" : "\\n";
        break;
      case '\r':
        out += minimal ? "\\u000d" : "\\r";
        break;
      case '\t':
        out += minimal ? "\\u0009" : "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else if (c < 0x80) {
          if (c == '<' && !minimal) {
            out += "\\u003c";
          } else {
            out += static_cast<char>(c);
          }
        } else if (const size_t length = Utf8SequenceLength(text); length > 0) {
          out.append(text.data(), length);
          consumed = length;
        } else {
          out += "\\ufffd";
        }
    }
    text.remove_prefix(consumed);
  }
  out += "\"";
  return out;
}

std::string JsonNumber(double value, JsonNumberFormat format) {
  if (!std::isfinite(value)) return "null";
  return format.Format(value);
}

JsonObject& JsonObject::Raw(absl::string_view key, absl::string_view json) {
  const bool first = text_.size() == 1;
  if (layout_ == JsonLayout::kCompact) {
    absl::StrAppend(&text_, first ? "" : ",", JsonString(key, escaping_), ":", json);
  } else {
    absl::StrAppend(&text_, first ? "\n  " : ",\n  ", JsonString(key, escaping_), ": ", json);
  }
  return *this;
}

std::string JsonObject::Close() const {
  const bool empty = text_.size() == 1;
  return absl::StrCat(text_, layout_ == JsonLayout::kOneFieldPerLine && !empty ? "\n}" : "}");
}

}  // namespace mtrain
