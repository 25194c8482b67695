#include "checkpoint/hf_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/file_io.h"
#include "checkpoint/hf_bert_config.h"
#include "checkpoint/hf_config_fields.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/hf_llama_config.h"
#include "checkpoint/safetensors.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "model/family_defaults.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

namespace fs = std::filesystem;

// A config.json or an index is a few KB (an index lists every tensor: ~20 KB for GPT-2
// XL); this bounds what a wrong path can make us read.
constexpr uint64_t kMaxJsonFileBytes = 16 << 20;
// The GeLU spellings transformers computes in our tanh form.
constexpr const char* kTanhGelus[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

bool IsFile(const std::string& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

absl::StatusOr<google::protobuf::Struct> ReadJsonObject(const std::string& path) {
  ASSIGN_OR_RETURN(const RandomAccessFile file, RandomAccessFile::Open(path));
  ASSIGN_OR_RETURN(const uint64_t size, file.Size());
  if (size > kMaxJsonFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", size, " bytes is more than the ",
                                                   kMaxJsonFileBytes, " a JSON file may have"));
  }
  std::string text(static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(file.Read(0, text.size(), text.data()));
  google::protobuf::Struct object;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text, &object);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a JSON object: ", parsed.ToString()));
  }
  return object;
}

absl::StatusOr<HuggingFaceFiles> FromIndex(const std::string& index_path) {
  ASSIGN_OR_RETURN(const google::protobuf::Struct index, ReadJsonObject(index_path));
  const auto map = index.fields().find("weight_map");
  if (map == index.fields().end() ||
      map->second.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": has no \"weight_map\" object (tensor name -> shard file)"));
  }
  const std::string dir = fs::path(index_path).parent_path().string();
  HuggingFaceFiles files;
  std::set<std::string> shards;
  for (const auto& [tensor, value] : map->second.struct_value().fields()) {
    const std::string& shard = value.string_value();
    // Shards lie beside the index: a name that leaves the directory would read files the
    // data roots did not vet.
    if (value.kind_case() != google::protobuf::Value::kStringValue || shard.empty() ||
        absl::StrContains(shard, "/") || shard == "." || shard == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": weight_map[\"", tensor, "\"] must be a file name beside the index (got ",
          value.ShortDebugString(), ")"));
    }
    const std::string shard_path = (fs::path(dir) / shard).string();
    files.weight_map[tensor] = shard_path;
    shards.insert(shard_path);
  }
  for (const std::string& shard : shards) {
    if (!IsFile(shard)) {
      return absl::NotFoundError(
          absl::StrCat(index_path, " names shard ", shard, ", which does not exist"));
    }
  }
  files.safetensors.assign(shards.begin(), shards.end());
  return files;
}

using hf_config::Bool;
using hf_config::Number;
using hf_config::String;

// What in a GPT-2 config.json makes transformers compute another model than `model`.
std::vector<std::string> Gpt2ConfigProblems(const google::protobuf::Struct& config,
                                            const ModelSpec& model) {
  std::vector<std::string> problems;
  if (const auto type = String(config, "model_type"); type.has_value() && *type != "gpt2") {
    problems.push_back(absl::StrCat("model_type is \"", *type, "\", not \"gpt2\""));
  }
  const std::pair<const char*, std::pair<const char*, int>> sizes[] = {
      {"n_layer", {"model.num_layers", model.num_layers()}},
      {"n_embd", {"model.hidden_size", model.hidden_size()}},
      {"n_head", {"model.num_heads", model.num_heads()}},
      {"vocab_size", {"model.vocab_size", model.vocab_size()}}};
  for (const auto& [key, field] : sizes) {
    const std::optional<double> value = Number(config, key);
    if (value.has_value() && *value != field.second) {
      problems.push_back(
          absl::StrCat(key, " is ", *value, " but ", field.first, " is ", field.second));
    }
  }
  for (const char* key : {"n_positions", "n_ctx"}) {
    const std::optional<double> value = Number(config, key);
    if (value.has_value() && *value < model.seq_length()) {
      problems.push_back(absl::StrCat(
          key, " is ", *value, ", fewer positions than model.seq_length ", model.seq_length()));
    }
  }
  // HF's default epsilon is GPT-2's (1e-5), as is ours; the spec's is a float.
  const double epsilon = Number(config, "layer_norm_epsilon").value_or(1e-5);
  if (std::abs(epsilon - model.norm_epsilon()) > 1e-6 * epsilon) {
    problems.push_back(absl::StrCat("layer_norm_epsilon is ", epsilon, "; model.norm_epsilon is ",
                                    model.norm_epsilon()));
  }
  if (const auto activation = String(config, "activation_function"); activation.has_value()) {
    const bool tanh_form = std::any_of(std::begin(kTanhGelus), std::end(kTanhGelus),
                                       [&](const char* name) { return *activation == name; });
    if (!tanh_form) {
      problems.push_back(absl::StrCat("activation_function is \"", *activation,
                                      "\"; this engine computes GeLU's tanh form (gelu_new)"));
    }
  }
  // n_inner null (or absent) means GPT-2's 4 x n_embd (model/'s GPT-2 default).
  const std::optional<double> inner = Number(config, "n_inner");
  const double ffn = inner.value_or(Gpt2FfnHidden(model.hidden_size()));
  if (ffn != model.ffn_hidden_size()) {
    problems.push_back(absl::StrCat(
        "n_inner is ", inner.has_value() ? absl::StrCat(*inner) : "null", " (an MLP width of ", ffn,
        "); model.ffn_hidden_size is ", model.ffn_hidden_size()));
  }
  const std::pair<const char*, bool> flags[] = {{"scale_attn_weights", true},
                                                {"scale_attn_by_inverse_layer_idx", false},
                                                {"tie_word_embeddings", true},
                                                {"add_cross_attention", false}};
  for (const auto& [key, ours] : flags) {
    const std::optional<bool> value = Bool(config, key);
    if (value.has_value() && *value != ours) {
      problems.push_back(absl::StrCat(key, " is ", *value ? "true" : "false",
                                      "; this engine computes it ", ours ? "true" : "false"));
    }
  }
  return problems;
}

}  // namespace

