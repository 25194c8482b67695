#include "model/transformer_config.h"

#include "spec/job_spec_arithmetic.h"

namespace mtrain {

TransformerConfig TransformerConfigOf(const JobSpec& spec) {
  const ModelSpec& m = spec.model();
  TransformerConfig config;
  config.num_layers = m.num_layers();
  config.hidden = m.hidden_size();
  config.num_heads = m.num_heads();
  config.num_kv_heads = m.num_heads();
  config.head_dim = m.num_heads() > 0 ? m.hidden_size() / m.num_heads() : 0;
  config.ffn_hidden = 4 * m.hidden_size();
  config.seq_length = m.seq_length();
  config.vocab = m.vocab_size();
  config.padded_vocab = static_cast<int>(
      PaddedVocabSize(m.vocab_size(), spec.parallel().tensor() > 0 ? spec.parallel().tensor() : 1));
  return config;
}

}  // namespace mtrain
