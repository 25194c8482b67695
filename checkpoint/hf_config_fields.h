// Typed reads of a transformers config.json's fields (parsed into a protobuf Struct by
// JsonStringToMessage), shared by the families' config checks: a field that is absent or
// of another JSON type reads as nullopt, and the check then applies transformers' default.
#ifndef MTRAIN_CHECKPOINT_HF_CONFIG_FIELDS_H_
#define MTRAIN_CHECKPOINT_HF_CONFIG_FIELDS_H_

#include <optional>
#include <string>

#include "google/protobuf/struct.pb.h"

namespace mtrain::hf_config {

inline const google::protobuf::Value* Field(const google::protobuf::Struct& config,
                                            const std::string& key,
                                            google::protobuf::Value::KindCase kind) {
  const auto it = config.fields().find(key);
  if (it == config.fields().end() || it->second.kind_case() != kind) return nullptr;
  return &it->second;
}

inline std::optional<double> Number(const google::protobuf::Struct& config,
                                    const std::string& key) {
  const auto* value = Field(config, key, google::protobuf::Value::kNumberValue);
  if (value == nullptr) return std::nullopt;
  return value->number_value();
}

inline std::optional<bool> Bool(const google::protobuf::Struct& config, const std::string& key) {
  const auto* value = Field(config, key, google::protobuf::Value::kBoolValue);
  if (value == nullptr) return std::nullopt;
  return value->bool_value();
}

inline std::optional<std::string> String(const google::protobuf::Struct& config,
                                         const std::string& key) {
  const auto* value = Field(config, key, google::protobuf::Value::kStringValue);
  if (value == nullptr) return std::nullopt;
  return value->string_value();
}

// A nested object ("rope_parameters"), or null when absent or not an object.
inline const google::protobuf::Struct* Object(const google::protobuf::Struct& config,
                                              const std::string& key) {
  const auto* value = Field(config, key, google::protobuf::Value::kStructValue);
  return value == nullptr ? nullptr : &value->struct_value();
}

// Present and not JSON null.
inline bool IsSet(const google::protobuf::Struct& config, const std::string& key) {
  const auto it = config.fields().find(key);
  return it != config.fields().end() &&
         it->second.kind_case() != google::protobuf::Value::kNullValue;
}

}  // namespace mtrain::hf_config

#endif  // MTRAIN_CHECKPOINT_HF_CONFIG_FIELDS_H_
