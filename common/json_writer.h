// The one way the project writes JSON: string escaping, numbers in a stated format, and a
// builder for objects and arrays. Used by the step metrics line (`train --metrics_jsonl`,
// `trainctl watch --json`), `train --stage_timings`, the coordinator's /api documents, the
// safetensors header and the HuggingFace config.json.
//
//   const JsonNumberFormat numbers = JsonNumberFormat::Significant(9);
//   std::string line = JsonObject(numbers).Int("step", 3).Number("loss", 5.54).Close();
//   // {"step":3,"loss":5.54}
//
// Output is compact (no spaces) unless a layout says otherwise, in the order fields are
// added, and always valid RFC 8259: strings are escaped (invalid UTF-8 replaced by U+FFFD),
// integers written exactly (never through a double), non-finite numbers written as null.
// The number format, the escaping and the layout are each caller's, because they are part
// of what users read, parse and hash: changing one would change a contract's bytes. Pure
// functions; thread-safe.
#ifndef MTRAIN_COMMON_JSON_WRITER_H_
#define MTRAIN_COMMON_JSON_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mtrain {

// How a finite number is printed: printf's %.Ng (N significant digits, the exponent form
// for large and small magnitudes), %.Nf (N digits after the point), or the shortest %.Ng
// that reads back as the same float.
class JsonNumberFormat {
 public:
  static constexpr JsonNumberFormat Significant(int digits) { return {Style::kG, digits}; }
  static constexpr JsonNumberFormat Fixed(int decimals) { return {Style::kF, decimals}; }
  // The value rounded to float, in the fewest significant digits (1 to 9) that strtof reads
  // back as that float: 0.1f as "0.1", not "0.100000001". For settings a float holds.
  static constexpr JsonNumberFormat ShortestFloat() { return {Style::kShortestFloat, 9}; }

  std::string Format(double value) const;

 private:
  enum class Style { kG, kF, kShortestFloat };
  constexpr JsonNumberFormat(Style style, int digits) : style_(style), digits_(digits) {}

  Style style_;
  int digits_;
};

// How strings are escaped. Either way the literal reads back as `text`, except that
// invalid UTF-8 is replaced by U+FFFD (JSON text is UTF-8).
enum class JsonEscaping {
  // Quotes and backslashes; \n, \r and \t as such, other control characters as \u00XX;
  // and '<' as \u003c, so that "</script>" in a message can never end a script block
  // should a page inline a document.
  kScriptSafe,
  // Only what RFC 8259 requires: quotes, backslashes, and every control character as
  // \u00XX ('\n' as \u000a); '<' as it is. The safetensors header has always been
  // escaped so, and its files are hashed.
  kMinimal,
};

// How a JsonObject lays out its fields.
enum class JsonLayout {
  kCompact,  // {"a":1,"b":[2,3]}
  // One field per line, indented by two spaces, a space after each colon, the closing brace
  // on a line of its own; nested values written inline as given:
  //   {
  //     "a": 1,
  //     "b": [2,3]
  //   }
  // An object without fields is {}.
  kOneFieldPerLine,
};

// `text` as a JSON string literal, quotes included.
std::string JsonString(absl::string_view text, JsonEscaping escaping = JsonEscaping::kScriptSafe);

// `value` in `format`; null for NaN and infinities, which JSON cannot carry.
std::string JsonNumber(double value, JsonNumberFormat format);

// Builds one JSON object field by field, in the order they are added; its numbers, keys
// and strings are written as given at construction. Keys are not checked for duplicates.
class JsonObject {
 public:
  explicit JsonObject(JsonNumberFormat numbers, JsonLayout layout = JsonLayout::kCompact,
                      JsonEscaping escaping = JsonEscaping::kScriptSafe)
      : numbers_(numbers), layout_(layout), escaping_(escaping) {}

  // `json` must already be one JSON value (a nested JsonObject's Close(), a JsonArray).
  JsonObject& Raw(absl::string_view key, absl::string_view json);
  JsonObject& String(absl::string_view key, absl::string_view value) {
    return Raw(key, JsonString(value, escaping_));
  }
  JsonObject& Int(absl::string_view key, int64_t value) { return Raw(key, absl::StrCat(value)); }
  JsonObject& Number(absl::string_view key, double value) {
    return Raw(key, JsonNumber(value, numbers_));
  }
  JsonObject& Bool(absl::string_view key, bool value) { return Raw(key, value ? "true" : "false"); }
  JsonObject& Null(absl::string_view key) { return Raw(key, "null"); }

  // The object's text; the builder can take more fields afterwards.
  std::string Close() const;

 private:
  JsonNumberFormat numbers_;
  JsonLayout layout_;
  JsonEscaping escaping_;
  std::string text_ = "{";
};

// A JSON array of `items`, each written by `to_json` (returning one JSON value), compact.
// Integers written by absl::StrCat are exact at any width:
//   JsonArray(offsets, [](uint64_t v) { return absl::StrCat(v); })  // [0,18446744073709551615]
template <typename Items, typename ToJson>
std::string JsonArray(const Items& items, ToJson to_json) {
  std::string text = "[";
  for (const auto& item : items) absl::StrAppend(&text, text.size() > 1 ? "," : "", to_json(item));
  return text + "]";
}

}  // namespace mtrain

#endif  // MTRAIN_COMMON_JSON_WRITER_H_
