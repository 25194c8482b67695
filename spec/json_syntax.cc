#include "spec/json_syntax.h"

#include <cstddef>
#include <string>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"

namespace mtrain {
namespace {

using Json = nlohmann::json;

// Accepts every event and remembers the parser's error, if any. No document is built.
class ErrorRecorder : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) override {
    // out_of_range: a well-formed number too large for a double, not a syntax error.
    failed_ = dynamic_cast<const Json::out_of_range*>(&error) == nullptr;
    position_ = position;
    last_token_ = last_token;
    return false;
  }

  bool failed() const { return failed_; }
  // How many bytes the parser had read when it stopped: the offending character is the
  // last of them (one past the text when it ended early).
  std::size_t position() const { return position_; }
  const std::string& last_token() const { return last_token_; }

 private:
  bool failed_ = false;
  std::size_t position_ = 0;
  std::string last_token_;
};

// The 0-based offset of the first character that cannot continue a valid text. nlohmann
// stops after the last byte it read: that byte is the culprit when no token can go on with
// it, but when a whole token is simply not allowed there (a second key without a comma
// between, `"a" "b"`), the error starts where that token does.
std::size_t ErrorOffset(absl::string_view text, std::size_t position,
                        const std::string& last_token) {
  if (position == 0 || position > text.size()) return text.size();  // the text ended early
  const absl::string_view read = text.substr(0, position);
  // A whole string or number: nlohmann reports it as its last token, byte for byte.
  const bool scalar_token = !last_token.empty() &&
                            (last_token[0] == '"' || last_token[0] == '-' ||
                             (last_token[0] >= '0' && last_token[0] <= '9')) &&
                            absl::EndsWith(read, last_token) && Json::accept(last_token);
  if (scalar_token) return position - last_token.size();
  // A whole literal (its last token also holds what came before it since the last string or
  // number). A character that breaks a token is never the end of one of these words.
  for (const absl::string_view literal : {"true", "false", "null"}) {
    if (absl::EndsWith(read, literal)) return position - literal.size();
  }
  return position - 1;
}

TextPosition PositionAt(absl::string_view text, std::size_t offset) {
  TextPosition at;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++at.line;
      at.column = 1;
    } else {
      ++at.column;
    }
  }
  return at;
}

}  // namespace

std::optional<TextPosition> FindJsonSyntaxError(absl::string_view text) {
  // nlohmann skips a UTF-8 byte order mark; RFC 8259 forbids sending one, and protobuf's
  // parser refuses it.
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) return TextPosition{};
  ErrorRecorder recorder;
  Json::sax_parse(text.data(), text.data() + text.size(), &recorder, Json::input_format_t::json,
                  /*strict=*/true, /*ignore_comments=*/false);
  if (!recorder.failed()) return std::nullopt;
  return PositionAt(text, ErrorOffset(text, recorder.position(), recorder.last_token()));
}

}  // namespace mtrain
