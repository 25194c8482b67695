#include "dashboard/promql_names.h"

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mtrain {
namespace {

bool IsIdentifierStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == ':'; }
bool IsIdentifierChar(char c) { return IsIdentifierStart(c) || absl::ascii_isdigit(c); }

// Words that are never metric names where they stand: binary and set operators,
// modifiers, number literals, and aggregation operators (PromQL keywords are
// case-insensitive).
bool IsKeyword(absl::string_view word) {
  static const auto* const kKeywords = new absl::flat_hash_set<std::string>{
      "and",   "or",     "unless",  "by",       "without",      "on",         "ignoring",
      "bool",  "offset", "atan2",   "inf",      "nan",          "group_left", "group_right",
      "sum",   "min",    "max",     "avg",      "group",        "stddev",     "stdvar",
      "count", "topk",   "bottomk", "quantile", "count_values", "limitk",     "limit_ratio"};
  return kKeywords->contains(absl::AsciiStrToLower(word));
}

// Keywords followed by a parenthesised list of label names, which are not metrics.
bool TakesLabelList(absl::string_view word) {
  const std::string lower = absl::AsciiStrToLower(word);
  return lower == "by" || lower == "without" || lower == "on" || lower == "ignoring" ||
         lower == "group_left" || lower == "group_right";
}

class Scanner {
 public:
  explicit Scanner(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::set<std::string>> Run() {
    while (true) {
      SkipSpace();
      if (AtEnd()) return std::move(names_);
      const char c = Peek();
      if (c == '"' || c == '\'' || c == '`') {
        if (!SkipString().ok()) return Error("unterminated string");
      } else if (c == '{') {
        if (absl::Status s = ReadMatchers(); !s.ok()) return s;
      } else if (c == '[') {
        const size_t close = text_.find(']', pos_);
        if (close == absl::string_view::npos) return Error("'[' without ']'");
        pos_ = close + 1;
      } else if (c == '$') {
        if (absl::Status s = SkipVariable(); !s.ok()) return s;
      } else if (absl::ascii_isdigit(c) || (c == '.' && absl::ascii_isdigit(PeekAt(1)))) {
        // A number or a duration (5m, 1h30m, 1e3, 0x1f).
        while (!AtEnd() && (absl::ascii_isalnum(Peek()) || Peek() == '.' || Peek() == '_')) ++pos_;
      } else if (IsIdentifierStart(c)) {
        ReadIdentifier();
      } else if (c == '(') {
        ++depth_;
        ++pos_;
      } else if (c == ')') {
        if (--depth_ < 0) return Error("')' without '('");
        ++pos_;
      } else if (absl::StrContains("+-*/%^=!<>,@", c)) {
        ++pos_;
      } else {
        return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
      if (AtEnd() && depth_ != 0) return Error("'(' without ')'");
    }
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return PeekAt(0); }
  char PeekAt(size_t ahead) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  void SkipSpace() {
    while (!AtEnd() && absl::ascii_isspace(Peek())) ++pos_;
  }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " at offset ", pos_, " of PromQL expression: ", text_));
  }

  absl::string_view Identifier() {
    const size_t begin = pos_;
    while (!AtEnd() && IsIdentifierChar(Peek())) ++pos_;
    return text_.substr(begin, pos_ - begin);
  }

  // A string literal starting at pos_; on success pos_ is past it and *value holds its
  // raw contents.
  absl::Status SkipString(std::string* value = nullptr) {
    const char quote = Peek();
    const size_t begin = ++pos_;
    while (!AtEnd() && Peek() != quote) {
      if (Peek() == '\\' && quote != '`') ++pos_;
      ++pos_;
    }
    if (AtEnd()) return Error("unterminated string");
    if (value != nullptr) *value = std::string(text_.substr(begin, pos_ - begin));
    ++pos_;
    return absl::OkStatus();
  }

  // Grafana's `$name`, `${name}` and `${name:format}`.
  absl::Status SkipVariable() {
    ++pos_;
    if (Peek() == '{') {
      const size_t close = text_.find('}', pos_);
      if (close == absl::string_view::npos) return Error("'${' without '}'");
      pos_ = close + 1;
    } else if (Identifier().empty()) {
      return Error("'$' without a variable name");
    }
    return absl::OkStatus();
  }

  // `{label op "value", ...}`: label names are not metrics, but `__name__="x"` names one.
  absl::Status ReadMatchers() {
    ++pos_;
    while (true) {
      SkipSpace();
      if (Peek() == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      std::string label;
      if (Peek() == '"') {
        // A quoted metric name (Prometheus 3's UTF-8 names) stands alone.
        std::string name;
        if (!SkipString(&name).ok()) return Error("unterminated string");
        SkipSpace();
        if (Peek() == ',' || Peek() == '}') {
          names_.insert(name);
          if (Peek() == ',') ++pos_;
          continue;
        }
        label = name;
      } else {
        label = std::string(Identifier());
        if (label.empty()) return Error("expected a label name");
      }
      SkipSpace();
      std::string op;
      while (!AtEnd() && absl::StrContains("=!~", Peek())) op += text_[pos_++];
      if (op != "=" && op != "!=" && op != "=~" && op != "!~") {
        return Error("expected =, !=, =~ or !~ in a label matcher");
      }
      SkipSpace();
      if (Peek() != '"' && Peek() != '\'' && Peek() != '`') return Error("expected a string");
      std::string value;
      if (!SkipString(&value).ok()) return Error("unterminated string");
      if (label == "__name__" && op == "=") names_.insert(value);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != '}') {
        return Error("expected ',' or '}' after a label matcher");
      }
    }
  }

  void ReadIdentifier() {
    const absl::string_view word = Identifier();
    SkipSpace();
    if (TakesLabelList(word)) {
      if (Peek() == '(') {
        const size_t close = text_.find(')', pos_);
        pos_ = close == absl::string_view::npos ? text_.size() : close + 1;
      }
      return;
    }
    if (IsKeyword(word)) return;
    if (Peek() == '(') return;  // a function
    names_.insert(std::string(word));
  }

  absl::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::set<std::string> names_;
};

}  // namespace

absl::StatusOr<std::set<std::string>> MetricNamesIn(absl::string_view expression) {
  return Scanner(expression).Run();
}

std::set<std::string> ExposedSeriesNames(absl::string_view exposition) {
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit(exposition, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() != 2) continue;
      const std::string name(parts[0]);
      if (parts[1] == "histogram" || parts[1] == "summary") {
        names.insert(name + "_sum");
        names.insert(name + "_count");
        names.insert(parts[1] == "histogram" ? name + "_bucket" : name);
      } else {
        names.insert(name);
      }
    } else if (!absl::StartsWith(line, "#")) {
      names.insert(std::string(line.substr(0, line.find_first_of("{ "))));
    }
  }
  return names;
}

}  // namespace mtrain
