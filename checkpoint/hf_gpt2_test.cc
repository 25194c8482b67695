#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/full_tensor_testing.h"
#include "checkpoint/hf_interchange.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

constexpr int kLayers = 2;
constexpr int kHidden = 8;
constexpr int kSeq = 6;
// Padded to 384 by the engine: the padding rows must not reach the HF file.
constexpr int kVocab = 300;
constexpr int kPaddedVocab = 384;

ModelSpec Model() {
  ModelSpec model;
  model.set_num_layers(kLayers);
  model.set_num_heads(2);
  model.set_hidden_size(kHidden);
  model.set_seq_length(kSeq);
  model.set_vocab_size(kVocab);
  return model;
}

// Every parameter of our GPT, with the names and global shapes the engine's layout gives
// them (worker/engine/parameter_layout.h; worker/engine/layout_resharding_test.cc checks
// the engine's real tensors against this conversion) and distinct nonzero values.
std::map<std::string, FullTensor> OurModel() {
  return DistinctGptTensors(kLayers, kHidden, kPaddedVocab, kSeq);
}

std::vector<float> Floats(const SafetensorsFile& file, const std::string& name) {
  auto it = file.tensors.find(name);
  EXPECT_NE(it, file.tensors.end()) << name;
  if (it == file.tensors.end()) return {};
  return *TensorAsFloats(it->second);
}

std::string FreshDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/hf_gpt2_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The tensors a round trip must give back: all of ours, wte without its padding rows.
std::map<std::string, FullTensor> WithoutVocabPadding(std::map<std::string, FullTensor> ours) {
  FullTensor& wte = ours.at("wte");
  wte.shape[0] = kVocab;
  wte.values.resize(static_cast<size_t>(kVocab) * kHidden);
  return ours;
}

TEST(HfGpt2Test, ExportHasHfNamesShapesAndConv1DLayouts) {
  const std::map<std::string, FullTensor> ours = OurModel();
  absl::StatusOr<SafetensorsFile> hf = ToHuggingFace(ours, Model());
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->metadata.at("format"), "pt");
  // 2 embeddings + 12 per layer + 2 final LayerNorm; no lm_head (tied).
  EXPECT_EQ(hf->tensors.size(), 2u + 12 * kLayers + 2);
  EXPECT_EQ(hf->tensors.count("lm_head.weight"), 0u);
  const int C = kHidden;
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"transformer.wte.weight", {kVocab, C}},
      {"transformer.wpe.weight", {kSeq, C}},
      {"transformer.h.1.ln_1.weight", {C}},
      {"transformer.h.1.attn.c_attn.weight", {C, 3 * C}},
      {"transformer.h.1.attn.c_attn.bias", {3 * C}},
      {"transformer.h.1.attn.c_proj.weight", {C, C}},
      {"transformer.h.1.mlp.c_fc.weight", {C, 4 * C}},
      {"transformer.h.1.mlp.c_fc.bias", {4 * C}},
      {"transformer.h.1.mlp.c_proj.weight", {4 * C, C}},
      {"transformer.ln_f.bias", {C}},
  };
  for (const auto& [name, shape] : shapes) {
    ASSERT_EQ(hf->tensors.count(name), 1u) << name;
    EXPECT_EQ(hf->tensors.at(name).shape, shape) << name;
    EXPECT_EQ(hf->tensors.at(name).dtype, "F32") << name;
  }
  // c_attn.weight[in][k * C + out] = qkv[k][out][in]: Q, K, V blocks side by side.
  const std::vector<float>& qkv = ours.at("layers.1.attn.qkv.weight").values;
  const std::vector<float> c_attn = Floats(*hf, "transformer.h.1.attn.c_attn.weight");
  for (int k = 0; k < 3; ++k) {
    for (int out = 0; out < C; ++out) {
      for (int in = 0; in < C; ++in) {
        ASSERT_EQ(c_attn[in * 3 * C + k * C + out], qkv[(k * C + out) * C + in]);
      }
    }
  }
  // mlp.c_proj.weight [4C (in), C (out)] = proj [C (out), 4C (in)] transposed.
  const std::vector<float>& proj = ours.at("layers.0.mlp.proj.weight").values;
  const std::vector<float> c_proj = Floats(*hf, "transformer.h.0.mlp.c_proj.weight");
  for (int out = 0; out < C; ++out) {
    for (int in = 0; in < 4 * C; ++in) ASSERT_EQ(c_proj[in * C + out], proj[out * 4 * C + in]);
  }
  // wte: the real vocabulary's rows, unchanged.
  const std::vector<float>& wte = ours.at("wte").values;
  EXPECT_EQ(Floats(*hf, "transformer.wte.weight"),
            std::vector<float>(wte.begin(), wte.begin() + kVocab * C));
}

