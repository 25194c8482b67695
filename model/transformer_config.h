// The architecture of a model as data: the model seam (ARCHITECTURE.md, "Model families are
// data, not code paths"). What the engines' metrics, the planner's cost model and the FLOPs
// read, instead of GPT-2's fixed fields (`4 * hidden`, one head per key-value head, a tied
// output layer) written where each is used. Daemon-neutral: the worker, the coordinator,
// trainctl and plan/ link it.
//
// Three families in the spec (model.family): GPT-2 (Megatron-LM's pre-LN blocks),
// Llama-style decoders, whose fields a spec may also set one by one, and BERT
// (bidirectional, token types, the pooler, masked-LM and sentence-order heads, the
// LayerNorm before or after each sub-layer: model.layernorm_placement).
//
//   const TransformerConfig config = TransformerConfigOf(spec);  // a resolved spec
//   const double flops = ModelFlopsPerStep(config, spec.parallel().global_batch_size());
#ifndef MTRAIN_MODEL_TRANSFORMER_CONFIG_H_
#define MTRAIN_MODEL_TRANSFORMER_CONFIG_H_

#include <cstdint>

#include "proto/job_spec.pb.h"

namespace mtrain {

enum class ArchitectureFamily { kGpt2, kLlama, kBert };
enum class NormKind { kLayerNorm, kRmsNorm };
enum class ActivationKind { kTanhGelu, kGelu, kSwiGlu };
enum class Positions { kLearned, kRotary };
// BERT's LayerNorm: before each sub-layer with a final one (Megatron's rearranged
// placement), or after each residual add with one after the embeddings (the original).
enum class NormPlacement { kPre, kPost };
// BERT's heads: masked-LM and sentence order (pretraining), or one score per sequence whose
// softmax over each question's kRaceChoices options is the multiple-choice loss.
enum class BertHeadKind { kPretraining, kMultipleChoice };

struct TransformerConfig {
  ArchitectureFamily family = ArchitectureFamily::kGpt2;
  int num_layers = 0;
  int hidden = 0;        // h: the residual stream's width
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // key-value heads (= num_heads: multi-head attention)
  int head_dim = 0;      // h / num_heads
  int ffn_hidden = 0;    // the MLP's inner width (GPT-2: 4 h)
  int seq_length = 0;
  int vocab = 0;         // real tokens
  int padded_vocab = 0;  // a multiple of 128 x the tensor degree (logits past vocab are padding)
  NormKind normalization = NormKind::kLayerNorm;
  double norm_epsilon = 1e-5;
  ActivationKind activation = ActivationKind::kTanhGelu;
  Positions positions = Positions::kLearned;
  double rope_theta = 10000;  // rotary positions' base
  bool biases = true;         // on every linear layer and normalisation
  bool tied_output = true;    // the output layer is the token embedding
  bool gated_mlp = false;     // SwiGLU-style: gate and up projections (3 FFN matrices)
  NormPlacement norm_placement = NormPlacement::kPre;
  int token_types = 0;  // BERT: segment A and B (2); 0: no token-type embedding
  BertHeadKind bert_head = BertHeadKind::kPretraining;

  // In 64 bits: an unvalidated spec's sizes (the planner's estimates take any) must not
  // overflow.
  int64_t query_width() const { return int64_t{num_heads} * head_dim; }
  int64_t kv_width() const { return int64_t{num_kv_heads} * head_dim; }
};

// GPT-2 of these sizes: what TransformerConfigOf gives a spec with them (tests and tools
// that build a model without a spec).
TransformerConfig Gpt2Config(int num_layers, int num_heads, int hidden, int seq_length, int vocab,
                             int padded_vocab);

// A Llama-style decoder of these sizes (RMSNorm, SwiGLU, rotary positions, no biases, an
// untied output layer: TransformerConfigOf's for a MODEL_FAMILY_LLAMA spec with them).
TransformerConfig LlamaConfig(int num_layers, int num_heads, int num_kv_heads, int hidden,
                              int ffn_hidden, int seq_length, int vocab, int padded_vocab);

// BERT of these sizes: LayerNorm, exact GeLU, learned positions, two token types, biases,
// the masked-LM decoder tied to the token embedding; `placement` kPre is Megatron's BERT
// (HF MegatronBertForPreTraining), kPost the original (HF BertForPreTraining).
TransformerConfig BertConfig(int num_layers, int num_heads, int hidden, int ffn_hidden,
                             int seq_length, int vocab, int padded_vocab, NormPlacement placement);

// The configuration of `spec` (defaults applied, spec/job_spec_defaults.h; layout fields
// read for the vocabulary's padding only). Sizes that are not positive stay as given:
// validation is spec/'s. A spec without the architecture fields reads as GPT-2.
TransformerConfig TransformerConfigOf(const JobSpec& spec);

}  // namespace mtrain

#endif  // MTRAIN_MODEL_TRANSFORMER_CONFIG_H_
