// Typed reads of a transformers config.json's fields (parsed into a protobuf Struct by
// JsonStringToMessage), shared by the families' config checks: a field that is absent or
// of another JSON type reads as nullopt, and the check then applies transformers' default.
#ifndef MTRAIN_CHECKPOINT_HF_CONFIG_FIELDS_H_
#define MTRAIN_CHECKPOINT_HF_CONFIG_FIELDS_H_

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// A size the config must give as the spec does.
struct SpecSize {
  const char* key;    // the config's
  const char* field;  // the spec's, for the message
  double ours;
  std::optional<double> absent;  // transformers' default; nullopt: no check when absent
};

// One line per size whose value (or default when absent) differs from the spec's:
// "KEY is VALUE but FIELD is OURS".
inline void CheckSizes(const google::protobuf::Struct& config, const std::vector<SpecSize>& sizes,
                       std::vector<std::string>* problems) {
  for (const SpecSize& size : sizes) {
    std::optional<double> value = Number(config, size.key);
    if (!value.has_value()) value = size.absent;
    if (value.has_value() && *value != size.ours) {
      problems->push_back(
          absl::StrCat(size.key, " is ", *value, " but ", size.field, " is ", size.ours));
    }
  }
}

// max_position_embeddings (default `absent`) below the spec's seq_length, and the
// normalisation's epsilon under `key` (default `absent_epsilon`) other than the spec's to
// float precision (the spec's field is a float).
inline void CheckPositionsAndEpsilon(const google::protobuf::Struct& config,
                                     double absent_positions, int seq_length,
                                     const char* epsilon_key, double absent_epsilon,
                                     double norm_epsilon, std::vector<std::string>* problems) {
  const double positions = Number(config, "max_position_embeddings").value_or(absent_positions);
  if (positions < seq_length) {
    problems->push_back(absl::StrCat("max_position_embeddings is ", positions,
                                     ", fewer positions than model.seq_length ", seq_length));
  }
  const double epsilon = Number(config, epsilon_key).value_or(absent_epsilon);
  if (std::abs(epsilon - norm_epsilon) > 1e-6 * std::abs(epsilon)) {
    problems->push_back(
        absl::StrCat(epsilon_key, " is ", epsilon, "; model.norm_epsilon is ", norm_epsilon));
  }
}

}  // namespace mtrain::hf_config

#endif  // MTRAIN_CHECKPOINT_HF_CONFIG_FIELDS_H_
