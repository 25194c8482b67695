// The HuggingFace export against transformers, without torch: hf_export_reference.py
// loaded an export of the model of hf_export_model.h with GPT2LMHeadModel.from_pretrained
// and committed transformers' logits with the CRC-32C of the model.safetensors it loaded.
// Here the same export runs in-process: a byte-identical file (same CRC-32C) and config
// means transformers would load exactly this, and the engine's logits still matching
// transformers' means the mapping (names, transposes, head order, GeLU, epsilon) is exact.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/parity/hf_export_model.h"

namespace mtrain {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Each variant of hf_export_model.h against its own reference (GPT-2; a wide FFN with a
// larger epsilon, issue 33).
class HfExportTest : public ::testing::TestWithParam<HfExportVariant> {
 protected:
  void SetUp() override {
    const std::string suffix = HfExportVariantSuffix(GetParam());
    absl::StatusOr<SafetensorsFile> reference =
        ReadSafetensors("tests/parity/hf_gpt2_export_reference" + suffix + ".safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
    dir_ = testing::TempDir() + "/hf_export_test" + suffix;
    std::filesystem::remove_all(dir_);
    const absl::Status exported =
        ExportHuggingFace(HfExportWeights(GetParam()), HfExportSpec(GetParam()), dir_);
    ASSERT_TRUE(exported.ok()) << exported;
  }

  SafetensorsFile reference_;
  std::string dir_;
};

TEST_P(HfExportTest, ExportIsByteIdenticalToTheFileTransformersLoaded) {
  const std::string model = ReadFile(dir_ + "/" + kHuggingFaceModelFile);
  ASSERT_FALSE(model.empty());
  uint32_t reference_crc = 0;
  ASSERT_TRUE(absl::SimpleAtoi(reference_.metadata.at("model_safetensors_crc32c"), &reference_crc));
  EXPECT_EQ(Crc32c(model.data(), model.size()), reference_crc)
      << "the export changed since hf_export_reference.py ran: rerun it";
  EXPECT_EQ(ReadFile(dir_ + "/" + kHuggingFaceConfigFile), reference_.metadata.at("config_json"));
}

TEST_P(HfExportTest, EngineLogitsMatchTransformers) {
  absl::StatusOr<std::vector<int32_t>> tokens = TensorAsInt32(reference_.tensors.at("tokens"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(*tokens, HfExportTokens());
  absl::StatusOr<std::vector<float>> ours =
      EngineLogits(HfExportWeights(GetParam()), *tokens, GetParam());
  ASSERT_TRUE(ours.ok()) << ours.status();
  absl::StatusOr<std::vector<float>> theirs = TensorAsFloats(reference_.tensors.at("logits"));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(ours->size(), theirs->size());
  // max |a - b| / max |b|: relative to the logits' scale.
  double diff = 0, scale = 0;
  for (size_t i = 0; i < theirs->size(); ++i) {
    const double d = std::abs(static_cast<double>((*ours)[i]) - (*theirs)[i]);
    if (!(d <= diff)) diff = d;  // NaN included (std::max would skip it)
    scale = std::max(scale, std::abs(static_cast<double>((*theirs)[i])));
  }
  EXPECT_GT(scale, 1.0);  // logits of a real spread, not a degenerate model
  EXPECT_LT(diff / scale, 1e-5) << "max abs error " << diff << " at scale " << scale;
}

TEST_P(HfExportTest, ConfigDescribesTheModel) {
  google::protobuf::Struct config;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  ReadFile(dir_ + "/" + kHuggingFaceConfigFile), &config)
                  .ok());
  const auto& f = config.fields();
  const JobSpec spec = HfExportSpec(GetParam());
  const ModelSpec& model = spec.model();
  EXPECT_EQ(f.at("model_type").string_value(), "gpt2");
  EXPECT_EQ(f.at("architectures").list_value().values(0).string_value(), "GPT2LMHeadModel");
  EXPECT_EQ(f.at("vocab_size").number_value(), model.vocab_size());
  EXPECT_EQ(f.at("n_positions").number_value(), model.seq_length());
  EXPECT_EQ(f.at("n_ctx").number_value(), model.seq_length());
  EXPECT_EQ(f.at("n_embd").number_value(), model.hidden_size());
  EXPECT_EQ(f.at("n_layer").number_value(), model.num_layers());
  EXPECT_EQ(f.at("n_head").number_value(), model.num_heads());
  EXPECT_EQ(f.at("activation_function").string_value(), "gelu_new");
  EXPECT_FLOAT_EQ(static_cast<float>(f.at("layer_norm_epsilon").number_value()),
                  model.norm_epsilon());
  if (model.ffn_hidden_size() == 4 * model.hidden_size()) {
    EXPECT_EQ(f.at("n_inner").kind_case(), google::protobuf::Value::kNullValue);
  } else {
    EXPECT_EQ(f.at("n_inner").number_value(), model.ffn_hidden_size());
  }
  EXPECT_EQ(f.at("resid_pdrop").number_value(), 0.1);
  EXPECT_TRUE(f.at("tie_word_embeddings").bool_value());
}

INSTANTIATE_TEST_SUITE_P(Variants, HfExportTest, ::testing::ValuesIn(kHfExportVariants),
                         [](const ::testing::TestParamInfo<HfExportVariant>& info) {
                           return std::string(info.param == HfExportVariant::kGpt2 ? "Gpt2"
                                                                                   : "WideFfn");
                         });

}  // namespace
}  // namespace mtrain