absl::StatusOr<HuggingFaceFiles> FindHuggingFaceFiles(const std::string& path) {
  std::error_code error;
  HuggingFaceFiles files;
  std::string dir;
  if (fs::is_directory(path, error)) {
    dir = path;
    const std::string single = (fs::path(path) / kHuggingFaceModelFile).string();
    const std::string index = (fs::path(path) / kHuggingFaceIndexFile).string();
    if (IsFile(single)) {
      files.safetensors = {single};
    } else if (IsFile(index)) {
      ASSIGN_OR_RETURN(files, FromIndex(index));
    } else {
      return absl::NotFoundError(absl::StrCat(path, " holds neither ", kHuggingFaceModelFile,
                                              " nor ", kHuggingFaceIndexFile,
                                              " (what transformers' save_pretrained writes)"));
    }
  } else if (absl::EndsWith(path, ".index.json")) {
    dir = fs::path(path).parent_path().string();
    ASSIGN_OR_RETURN(files, FromIndex(path));
  } else {
    dir = fs::path(path).parent_path().string();
    files.safetensors = {path};
  }
  const std::string config = (fs::path(dir.empty() ? "." : dir) / kHuggingFaceConfigFile).string();
  if (IsFile(config)) files.config = config;
  return files;
}

absl::Status CheckHuggingFaceConfig(absl::string_view config_json, const std::string& config_path,
                                    const ModelSpec& model_spec) {
  JobSpec resolved;
  *resolved.mutable_model() = model_spec;
  ApplyJobSpecDefaults(&resolved);
  const ModelSpec& model = resolved.model();
  google::protobuf::Struct config;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(config_json.data(), config_json.size()), &config);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": not a JSON object: ", parsed.ToString()));
  }
  const std::vector<std::string> problems =
      model.family() == MODEL_FAMILY_LLAMA  ? HuggingFaceLlamaConfigProblems(config, model)
      : model.family() == MODEL_FAMILY_BERT ? HuggingFaceBertConfigProblems(config, model)
                                            : Gpt2ConfigProblems(config, model);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      config_path, " describes another model than the spec: ", absl::StrJoin(problems, "; "),
      " [rule: the spec's model fields must be the checkpoint's (set them from config.json), "
      "and the model must be one this engine computes]"));
}

absl::StatusOr<std::map<std::string, FullTensor>> ImportHuggingFace(
    const std::string& path, const ModelSpec& model, const std::set<std::string>* only,
    const HfTensorSink* sink) {
  ASSIGN_OR_RETURN(const HuggingFaceFiles files, FindHuggingFaceFiles(path));
  if (!files.config.empty()) {
    ASSIGN_OR_RETURN(const RandomAccessFile file, RandomAccessFile::Open(files.config));
    ASSIGN_OR_RETURN(const uint64_t size, file.Size());
    if (size > kMaxJsonFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(files.config, ": ", size, " bytes is more than a config.json has"));
    }
    std::string text(static_cast<size_t>(size), '\0');
    RETURN_IF_ERROR(file.Read(0, text.size(), text.data()));
    RETURN_IF_ERROR(CheckHuggingFaceConfig(text, files.config, model));
  }
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  std::map<std::string, const SafetensorsReader*> owner;
  HfTensorShapes shapes;
  for (const std::string& shard : files.safetensors) {
    ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(shard));
    readers.push_back(std::make_unique<SafetensorsReader>(std::move(reader)));
    for (const auto& [name, entry] : readers.back()->entries()) {
      const auto [it, inserted] = owner.emplace(name, readers.back().get());
      if (!inserted) {
        return absl::DataLossError(
            absl::StrCat("tensor '", name, "' is in both ", it->second->path(), " and ", shard));
      }
      shapes[name] = entry.shape;
    }
  }
  for (const auto& [name, shard] : files.weight_map) {
    const auto it = owner.find(name);
    if (it == owner.end() || it->second->path() != shard) {
      return absl::DataLossError(absl::StrCat(
          "the index places tensor '", name, "' in ", shard, ", which does not hold it",
          it == owner.end() ? std::string(" (no shard does)")
                            : absl::StrCat(" (", it->second->path(), " does)")));
    }
  }
  const HfTensorReader read = [&owner](const std::string& name) {
    return owner.at(name)->ReadFloat32(name);
  };
  return FromHuggingFace(shapes, read, model, only, sink);
}

}  // namespace mtrain