// Decided: padded vocabulary rows are not part of the HF model and come back absent (wte
// [vocab, C]); the checkpoint loader zero-fills them at the job's padded vocabulary.
TEST(HfGpt2Test, RoundTripGivesOurTensorsBackWithoutVocabPadding) {
  const std::map<std::string, FullTensor> ours = OurModel();
  absl::StatusOr<SafetensorsFile> hf = ToHuggingFace(ours, Model());
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<std::map<std::string, FullTensor>> back = FromHuggingFace(*hf, Model());
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameTensors(*back, WithoutVocabPadding(ours));

  // And again from the unpadded tensors: an exported import is the same file.
  absl::StatusOr<SafetensorsFile> again = ToHuggingFace(*back, Model());
  ASSERT_TRUE(again.ok()) << again.status();
  for (const auto& [name, tensor] : hf->tensors) {
    EXPECT_EQ(again->tensors.at(name).bytes, tensor.bytes) << name;
  }
}

TEST(HfGpt2Test, ExportWritesLoadableFilesDeterministically) {
  JobSpec spec;
  *spec.mutable_model() = Model();
  spec.mutable_train()->set_dropout(0.25f);
  const std::string dir = FreshDir("export") + "/nested/out";  // created if needed
  ASSERT_TRUE(ExportHuggingFace(OurModel(), spec, dir).ok());

  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata.at("format"), "pt");
  absl::StatusOr<std::map<std::string, FullTensor>> back = FromHuggingFace(*file, Model());
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameTensors(*back, WithoutVocabPadding(OurModel()));

  const std::string bytes = ReadFile(dir + "/model.safetensors");
  const std::string dir2 = FreshDir("export2");
  ASSERT_TRUE(ExportHuggingFace(OurModel(), spec, dir2).ok());
  EXPECT_EQ(ReadFile(dir2 + "/model.safetensors"), bytes);

  google::protobuf::Struct config;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadFile(dir + "/config.json"), &config).ok());
  const auto& f = config.fields();
  EXPECT_EQ(f.at("model_type").string_value(), "gpt2");
  EXPECT_EQ(f.at("architectures").list_value().values(0).string_value(), "GPT2LMHeadModel");
  EXPECT_EQ(f.at("vocab_size").number_value(), kVocab);
  EXPECT_EQ(f.at("n_positions").number_value(), kSeq);
  EXPECT_EQ(f.at("n_ctx").number_value(), kSeq);
  EXPECT_EQ(f.at("n_embd").number_value(), kHidden);
  EXPECT_EQ(f.at("n_layer").number_value(), kLayers);
  EXPECT_EQ(f.at("n_head").number_value(), 2);
  EXPECT_EQ(f.at("activation_function").string_value(), "gelu_new");
  EXPECT_EQ(f.at("layer_norm_epsilon").number_value(), 1e-5);
  EXPECT_EQ(f.at("attn_pdrop").number_value(), 0.25);
  EXPECT_EQ(f.at("embd_pdrop").number_value(), 0.25);
  EXPECT_EQ(f.at("resid_pdrop").number_value(), 0.25);
  EXPECT_TRUE(f.at("tie_word_embeddings").bool_value());
  EXPECT_TRUE(f.at("scale_attn_weights").bool_value());
  EXPECT_FALSE(f.at("scale_attn_by_inverse_layer_idx").bool_value());
  EXPECT_FALSE(f.at("reorder_and_upcast_attn").bool_value());
}

