// HuggingFace Llama interchange against files transformers itself wrote
// (tests/parity/llama/, llama_reference.py): import then export gives transformers'
// tensors back bit for bit (names, shapes, values; the sharded, tied one included), and
// every config.json setting that would make transformers compute another model is refused
// by name.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kFixtures[] = "tests/parity/llama/";

// The spec of each fixture (its config.json's settings).
ModelSpec Model(bool gqa) {
  ModelSpec m;
  m.set_family(MODEL_FAMILY_LLAMA);
  m.set_num_layers(2);
  m.set_num_heads(4);
  m.set_hidden_size(64);
  m.set_ffn_hidden_size(96);
  m.set_seq_length(32);
  m.set_vocab_size(300);
  if (gqa) {
    m.set_num_kv_heads(2);
    m.set_norm_epsilon(1e-6f);
  } else {
    m.set_num_kv_heads(4);
    m.set_norm_epsilon(1e-5f);
    m.set_rope_theta(500);
    m.set_linear_bias(true);
    m.set_tie_word_embeddings(true);
  }
  return m;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Every tensor of a fixture directory (its shards merged).
std::map<std::string, SafetensorsTensor> FixtureTensors(const std::string& dir) {
  std::map<std::string, SafetensorsTensor> tensors;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(entry.path().string());
    EXPECT_TRUE(file.ok()) << file.status();
    if (file.ok()) tensors.insert(file->tensors.begin(), file->tensors.end());
  }
  return tensors;
}

TEST(HfLlamaTest, ImportThenExportGivesTransformersTensorsBack) {
  for (const bool gqa : {true, false}) {
    const std::string dir = std::string(kFixtures) + (gqa ? "gqa" : "mha_tied_sharded");
    absl::StatusOr<std::map<std::string, FullTensor>> ours = ImportHuggingFace(dir, Model(gqa));
    ASSERT_TRUE(ours.ok()) << ours.status();
    EXPECT_EQ(ours->count("lm_head"), gqa ? 1u : 0u) << "untied only where the config says";
    absl::StatusOr<SafetensorsFile> exported = ToHuggingFace(*ours, Model(gqa));
    ASSERT_TRUE(exported.ok()) << exported.status();
    const std::map<std::string, SafetensorsTensor> theirs = FixtureTensors(dir);
    ASSERT_EQ(exported->tensors.size(), theirs.size()) << dir;
    for (const auto& [name, tensor] : theirs) {
      ASSERT_EQ(exported->tensors.count(name), 1u) << name;
      const SafetensorsTensor& mine = exported->tensors.at(name);
      EXPECT_EQ(mine.shape, tensor.shape) << name;
      absl::StatusOr<std::vector<float>> a = TensorAsFloats(mine);
      absl::StatusOr<std::vector<float>> b = TensorAsFloats(tensor);
      ASSERT_TRUE(a.ok() && b.ok()) << name;
      EXPECT_EQ(*a, *b) << name;
    }
  }
}

// The gqa fixture's config.json with `from` replaced by `to`, checked against its spec.
absl::Status CheckEdited(const std::string& from, const std::string& to) {
  const std::string config = ReadFile(std::string(kFixtures) + "gqa/config.json");
  EXPECT_NE(config.find(from), std::string::npos) << from;
  return CheckHuggingFaceConfig(absl::StrReplaceAll(config, {{from, to}}), "config.json",
                                Model(true));
}

