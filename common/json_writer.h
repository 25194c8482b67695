// The one way the project writes JSON: string escaping, numbers in a stated format, and a
// builder for objects and arrays. Used by the step metrics line (`train --metrics_jsonl`,
// `trainctl watch --json`), `train --stage_timings` and the coordinator's /api documents.
//
//   const JsonNumberFormat numbers = JsonNumberFormat::Significant(9);
//   std::string line = JsonObject(numbers).Int("step", 3).Number("loss", 5.54).Close();
//   // {"step":3,"loss":5.54}
//
// Output is compact (no spaces), in the order fields are added, and always valid RFC 8259:
// strings are escaped (invalid UTF-8 replaced by U+FFFD), non-finite numbers written as
// null. The number format is each caller's, because it is part of what users read and
// parse: changing one would change a contract's bytes. Pure functions; thread-safe.
#ifndef MTRAIN_COMMON_JSON_WRITER_H_
#define MTRAIN_COMMON_JSON_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mtrain {

// How a finite number is printed: printf's %.Ng (N significant digits, the exponent form
// for large and small magnitudes) or %.Nf (N digits after the point).
class JsonNumberFormat {
 public:
  static constexpr JsonNumberFormat Significant(int digits) { return {Style::kG, digits}; }
  static constexpr JsonNumberFormat Fixed(int decimals) { return {Style::kF, decimals}; }

  std::string Format(double value) const;

 private:
  enum class Style { kG, kF };
  constexpr JsonNumberFormat(Style style, int digits) : style_(style), digits_(digits) {}

  Style style_;
  int digits_;
};

// `text` as a JSON string literal, quotes included. Control characters, quotes and
// backslashes are escaped, and '<' too (as \u003c), so that "</script>" in a message can
// never end a script block should a page inline a document.
std::string JsonString(absl::string_view text);

// `value` in `format`; null for NaN and infinities, which JSON cannot carry.
std::string JsonNumber(double value, JsonNumberFormat format);

// Builds one JSON object field by field; its numbers are written in the format given at
// construction. Keys are not checked for duplicates.
class JsonObject {
 public:
  explicit JsonObject(JsonNumberFormat numbers) : numbers_(numbers) {}

  // `json` must already be one JSON value (a nested JsonObject's Close(), a JsonArray).
  JsonObject& Raw(absl::string_view key, absl::string_view json);
  JsonObject& String(absl::string_view key, absl::string_view value) {
    return Raw(key, JsonString(value));
  }
  JsonObject& Int(absl::string_view key, int64_t value) { return Raw(key, absl::StrCat(value)); }
  JsonObject& Number(absl::string_view key, double value) {
    return Raw(key, JsonNumber(value, numbers_));
  }
  JsonObject& Bool(absl::string_view key, bool value) { return Raw(key, value ? "true" : "false"); }
  JsonObject& Null(absl::string_view key) { return Raw(key, "null"); }

  // The object's text; the builder can take more fields afterwards.
  std::string Close() const { return text_ + "}"; }

 private:
  JsonNumberFormat numbers_;
  std::string text_ = "{";
};

// A JSON array of `items`, each written by `to_json` (returning one JSON value).
template <typename Items, typename ToJson>
std::string JsonArray(const Items& items, ToJson to_json) {
  std::string text = "[";
  for (const auto& item : items) absl::StrAppend(&text, text.size() > 1 ? "," : "", to_json(item));
  return text + "]";
}

}  // namespace mtrain

#endif  // MTRAIN_COMMON_JSON_WRITER_H_
