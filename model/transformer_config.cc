#include "model/transformer_config.h"

#include <algorithm>
#include <cstdint>

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
  // Saturated rather than overflowed for sizes validation refuses (kMaxHiddenSize).
  config.ffn_hidden = static_cast<int>(std::min<int64_t>(int64_t{4} * hidden, INT32_MAX));
  config.seq_length = seq_length;
  config.vocab = vocab;
  config.padded_vocab = padded_vocab;
  return config;
}

TransformerConfig TransformerConfigOf(const JobSpec& spec) {
  const ModelSpec& m = spec.model();
  const int tensor = spec.parallel().tensor() > 0 ? spec.parallel().tensor() : 1;
  // Validated specs keep the padded vocabulary far below INT_MAX (rank_allocation_estimate
  // refuses more).
  return Gpt2Config(m.num_layers(), m.num_heads(), m.hidden_size(), m.seq_length(), m.vocab_size(),
                    static_cast<int>(PaddedVocabSize(m.vocab_size(), tensor)));
}

}  // namespace mtrain
