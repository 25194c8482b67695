// Where a JSON text first breaks the grammar (RFC 8259), as a line and column, for error
// messages: protobuf's JSON parser says what it expected but not where, and a job spec is
// written by hand.
//
//   if (auto at = FindJsonSyntaxError(text)) { ... at->line, at->column ... }
#ifndef MTRAIN_SPEC_JSON_SYNTAX_H_
#define MTRAIN_SPEC_JSON_SYNTAX_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace mtrain {

struct TextPosition {
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes
};

// The position of the first character that cannot continue a valid JSON text (or of the
// end, for a text that stops early); nullopt for a valid one. Nesting deeper than 512
// counts as an error at the opening bracket.
std::optional<TextPosition> FindJsonSyntaxError(absl::string_view text);

}  // namespace mtrain

#endif  // MTRAIN_SPEC_JSON_SYNTAX_H_
