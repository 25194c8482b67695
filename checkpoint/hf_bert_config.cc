#include "checkpoint/hf_bert_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf_config_fields.h"
#include "common/json_writer.h"
#include "model/parameter_table.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

using hf_config::Bool;
using hf_config::Number;
using hf_config::String;

// transformers' BertConfig (and MegatronBertConfig) defaults, which apply to a setting a
// config.json omits.
constexpr double kHfIntermediateSize = 3072;
constexpr double kHfMaxPositions = 512;
constexpr double kHfLayerNormEps = 1e-12;
constexpr double kHfTypeVocabSize = 2;

bool IsPost(const ModelSpec& m) { return m.layernorm_placement() == LAYERNORM_PLACEMENT_POST; }

}  // namespace

std::string HuggingFaceBertConfigJson(const JobSpec& spec_in) {
  JobSpec spec = spec_in;
  ApplyJobSpecDefaults(&spec);
  const ModelSpec& m = spec.model();
  const bool post = IsPost(m);
  const bool choice = m.bert_head() == BERT_HEAD_MULTIPLE_CHOICE;
  const std::string architecture =
      absl::StrCat(post ? "Bert" : "MegatronBert", choice ? "ForMultipleChoice" : "ForPreTraining");
  JsonObject config(JsonNumberFormat::ShortestFloat(), JsonLayout::kOneFieldPerLine);
  config
      .Raw("architectures", JsonArray(std::vector<std::string>{architecture},
                                      [](const std::string& name) { return JsonString(name); }))
      .String("model_type", post ? "bert" : "megatron-bert")
      .Int("vocab_size", m.vocab_size())
      .Int("hidden_size", m.hidden_size())
      .Int("intermediate_size", m.ffn_hidden_size())
      .Int("num_hidden_layers", m.num_layers())
      .Int("num_attention_heads", m.num_heads())
      .String("hidden_act", "gelu")
      .Int("max_position_embeddings", m.seq_length())
      .Int("type_vocab_size", 2)
      .Number("layer_norm_eps", m.norm_epsilon())
      .String("position_embedding_type", "absolute")
      .Number("hidden_dropout_prob", spec.train().dropout())
      .Number("attention_probs_dropout_prob", spec.train().dropout())
      .Number("initializer_range", static_cast<float>(kInitStd))
      .Bool("tie_word_embeddings", true)
      .Null("pad_token_id")
      .String("torch_dtype", "float32");
  return config.Close() + "\n";  // a text file ends with a newline
}

std::vector<std::string> HuggingFaceBertConfigProblems(const google::protobuf::Struct& config,
                                                       const ModelSpec& model) {
  std::vector<std::string> problems;
  const bool post = IsPost(model);
  const std::string type = post ? "bert" : "megatron-bert";
  if (const auto found = String(config, "model_type"); found.has_value() && *found != type) {
    problems.push_back(absl::StrCat(
        "model_type is \"", *found, "\", not \"", type, "\" (model.layernorm_placement is ",
        LayerNormPlacement_Name(model.layernorm_placement()),
        post ? ": BertForPreTraining's LayerNorm after each residual add)"
             : ": MegatronBertForPreTraining's LayerNorm before each sub-layer)"));
  }
  hf_config::CheckSizes(
      config,
      {
          {"num_hidden_layers", "model.num_layers", static_cast<double>(model.num_layers()), 12},
          {"hidden_size", "model.hidden_size", static_cast<double>(model.hidden_size()), 768},
          {"num_attention_heads", "model.num_heads", static_cast<double>(model.num_heads()), 12},
          {"intermediate_size", "model.ffn_hidden_size",
           static_cast<double>(model.ffn_hidden_size()), kHfIntermediateSize},
          {"vocab_size", "model.vocab_size", static_cast<double>(model.vocab_size()), {}},
          {"type_vocab_size", "BERT's two segments", 2, kHfTypeVocabSize},
      },
      &problems);
  hf_config::CheckPositionsAndEpsilon(config, kHfMaxPositions, model.seq_length(), "layer_norm_eps",
                                      kHfLayerNormEps, model.norm_epsilon(), &problems);
  if (const auto act = String(config, "hidden_act"); act.has_value() && *act != "gelu") {
    problems.push_back(absl::StrCat("hidden_act is \"", *act,
                                    "\"; this engine computes BERT's exact GeLU (\"gelu\")"));
  }
  if (const auto positions_type = String(config, "position_embedding_type");
      positions_type.has_value() && *positions_type != "absolute") {
    problems.push_back(absl::StrCat("position_embedding_type is \"", *positions_type,
                                    "\"; this engine computes learned absolute positions"));
  }
  if (!Bool(config, "tie_word_embeddings").value_or(true)) {
    problems.push_back(
        "tie_word_embeddings is false; BERT's masked-LM decoder is the token embedding here");
  }
  return problems;
}

}  // namespace mtrain
