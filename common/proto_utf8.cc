#include "common/proto_utf8.h"

#include "common/utf8.h"
#include "google/protobuf/unknown_field_set.h"

namespace mtrain {
namespace {

// Messages nest at most this deep here (a JobSpec is three levels); bounds the recursion
// on hostile input that nests length-delimited fields.
constexpr int kMaxDepth = 16;

std::optional<std::string> Find(const google::protobuf::Descriptor& type, absl::string_view bytes,
                                const std::string& prefix, int depth) {
  if (depth > kMaxDepth) return std::nullopt;
  // Any well-formed wire format parses as unknown fields, whatever its strings hold.
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return std::nullopt;
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    if (field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const google::protobuf::FieldDescriptor* described = type.FindFieldByNumber(field.number());
    if (described == nullptr) continue;
    const std::string name = prefix.empty() ? described->name() : prefix + "." + described->name();
    if (described->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
      if (!IsValidUtf8(field.length_delimited())) return name;
    } else if (described->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
      if (std::optional<std::string> inner =
              Find(*described->message_type(), field.length_delimited(), name, depth + 1)) {
        return inner;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> FindInvalidUtf8Field(const google::protobuf::Descriptor& type,
                                                absl::string_view wire_bytes) {
  return Find(type, wire_bytes, "", 0);
}

}  // namespace mtrain
