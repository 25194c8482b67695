#include "spec/json_syntax.h"

#include <cstddef>

#include "absl/strings/ascii.h"

namespace mtrain {
namespace {

constexpr int kMaxDepth = 512;

// A recursive-descent recogniser: each Parse* consumes one value (or fails, leaving pos_
// at the offending character).
class JsonScanner {
 public:
  explicit JsonScanner(absl::string_view text) : text_(text) {}

  bool ParseDocument() {
    SkipSpace();
    if (!ParseValue(0)) return false;
    SkipSpace();
    return pos_ == text_.size();
  }

  TextPosition Position() const {
    TextPosition at;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++at.line;
        at.column = 1;
      } else {
        ++at.column;
      }
    }
    return at;
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipSpace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  bool ParseValue(int depth) {
    switch (Peek()) {
      case '{':
        return ParseObject(depth);
      case '[':
        return ParseArray(depth);
      case '"':
        return ParseString();
      case 't':
        return ParseLiteral("true");
      case 'f':
        return ParseLiteral("false");
      case 'n':
        return ParseLiteral("null");
      default:
        return ParseNumber();
    }
  }

  bool ParseObject(int depth) {
    if (depth >= kMaxDepth) return false;
    ++pos_;  // '{'
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      if (Peek() != '"' || !ParseString()) return false;
      SkipSpace();
      if (Peek() != ':') return false;
      ++pos_;
      SkipSpace();
      if (!ParseValue(depth + 1)) return false;
      SkipSpace();
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      if (Peek() != ',') return false;
      ++pos_;
      SkipSpace();
    }
  }

  bool ParseArray(int depth) {
    if (depth >= kMaxDepth) return false;
    ++pos_;  // '['
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      if (!ParseValue(depth + 1)) return false;
      SkipSpace();
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      if (Peek() != ',') return false;
      ++pos_;
      SkipSpace();
    }
  }

  bool ParseString() {
    ++pos_;  // '"'
    while (!AtEnd()) {
      const unsigned char c = static_cast<unsigned char>(Peek());
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return false;  // control characters must be escaped
      if (c != '\\') {
        ++pos_;
        continue;
      }
      ++pos_;
      const char escaped = Peek();
      if (escaped == 'u') {
        ++pos_;
        for (int i = 0; i < 4; ++i, ++pos_) {
          if (!absl::ascii_isxdigit(static_cast<unsigned char>(Peek()))) return false;
        }
        continue;
      }
      if (absl::string_view("\"\\/bfnrt").find(escaped) == absl::string_view::npos || AtEnd()) {
        return false;
      }
      ++pos_;
    }
    return false;  // unterminated
  }

  bool ParseLiteral(absl::string_view word) {
    for (char c : word) {
      if (Peek() != c) return false;
      ++pos_;
    }
    return true;
  }

  bool Digits() {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) return false;
    while (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) ++pos_;
    return true;
  }

  bool ParseNumber() {
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (!Digits()) {
      return false;
    }
    if (Peek() == '.') {
      ++pos_;
      if (!Digits()) return false;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!Digits()) return false;
    }
    return true;
  }

  const absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<TextPosition> FindJsonSyntaxError(absl::string_view text) {
  JsonScanner scanner(text);
  if (scanner.ParseDocument()) return std::nullopt;
  return scanner.Position();
}

}  // namespace mtrain
