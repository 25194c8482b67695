// Every parameter of a model as data (GPT-2's and Llama's; see the .cc for Llama's names): its
// name, global shape, the axis tensor parallelism splits, its initialisation, weight decay, which
// pipeline stages hold it and its HuggingFace counterpart. The one place tensor names are written
// (ARCHITECTURE.md, "Model families are data, not code paths"): the engines' flat parameter
// layouts, the checkpoints and the HuggingFace conversion read this table instead of spelling
// names.
//
// Names and global shapes of GPT-2 (C hidden, S seq_length, Vp padded vocabulary, F the
// FFN width; per layer i), in the order the flat buffers hold them:
//   wte                       [Vp, C]    token embedding and tied output layer; split on Vp
//   wpe                       [S, C]     learned positions
//   layers.i.ln1.weight/bias  [C]
//   layers.i.attn.qkv.weight  [3, C, C]  Q, K, V blocks of [out, in]; split on dim 1 (heads)
//   layers.i.attn.qkv.bias    [3, C]     split on dim 1
//   layers.i.attn.proj.weight [C, C]     [out, in]; split on in (row parallel)
//   layers.i.attn.proj.bias   [C]
//   layers.i.ln2.weight/bias  [C]
//   layers.i.mlp.fc.weight    [F, C]     split on out (column parallel)
//   layers.i.mlp.fc.bias      [F]        split
//   layers.i.mlp.proj.weight  [C, F]     split on in (row parallel)
//   layers.i.mlp.proj.bias    [C]
//   lnf.weight/bias           [C]
#ifndef MTRAIN_MODEL_PARAMETER_TABLE_H_
#define MTRAIN_MODEL_PARAMETER_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/transformer_config.h"

namespace mtrain {

// What a parameter is to the layer code: engines bind their typed views by role, never by
// name.
enum class ParameterRole {
  kTokenEmbedding,
  kPositionEmbedding,
  kAttentionNormWeight,
  kAttentionNormBias,
  kQkvWeight,
  kQkvBias,
  kAttentionOutWeight,
  kAttentionOutBias,
  kMlpNormWeight,
  kMlpNormBias,
  kMlpInWeight,
  kMlpInBias,
  kMlpOutWeight,
  kMlpOutBias,
  kFinalNormWeight,
  kFinalNormBias,
  // Llama-style decoders: separate query, key and value projections (grouped-query heads),
  // the gated MLP's two input projections, an untied output layer.
  kQueryWeight,
  kKeyWeight,
  kValueWeight,
  kQueryBias,
  kKeyBias,
  kValueBias,
  kMlpGateWeight,
  kMlpUpWeight,
  kOutputWeight,
  // BERT: the token-type embedding and the LayerNorm after the embeddings (the original
  // placement), the pooler ([CLS]'s dense + tanh), the masked-LM head (a dense + GeLU +
  // LayerNorm transform, then the tied decoder with its own bias), the sentence-order
  // classifier.
  kTokenTypeEmbedding,
  kEmbeddingNormWeight,
  kEmbeddingNormBias,
  kPoolerWeight,
  kPoolerBias,
  kMlmTransformWeight,
  kMlmTransformBias,
  kMlmNormWeight,
  kMlmNormBias,
  kMlmOutputBias,
  kSentenceOrderWeight,
  kSentenceOrderBias,
  // BERT's multiple-choice head (in place of the two above and the masked-LM head): a score
  // per sequence from the pooler's output.
  kChoiceWeight,
  kChoiceBias,
};

// The standard deviation of kNormal (and the base of kScaledNormal): what the engines draw
// with and what an exported config.json states as initializer_range.
inline constexpr double kInitStd = 0.02;

enum class ParamInit {
  kNormal,        // N(0, 0.02)
  kScaledNormal,  // N(0, 0.02 / sqrt(2 L)): output projections of attention and MLP
  kOnes,          // normalisation gains
  kZeros,         // biases
};

// Which pipeline stages hold a parameter.
enum class ParameterHolder {
  kFirstStage,         // the input embeddings
  kLayer,              // the stage holding `layer`
  kLastStage,          // the final normalisation (and an untied output layer)
  kFirstAndLastStage,  // a token embedding that is also the output layer: one copy on each
};

// How a tensor's elements map to HuggingFace's.
enum class HfLayout {
  kSame,        // identical row-major elements (shapes may differ, e.g. [3, C] vs [3C])
  kTransposed,  // ours [rows..., cols] is [out, in]; HF's (GPT-2's Conv1D) is [in, out]
};

// Which side may hold more rows than the other.
enum class HfRows {
  kExact,
  kOursPadded,  // ours has the padded vocabulary, HF the real one
  kHfLonger,    // HF may hold more positions than our seq_length
};

struct ParameterEntry {
  ParameterRole role;
  int layer = -1;  // the global layer; -1 outside the layers
  std::string name;
  std::vector<int64_t> global_shape;
  // The dimension tensor parallelism divides among the tensor ranks (rank r holds the
  // r-th contiguous slice); -1: every tensor rank holds all of it.
  int tensor_split_axis = -1;
  ParamInit init = ParamInit::kNormal;
  // AdamW's decoupled decay: weight matrices and embeddings, not biases or norm gains.
  bool weight_decay = false;
  ParameterHolder holder = ParameterHolder::kLayer;
  // The first dimension is the padded vocabulary, whose padding differs between layouts.
  bool padded_vocabulary_rows = false;
  // HuggingFace: the name inside the family's base model (GPT-2: without "transformer."),
  // its shape and how its elements relate to ours.
  std::string hf_name;
  std::vector<int64_t> hf_shape;
  HfLayout hf_layout = HfLayout::kSame;
  HfRows hf_rows = HfRows::kExact;
  // Whether hf_name lies inside the family's base model (GPT-2's "transformer.", Llama's
  // "model.", BERT's "bert."), or at the top of the HF model (Llama's "lm_head.weight",
  // BERT's "cls.*" heads).
  bool hf_in_base_model = true;
};

// The whole model's parameters in buffer order: embeddings, the layers in order, the head.
std::vector<ParameterEntry> ParameterTable(const TransformerConfig& config);

// Elements one of `tensor` tensor-parallel ranks holds (what the planner's memory model
// charges a stage): of each layer (all alike), of the tensors only the first or only the
// last stage holds, and of the one both hold (the tied embedding). In floating point so
// that the sizes of an unvalidated spec cannot overflow (exact below 2^53).
struct RankParameterCounts {
  double per_layer = 0;
  double first_stage = 0;
  double last_stage = 0;
  double first_and_last_stage = 0;
};
RankParameterCounts ParameterCountsPerTensorRank(const TransformerConfig& config, int tensor);

// Every parameter of the model once (a tied embedding once), at config.padded_vocab rows.
double ModelParameterCount(const TransformerConfig& config);

}  // namespace mtrain

#endif  // MTRAIN_MODEL_PARAMETER_TABLE_H_
