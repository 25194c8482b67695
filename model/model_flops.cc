#include "model/model_flops.h"

namespace mtrain {
namespace {

// Forward FLOPs of one layer for one token: the linear layers and the attention core.
double LayerLinearForwardFlops(const TransformerConfig& c) {
  const double h = c.hidden, q = c.query_width(), kv = c.kv_width(), f = c.ffn_hidden;
  const double mlp_matrices = c.gated_mlp ? 3 : 2;
  return 2 * h * (q + 2 * kv) + 2 * q * h + mlp_matrices * 2 * h * f;
}

double LayerAttentionForwardFlops(const TransformerConfig& c) {
  return 4.0 * c.seq_length * c.query_width();
}

}  // namespace

double ModelFlopsPerStep(const TransformerConfig& c, double global_batch) {
  const double tokens = global_batch * c.seq_length;
  const double layer = LayerLinearForwardFlops(c) + LayerAttentionForwardFlops(c);
  // The output layer; BERT's masked-LM head adds its dense transform (over every position,
  // as Megatron and HF compute it; the pooler and sentence-order classifier see one token
  // a sequence and are left out). BERT's multiple-choice head is the pooler and a score,
  // one token a sequence: left out as well.
  double head = 2.0 * c.hidden * c.padded_vocab;
  if (c.family == ArchitectureFamily::kBert) head += 2.0 * c.hidden * c.hidden;
  if (c.family == ArchitectureFamily::kBert && c.bert_head == BertHeadKind::kMultipleChoice) {
    head = 0;
  }
  return 3 * tokens * (c.num_layers * layer + head);
}

double RecomputeFlopsPerStep(const TransformerConfig& c, double global_batch,
                             double recomputed_share, bool selective) {
  const double tokens_layers = global_batch * c.seq_length * c.num_layers;
  double extra = recomputed_share * tokens_layers *
                 (LayerLinearForwardFlops(c) + LayerAttentionForwardFlops(c));
  if (selective) extra += tokens_layers * LayerAttentionForwardFlops(c);
  return extra;
}

}  // namespace mtrain
