#include "model/parameter_table.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

int64_t Volume(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TEST(ParameterTableTest, Gpt2HasMegatronsParameterCount) {
  const TransformerConfig config = Gpt2Config(/*num_layers=*/3, /*num_heads=*/4, /*hidden=*/64,
                                              /*seq_length=*/32, /*vocab=*/250,
                                              /*padded_vocab=*/256);
  const std::vector<ParameterEntry> table = ParameterTable(config);
  ASSERT_EQ(table.size(), 2u + 12u * 3u + 2u);
  int64_t total = 0;
  std::set<std::string> names, hf_names;
  for (const ParameterEntry& entry : table) {
    total += Volume(entry.global_shape);
    EXPECT_TRUE(names.insert(entry.name).second) << entry.name;
    EXPECT_TRUE(hf_names.insert(entry.hf_name).second) << entry.hf_name;
  }
  const int64_t C = 64;
  // 12 C^2 + 13 C a layer, embeddings, the final LayerNorm.
  EXPECT_EQ(total, 256 * C + 32 * C + 3 * (12 * C * C + 13 * C) + 2 * C);
}

TEST(ParameterTableTest, EntriesAreOrderedAndSplitWhereMegatronSplits) {
  const TransformerConfig config = Gpt2Config(2, 4, 64, 32, 250, 256);
  const std::vector<ParameterEntry> table = ParameterTable(config);
  EXPECT_EQ(table.front().role, ParameterRole::kTokenEmbedding);
  EXPECT_EQ(table.front().holder, ParameterHolder::kFirstAndLastStage);
  EXPECT_TRUE(table.front().padded_vocabulary_rows);
  EXPECT_EQ(table.back().holder, ParameterHolder::kLastStage);
  int last_layer = -1;
  for (const ParameterEntry& entry : table) {
    if (entry.holder == ParameterHolder::kLayer) {
      EXPECT_GE(entry.layer, last_layer) << entry.name;
      last_layer = entry.layer;
    } else {
      EXPECT_EQ(entry.layer, -1) << entry.name;
    }
    switch (entry.role) {
      case ParameterRole::kQkvWeight:
      case ParameterRole::kQkvBias:
      case ParameterRole::kAttentionOutWeight:
      case ParameterRole::kMlpOutWeight:
        EXPECT_EQ(entry.tensor_split_axis, 1) << entry.name;  // heads; row parallel's input
        break;
      case ParameterRole::kTokenEmbedding:
      case ParameterRole::kMlpInWeight:
      case ParameterRole::kMlpInBias:
        EXPECT_EQ(entry.tensor_split_axis, 0) << entry.name;  // vocabulary; column parallel
        break;
      default:
        EXPECT_EQ(entry.tensor_split_axis, -1) << entry.name;
    }
    // Decay on matrices and embeddings (drawn from a normal) only, not on biases and gains.
    const bool drawn = entry.init == ParamInit::kNormal || entry.init == ParamInit::kScaledNormal;
    EXPECT_EQ(entry.weight_decay, drawn) << entry.name;
    EXPECT_EQ(drawn, entry.global_shape.size() >= 2 && entry.role != ParameterRole::kQkvBias)
        << entry.name;
  }
}

TEST(ParameterTableTest, HuggingFaceShapesHoldTheSameElements) {
  const TransformerConfig config = Gpt2Config(2, 4, 64, 32, 250, 256);
  for (const ParameterEntry& entry : ParameterTable(config)) {
    std::vector<int64_t> ours = entry.global_shape;
    if (entry.hf_rows == HfRows::kOursPadded) ours[0] = config.vocab;
    EXPECT_EQ(Volume(ours), Volume(entry.hf_shape)) << entry.name << " / " << entry.hf_name;
    if (entry.hf_layout == HfLayout::kTransposed) {
      EXPECT_EQ(ours.back(), entry.hf_shape.front()) << entry.name;  // Conv1D is [in, out]
    }
  }
}

TEST(ParameterTableTest, FfnWidthComesFromTheConfiguration) {
  TransformerConfig config = Gpt2Config(1, 4, 64, 32, 250, 256);
  config.ffn_hidden = 96;
  for (const ParameterEntry& entry : ParameterTable(config)) {
    if (entry.role == ParameterRole::kMlpInWeight) {
      EXPECT_EQ(entry.global_shape, (std::vector<int64_t>{96, 64}));
    }
    if (entry.role == ParameterRole::kMlpOutWeight) {
      EXPECT_EQ(entry.global_shape, (std::vector<int64_t>{64, 96}));
    }
  }
}

// Megatron's count for one tensor rank of t: 12 C Cl + 7 Cl + 6 C a layer (qkv 3 C Cl + 3 Cl,
// attention projection Cl C + C, MLP 4 C Cl + 4 Cl and 4 Cl C + C, two LayerNorms 4 C).
TEST(ParameterTableTest, CountsPerTensorRankFollowMegatron) {
  const int64_t C = 64, t = 2, Cl = C / t;
  const TransformerConfig config = Gpt2Config(6, 4, 64, 32, 250, 512);
  const RankParameterCounts counts = ParameterCountsPerTensorRank(config, 2);
  EXPECT_EQ(counts.per_layer, 12 * C * Cl + 7 * Cl + 6 * C);
  EXPECT_EQ(counts.first_stage, 32 * C);
  EXPECT_EQ(counts.last_stage, 2 * C);
  EXPECT_EQ(counts.first_and_last_stage, 512 / t * C);
}

TransformerConfig LlamaConfig(int layers, int heads, int kv_heads, int hidden, int ffn, int vocab) {
  TransformerConfig c = Gpt2Config(layers, heads, hidden, 4096, vocab, vocab);
  c.family = ArchitectureFamily::kLlama;
  c.num_kv_heads = kv_heads;
  c.ffn_hidden = ffn;
  c.normalization = NormKind::kRmsNorm;
  c.activation = ActivationKind::kSwiGlu;
  c.gated_mlp = true;
  c.positions = Positions::kRotary;
  c.biases = false;
  c.tied_output = false;
  return c;
}

int64_t TotalParameters(const TransformerConfig& config) {
  int64_t total = 0;
  for (const ParameterEntry& entry : ParameterTable(config)) total += Volume(entry.global_shape);
  return total;
}

// The published sizes: Llama 2 7B has 6,738,415,616 parameters, Llama 3 8B 8,030,261,248
// (grouped-query attention, 8 key-value heads, a 128,256-token vocabulary).
TEST(ParameterTableTest, LlamaHasThePublishedParameterCounts) {
  EXPECT_EQ(TotalParameters(LlamaConfig(32, 32, 32, 4096, 11008, 32000)), 6738415616);
  EXPECT_EQ(TotalParameters(LlamaConfig(32, 32, 8, 4096, 14336, 128256)), 8030261248);
  EXPECT_DOUBLE_EQ(ModelParameterCount(LlamaConfig(32, 32, 8, 4096, 14336, 128256)), 8030261248.0);
  // GPT-2 small, the tied embedding once: 124,439,808.
  EXPECT_DOUBLE_EQ(ModelParameterCount(Gpt2Config(12, 12, 768, 1024, 50257, 50257)), 124439808.0);
}

TEST(ParameterTableTest, LlamaSplitsHeadsAndKeepsHuggingFaceNames) {
  const TransformerConfig config = LlamaConfig(2, 8, 2, 64, 192, 256);
  const std::vector<ParameterEntry> table = ParameterTable(config);
  std::set<std::string> hf_names;
  for (const ParameterEntry& entry : table) {
    hf_names.insert(entry.hf_name);
    EXPECT_EQ(entry.hf_layout, HfLayout::kSame) << entry.name;  // nn.Linear is [out, in]
    switch (entry.role) {
      case ParameterRole::kKeyWeight:
      case ParameterRole::kValueWeight:
        EXPECT_EQ(entry.global_shape, (std::vector<int64_t>{2 * 8, 64})) << entry.name;
        EXPECT_EQ(entry.tensor_split_axis, 0) << entry.name;  // whole key-value heads
        break;
      case ParameterRole::kOutputWeight:
        EXPECT_EQ(entry.holder, ParameterHolder::kLastStage);
        EXPECT_TRUE(entry.padded_vocabulary_rows);
        break;
      case ParameterRole::kTokenEmbedding:
        EXPECT_EQ(entry.holder, ParameterHolder::kFirstStage);  // untied
        break;
      case ParameterRole::kPositionEmbedding:
      case ParameterRole::kQkvBias:
      case ParameterRole::kAttentionNormBias:
        ADD_FAILURE() << "Llama has no " << entry.name;
        break;
      default:
        break;
    }
  }
  for (const char* name : {"embed_tokens.weight", "layers.1.input_layernorm.weight",
                           "layers.1.self_attn.q_proj.weight", "layers.1.self_attn.k_proj.weight",
                           "layers.1.self_attn.v_proj.weight", "layers.1.self_attn.o_proj.weight",
                           "layers.1.post_attention_layernorm.weight",
                           "layers.1.mlp.gate_proj.weight", "layers.1.mlp.up_proj.weight",
                           "layers.1.mlp.down_proj.weight", "norm.weight", "lm_head.weight"}) {
    EXPECT_EQ(hf_names.count(name), 1u) << name;
  }
  // Per tensor rank of 2: the table's counts follow the split.
  const RankParameterCounts counts = ParameterCountsPerTensorRank(config, 2);
  const double C = 64, Q = 64 / 2, KV = 16 / 2, F = 192 / 2;
  EXPECT_DOUBLE_EQ(counts.per_layer, 2 * C + Q * C + 2 * KV * C + C * Q + 3 * F * C);
  EXPECT_DOUBLE_EQ(counts.first_stage, 128 * C);
  EXPECT_DOUBLE_EQ(counts.last_stage, C + 128 * C);
  EXPECT_DOUBLE_EQ(counts.first_and_last_stage, 0);
}

}  // namespace
}  // namespace mtrain

