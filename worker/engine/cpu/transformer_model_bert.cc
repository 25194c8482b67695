// BERT's parts of TransformerModel (issue 35): the post placement's layer (LayerNorm after
// each residual add, the original BERT), the token types and embedding LayerNorm, and the
// heads: the masked-LM head (dense, exact GeLU, LayerNorm, then the token embedding as the
// decoder with its own bias over the padded vocabulary) on the masked rows only, and the
// pooler (the first row of each sequence, dense, tanh) with the binary sentence-order head.
//
// The heads run replicated on every tensor rank except the decoder, which is
// column-parallel over the vocabulary like the decoders' output layer: its backward
// all-reduces the transform's gradient, so everything below it is the same on every rank
// (the replicated tensors' gradients too, as the trainer's norm assumes).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu_exact.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "worker/engine/bert_inputs.h"
#include "worker/engine/cpu/layer_blocks.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/model_numerics.h"

namespace mtrain {
namespace {

template <typename T>
void ZeroPrefix(std::vector<T>& v, size_t n) {
  std::fill(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n), T(0));
}

template <typename T>
void AddInto(const T* from, T* to, size_t n) {
  for (size_t i = 0; i < n; ++i) to[i] += from[i];
}

}  // namespace

template <typename T>
absl::Status TransformerModel<T>::PostNormLayerForward(int layer, const MicrobatchId& id,
                                                       const T* x, T* out, LayerActivations<T>* s) {
  const LayerView<T>& w = p_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const size_t NC = static_cast<size_t>(N) * shape_.hidden;
  // The attention on the layer's input; ln1 keeps the residual sum LayerNorm 1 reads.
  RETURN_IF_ERROR(AttentionBranchForward(layer, id, x, out, s));
  for (size_t i = 0; i < NC; ++i) s->ln1[i] = x[i] + out[i];
  layer_blocks::NormForward<T>(shape_, s->ln1.data(), w.ln1_gamma, w.ln1_beta, s->h1.data(),
                               s->ln1_mean.data(), s->ln1_rstd.data(), N);
  // The MLP on h1; ln2 keeps the second residual sum.
  RETURN_IF_ERROR(MlpBranchForward(layer, id, s->h1.data(), out, s));
  for (size_t i = 0; i < NC; ++i) s->ln2[i] = s->h1[i] + out[i];
  layer_blocks::NormForward<T>(shape_, s->ln2.data(), w.ln2_gamma, w.ln2_beta, out,
                               s->ln2_mean.data(), s->ln2_rstd.data(), N);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::PostNormLayerBackward(int layer, const MicrobatchId& id,
                                                        const T* x, const LayerActivations<T>& s,
                                                        T* d_out, T* d_x) {
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const size_t NC = static_cast<size_t>(N) * shape_.hidden;
  // LayerNorm 2: d_ln_ = the gradient of the second residual sum, which d_out then holds as
  // the residual part of h1's gradient; d_x (written last) holds the MLP's part meanwhile.
  std::fill(d_ln_.begin(), d_ln_.end(), T(0));
  layer_blocks::NormBackward<T>(shape_, d_out, s.ln2.data(), w.ln2_gamma, s.ln2_mean.data(),
                                s.ln2_rstd.data(), d_ln_.data(), g.ln2_gamma, g.ln2_beta, N);
  T* d_h1 = d_out;
  std::copy(d_ln_.begin(), d_ln_.begin() + static_cast<std::ptrdiff_t>(NC), d_h1);
  RETURN_IF_ERROR(MlpBranchBackward(layer, id, s.h1.data(), s, d_ln_.data(), d_x));
  AddInto(d_x, d_h1, NC);
  // LayerNorm 1: d_ln_ = the gradient of the first residual sum; d_x is its residual part
  // plus the attention branch's (computed into d_out, free again).
  std::fill(d_ln_.begin(), d_ln_.end(), T(0));
  layer_blocks::NormBackward<T>(shape_, d_h1, s.ln1.data(), w.ln1_gamma, s.ln1_mean.data(),
                                s.ln1_rstd.data(), d_ln_.data(), g.ln1_gamma, g.ln1_beta, N);
  std::copy(d_ln_.begin(), d_ln_.begin() + static_cast<std::ptrdiff_t>(NC), d_x);
  RETURN_IF_ERROR(AttentionBranchBackward(layer, id, x, s, d_ln_.data(), d_out));
  AddInto(d_out, d_x, NC);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::TakeBertInputs(const MicrobatchInput<T>& input,
                                                 Activations<T>* acts) {
  const int S = shape_.seq_length;
  RETURN_IF_ERROR(CheckBertLengths(input.lengths, batch_, S));
  std::copy(input.lengths, input.lengths + batch_, acts->lengths.begin());
  if (!placement_.has_embedding) return absl::OkStatus();
  const int N = batch_ * S;
  RETURN_IF_ERROR(CheckTokenTypes(input.token_types, N, shape_.token_types));
  std::copy(input.token_types, input.token_types + N, acts->token_types.begin());
  return absl::OkStatus();
}

template <typename T>
void TransformerModel<T>::BertEmbeddingForward(Activations<T>* acts, T* x0, int rows,
                                               int row_offset) {
  const int C = shape_.hidden;
  cpu::EmbeddingForward<T>(acts->token_types.data() + row_offset, p_.tte, x0, rows, C, 0,
                           shape_.token_types, /*accumulate=*/true);
  if (shape_.norm_placement != NormPlacement::kPost) return;
  const size_t RC = static_cast<size_t>(rows) * C;
  acts->emb_sum.assign(x0, x0 + RC);
  acts->emb_ln_mean.resize(rows);
  acts->emb_ln_rstd.resize(rows);
  layer_blocks::NormForward<T>(shape_, acts->emb_sum.data(), p_.emb_ln_gamma, p_.emb_ln_beta, x0,
                               acts->emb_ln_mean.data(), acts->emb_ln_rstd.data(), rows);
}

template <typename T>
void TransformerModel<T>::BertEmbeddingNormBackward(Activations<T>* acts, T* d_x0, int rows) {
  if (shape_.norm_placement != NormPlacement::kPost) return;
  const size_t RC = static_cast<size_t>(rows) * shape_.hidden;
  std::fill(d_ln_.begin(), d_ln_.begin() + static_cast<std::ptrdiff_t>(RC), T(0));
  layer_blocks::NormBackward<T>(shape_, d_x0, acts->emb_sum.data(), p_.emb_ln_gamma,
                                acts->emb_ln_mean.data(), acts->emb_ln_rstd.data(), d_ln_.data(),
                                g_.emb_ln_gamma, g_.emb_ln_beta, rows);
  std::copy(d_ln_.begin(), d_ln_.begin() + static_cast<std::ptrdiff_t>(RC), d_x0);
}

template <typename T>
void TransformerModel<T>::BertTokenTypeBackward(Activations<T>* acts, const T* d_sum, int rows) {
  cpu::EmbeddingBackward<T>(acts->token_types.data(), d_sum, g_.tte, rows, shape_.hidden, 0,
                            shape_.token_types);
}

template <typename T>
absl::StatusOr<double> TransformerModel<T>::BertHeadForward(const MicrobatchInput<T>& input,
                                                            Activations<T>* acts,
                                                            const T* head_in) {
  const int B = batch_;
  const int S = shape_.seq_length;
  const int C = shape_.hidden;
  const int N = B * S;
  if (shape_.bert_head == BertHeadKind::kMultipleChoice) {
    return ChoiceHeadForward(input, acts, head_in);
  }
  RETURN_IF_ERROR(CheckSentenceOrder(input.sentence_order, B));
  // The masked rows and their labels (-1: not masked).
  ASSIGN_OR_RETURN(MaskedRows masked, MaskedRowsOf(acts->targets.data(), N, shape_.vocab));
  acts->mlm_rows = std::move(masked.rows);
  acts->mlm_targets = std::move(masked.labels);
  const int M = static_cast<int>(acts->mlm_rows.size());
  const size_t MC = static_cast<size_t>(M) * C;
  const int Vl = placement_.local_vocab(shape_);
  std::vector<T> losses(M);
  acts->mlm_in.resize(MC);
  acts->mlm_fc.resize(MC);
  acts->mlm_act.resize(MC);
  acts->mlm_ln.resize(MC);
  acts->mlm_ln_mean.resize(M);
  acts->mlm_ln_rstd.resize(M);
  acts->logits.resize(static_cast<size_t>(M) * Vl);
  acts->ce_max.resize(M);
  acts->ce_sum_exp.resize(M);
  acts->ce_target.resize(M);
  // Every tensor rank holds the same labels, so all of them skip (or run) the collectives.
  if (M > 0) {
    for (int m = 0; m < M; ++m) {
      const T* row = head_in + static_cast<size_t>(acts->mlm_rows[m]) * C;
      std::copy(row, row + C, acts->mlm_in.begin() + static_cast<std::ptrdiff_t>(m) * C);
    }
    cpu::MatmulForward<T>(acts->mlm_in.data(), p_.mlm_weight, p_.mlm_bias, acts->mlm_fc.data(), M,
                          C, C);
    cpu::GeluExactForward<T>(acts->mlm_fc.data(), acts->mlm_act.data(), MC);
    cpu::LayerNormForward<T>(acts->mlm_act.data(), p_.mlm_ln_gamma, p_.mlm_ln_beta,
                             acts->mlm_ln.data(), acts->mlm_ln_mean.data(),
                             acts->mlm_ln_rstd.data(), M, C, NormEpsilon(shape_));
    tp::ColumnParallelLinearForward<T>(acts->mlm_ln.data(), p_.wte, p_.mlm_output_bias,
                                       acts->logits.data(), M, C, Vl);
    RETURN_IF_ERROR(tp::VocabParallelCrossEntropyForward<T>(
        tp_, acts->logits.data(), acts->mlm_targets.data(), VocabShardOf(M),
        {acts->ce_max.data(), acts->ce_sum_exp.data(), acts->ce_target.data()}, losses.data()));
  }
  double mlm_sum = 0;
  for (T loss : losses) mlm_sum += static_cast<double>(loss);
  if (input.bert_totals != nullptr) {
    // The statistics hold the row's largest logit and the label's over the whole
    // vocabulary (all-reduced across tensor ranks): the label is an argmax when they tie.
    for (int m = 0; m < M; ++m) {
      input.bert_totals->masked_correct += acts->ce_target[m] >= acts->ce_max[m] ? 1 : 0;
    }
  }
  if (input.outputs != nullptr) {
    // Each masked row's loss and whether its label is an argmax; 0 on the other rows.
    input.outputs->loss.assign(N, 0.0f);
    input.outputs->argmax.assign(N, 0);
    for (int m = 0; m < M; ++m) {
      input.outputs->loss[acts->mlm_rows[m]] = static_cast<float>(losses[m]);
      input.outputs->argmax[acts->mlm_rows[m]] = acts->ce_target[m] >= acts->ce_max[m] ? 1 : 0;
    }
  }

  // Pooler and sentence-order head on each sequence's first row.
  acts->sentence_order.assign(input.sentence_order, input.sentence_order + B);
  PoolerForward(acts, head_in);
  acts->sop_logits.resize(static_cast<size_t>(B) * 2);
  acts->sop_max.resize(B);
  acts->sop_sum_exp.resize(B);
  acts->sop_target.resize(B);
  cpu::MatmulForward<T>(acts->pooled.data(), p_.sop_weight, p_.sop_bias, acts->sop_logits.data(), B,
                        C, 2);
  const cpu::VocabShard two{B, 2, 2, 0};
  cpu::CrossEntropyLocalMax<T>(acts->sop_logits.data(), two, acts->sop_max.data());
  cpu::CrossEntropyLocalSums<T>(acts->sop_logits.data(), acts->sentence_order.data(),
                                acts->sop_max.data(), two, acts->sop_sum_exp.data(),
                                acts->sop_target.data());
  std::vector<T> sop_losses(B);
  cpu::CrossEntropyLosses<T>(acts->sop_max.data(), acts->sop_sum_exp.data(),
                             acts->sop_target.data(), B, sop_losses.data());
  double sop_sum = 0;
  for (T loss : sop_losses) sop_sum += static_cast<double>(loss);
  if (input.bert_totals != nullptr) {
    input.bert_totals->sentence_order_loss += sop_sum;
    for (int b = 0; b < B; ++b) {
      input.bert_totals->sentence_order_correct += acts->sop_target[b] >= acts->sop_max[b] ? 1 : 0;
    }
  }
  acts->d_loss_per_sequence = input.d_loss_per_sequence;
  return mlm_sum;
}

template <typename T>
absl::Status TransformerModel<T>::BertHeadBackward(Activations<T>* acts, T d_loss_per_token,
                                                   T* d_head_in) {
  const int B = batch_;
  const int S = shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(B) * S * C;
  std::fill(d_head_in, d_head_in + NC, T(0));
  if (shape_.bert_head == BertHeadKind::kMultipleChoice) {
    ChoiceHeadBackward(acts, d_loss_per_token, d_head_in);
    return absl::OkStatus();
  }
  const int M = static_cast<int>(acts->mlm_rows.size());
  const size_t MC = static_cast<size_t>(M) * C;
  const int Vl = placement_.local_vocab(shape_);
  if (M > 0) {
    // The decoder's gradient is all-reduced over the tensor group (its input was copied in);
    // the transform below it is replicated.
    ZeroPrefix(d_logits_, static_cast<size_t>(M) * Vl);
    tp::VocabParallelCrossEntropyBackward<T>(
        acts->logits.data(), acts->mlm_targets.data(), VocabShardOf(M),
        {acts->ce_max.data(), acts->ce_sum_exp.data(), acts->ce_target.data()}, d_loss_per_token,
        d_logits_.data());
    d_mlm_a_.assign(MC, T(0));
    RETURN_IF_ERROR(tp::ColumnParallelLinearBackward<T>(tp_, d_logits_.data(), acts->mlm_ln.data(),
                                                        p_.wte, d_mlm_a_.data(), g_.wte,
                                                        g_.mlm_output_bias, M, C, Vl));
    d_mlm_b_.assign(MC, T(0));
    cpu::LayerNormBackward<T>(d_mlm_a_.data(), acts->mlm_act.data(), p_.mlm_ln_gamma,
                              acts->mlm_ln_mean.data(), acts->mlm_ln_rstd.data(), d_mlm_b_.data(),
                              g_.mlm_ln_gamma, g_.mlm_ln_beta, M, C);
    std::fill(d_mlm_a_.begin(), d_mlm_a_.end(), T(0));
    cpu::GeluExactBackward<T>(d_mlm_b_.data(), acts->mlm_fc.data(), d_mlm_a_.data(), MC);
    std::fill(d_mlm_b_.begin(), d_mlm_b_.end(), T(0));
    cpu::MatmulBackward<T>(d_mlm_a_.data(), acts->mlm_in.data(), p_.mlm_weight, d_mlm_b_.data(),
                           g_.mlm_weight, g_.mlm_bias, M, C, C);
    for (int m = 0; m < M; ++m) {
      AddInto(d_mlm_b_.data() + static_cast<size_t>(m) * C,
              d_head_in + static_cast<size_t>(acts->mlm_rows[m]) * C, C);
    }
  }

  d_sop_logits_.assign(static_cast<size_t>(B) * 2, T(0));
  cpu::CrossEntropyBackward<T>(acts->sop_logits.data(), acts->sentence_order.data(),
                               acts->sop_max.data(), acts->sop_sum_exp.data(),
                               cpu::VocabShard{B, 2, 2, 0}, acts->d_loss_per_sequence,
                               d_sop_logits_.data());
  d_pooled_.assign(static_cast<size_t>(B) * C, T(0));
  cpu::MatmulBackward<T>(d_sop_logits_.data(), acts->pooled.data(), p_.sop_weight, d_pooled_.data(),
                         g_.sop_weight, g_.sop_bias, B, C, 2);
  PoolerBackward(acts, d_head_in);
  return absl::OkStatus();
}

template <typename T>
void TransformerModel<T>::PoolerForward(Activations<T>* acts, const T* head_in) {
  const int B = batch_;
  const int S = shape_.seq_length;
  const int C = shape_.hidden;
  const size_t BC = static_cast<size_t>(B) * C;
  acts->pooler_in.resize(BC);
  acts->pooled.resize(BC);
  for (int b = 0; b < B; ++b) {
    const T* row = head_in + static_cast<size_t>(b) * S * C;
    std::copy(row, row + C, acts->pooler_in.begin() + static_cast<std::ptrdiff_t>(b) * C);
  }
  cpu::MatmulForward<T>(acts->pooler_in.data(), p_.pooler_weight, p_.pooler_bias,
                        acts->pooled.data(), B, C, C);
  for (T& v : acts->pooled) v = std::tanh(v);
}

template <typename T>
void TransformerModel<T>::PoolerBackward(Activations<T>* acts, T* d_head_in) {
  const int B = batch_;
  const int S = shape_.seq_length;
  const int C = shape_.hidden;
  const size_t BC = static_cast<size_t>(B) * C;
  for (size_t i = 0; i < BC; ++i) d_pooled_[i] *= T(1) - acts->pooled[i] * acts->pooled[i];
  d_mlm_b_.assign(BC, T(0));
  cpu::MatmulBackward<T>(d_pooled_.data(), acts->pooler_in.data(), p_.pooler_weight,
                         d_mlm_b_.data(), g_.pooler_weight, g_.pooler_bias, B, C, C);
  for (int b = 0; b < B; ++b) {
    AddInto(d_mlm_b_.data() + static_cast<size_t>(b) * C,
            d_head_in + static_cast<size_t>(b) * S * C, C);
  }
}

// Only the members defined here: the class itself is instantiated in transformer_model.cc.
#define MTRAIN_INSTANTIATE_BERT(T)                                                                 \
  template absl::Status TransformerModel<T>::PostNormLayerForward(                                 \
      int, const MicrobatchId&, const T*, T*, LayerActivations<T>*);                               \
  template absl::Status TransformerModel<T>::PostNormLayerBackward(                                \
      int, const MicrobatchId&, const T*, const LayerActivations<T>&, T*, T*);                     \
  template absl::Status TransformerModel<T>::TakeBertInputs(const MicrobatchInput<T>&,             \
                                                            Activations<T>*);                      \
  template void TransformerModel<T>::BertEmbeddingForward(Activations<T>*, T*, int, int);          \
  template void TransformerModel<T>::BertEmbeddingNormBackward(Activations<T>*, T*, int);          \
  template void TransformerModel<T>::BertTokenTypeBackward(Activations<T>*, const T*, int);        \
  template absl::StatusOr<double> TransformerModel<T>::BertHeadForward(const MicrobatchInput<T>&,  \
                                                                       Activations<T>*, const T*); \
  template absl::Status TransformerModel<T>::BertHeadBackward(Activations<T>*, T, T*);             \
  template void TransformerModel<T>::PoolerForward(Activations<T>*, const T*);                     \
  template void TransformerModel<T>::PoolerBackward(Activations<T>*, T*);
MTRAIN_INSTANTIATE_BERT(float)
MTRAIN_INSTANTIATE_BERT(double)
#undef MTRAIN_INSTANTIATE_BERT

}  // namespace mtrain