TEST(HfLlamaTest, ConfigSettingsOfAnotherModelAreRefusedByName) {
  EXPECT_TRUE(CheckEdited("\"silu\"", "\"silu\"").ok());
  const std::pair<std::pair<std::string, std::string>, std::string> cases[] = {
      {{"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4"},
       "num_key_value_heads is 4 but model.num_kv_heads is 2"},
      {{"\"intermediate_size\": 96", "\"intermediate_size\": 128"},
       "intermediate_size is 128 but model.ffn_hidden_size is 96"},
      {{"\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 1e-05"}, "rms_norm_eps is 1e-05"},
      {{"\"rope_theta\": 10000.0", "\"rope_theta\": 500000.0"}, "rope_theta is 500000"},
      {{"\"rope_type\": \"default\"", "\"rope_type\": \"llama3\""},
       "rope_parameters.rope_type is \"llama3\""},
      {{"\"use_cache\": true", "\"use_cache\": true, \"rope_scaling\": {\"factor\": 2.0}"},
       "rope_scaling is set"},
      {{"\"silu\"", "\"gelu\""}, "hidden_act is \"gelu\""},
      {{"\"attention_bias\": false", "\"attention_bias\": true"}, "attention_bias is true"},
      {{"\"mlp_bias\": false", "\"mlp_bias\": true"}, "mlp_bias is true"},
      {{"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true"},
       "tie_word_embeddings is true"},
      {{"\"max_position_embeddings\": 32", "\"max_position_embeddings\": 16"},
       "max_position_embeddings is 16, fewer positions than model.seq_length 32"},
      {{"\"model_type\": \"llama\"", "\"model_type\": \"mistral\""},
       "model_type is \"mistral\", not \"llama\""},
  };
  for (const auto& [edit, message] : cases) {
    const absl::Status status = CheckEdited(edit.first, edit.second);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(status.message(), HasSubstr(message));
  }
  // A GPT-2 spec on a Llama checkpoint: its family is named.
  ModelSpec gpt2 = Model(true);
  gpt2.set_family(MODEL_FAMILY_GPT2);
  const absl::Status status = CheckHuggingFaceConfig(
      ReadFile(std::string(kFixtures) + "gqa/config.json"), "config.json", gpt2);
  EXPECT_THAT(status.message(), HasSubstr("model_type is \"llama\", not \"gpt2\""));
}

TEST(HfLlamaTest, TensorErrorsNameTheHuggingFaceTensor) {
  std::map<std::string, SafetensorsTensor> tensors = FixtureTensors(std::string(kFixtures) + "gqa");
  HfTensorShapes shapes;
  for (const auto& [name, tensor] : tensors) shapes[name] = tensor.shape;
  const HfTensorReader read = [&](const std::string& name) -> absl::StatusOr<SafetensorsTensor> {
    return tensors.at(name);
  };
  // Older transformers saved the rotary frequencies: a buffer, not a parameter.
  shapes["model.layers.0.self_attn.rotary_emb.inv_freq"] = {8};
  EXPECT_TRUE(FromHuggingFace(shapes, read, Model(true)).ok());
  HfTensorShapes missing = shapes;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  absl::Status status = FromHuggingFace(missing, read, Model(true)).status();
  EXPECT_THAT(status.message(), HasSubstr("HF tensor 'model.layers.1.mlp.up_proj.weight' is "
                                          "missing"));
  HfTensorShapes no_head = shapes;
  no_head.erase("lm_head.weight");
  status = FromHuggingFace(no_head, read, Model(true)).status();
  EXPECT_THAT(status.message(), HasSubstr("HF tensor 'lm_head.weight' is missing"));
  HfTensorShapes wrong = shapes;
  wrong["model.layers.0.self_attn.k_proj.weight"] = {64, 64};
  status = FromHuggingFace(wrong, read, Model(true)).status();
  EXPECT_THAT(status.message(),
              HasSubstr("'model.layers.0.self_attn.k_proj.weight' has shape [64, 64]"));
  EXPECT_THAT(status.message(), HasSubstr("expect [32, 64]"));
  HfTensorShapes extra = shapes;
  extra["model.layers.2.mlp.up_proj.weight"] = {96, 64};
  status = FromHuggingFace(extra, read, Model(true)).status();
  EXPECT_THAT(status.message(), HasSubstr("is not a parameter of a Llama with model.num_layers 2"));
}

}  // namespace
}  // namespace mtrain