namespace mtrain {
namespace {

// Every parameter of HF's BertForPreTraining (post) and MegatronBertForPreTraining (pre) for
// a 2-layer model of width 32, by name and shape, as transformers 5.24 lists them (its tied
// aliases cls.predictions.decoder.weight and .bias left out).
std::map<std::string, std::vector<int64_t>> HuggingFaceBert(NormPlacement placement) {
  const bool pre = placement == NormPlacement::kPre;
  std::map<std::string, std::vector<int64_t>> names = {
      {"bert.embeddings.word_embeddings.weight", {100, 32}},
      {"bert.embeddings.position_embeddings.weight", {48, 32}},
      {"bert.embeddings.token_type_embeddings.weight", {2, 32}},
      {"bert.pooler.dense.weight", {32, 32}},
      {"bert.pooler.dense.bias", {32}},
      {"cls.predictions.bias", {100}},
      {"cls.predictions.transform.dense.weight", {32, 32}},
      {"cls.predictions.transform.dense.bias", {32}},
      {"cls.predictions.transform.LayerNorm.weight", {32}},
      {"cls.predictions.transform.LayerNorm.bias", {32}},
      {"cls.seq_relationship.weight", {2, 32}},
      {"cls.seq_relationship.bias", {2}}};
  if (pre) {
    names["bert.encoder.ln.weight"] = {32};
    names["bert.encoder.ln.bias"] = {32};
  } else {
    names["bert.embeddings.LayerNorm.weight"] = {32};
    names["bert.embeddings.LayerNorm.bias"] = {32};
  }
  for (int i = 0; i < 2; ++i) {
    const std::string l = "bert.encoder.layer." + std::to_string(i) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      names[l + "attention.self." + qkv + ".weight"] = {32, 32};
      names[l + "attention.self." + qkv + ".bias"] = {32};
    }
    names[l + "attention.output.dense.weight"] = {32, 32};
    names[l + "attention.output.dense.bias"] = {32};
    names[l + "intermediate.dense.weight"] = {64, 32};
    names[l + "intermediate.dense.bias"] = {64};
    names[l + "output.dense.weight"] = {32, 64};
    names[l + "output.dense.bias"] = {32};
    for (const char* ln :
         {pre ? "attention.ln" : "attention.output.LayerNorm", pre ? "ln" : "output.LayerNorm"}) {
      names[l + ln + ".weight"] = {32};
      names[l + ln + ".bias"] = {32};
    }
  }
  return names;
}

TEST(ParameterTableTest, BertHasHuggingFacesParametersInBothPlacements) {
  for (NormPlacement placement : {NormPlacement::kPre, NormPlacement::kPost}) {
    const TransformerConfig config = BertConfig(/*num_layers=*/2, /*num_heads=*/4, /*hidden=*/32,
                                                /*ffn_hidden=*/64, /*seq_length=*/48,
                                                /*vocab=*/100, /*padded_vocab=*/128, placement);
    std::map<std::string, std::vector<int64_t>> ours;
    int64_t hf_elements = 0;
    std::set<std::string> names;
    for (const ParameterEntry& entry : ParameterTable(config)) {
      EXPECT_TRUE(names.insert(entry.name).second) << entry.name;
      ours[(entry.hf_in_base_model ? "bert." : "") + entry.hf_name] = entry.hf_shape;
      EXPECT_EQ(
          Volume(entry.hf_shape) +
              (entry.padded_vocabulary_rows ? (128 - 100) * Volume(entry.global_shape) / 128 : 0),
          Volume(entry.global_shape))
          << entry.name;
      hf_elements += Volume(entry.hf_shape);
    }
    EXPECT_EQ(ours, HuggingFaceBert(placement));
    // transformers' own count of either class at this size.
    EXPECT_EQ(hf_elements, 24294);
  }
  // Published sizes: BERT-base (BertForPreTraining with its defaults) and Megatron's BERT
  // 345M (MegatronBertForPreTraining, vocabulary 29,056), as transformers counts them.
  TransformerConfig base = BertConfig(12, 12, 768, 3072, 512, 30522, 30522, NormPlacement::kPost);
  EXPECT_EQ(ModelParameterCount(base), 110106428);
  TransformerConfig megatron =
      BertConfig(24, 16, 1024, 4096, 512, 29056, 29056, NormPlacement::kPre);
  EXPECT_EQ(ModelParameterCount(megatron), 334723458);
}

TEST(ParameterTableTest, BertSplitsLikeMegatronAndKeepsItsHeadsOnTheLastStage) {
  const TransformerConfig config = BertConfig(2, 4, 32, 64, 48, 100, 128, NormPlacement::kPre);
  for (const ParameterEntry& entry : ParameterTable(config)) {
    switch (entry.role) {
      case ParameterRole::kQueryWeight:
      case ParameterRole::kMlpInWeight:
      case ParameterRole::kTokenEmbedding:
      case ParameterRole::kMlmOutputBias:
        EXPECT_EQ(entry.tensor_split_axis, 0) << entry.name;
        break;
      case ParameterRole::kAttentionOutWeight:
      case ParameterRole::kMlpOutWeight:
        EXPECT_EQ(entry.tensor_split_axis, 1) << entry.name;
        break;
      case ParameterRole::kPoolerWeight:
      case ParameterRole::kMlmTransformWeight:
      case ParameterRole::kSentenceOrderWeight:
        EXPECT_EQ(entry.tensor_split_axis, -1) << entry.name;
        EXPECT_EQ(entry.holder, ParameterHolder::kLastStage) << entry.name;
        break;
      case ParameterRole::kTokenTypeEmbedding:
        EXPECT_EQ(entry.holder, ParameterHolder::kFirstStage) << entry.name;
        break;
      default:
        break;
    }
  }
}

TEST(ParameterTableTest, BertMultipleChoiceHasTheClassifierInPlaceOfThePretrainingHeads) {
  TransformerConfig config = BertConfig(12, 12, 768, 3072, 512, 30522, 30522, NormPlacement::kPost);
  config.bert_head = BertHeadKind::kMultipleChoice;
  // HF BertForMultipleChoice at BERT-base's defaults: BertModel (pooler included) and the
  // [1, 768] classifier with its bias.
  EXPECT_EQ(ModelParameterCount(config), 109483009);
  bool classifier = false;
  for (const ParameterEntry& entry : ParameterTable(config)) {
    EXPECT_NE(entry.name.rfind("mlm.", 0), 0u) << entry.name;
    EXPECT_NE(entry.name.rfind("sop.", 0), 0u) << entry.name;
    if (entry.role == ParameterRole::kTokenEmbedding) {
      // No decoder reads it: the first stage alone holds it.
      EXPECT_EQ(entry.holder, ParameterHolder::kFirstStage);
    }
    if (entry.role == ParameterRole::kChoiceWeight) {
      classifier = true;
      EXPECT_EQ(entry.hf_name, "classifier.weight");
      EXPECT_FALSE(entry.hf_in_base_model);
      EXPECT_EQ(entry.global_shape, (std::vector<int64_t>{1, 768}));
      EXPECT_EQ(entry.holder, ParameterHolder::kLastStage);
    }
  }
  EXPECT_TRUE(classifier);
}

}  // namespace
}  // namespace mtrain
