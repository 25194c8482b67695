// ImportHuggingFace on the layouts users have: an exported directory (model.safetensors
// + config.json), a single file, a sharded save_pretrained directory (an index and its
// shards), a file holding only the tied head; and the config.json check that refuses a
// spec describing another model.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "checkpoint/full_tensor_testing.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kLayers = 2;
constexpr int kHidden = 8;
constexpr int kVocab = 300;

JobSpec Spec() {
  JobSpec spec;
  spec.mutable_model()->set_num_layers(kLayers);
  spec.mutable_model()->set_num_heads(2);
  spec.mutable_model()->set_hidden_size(kHidden);
  spec.mutable_model()->set_seq_length(6);
  spec.mutable_model()->set_vocab_size(kVocab);
  spec.mutable_train()->set_dropout(0);
  return spec;
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : "/tmp") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A HuggingFace GPT-2 of Spec() with distinct values (our export of one).
SafetensorsFile HfModel() {
  absl::StatusOr<SafetensorsFile> file =
      ToHuggingFace(DistinctGptTensors(kLayers, kHidden, kVocab, 6), Spec().model());
  EXPECT_TRUE(file.ok()) << file.status();
  return *file;
}

// What importing the whole file in memory gives: the reference for every other layout.
std::map<std::string, FullTensor> Reference() {
  absl::StatusOr<std::map<std::string, FullTensor>> params =
      FromHuggingFace(HfModel(), Spec().model());
  EXPECT_TRUE(params.ok()) << params.status();
  return *params;
}

TEST(HfGpt2ImportTest, AnExportedDirectoryImportsWithItsConfigChecked) {
  const std::string dir = FreshDir("exported");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", HfModel()).ok());
  WriteText(dir + "/config.json", HuggingFaceConfigJson(Spec()));
  for (const std::string& path : {dir, dir + "/model.safetensors"}) {
    absl::StatusOr<std::map<std::string, FullTensor>> params =
        ImportHuggingFace(path, Spec().model());
    ASSERT_TRUE(params.ok()) << path << ": " << params.status();
    ExpectSameTensors(*params, Reference());
  }
  absl::StatusOr<HuggingFaceFiles> files = FindHuggingFaceFiles(dir);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->config, dir + "/config.json");
}

TEST(HfGpt2ImportTest, ASpecThatDisagreesWithConfigJsonIsRefusedNamingEachSetting) {
  const std::string dir = FreshDir("disagrees");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", HfModel()).ok());
  std::string config = HuggingFaceConfigJson(Spec());
  config = absl::StrReplaceAll(config, {{"\"n_head\": 2", "\"n_head\": 4"},
                                        {"\"gelu_new\"", "\"gelu\""},
                                        {"\"scale_attn_by_inverse_layer_idx\": false",
                                         "\"scale_attn_by_inverse_layer_idx\": true"}});
  ASSERT_NE(config.find("\"n_head\": 4"), std::string::npos) << config;
  WriteText(dir + "/config.json", config);
  absl::Status refused = ImportHuggingFace(dir, Spec().model()).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr(dir + "/config.json describes another model than the spec"),
                    HasSubstr("n_head is 4 but model.num_heads is 2"),
                    HasSubstr("activation_function is \"gelu\""),
                    HasSubstr("scale_attn_by_inverse_layer_idx is true")));
  // One setting at a time, each named.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"layer_norm_epsilon": 1e-6})", "layer_norm_epsilon is 1e-06"},
      {R"({"n_layer": 3})", "n_layer is 3 but model.num_layers is 2"},
      {R"({"n_embd": 16})", "n_embd is 16 but model.hidden_size is 8"},
      {R"({"vocab_size": 50257})", "vocab_size is 50257 but model.vocab_size is 300"},
      {R"({"n_positions": 4})", "n_positions is 4, fewer positions than model.seq_length 6"},
      {R"({"n_inner": 10})", "n_inner is 10"},
      {R"({"tie_word_embeddings": false})", "tie_word_embeddings is false"},
      {R"({"scale_attn_weights": false})", "scale_attn_weights is false"},
      {R"({"model_type": "llama"})", "model_type is \"llama\""},
  };
  for (const auto& [json, expected] : cases) {
    absl::Status status = CheckHuggingFaceConfig(json, "c.json", Spec().model());
    EXPECT_THAT(status.message(), HasSubstr(expected)) << json;
  }
  // transformers' defaults for what a config omits are ours; the other tanh spellings too.
  EXPECT_TRUE(CheckHuggingFaceConfig("{}", "c.json", Spec().model()).ok());
  EXPECT_TRUE(CheckHuggingFaceConfig(R"({"activation_function": "gelu_pytorch_tanh",
      "n_positions": 1024, "n_inner": null})",
                                     "c.json", Spec().model())
                  .ok());
  EXPECT_EQ(CheckHuggingFaceConfig("not json", "c.json", Spec().model()).code(),
            absl::StatusCode::kInvalidArgument);
}

