#include "model/transformer_config.h"

#include <algorithm>
#include <cstdint>

#include "model/family_defaults.h"
#include "spec/job_spec_arithmetic.h"

namespace mtrain {

TransformerConfig Gpt2Config(int num_layers, int num_heads, int hidden, int seq_length, int vocab,
                             int padded_vocab) {
  TransformerConfig config;
  config.num_layers = num_layers;
  config.hidden = hidden;
  config.num_heads = num_heads;
  config.num_kv_heads = num_heads;
  config.head_dim = num_heads > 0 ? hidden / num_heads : 0;
  config.ffn_hidden = Gpt2FfnHidden(hidden);
  config.seq_length = seq_length;
  config.vocab = vocab;
  config.padded_vocab = padded_vocab;
  return config;
}

TransformerConfig LlamaConfig(int num_layers, int num_heads, int num_kv_heads, int hidden,
                              int ffn_hidden, int seq_length, int vocab, int padded_vocab) {
  TransformerConfig config =
      Gpt2Config(num_layers, num_heads, hidden, seq_length, vocab, padded_vocab);
  config.family = ArchitectureFamily::kLlama;
  config.num_kv_heads = num_kv_heads;
  config.ffn_hidden = ffn_hidden;
  config.normalization = NormKind::kRmsNorm;
  config.activation = ActivationKind::kSwiGlu;
  config.gated_mlp = true;
  config.positions = Positions::kRotary;
  config.biases = false;
  config.tied_output = false;
  return config;
}

TransformerConfig BertConfig(int num_layers, int num_heads, int hidden, int ffn_hidden,
                             int seq_length, int vocab, int padded_vocab, NormPlacement placement) {
  TransformerConfig config =
      Gpt2Config(num_layers, num_heads, hidden, seq_length, vocab, padded_vocab);
  config.family = ArchitectureFamily::kBert;
  config.ffn_hidden = ffn_hidden;
  config.activation = ActivationKind::kGelu;  // BERT's exact (erf) GeLU
  config.norm_epsilon = 1e-12;                // BERT's layer_norm_eps
  config.norm_placement = placement;
  config.token_types = 2;
  return config;
}

TransformerConfig TransformerConfigOf(const JobSpec& spec) {
  const ModelSpec& m = spec.model();
  const int tensor = spec.parallel().tensor() > 0 ? spec.parallel().tensor() : 1;
  // Validated specs keep the padded vocabulary far below INT_MAX (rank_allocation_estimate
  // refuses more); an unvalidated one saturates rather than wraps.
  const int padded_vocab =
      static_cast<int>(std::min<int64_t>(PaddedVocabSize(m.vocab_size(), tensor), INT32_MAX));
  TransformerConfig config = Gpt2Config(m.num_layers(), m.num_heads(), m.hidden_size(),
                                        m.seq_length(), m.vocab_size(), padded_vocab);
  // Each field as the spec sets it; absent (a spec without defaults), GPT-2's.
  if (m.family() == MODEL_FAMILY_LLAMA) config.family = ArchitectureFamily::kLlama;
  if (m.family() == MODEL_FAMILY_BERT) {
    config.family = ArchitectureFamily::kBert;
    config.token_types = 2;  // segments A and B
    config.norm_placement = m.layernorm_placement() == LAYERNORM_PLACEMENT_POST
                                ? NormPlacement::kPost
                                : NormPlacement::kPre;
    if (m.bert_head() == BERT_HEAD_MULTIPLE_CHOICE) {
      config.bert_head = BertHeadKind::kMultipleChoice;
    }
  }
  if (m.has_num_kv_heads()) config.num_kv_heads = m.num_kv_heads();
  if (m.has_ffn_hidden_size()) config.ffn_hidden = m.ffn_hidden_size();
  if (m.normalization() == NORMALIZATION_RMSNORM) config.normalization = NormKind::kRmsNorm;
  if (m.has_norm_epsilon()) config.norm_epsilon = m.norm_epsilon();
  switch (m.activation()) {
    case ACTIVATION_GELU:
      config.activation = ActivationKind::kGelu;
      break;
    case ACTIVATION_SWIGLU:
      config.activation = ActivationKind::kSwiGlu;
      break;
    default:
      break;
  }
  config.gated_mlp = config.activation == ActivationKind::kSwiGlu;
  if (m.position_embedding() == POSITION_EMBEDDING_ROTARY) config.positions = Positions::kRotary;
  if (m.has_rope_theta()) config.rope_theta = m.rope_theta();
  if (m.has_linear_bias()) config.biases = m.linear_bias();
  if (m.has_tie_word_embeddings()) config.tied_output = m.tie_word_embeddings();
  return config;
}

}  // namespace mtrain
