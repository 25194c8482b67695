#include "tests/parity/hf_export_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spec/job_spec_validation.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/model_shape.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t NameHash(const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

// Uniform on the grid of multiples of 2^-20 in [-scale, scale]: an integer times a power
// of two, plus 0 or 1, is exact in float, so no rounding (nor contraction into FMA) can
// make two builds differ.
float Uniform(uint64_t key, uint64_t index, float scale) {
  const int64_t steps = static_cast<int64_t>(scale * 0x1.0p20f);
  const uint64_t bits = SplitMix64(key ^ SplitMix64(index));
  const int64_t k = static_cast<int64_t>(bits % static_cast<uint64_t>(2 * steps + 1)) - steps;
  return static_cast<float>(k) * 0x1.0p-20f;
}

ModelShape Shape(HfExportVariant variant = HfExportVariant::kGpt2) {
  return ShapeFromSpec(HfExportSpec(variant));
}

}  // namespace

const char* HfExportVariantSuffix(HfExportVariant variant) {
  return variant == HfExportVariant::kWideFfn ? "_wide_ffn" : "";
}

JobSpec HfExportSpec(HfExportVariant variant) {
  JobSpec spec;
  spec.set_name("hf-export-parity");
  ModelSpec* model = spec.mutable_model();
  model->set_num_layers(2);
  model->set_num_heads(4);
  model->set_hidden_size(64);
  model->set_seq_length(32);
  model->set_vocab_size(300);
  if (variant == HfExportVariant::kWideFfn) {
    model->set_ffn_hidden_size(192);
    model->set_norm_epsilon(1e-3f);
  }
  spec.mutable_train()->set_dropout(0.1f);
  spec.mutable_train()->set_seed(kHfExportSeed);
  // A fixed valid spec: resolving it cannot fail.
  return *ResolveJobSpec(spec);
}

std::map<std::string, FullTensor> HfExportWeights(HfExportVariant variant) {
  const ModelShape shape = Shape(variant);
  const ParameterLayout layout(shape, WholeModel(shape));
  std::map<std::string, FullTensor> weights;
  for (const ParamTensor& t : layout.tensors()) {
    const uint64_t key = SplitMix64(kHfExportSeed) ^ NameHash(t.name);
    // Uniform [-a, a] has std a / sqrt(3): about 0.2 for matrices, 0.1 for the scaled
    // output projections; gains 1 +- 0.3, biases +- 0.3.
    float base = 0.0f, scale = 0.35f;
    if (t.init == ParamInit::kScaledNormal) scale = 0.175f;
    if (t.init == ParamInit::kOnes) {
      base = 1.0f;
      scale = 0.3f;
    }
    if (t.init == ParamInit::kZeros) scale = 0.3f;
    FullTensor& full = weights[t.name];
    full.shape = t.global_shape;
    full.values.resize(t.size);
    for (size_t i = 0; i < t.size; ++i) full.values[i] = base + Uniform(key, i, scale);
  }
  return weights;
}

std::vector<int32_t> HfExportTokens() {
  const ModelShape shape = Shape();
  std::vector<int32_t> tokens(static_cast<size_t>(kHfExportBatch) * shape.seq_length);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(SplitMix64(kHfExportSeed * 1000 + i) % shape.vocab);
  }
  // The first and the last real token ids, so both ends of the cut embedding are used.
  tokens[1] = 0;
  tokens[2] = shape.vocab - 1;
  return tokens;
}

absl::StatusOr<std::vector<float>> EngineLogits(const std::map<std::string, FullTensor>& weights,
                                                const std::vector<int32_t>& tokens,
                                                HfExportVariant variant) {
  const ModelShape shape = Shape(variant);
  const ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<float> model(layout, kHfExportBatch, ModelOptions{});
  for (const ParamTensor& t : layout.tensors()) {
    auto it = weights.find(t.name);
    if (it == weights.end() || it->second.values.size() != t.size) {
      return absl::InvalidArgumentError(absl::StrCat("weights lack '", t.name, "' or its size"));
    }
    std::copy(it->second.values.begin(), it->second.values.end(), model.params() + t.offset);
  }
  const int S = shape.seq_length;
  if (tokens.size() != static_cast<size_t>(kHfExportBatch) * S) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", kHfExportBatch * S, " tokens"));
  }
  // The loss needs targets; any valid ids do (only the logits are compared).
  std::vector<int32_t> targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) targets[i] = tokens[(i + 1) % tokens.size()];
  auto acts = model.NewActivations();
  MicrobatchInput<float> input;
  input.id = {1, 0};
  input.tokens = tokens.data();
  input.targets = targets.data();
  absl::StatusOr<double> loss = model.Forward(input, acts.get());
  if (!loss.ok()) return loss.status();
  const float* padded = model.logits(*acts);
  std::vector<float> logits;
  logits.reserve(tokens.size() * shape.vocab);
  for (size_t row = 0; row < tokens.size(); ++row) {
    const float* begin = padded + row * shape.padded_vocab;
    logits.insert(logits.end(), begin, begin + shape.vocab);
  }
  return logits;
}

}  // namespace mtrain
