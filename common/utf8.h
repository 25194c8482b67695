// Whether bytes are well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. Protobuf's proto3 `string` fields must hold
// UTF-8, so a message built in code with other bytes serializes but does not parse on
// the other side; checking before storing or sending turns that into a clear refusal.
//
//   if (!IsValidUtf8(path)) return absl::InvalidArgumentError("data.path: not UTF-8");
#ifndef MTRAIN_COMMON_UTF8_H_
#define MTRAIN_COMMON_UTF8_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace mtrain {

// The byte offset of the first ill-formed sequence, or nullopt if `text` is valid UTF-8.
std::optional<size_t> FindInvalidUtf8(absl::string_view text);

inline bool IsValidUtf8(absl::string_view text) { return !FindInvalidUtf8(text).has_value(); }

}  // namespace mtrain

#endif  // MTRAIN_COMMON_UTF8_H_