// The spec's FFN width and epsilon (model.ffn_hidden_size, model.norm_epsilon) are what
// config.json must say: n_inner null is 4 x n_embd.
TEST(HfGpt2ImportTest, FfnWidthAndEpsilonAreCheckedAgainstTheSpec) {
  ModelSpec wide = Spec().model();
  wide.set_ffn_hidden_size(24);  // 3 x n_embd 8
  wide.set_norm_epsilon(1e-6f);
  EXPECT_TRUE(
      CheckHuggingFaceConfig(R"({"n_inner": 24, "layer_norm_epsilon": 1e-6})", "c.json", wide)
          .ok());
  absl::Status status =
      CheckHuggingFaceConfig(R"({"n_inner": null, "layer_norm_epsilon": 1e-5})", "c.json", wide);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("n_inner is null (an MLP width of 32); model.ffn_hidden_size is 24"),
                    HasSubstr("layer_norm_epsilon is 1e-05; model.norm_epsilon is 1e-06")));
  // The export says the same, and reads back.
  JobSpec spec = Spec();
  *spec.mutable_model() = wide;
  const std::string config = HuggingFaceConfigJson(spec);
  EXPECT_THAT(config,
              AllOf(HasSubstr("\"n_inner\": 24,"), HasSubstr("\"layer_norm_epsilon\": 1e-06,")));
  EXPECT_TRUE(CheckHuggingFaceConfig(config, "c.json", wide).ok());
}

TEST(HfGpt2ImportTest, AShardedCheckpointImportsThroughItsIndex) {
  const std::string dir = FreshDir("sharded");
  const SafetensorsFile whole = HfModel();
  SafetensorsFile first, second;
  std::string weight_map;
  int i = 0;
  for (const auto& [name, tensor] : whole.tensors) {
    const bool in_first = i++ % 2 == 0;
    (in_first ? first : second).tensors[name] = tensor;
    absl::StrAppend(
        &weight_map, weight_map.empty() ? "" : ", ", "\"", name, "\": \"",
        in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors", "\"");
  }
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", first).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", second).ok());
  const std::string index =
      absl::StrCat(R"({"metadata": {"total_size": 1}, "weight_map": {)", weight_map, "}}");
  WriteText(dir + "/model.safetensors.index.json", index);
  WriteText(dir + "/config.json", HuggingFaceConfigJson(Spec()));
  for (const std::string& path : {dir, dir + "/model.safetensors.index.json"}) {
    absl::StatusOr<std::map<std::string, FullTensor>> params =
        ImportHuggingFace(path, Spec().model());
    ASSERT_TRUE(params.ok()) << path << ": " << params.status();
    ExpectSameTensors(*params, Reference());
  }

  // A shard the index names that is missing; a shard outside the directory; a tensor the
  // index misplaces.
  WriteText(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"transformer.wte.weight": "model-00003-of-00002.safetensors"}})");
  EXPECT_EQ(ImportHuggingFace(dir, Spec().model()).status().code(), absl::StatusCode::kNotFound);
  WriteText(dir + "/model.safetensors.index.json",
            R"({"weight_map": {"transformer.wte.weight": "../elsewhere.safetensors"}})");
  EXPECT_THAT(ImportHuggingFace(dir, Spec().model()).status().message(),
              HasSubstr("must be a file name beside the index"));
  const std::string misplaced = absl::StrReplaceAll(
      index, {{"\"transformer.wte.weight\": \"model-00001-of-00002.safetensors\"",
               "\"transformer.wte.weight\": \"model-00002-of-00002.safetensors\""},
              {"\"transformer.wte.weight\": \"model-00002-of-00002.safetensors\"",
               "\"transformer.wte.weight\": \"model-00001-of-00002.safetensors\""}});
  ASSERT_NE(misplaced, index);
  WriteText(dir + "/model.safetensors.index.json", misplaced);
  absl::Status wrong = ImportHuggingFace(dir, Spec().model()).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kDataLoss) << wrong;
  EXPECT_THAT(wrong.message(), HasSubstr("transformer.wte.weight"));
  // A directory without weights.
  EXPECT_EQ(ImportHuggingFace(FreshDir("empty"), Spec().model()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(HfGpt2ImportTest, OnlyTheTensorsARankHoldsAreReadAndTheRestStillChecked) {
  const std::string dir = FreshDir("only");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", HfModel()).ok());
  const std::set<std::string> stage = {"wpe", "layers.1.ln1.weight", "layers.1.mlp.fc.bias"};
  absl::StatusOr<std::map<std::string, FullTensor>> params =
      ImportHuggingFace(dir + "/model.safetensors", Spec().model(), &stage);
  ASSERT_TRUE(params.ok()) << params.status();
  std::map<std::string, FullTensor> want;
  for (const auto& [name, tensor] : Reference()) {
    if (stage.count(name) > 0) want[name] = tensor;
  }
  ExpectSameTensors(*params, want);
  // A tensor the rank does not hold must still be in the file with its shape.
  SafetensorsFile broken = HfModel();
  broken.tensors.erase("transformer.h.0.mlp.c_fc.bias");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", broken).ok());
  EXPECT_THAT(
      ImportHuggingFace(dir + "/model.safetensors", Spec().model(), &stage).status().message(),
      HasSubstr("transformer.h.0.mlp.c_fc.bias' is missing"));
}

TEST(HfGpt2ImportTest, AFileWithTheTiedHeadOnlyTakesItAsTheEmbedding) {
  const std::string dir = FreshDir("head-only");
  SafetensorsFile file = HfModel();
  file.tensors["lm_head.weight"] = file.tensors.at("transformer.wte.weight");
  file.tensors.erase("transformer.wte.weight");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", file).ok());
  absl::StatusOr<std::map<std::string, FullTensor>> params =
      ImportHuggingFace(dir + "/model.safetensors", Spec().model());
  ASSERT_TRUE(params.ok()) << params.status();
  ExpectSameTensors(*params, Reference());
}

}  // namespace
}  // namespace mtrain
