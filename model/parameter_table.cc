#include "model/parameter_table.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace mtrain {

namespace {

using P = ParamInit;
using R = ParameterRole;
constexpr HfLayout kSame = HfLayout::kSame;
constexpr HfLayout kTransposed = HfLayout::kTransposed;

// Appends entries in buffer order.
class TableBuilder {
 public:
  ParameterEntry& Add(R role, int layer, std::string name, std::vector<int64_t> shape,
                      int split_axis, P init, bool decay, ParameterHolder holder,
                      std::string hf_name, std::vector<int64_t> hf_shape, HfLayout hf_layout) {
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
    table_.push_back(std::move(entry));
    return table_.back();
  }
  // A parameter of layer i: ours "layers.i.<ours>", HF's "<hf_layer_prefix>i.<hf>".
  void AddLayer(int i, const std::string& hf_layer_prefix, R role, const char* ours,
                std::vector<int64_t> shape, int split_axis, P init, bool decay,
                absl::string_view hf, std::vector<int64_t> hf_shape, HfLayout hf_layout) {
    Add(role, i, absl::StrCat("layers.", i, ".", ours), std::move(shape), split_axis, init, decay,
        ParameterHolder::kLayer, absl::StrCat(hf_layer_prefix, i, ".", hf), std::move(hf_shape),
        hf_layout);
  }
  std::vector<ParameterEntry> Take() { return std::move(table_); }