TEST(HfGpt2Test, ConfigTakesJobDefaultsForOmittedFields) {
  const std::string json = HuggingFaceConfigJson(JobSpec());
  EXPECT_THAT(json, HasSubstr("\"n_layer\": 4,"));
  EXPECT_THAT(json, HasSubstr("\"n_embd\": 128,"));
  EXPECT_THAT(json, HasSubstr("\"vocab_size\": 256,"));
  EXPECT_THAT(json, HasSubstr("\"attn_pdrop\": 0.1,"));
}

// The exact text, as written before the config went through common/json_writer:
// transformers reads it, and exported directories are compared and hashed by users.
TEST(HfGpt2Test, ConfigIsTheSameTextAsEver) {
  JobSpec spec;
  *spec.mutable_model() = Model();
  spec.mutable_train()->set_dropout(0.3f);
  EXPECT_EQ(HuggingFaceConfigJson(spec),
            "{\n"
            "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
            "  \"model_type\": \"gpt2\",\n"
            "  \"vocab_size\": 300,\n"
            "  \"n_positions\": 6,\n"
            "  \"n_ctx\": 6,\n"
            "  \"n_embd\": 8,\n"
            "  \"n_layer\": 2,\n"
            "  \"n_head\": 2,\n"
            "  \"n_inner\": null,\n"
            "  \"activation_function\": \"gelu_new\",\n"
            "  \"layer_norm_epsilon\": 1e-05,\n"
            "  \"embd_pdrop\": 0.3,\n"
            "  \"attn_pdrop\": 0.3,\n"
            "  \"resid_pdrop\": 0.3,\n"
            "  \"initializer_range\": 0.02,\n"
            "  \"scale_attn_weights\": true,\n"
            "  \"scale_attn_by_inverse_layer_idx\": false,\n"
            "  \"reorder_and_upcast_attn\": false,\n"
            "  \"tie_word_embeddings\": true,\n"
            "  \"bos_token_id\": null,\n"
            "  \"eos_token_id\": null,\n"
            "  \"use_cache\": true,\n"
            "  \"torch_dtype\": \"float32\"\n"
            "}\n");
  // The fewest digits that read back as the same float: 8 here, 9 (the most) below.
  spec.mutable_train()->set_dropout(0.12345679f);
  EXPECT_THAT(HuggingFaceConfigJson(spec), HasSubstr("\"attn_pdrop\": 0.12345679,\n"));
  spec.mutable_train()->set_dropout(0.104274996f);
  EXPECT_THAT(HuggingFaceConfigJson(spec), HasSubstr("\"attn_pdrop\": 0.104274996,\n"));
  spec.mutable_train()->set_dropout(0.0f);
  EXPECT_THAT(HuggingFaceConfigJson(spec), HasSubstr("\"attn_pdrop\": 0,\n"));
}

