// Exports the tiny model of hf_export_model.h to HuggingFace GPT-2 format and writes what
// tests/parity/hf_export_reference.py compares transformers against:
//   <output_dir>/model.safetensors, config.json   ExportHuggingFace's output
//   <output_dir>/engine.safetensors               tokens [B, S] (I32) and the engine's
//       fp32 logits [B * S, vocab] (F32); metadata "model_safetensors_crc32c" (decimal
//       CRC-32C of model.safetensors' bytes) and "config_json" (config.json's text)
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "tests/parity/hf_export_model.h"

ABSL_FLAG(std::string, output_dir, "hf_export", "directory to write the export into");
ABSL_FLAG(std::string, variant, "gpt2",
          "the model of hf_export_model.h: gpt2, or wide_ffn (ffn_hidden_size 3 h, norm_epsilon "
          "1e-3)");

namespace mtrain {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::Status Run(const std::string& dir, const std::string& variant_name) {
  if (variant_name != "gpt2" && variant_name != "wide_ffn") {
    return absl::InvalidArgumentError(
        absl::StrCat("--variant=", variant_name, ": must be gpt2 or wide_ffn"));
  }
  const HfExportVariant variant =
      variant_name == "wide_ffn" ? HfExportVariant::kWideFfn : HfExportVariant::kGpt2;
  const JobSpec spec = HfExportSpec(variant);
  const std::map<std::string, FullTensor> weights = HfExportWeights(variant);
  const std::vector<int32_t> tokens = HfExportTokens();
  absl::StatusOr<std::vector<float>> logits = EngineLogits(weights, tokens, variant);
  if (!logits.ok()) return logits.status();
  absl::Status exported = ExportHuggingFace(weights, spec, dir);
  if (!exported.ok()) return exported;
  absl::StatusOr<std::string> model = ReadFile(absl::StrCat(dir, "/", kHuggingFaceModelFile));
  if (!model.ok()) return model.status();
  absl::StatusOr<std::string> config = ReadFile(absl::StrCat(dir, "/", kHuggingFaceConfigFile));
  if (!config.ok()) return config.status();

  const int64_t S = spec.model().seq_length(), V = spec.model().vocab_size();
  SafetensorsFile out;
  out.tensors["tokens"] = MakeI32Tensor({kHfExportBatch, S}, tokens.data());
  out.tensors["logits"] = MakeF32Tensor({kHfExportBatch * S, V}, logits->data());
  out.metadata["model_safetensors_crc32c"] = absl::StrCat(Crc32c(model->data(), model->size()));
  out.metadata["config_json"] = *config;
  return WriteSafetensors(absl::StrCat(dir, "/engine.safetensors"), out);
}

}  // namespace
}  // namespace mtrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status =
      mtrain::Run(absl::GetFlag(FLAGS_output_dir), absl::GetFlag(FLAGS_variant));
  if (!status.ok()) {
    std::fprintf(stderr, "write_hf_export: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