 private:
  std::vector<ParameterEntry> table_;
};

// GPT-2 (HF GPT2Model's names; its Conv1D weights are [in, out]).
std::vector<ParameterEntry> Gpt2Table(const TransformerConfig& config) {
  const int64_t C = config.hidden, S = config.seq_length, V = config.vocab;
  const int64_t Vp = config.padded_vocab, F = config.ffn_hidden;
  TableBuilder t;
  ParameterEntry& wte = t.Add(R::kTokenEmbedding, -1, "wte", {Vp, C}, 0, P::kNormal, true,
                              ParameterHolder::kFirstAndLastStage,  // and GPT-2's output layer
                              "wte.weight", {V, C}, kSame);
  wte.padded_vocabulary_rows = true;
  wte.hf_rows = HfRows::kOursPadded;
  ParameterEntry& wpe = t.Add(R::kPositionEmbedding, -1, "wpe", {S, C}, -1, P::kNormal, true,
                              ParameterHolder::kFirstStage, "wpe.weight", {S, C}, kSame);
  wpe.hf_rows = HfRows::kHfLonger;
  for (int i = 0; i < config.num_layers; ++i) {
    const std::string h = "h.";
    t.AddLayer(i, h, R::kAttentionNormWeight, "ln1.weight", {C}, -1, P::kOnes, false, "ln_1.weight",
               {C}, kSame);
    t.AddLayer(i, h, R::kAttentionNormBias, "ln1.bias", {C}, -1, P::kZeros, false, "ln_1.bias", {C},
               kSame);
    // Q, K, V blocks (heads contiguous inside each) are exactly the thirds of c_attn's
    // output that HF splits with qkv.split(C): the same element order.
    t.AddLayer(i, h, R::kQkvWeight, "attn.qkv.weight", {3, C, C}, 1, P::kNormal, true,
               "attn.c_attn.weight", {C, 3 * C}, kTransposed);
    t.AddLayer(i, h, R::kQkvBias, "attn.qkv.bias", {3, C}, 1, P::kZeros, false, "attn.c_attn.bias",
               {3 * C}, kSame);
    t.AddLayer(i, h, R::kAttentionOutWeight, "attn.proj.weight", {C, C}, 1, P::kScaledNormal, true,
               "attn.c_proj.weight", {C, C}, kTransposed);
    t.AddLayer(i, h, R::kAttentionOutBias, "attn.proj.bias", {C}, -1, P::kZeros, false,
               "attn.c_proj.bias", {C}, kSame);
    t.AddLayer(i, h, R::kMlpNormWeight, "ln2.weight", {C}, -1, P::kOnes, false, "ln_2.weight", {C},
               kSame);
    t.AddLayer(i, h, R::kMlpNormBias, "ln2.bias", {C}, -1, P::kZeros, false, "ln_2.bias", {C},
               kSame);
    t.AddLayer(i, h, R::kMlpInWeight, "mlp.fc.weight", {F, C}, 0, P::kNormal, true,
               "mlp.c_fc.weight", {C, F}, kTransposed);
    t.AddLayer(i, h, R::kMlpInBias, "mlp.fc.bias", {F}, 0, P::kZeros, false, "mlp.c_fc.bias", {F},
               kSame);
    t.AddLayer(i, h, R::kMlpOutWeight, "mlp.proj.weight", {C, F}, 1, P::kScaledNormal, true,
               "mlp.c_proj.weight", {F, C}, kTransposed);
    t.AddLayer(i, h, R::kMlpOutBias, "mlp.proj.bias", {C}, -1, P::kZeros, false, "mlp.c_proj.bias",
               {C}, kSame);
  }
  t.Add(R::kFinalNormWeight, -1, "lnf.weight", {C}, -1, P::kOnes, false,
        ParameterHolder::kLastStage, "ln_f.weight", {C}, kSame);
  t.Add(R::kFinalNormBias, -1, "lnf.bias", {C}, -1, P::kZeros, false, ParameterHolder::kLastStage,
        "ln_f.bias", {C}, kSame);
  return t.Take();
}

// Llama-style decoders (HF LlamaForCausalLM's names, without its "model." prefix except
// the output layer's; its Linear weights are [out, in] like ours). Q, K and V are three
// tensors, each split by heads, that lie next to each other in a rank's buffer (one GEMM
// produces [q | k | v] for its heads); gate and up likewise ([gate | up], kernels/swiglu.h).
// Biases only where model.linear_bias asks (Llama: none).
std::vector<ParameterEntry> LlamaTable(const TransformerConfig& config) {
  const int64_t C = config.hidden, V = config.vocab, Vp = config.padded_vocab;
  const int64_t F = config.ffn_hidden, Q = config.query_width(), KV = config.kv_width();
  TableBuilder t;
  ParameterEntry& embed =
      t.Add(R::kTokenEmbedding, -1, "wte", {Vp, C}, 0, P::kNormal, true,
            config.tied_output ? ParameterHolder::kFirstAndLastStage : ParameterHolder::kFirstStage,
            "embed_tokens.weight", {V, C}, kSame);
  embed.padded_vocabulary_rows = true;
  embed.hf_rows = HfRows::kOursPadded;
  for (int i = 0; i < config.num_layers; ++i) {
    const std::string h = "layers.";
    t.AddLayer(i, h, R::kAttentionNormWeight, "ln1.weight", {C}, -1, P::kOnes, false,
               "input_layernorm.weight", {C}, kSame);
    t.AddLayer(i, h, R::kQueryWeight, "attn.q.weight", {Q, C}, 0, P::kNormal, true,
               "self_attn.q_proj.weight", {Q, C}, kSame);
    t.AddLayer(i, h, R::kKeyWeight, "attn.k.weight", {KV, C}, 0, P::kNormal, true,
               "self_attn.k_proj.weight", {KV, C}, kSame);
    t.AddLayer(i, h, R::kValueWeight, "attn.v.weight", {KV, C}, 0, P::kNormal, true,
               "self_attn.v_proj.weight", {KV, C}, kSame);
    if (config.biases) {
      t.AddLayer(i, h, R::kQueryBias, "attn.q.bias", {Q}, 0, P::kZeros, false,
                 "self_attn.q_proj.bias", {Q}, kSame);
      t.AddLayer(i, h, R::kKeyBias, "attn.k.bias", {KV}, 0, P::kZeros, false,
                 "self_attn.k_proj.bias", {KV}, kSame);
      t.AddLayer(i, h, R::kValueBias, "attn.v.bias", {KV}, 0, P::kZeros, false,
                 "self_attn.v_proj.bias", {KV}, kSame);
    }
    t.AddLayer(i, h, R::kAttentionOutWeight, "attn.proj.weight", {C, Q}, 1, P::kScaledNormal, true,
               "self_attn.o_proj.weight", {C, Q}, kSame);
    if (config.biases) {
      t.AddLayer(i, h, R::kAttentionOutBias, "attn.proj.bias", {C}, -1, P::kZeros, false,
                 "self_attn.o_proj.bias", {C}, kSame);
    }
    t.AddLayer(i, h, R::kMlpNormWeight, "ln2.weight", {C}, -1, P::kOnes, false,
               "post_attention_layernorm.weight", {C}, kSame);
    t.AddLayer(i, h, R::kMlpGateWeight, "mlp.gate.weight", {F, C}, 0, P::kNormal, true,
               "mlp.gate_proj.weight", {F, C}, kSame);
    t.AddLayer(i, h, R::kMlpUpWeight, "mlp.up.weight", {F, C}, 0, P::kNormal, true,
               "mlp.up_proj.weight", {F, C}, kSame);
    t.AddLayer(i, h, R::kMlpOutWeight, "mlp.proj.weight", {C, F}, 1, P::kScaledNormal, true,
               "mlp.down_proj.weight", {C, F}, kSame);
  }
  t.Add(R::kFinalNormWeight, -1, "lnf.weight", {C}, -1, P::kOnes, false,
        ParameterHolder::kLastStage, "norm.weight", {C}, kSame);
  if (!config.tied_output) {
    ParameterEntry& head = t.Add(R::kOutputWeight, -1, "lm_head", {Vp, C}, 0, P::kNormal, true,
                                 ParameterHolder::kLastStage, "lm_head.weight", {V, C}, kSame);
    head.padded_vocabulary_rows = true;
    head.hf_rows = HfRows::kOursPadded;
    head.hf_in_base_model = false;
  }
  return t.Take();
}

// BERT (HF MegatronBertForPreTraining's names under the pre placement, BertForPreTraining's
// under the post one, without their "bert." prefix except the heads' "cls.*"; Linear
// weights [out, in] like ours). Q, K and V are three tensors next to each other, as
// Llama's. The masked-LM decoder is the token embedding (first and last stage, as GPT-2's
// tied output layer) with its own bias over the padded vocabulary.
std::vector<ParameterEntry> BertTable(const TransformerConfig& config) {
  const int64_t C = config.hidden, S = config.seq_length, V = config.vocab;
  const int64_t Vp = config.padded_vocab, F = config.ffn_hidden;
  const bool pre = config.norm_placement == NormPlacement::kPre;
  TableBuilder t;
  const bool pretraining = config.bert_head == BertHeadKind::kPretraining;
  ParameterEntry& wte =
      t.Add(R::kTokenEmbedding, -1, "wte", {Vp, C}, 0, P::kNormal, true,
            // and the masked-LM decoder
            pretraining ? ParameterHolder::kFirstAndLastStage : ParameterHolder::kFirstStage,
            "embeddings.word_embeddings.weight", {V, C}, kSame);
  wte.padded_vocabulary_rows = true;
  wte.hf_rows = HfRows::kOursPadded;
  ParameterEntry& wpe =
      t.Add(R::kPositionEmbedding, -1, "wpe", {S, C}, -1, P::kNormal, true,
            ParameterHolder::kFirstStage, "embeddings.position_embeddings.weight", {S, C}, kSame);
  wpe.hf_rows = HfRows::kHfLonger;
  const int64_t types = config.token_types;
  t.Add(R::kTokenTypeEmbedding, -1, "tte", {types, C}, -1, P::kNormal, true,
        ParameterHolder::kFirstStage, "embeddings.token_type_embeddings.weight", {types, C}, kSame);
  if (!pre) {
    t.Add(R::kEmbeddingNormWeight, -1, "emb_ln.weight", {C}, -1, P::kOnes, false,
          ParameterHolder::kFirstStage, "embeddings.LayerNorm.weight", {C}, kSame);
    t.Add(R::kEmbeddingNormBias, -1, "emb_ln.bias", {C}, -1, P::kZeros, false,
          ParameterHolder::kFirstStage, "embeddings.LayerNorm.bias", {C}, kSame);
  }
  // ln1 normalises the attention's input (pre) or its residual sum (post); ln2 likewise for
  // the MLP.
  const char* ln1 = pre ? "attention.ln" : "attention.output.LayerNorm";
  const char* ln2 = pre ? "ln" : "output.LayerNorm";
  for (int i = 0; i < config.num_layers; ++i) {
    const std::string h = "encoder.layer.";
    t.AddLayer(i, h, R::kAttentionNormWeight, "ln1.weight", {C}, -1, P::kOnes, false,
               absl::StrCat(ln1, ".weight"), {C}, kSame);
    t.AddLayer(i, h, R::kAttentionNormBias, "ln1.bias", {C}, -1, P::kZeros, false,
               absl::StrCat(ln1, ".bias"), {C}, kSame);
    t.AddLayer(i, h, R::kQueryWeight, "attn.q.weight", {C, C}, 0, P::kNormal, true,
               "attention.self.query.weight", {C, C}, kSame);
    t.AddLayer(i, h, R::kKeyWeight, "attn.k.weight", {C, C}, 0, P::kNormal, true,
               "attention.self.key.weight", {C, C}, kSame);
    t.AddLayer(i, h, R::kValueWeight, "attn.v.weight", {C, C}, 0, P::kNormal, true,
               "attention.self.value.weight", {C, C}, kSame);
    t.AddLayer(i, h, R::kQueryBias, "attn.q.bias", {C}, 0, P::kZeros, false,
               "attention.self.query.bias", {C}, kSame);
    t.AddLayer(i, h, R::kKeyBias, "attn.k.bias", {C}, 0, P::kZeros, false,
               "attention.self.key.bias", {C}, kSame);
    t.AddLayer(i, h, R::kValueBias, "attn.v.bias", {C}, 0, P::kZeros, false,
               "attention.self.value.bias", {C}, kSame);
    t.AddLayer(i, h, R::kAttentionOutWeight, "attn.proj.weight", {C, C}, 1, P::kScaledNormal, true,
               "attention.output.dense.weight", {C, C}, kSame);
    t.AddLayer(i, h, R::kAttentionOutBias, "attn.proj.bias", {C}, -1, P::kZeros, false,
               "attention.output.dense.bias", {C}, kSame);
    t.AddLayer(i, h, R::kMlpNormWeight, "ln2.weight", {C}, -1, P::kOnes, false,
               absl::StrCat(ln2, ".weight"), {C}, kSame);
    t.AddLayer(i, h, R::kMlpNormBias, "ln2.bias", {C}, -1, P::kZeros, false,
               absl::StrCat(ln2, ".bias"), {C}, kSame);
    t.AddLayer(i, h, R::kMlpInWeight, "mlp.fc.weight", {F, C}, 0, P::kNormal, true,
               "intermediate.dense.weight", {F, C}, kSame);
    t.AddLayer(i, h, R::kMlpInBias, "mlp.fc.bias", {F}, 0, P::kZeros, false,
               "intermediate.dense.bias", {F}, kSame);
    t.AddLayer(i, h, R::kMlpOutWeight, "mlp.proj.weight", {C, F}, 1, P::kScaledNormal, true,
               "output.dense.weight", {C, F}, kSame);
    t.AddLayer(i, h, R::kMlpOutBias, "mlp.proj.bias", {C}, -1, P::kZeros, false,
               "output.dense.bias", {C}, kSame);
  }
  if (pre) {
    t.Add(R::kFinalNormWeight, -1, "lnf.weight", {C}, -1, P::kOnes, false,
          ParameterHolder::kLastStage, "encoder.ln.weight", {C}, kSame);
    t.Add(R::kFinalNormBias, -1, "lnf.bias", {C}, -1, P::kZeros, false, ParameterHolder::kLastStage,
          "encoder.ln.bias", {C}, kSame);
  }
  const auto last = ParameterHolder::kLastStage;
  t.Add(R::kPoolerWeight, -1, "pooler.weight", {C, C}, -1, P::kNormal, true, last,
        "pooler.dense.weight", {C, C}, kSame);
  t.Add(R::kPoolerBias, -1, "pooler.bias", {C}, -1, P::kZeros, false, last, "pooler.dense.bias",
        {C}, kSame);
  // The heads sit outside HF's base model.
  auto head = [&](R role, const char* ours, std::vector<int64_t> shape, int split, P init,
                  bool decay, const char* hf, std::vector<int64_t> hf_shape) -> ParameterEntry& {
    ParameterEntry& e =
        t.Add(role, -1, ours, std::move(shape), split, init, decay, last, hf, hf_shape, kSame);
    e.hf_in_base_model = false;
    return e;
  };
  if (!pretraining) {
    // HF BertForMultipleChoice's classifier: one score per sequence.
    head(R::kChoiceWeight, "choice.weight", {1, C}, -1, P::kNormal, true, "classifier.weight",
         {1, C});
    head(R::kChoiceBias, "choice.bias", {1}, -1, P::kZeros, false, "classifier.bias", {1});
    return t.Take();
  }
  head(R::kMlmTransformWeight, "mlm.dense.weight", {C, C}, -1, P::kNormal, true,
       "cls.predictions.transform.dense.weight", {C, C});
  head(R::kMlmTransformBias, "mlm.dense.bias", {C}, -1, P::kZeros, false,
       "cls.predictions.transform.dense.bias", {C});
  head(R::kMlmNormWeight, "mlm.ln.weight", {C}, -1, P::kOnes, false,
       "cls.predictions.transform.LayerNorm.weight", {C});
  head(R::kMlmNormBias, "mlm.ln.bias", {C}, -1, P::kZeros, false,
       "cls.predictions.transform.LayerNorm.bias", {C});
  ParameterEntry& mlm_bias =
      head(R::kMlmOutputBias, "mlm.bias", {Vp}, 0, P::kZeros, false, "cls.predictions.bias", {V});
  mlm_bias.padded_vocabulary_rows = true;
  mlm_bias.hf_rows = HfRows::kOursPadded;
  head(R::kSentenceOrderWeight, "sop.weight", {2, C}, -1, P::kNormal, true,
       "cls.seq_relationship.weight", {2, C});
  head(R::kSentenceOrderBias, "sop.bias", {2}, -1, P::kZeros, false, "cls.seq_relationship.bias",
       {2});
  return t.Take();
}

}  // namespace

std::vector<ParameterEntry> ParameterTable(const TransformerConfig& config) {
  switch (config.family) {
    case ArchitectureFamily::kLlama:
      return LlamaTable(config);
    case ArchitectureFamily::kBert:
      return BertTable(config);
    case ArchitectureFamily::kGpt2:
      break;
  }
  return Gpt2Table(config);
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

double ModelParameterCount(const TransformerConfig& config) {
  const RankParameterCounts counts = ParameterCountsPerTensorRank(config, 1);
  return counts.per_layer * config.num_layers + counts.first_stage + counts.last_stage +
         counts.first_and_last_stage;
}

}  // namespace mtrain
