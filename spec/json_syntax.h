// Where a JSON text first breaks the grammar (RFC 8259), as a line and column, for error
// messages: protobuf's JSON parser says what it expected but not where, and a job spec is
// written by hand. The grammar is nlohmann-json's strict parser (Debian's
// nlohmann-json3-dev); this file only turns its byte offset into a line and column.
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

// The position of the first character that cannot continue a valid JSON text: the start
// of a well-formed token the grammar does not allow there (a second key without a comma),
// a character no token can continue with, or the end, for a text that stops early; for a
// token both misplaced and malformed (`{tru}`), where it stops being well formed. nullopt
// for a valid text. Strict RFC 8259:
// no comments, single quotes, trailing commas, NaN or Infinity tokens, byte order mark
// or ill-formed UTF-8 in strings. Nesting depth is not limited (the parser is not
// recursive). A number beyond the range of a double is valid JSON but ends the search
// there: nullopt (protobuf's parser refuses such a number itself).
std::optional<TextPosition> FindJsonSyntaxError(absl::string_view text);

}  // namespace mtrain

#endif  // MTRAIN_SPEC_JSON_SYNTAX_H_