uint16_t ToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// A file as transformers may write it: no prefix, the tied head saved, the attention mask
// buffers of older versions, more positions than our seq_length, half precision.
TEST(HfGpt2Test, ImportAcceptsTheVariantsTransformersWrites) {
  absl::StatusOr<SafetensorsFile> exported = ToHuggingFace(OurModel(), Model());
  ASSERT_TRUE(exported.ok()) << exported.status();
  SafetensorsFile file;
  for (const auto& [name, tensor] : exported->tensors) {
    file.tensors[name.substr(std::strlen("transformer."))] = tensor;
  }
  file.tensors["lm_head.weight"] = file.tensors.at("wte.weight");
  file.tensors["h.0.attn.bias"] = file.tensors.at("h.0.attn.c_proj.weight");
  file.tensors["h.1.attn.masked_bias"] = file.tensors.at("h.0.ln_1.bias");
  // 10 positions instead of 6: only the first 6 are ours.
  std::vector<float> wpe = Floats(file, "wpe.weight");
  const std::vector<float> ours_wpe = wpe;
  wpe.resize(10 * kHidden, 7.0f);
  file.tensors["wpe.weight"] = MakeF32Tensor({10, kHidden}, wpe.data());
  // BF16 keeps the upper half of a float's bits: exactly representable values survive.
  std::vector<float> ln = Floats(file, "ln_f.weight");
  SafetensorsTensor bf16{"BF16", {kHidden}, std::string(2 * kHidden, '\0'), {}};
  for (int i = 0; i < kHidden; ++i) {
    const uint16_t b = ToBfloat16(ln[i]);
    std::memcpy(&bf16.bytes[2 * i], &b, 2);
    uint32_t bits = static_cast<uint32_t>(b) << 16;
    std::memcpy(&ln[i], &bits, 4);
  }
  file.tensors["ln_f.weight"] = bf16;
  // F16: 1.5, -2, 2^-24 (smallest subnormal), 0.
  SafetensorsTensor f16{"F16", {kHidden}, std::string(2 * kHidden, '\0'), {}};
  const uint16_t halves[kHidden] = {0x3E00, 0xC000, 0x0001, 0x0000, 0x3C00, 0x3C00, 0x3C00, 0x3C00};
  std::memcpy(f16.bytes.data(), halves, sizeof(halves));
  file.tensors["ln_f.bias"] = f16;

  absl::StatusOr<std::map<std::string, FullTensor>> ours = FromHuggingFace(file, Model());
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_EQ(ours->size(), 2u + 12 * kLayers + 2);
  EXPECT_EQ(ours->at("wpe").shape, (std::vector<int64_t>{kSeq, kHidden}));
  EXPECT_EQ(ours->at("wpe").values, ours_wpe);
  EXPECT_EQ(ours->at("lnf.weight").values, ln);
  const std::vector<float>& bias = ours->at("lnf.bias").values;
  EXPECT_EQ(bias[0], 1.5f);
  EXPECT_EQ(bias[1], -2.0f);
  EXPECT_EQ(bias[2], 0x1.0p-24f);
  EXPECT_EQ(bias[3], 0.0f);
  EXPECT_EQ(bias[4], 1.0f);
}

absl::Status Import(const SafetensorsFile& file) { return FromHuggingFace(file, Model()).status(); }

SafetensorsFile Exported() { return *ToHuggingFace(OurModel(), Model()); }

TEST(HfGpt2Test, ImportErrorsNameTheTensorTheShapesAndTheSpecField) {
  SafetensorsFile file = Exported();
  std::vector<float> wte(50257 * kHidden, 0.0f);
  file.tensors["transformer.wte.weight"] = MakeF32Tensor({50257, kHidden}, wte.data());
  absl::Status status = Import(file);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'transformer.wte.weight' has 50257 rows"));
  EXPECT_THAT(status.message(), HasSubstr("model.vocab_size is 300"));

  file = Exported();
  std::vector<float> wpe(4 * kHidden, 0.0f);
  file.tensors["transformer.wpe.weight"] = MakeF32Tensor({4, kHidden}, wpe.data());
  EXPECT_THAT(Import(file).message(),
              HasSubstr("'transformer.wpe.weight' has 4 rows (positions); model.seq_length 6 "
                        "needs at least 6"));

  file = Exported();
  std::vector<float> c_fc(kHidden * 3 * kHidden, 0.0f);
  file.tensors["transformer.h.1.mlp.c_fc.weight"] =
      MakeF32Tensor({kHidden, 3 * kHidden}, c_fc.data());
  EXPECT_THAT(Import(file).message(),
              HasSubstr("'transformer.h.1.mlp.c_fc.weight' has shape [8, 24]; layer 1 of "
                        "model.num_layers 2, model.hidden_size 8 expect [8, 32]"));

  file = Exported();
  file.tensors.erase("transformer.h.1.ln_2.bias");
  EXPECT_THAT(Import(file).message(), HasSubstr("'transformer.h.1.ln_2.bias' is missing"));

  file = Exported();
  file.tensors["transformer.h.2.ln_1.weight"] = file.tensors.at("transformer.h.1.ln_1.weight");
  EXPECT_THAT(Import(file).message(),
              HasSubstr("'transformer.h.2.ln_1.weight' is not a parameter of a GPT-2 with "
                        "model.num_layers 2"));

  file = Exported();
  file.tensors["transformer.h.0.ln_1.bias"].dtype = "I32";
  EXPECT_THAT(Import(file).message(),
              HasSubstr("'transformer.h.0.ln_1.bias' has dtype I32; import reads F32"));

  file = Exported();
  file.tensors["h.0.ln_1.bias"] = file.tensors.at("transformer.h.0.ln_1.bias");
  EXPECT_THAT(Import(file).message(),
              HasSubstr("'h.0.ln_1.bias' and 'transformer.h.0.ln_1.bias' name the same"));
}

