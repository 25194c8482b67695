#include "model/parameter_table.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace mtrain {

std::vector<ParameterEntry> ParameterTable(const TransformerConfig& config) {
  const int64_t C = config.hidden;
  const int64_t S = config.seq_length;
  const int64_t V = config.vocab;
  const int64_t Vp = config.padded_vocab;
  const int64_t F = config.ffn_hidden;
  using P = ParamInit;
  using R = ParameterRole;
  std::vector<ParameterEntry> table;
  auto add = [&](R role, int layer, std::string name, std::vector<int64_t> shape, int split_axis,
                 P init, bool decay, ParameterHolder holder, std::string hf_name,
                 std::vector<int64_t> hf_shape, HfLayout hf_layout) -> ParameterEntry& {
    ParameterEntry entry;
    entry.role = role;
    entry.layer = layer;
    entry.name = std::move(name);
    entry.global_shape = std::move(shape);
    entry.tensor_split_axis = split_axis;
    entry.init = init;
    entry.weight_decay = decay;
    entry.holder = holder;
    entry.hf_name = std::move(hf_name);
    entry.hf_shape = std::move(hf_shape);
    entry.hf_layout = hf_layout;
    table.push_back(std::move(entry));
    return table.back();
  };
  constexpr HfLayout kSame = HfLayout::kSame;
  constexpr HfLayout kTransposed = HfLayout::kTransposed;

  ParameterEntry& wte = add(R::kTokenEmbedding, -1, "wte", {Vp, C}, 0, P::kNormal, true,
                            ParameterHolder::kFirstAndLastStage,  // and GPT-2's output layer
                            "wte.weight", {V, C}, kSame);
  wte.padded_vocabulary_rows = true;
  wte.hf_rows = HfRows::kOursPadded;
  ParameterEntry& wpe = add(R::kPositionEmbedding, -1, "wpe", {S, C}, -1, P::kNormal, true,
                            ParameterHolder::kFirstStage, "wpe.weight", {S, C}, kSame);
  wpe.hf_rows = HfRows::kHfLonger;

  for (int i = 0; i < config.num_layers; ++i) {
    const std::string o = absl::StrCat("layers.", i, ".");
    const std::string h = absl::StrCat("h.", i, ".");
    auto layer = [&](R role, const char* ours, std::vector<int64_t> shape, int split_axis, P init,
                     bool decay, const char* hf, std::vector<int64_t> hf_shape,
                     HfLayout hf_layout) {
      add(role, i, o + ours, std::move(shape), split_axis, init, decay, ParameterHolder::kLayer,
          h + hf, std::move(hf_shape), hf_layout);
    };
    layer(R::kAttentionNormWeight, "ln1.weight", {C}, -1, P::kOnes, false, "ln_1.weight", {C},
          kSame);
    layer(R::kAttentionNormBias, "ln1.bias", {C}, -1, P::kZeros, false, "ln_1.bias", {C}, kSame);
    // Q, K, V blocks (heads contiguous inside each) are exactly the thirds of c_attn's output
    // that HF splits with qkv.split(C): the same element order.
    layer(R::kQkvWeight, "attn.qkv.weight", {3, C, C}, 1, P::kNormal, true, "attn.c_attn.weight",
          {C, 3 * C}, kTransposed);
    layer(R::kQkvBias, "attn.qkv.bias", {3, C}, 1, P::kZeros, false, "attn.c_attn.bias", {3 * C},
          kSame);
    layer(R::kAttentionOutWeight, "attn.proj.weight", {C, C}, 1, P::kScaledNormal, true,
          "attn.c_proj.weight", {C, C}, kTransposed);
    layer(R::kAttentionOutBias, "attn.proj.bias", {C}, -1, P::kZeros, false, "attn.c_proj.bias",
          {C}, kSame);
    layer(R::kMlpNormWeight, "ln2.weight", {C}, -1, P::kOnes, false, "ln_2.weight", {C}, kSame);
    layer(R::kMlpNormBias, "ln2.bias", {C}, -1, P::kZeros, false, "ln_2.bias", {C}, kSame);
    layer(R::kMlpInWeight, "mlp.fc.weight", {F, C}, 0, P::kNormal, true, "mlp.c_fc.weight", {C, F},
          kTransposed);
    layer(R::kMlpInBias, "mlp.fc.bias", {F}, 0, P::kZeros, false, "mlp.c_fc.bias", {F}, kSame);
    layer(R::kMlpOutWeight, "mlp.proj.weight", {C, F}, 1, P::kScaledNormal, true,
          "mlp.c_proj.weight", {F, C}, kTransposed);
    layer(R::kMlpOutBias, "mlp.proj.bias", {C}, -1, P::kZeros, false, "mlp.c_proj.bias", {C},
          kSame);
  }
  add(R::kFinalNormWeight, -1, "lnf.weight", {C}, -1, P::kOnes, false, ParameterHolder::kLastStage,
      "ln_f.weight", {C}, kSame);
  add(R::kFinalNormBias, -1, "lnf.bias", {C}, -1, P::kZeros, false, ParameterHolder::kLastStage,
      "ln_f.bias", {C}, kSame);
  return table;
}

RankParameterCounts ParameterCountsPerTensorRank(const TransformerConfig& config, int tensor) {
  TransformerConfig one_layer = config;
  one_layer.num_layers = 1;  // layers are alike: one stands for all
  RankParameterCounts counts;
  for (const ParameterEntry& entry : ParameterTable(one_layer)) {
    double elements = 1;
    for (size_t d = 0; d < entry.global_shape.size(); ++d) {
      const bool split = static_cast<int>(d) == entry.tensor_split_axis;
      elements *=
          static_cast<double>(split ? entry.global_shape[d] / tensor : entry.global_shape[d]);
    }
    switch (entry.holder) {
      case ParameterHolder::kLayer:
        counts.per_layer += elements;
        break;
      case ParameterHolder::kFirstStage:
        counts.first_stage += elements;
        break;
      case ParameterHolder::kLastStage:
        counts.last_stage += elements;
        break;
      case ParameterHolder::kFirstAndLastStage:
        counts.first_and_last_stage += elements;
        break;
    }
  }
  return counts;
}

}  // namespace mtrain
