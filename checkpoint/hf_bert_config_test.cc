// The config.json of a HuggingFace BERT both ways: what an export writes, and each setting
// an import refuses, named.
#include "checkpoint/hf_bert_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

ModelSpec Bert(LayerNormPlacement placement) {
  JobSpec spec;
  ModelSpec& m = *spec.mutable_model();
  m.set_family(MODEL_FAMILY_BERT);
  m.set_num_layers(2);
  m.set_num_heads(4);
  m.set_hidden_size(64);
  m.set_ffn_hidden_size(96);
  m.set_seq_length(32);
  m.set_vocab_size(2048);
  m.set_layernorm_placement(placement);
  ApplyJobSpecDefaults(&spec);
  return spec.model();
}

google::protobuf::Struct Parse(const std::string& json) {
  google::protobuf::Struct config;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &config).ok()) << json;
  return config;
}

std::string ExportedConfig(const ModelSpec& model) {
  JobSpec spec;
  *spec.mutable_model() = model;
  return HuggingFaceBertConfigJson(spec);
}

std::string Problems(const std::string& json, const ModelSpec& model) {
  return absl::StrJoin(HuggingFaceBertConfigProblems(Parse(json), model), "\n");
}

TEST(HfBertConfigTest, TheExportDescribesTheModelAndPassesItsOwnCheck) {
  for (LayerNormPlacement placement : {LAYERNORM_PLACEMENT_PRE, LAYERNORM_PLACEMENT_POST}) {
    const ModelSpec model = Bert(placement);
    const std::string json = ExportedConfig(model);
    const bool pre = placement == LAYERNORM_PLACEMENT_PRE;
    EXPECT_THAT(json,
                HasSubstr(pre ? R"("model_type": "megatron-bert")" : R"("model_type": "bert")"));
    EXPECT_THAT(json, HasSubstr(pre ? "MegatronBertForPreTraining" : "\"BertForPreTraining\""));
    EXPECT_THAT(json, HasSubstr(R"("hidden_act": "gelu")"));
    EXPECT_THAT(json, HasSubstr(R"("intermediate_size": 96)"));
    EXPECT_THAT(json, HasSubstr(R"("max_position_embeddings": 32)"));
    EXPECT_EQ(Problems(json, model), "") << json;
  }
}

TEST(HfBertConfigTest, EverySettingThatChangesTheModelIsRefusedByName) {
  const ModelSpec pre = Bert(LAYERNORM_PLACEMENT_PRE);
  const ModelSpec post = Bert(LAYERNORM_PLACEMENT_POST);
  // The other placement's class.
  EXPECT_THAT(Problems(ExportedConfig(post), pre),
              HasSubstr(R"(model_type is "bert", not "megatron-bert")"));
  EXPECT_THAT(Problems(ExportedConfig(pre), post),
              HasSubstr(R"(model_type is "megatron-bert", not "bert")"));
  const std::string sizes = R"("model_type": "megatron-bert", "num_hidden_layers": 2,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 2048,
      "max_position_embeddings": 40)";
  EXPECT_EQ(Problems("{" + sizes + "}", pre), "");
  EXPECT_THAT(Problems("{" + sizes + R"(, "hidden_act": "gelu_new"})", pre),
              HasSubstr(R"(hidden_act is "gelu_new")"));
  EXPECT_THAT(Problems("{" + sizes + R"(, "layer_norm_eps": 1e-5})", pre),
              HasSubstr("layer_norm_eps is 1e-05; model.norm_epsilon is 1e-12"));
  EXPECT_THAT(Problems("{" + sizes + R"(, "type_vocab_size": 3})", pre),
              HasSubstr("type_vocab_size is 3"));
  EXPECT_THAT(Problems("{" + sizes + R"(, "position_embedding_type": "relative_key"})", pre),
              HasSubstr("position_embedding_type is \"relative_key\""));
  EXPECT_THAT(Problems("{" + sizes + R"(, "tie_word_embeddings": false})", pre),
              HasSubstr("tie_word_embeddings is false"));
  // Absent sizes take BertConfig's defaults: BERT-base's, not this model.
  EXPECT_THAT(Problems(R"({"model_type": "megatron-bert", "vocab_size": 2048})", pre),
              HasSubstr("num_hidden_layers is 12 but model.num_layers is 2"));
  EXPECT_THAT(Problems(R"({"model_type": "megatron-bert", "vocab_size": 2048})", pre),
              HasSubstr("intermediate_size is 3072 but model.ffn_hidden_size is 96"));
  EXPECT_THAT(Problems(R"({"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64,
                          "num_attention_heads": 4, "intermediate_size": 96,
                          "vocab_size": 2048, "max_position_embeddings": 16})",
                       post),
              HasSubstr("max_position_embeddings is 16, fewer positions than model.seq_length 32"));
}

}  // namespace
}  // namespace mtrain
