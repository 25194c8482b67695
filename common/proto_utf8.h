// Which string field of a serialized protobuf message holds bytes that are not UTF-8.
//
// proto3 refuses such a message while parsing it, before any handler sees it, so gRPC
// answers INTERNAL ("failed to parse") and nothing can say which field was wrong. A
// handler that takes the request's bytes parses them itself and, when that fails, asks
// this which field it was, to answer INVALID_ARGUMENT naming it:
//
//   if (!request.ParseFromString(bytes)) {
//     std::optional<std::string> field =
//         FindInvalidUtf8Field(*SubmitJobRequest::descriptor(), bytes);
//     // field == "spec.data.path"
//   }
#ifndef MTRAIN_COMMON_PROTO_UTF8_H_
#define MTRAIN_COMMON_PROTO_UTF8_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace mtrain {

// The dotted path (field names as in the .proto) of the first string field of `type`, or
// of a message nested in it, whose value in `wire_bytes` is not valid UTF-8. nullopt when
// there is none or the bytes are not wire format at all.
std::optional<std::string> FindInvalidUtf8Field(const google::protobuf::Descriptor& type,
                                                absl::string_view wire_bytes);

}  // namespace mtrain

#endif  // MTRAIN_COMMON_PROTO_UTF8_H_