TEST(HfGpt2Test, ImportOfAFileWithTheEngineNamesSaysSo) {
  // train --save_weights writes the engine's names ("wte", "layers.0..."), not HF's.
  SafetensorsFile file;
  for (const auto& [name, tensor] : OurModel()) {
    file.tensors[name] = MakeF32Tensor(tensor.shape, tensor.values.data());
  }
  const absl::Status status = FromHuggingFace(file, Model()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("engine's own tensor names"), std::string::npos) << status;
  EXPECT_NE(status.message().find("trainctl export"), std::string::npos) << status;
}

TEST(HfGpt2Test, ImportRefusesAnUntiedOutputLayer) {
  SafetensorsFile file = Exported();
  std::vector<float> head = Floats(file, "transformer.wte.weight");
  head[5] += 1.0f;
  file.tensors["lm_head.weight"] = MakeF32Tensor({kVocab, kHidden}, head.data());
  const absl::Status status = Import(file);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'lm_head.weight'"));
  EXPECT_THAT(status.message(), HasSubstr("the spec ties them (model.tie_word_embeddings true"));
}

TEST(HfGpt2Test, ExportErrorsNameTheTensorTheShapesAndTheSpecField) {
  std::map<std::string, FullTensor> ours = OurModel();
  ours.erase("layers.1.mlp.fc.bias");
  absl::Status status = ToHuggingFace(ours, Model()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'layers.1.mlp.fc.bias' is missing"));

  ours = OurModel();
  ours["layers.0.attn.qkv.weight"].shape = {3, 4, 16};
  EXPECT_THAT(ToHuggingFace(ours, Model()).status().message(),
              HasSubstr("tensor 'layers.0.attn.qkv.weight' has shape [3, 4, 16]; layer 0 of "
                        "model.num_layers 2, model.hidden_size 8 expect [3, 8, 8]"));

  ours = OurModel();
  ours["wte"].shape = {200, kHidden};
  ours["wte"].values.resize(200 * kHidden);
  EXPECT_THAT(ToHuggingFace(ours, Model()).status().message(),
              HasSubstr("tensor 'wte' has shape [200, 8]; model.vocab_size 300, "
                        "model.hidden_size 8 expect [>= 300, 8]"));

  ours = OurModel();
  ours["wpe"].values.pop_back();
  EXPECT_THAT(ToHuggingFace(ours, Model()).status().message(),
              HasSubstr("tensor 'wpe' has 47 values; its shape [6, 8] holds 48"));

  ours = OurModel();
  ours["layers.2.ln1.weight"] = ours.at("layers.1.ln1.weight");
  EXPECT_THAT(ToHuggingFace(ours, Model()).status().message(),
              HasSubstr("tensor 'layers.2.ln1.weight' is not a parameter of a GPT-2 with "
                        "model.num_layers 2"));

  ModelSpec bad = Model();
  bad.set_num_heads(3);
  EXPECT_THAT(ToHuggingFace(OurModel(), bad).status().message(),
              HasSubstr("model.hidden_size 8 is not divisible by model.num_heads 3"));
}

}  // namespace
}  // namespace mtrain
