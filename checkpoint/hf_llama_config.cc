#include "checkpoint/hf_llama_config.h"

#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf_config_fields.h"
#include "common/json_writer.h"
#include "model/parameter_table.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

using hf_config::Bool;
using hf_config::IsSet;
using hf_config::Number;
using hf_config::Object;
using hf_config::String;

// transformers' LlamaConfig defaults, which apply to a setting a config.json omits.
constexpr double kHfIntermediateSize = 11008;
constexpr double kHfMaxPositions = 2048;
constexpr double kHfRmsNormEps = 1e-6;
constexpr double kHfRopeTheta = 10000;

// The spec's float fields against a config's double: equal to float precision.
bool SameFloat(double config, double ours) {
  return std::abs(config - ours) <= 1e-6 * std::abs(config);
}

}  // namespace

std::string HuggingFaceLlamaConfigJson(const JobSpec& spec_in) {
  JobSpec spec = spec_in;
  ApplyJobSpecDefaults(&spec);
  const ModelSpec& m = spec.model();
  const JsonNumberFormat numbers = JsonNumberFormat::ShortestFloat();
  const std::string rope = JsonObject(numbers)
                               .String("rope_type", "default")
                               .Number("rope_theta", m.rope_theta())
                               .Close();
  JsonObject config(numbers, JsonLayout::kOneFieldPerLine);
  config
      .Raw("architectures", JsonArray(std::vector<std::string>{"LlamaForCausalLM"},
                                      [](const std::string& name) { return JsonString(name); }))
      .String("model_type", "llama")
      .Int("vocab_size", m.vocab_size())
      .Int("hidden_size", m.hidden_size())
      .Int("intermediate_size", m.ffn_hidden_size())
      .Int("num_hidden_layers", m.num_layers())
      .Int("num_attention_heads", m.num_heads())
      .Int("num_key_value_heads", m.num_kv_heads())
      .Int("head_dim", m.hidden_size() / m.num_heads())
      .String("hidden_act", "silu")
      .Int("max_position_embeddings", m.seq_length())
      .Number("rms_norm_eps", m.norm_epsilon())
      .Raw("rope_parameters", rope)
      .Number("rope_theta", m.rope_theta())
      .Bool("attention_bias", m.linear_bias())
      .Bool("mlp_bias", false)
      .Number("attention_dropout", spec.train().dropout())
      .Number("initializer_range", static_cast<float>(kInitStd))
      .Bool("tie_word_embeddings", m.tie_word_embeddings())
      .Null("bos_token_id")
      .Null("eos_token_id")
      .Bool("use_cache", true)
      .String("torch_dtype", "float32");
  return config.Close() + "\n";  // a text file ends with a newline
}

std::vector<std::string> HuggingFaceLlamaConfigProblems(const google::protobuf::Struct& config,
                                                        const ModelSpec& model) {
  std::vector<std::string> problems;
  if (const auto type = String(config, "model_type"); type.has_value() && *type != "llama") {
    problems.push_back(absl::StrCat("model_type is \"", *type,
                                    "\", not \"llama\" (model.family is MODEL_FAMILY_LLAMA)"));
  }
  const double heads = Number(config, "num_attention_heads").value_or(model.num_heads());
  hf_config::CheckSizes(
      config,
      {
          {"num_hidden_layers", "model.num_layers", static_cast<double>(model.num_layers()), {}},
          {"hidden_size", "model.hidden_size", static_cast<double>(model.hidden_size()), {}},
          {"num_attention_heads", "model.num_heads", static_cast<double>(model.num_heads()), {}},
          {"num_key_value_heads", "model.num_kv_heads", static_cast<double>(model.num_kv_heads()),
           heads},
          {"intermediate_size", "model.ffn_hidden_size",
           static_cast<double>(model.ffn_hidden_size()), kHfIntermediateSize},
          {"vocab_size", "model.vocab_size", static_cast<double>(model.vocab_size()), {}},
          {"head_dim",
           "model.hidden_size / model.num_heads",
           static_cast<double>(model.hidden_size() / std::max(1, model.num_heads())),
           {}},
      },
      &problems);
  hf_config::CheckPositionsAndEpsilon(config, kHfMaxPositions, model.seq_length(), "rms_norm_eps",
                                      kHfRmsNormEps, model.norm_epsilon(), &problems);
  // transformers 5 keeps the rotary settings in rope_parameters, 4.x in rope_theta and
  // rope_scaling.
  std::optional<double> theta = Number(config, "rope_theta");
  if (const google::protobuf::Struct* rope = Object(config, "rope_parameters")) {
    if (const auto nested = Number(*rope, "rope_theta")) theta = nested;
    if (const auto type = String(*rope, "rope_type"); type.has_value() && *type != "default") {
      problems.push_back(absl::StrCat("rope_parameters.rope_type is \"", *type,
                                      "\"; this engine computes unscaled rotary positions "
                                      "(\"default\")"));
    }
  }
  if (!SameFloat(theta.value_or(kHfRopeTheta), model.rope_theta())) {
    problems.push_back(absl::StrCat("rope_theta is ", theta.value_or(kHfRopeTheta),
                                    "; model.rope_theta is ", model.rope_theta()));
  }
  if (IsSet(config, "rope_scaling")) {
    problems.push_back(
        "rope_scaling is set; this engine computes unscaled rotary positions (rope_scaling "
        "null)");
  }
  if (const auto act = String(config, "hidden_act"); act.has_value() && *act != "silu") {
    problems.push_back(
        absl::StrCat("hidden_act is \"", *act, "\"; this engine computes SwiGLU with silu"));
  }
  const std::pair<const char*, bool> flags[] = {
      {"attention_bias", model.linear_bias()},
      {"mlp_bias", false},
      {"tie_word_embeddings", model.tie_word_embeddings()}};
  for (const auto& [key, ours] : flags) {
    const bool value = Bool(config, key).value_or(false);  // LlamaConfig's defaults
    if (value != ours) {
      problems.push_back(absl::StrCat(key, " is ", value ? "true" : "false",
                                      "; the spec computes it ", ours ? "true" : "false"));
    }
  }
  return problems;
}

}  // namespace mtrain
