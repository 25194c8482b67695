// TransformerModel's layers under sequence parallelism (transformer_model.h, Korthikanti et al.
// 2022), in both LayerNorm placements: the residual stream, normalisations, dropouts and residual
// adds work on this tensor rank's rows [rank * R, (rank + 1) * R) of the [N, C] activations
// (R = N / t); each column-parallel block takes its all-gathered input (the LayerNorm's output
// under pre, the layer's input or h1 under post), each row-parallel block's partial output is
// reduce-scattered back to the rank's rows (the conjugates in the backward). As in Megatron, a
// branch's input is kept for the rank's rows only and gathered again for the backward's weight
// gradients (t times less kept for a second all-gather). Dropout masks are indexed by the element's
// place in the whole [N, C] tensor, so every layout drops the same elements. The LayerNorms'
// parameter gradients, from this rank's rows only, are summed over the tensor group by the caller
// once the step's last backward is done.
#include <algorithm>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "kernels/attention.h"
#include "kernels/dropout.h"
#include "kernels/matmul.h"
#include "worker/engine/cpu/layer_blocks.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/model_numerics.h"

namespace mtrain {
namespace {

// No-op without a bias (Llama-style layers have none).
template <typename T>
void AddRowBias(const T* bias, T* out, int rows, int cols) {
  if (bias == nullptr) return;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) out[static_cast<size_t>(r) * cols + c] += bias[c];
  }
}

}  // namespace

template <typename T>
absl::Status TransformerModel<T>::GatheredColumnForward(const T* in, const T* weight, const T* bias,
                                                        T* out_cols, int cols) {
  const int C = shape_.hidden;
  RETURN_IF_ERROR(tp::GatherSequence<T>(tp_, in, sp_full_.data(), local_rows_, C));
  tp::ColumnParallelLinearForward<T>(sp_full_.data(), weight, bias, out_cols,
                                     batch_ * shape_.seq_length, C, cols);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::ScatteredRowForward(const MicrobatchId& id, int global_layer,
                                                      int site, const T* in_cols, const T* weight,
                                                      const T* bias, int cols, T* out) {
  const int R = local_rows_;
  const int C = shape_.hidden;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  cpu::MatmulForward<T>(in_cols, weight, nullptr, sp_full_.data(), batch_ * shape_.seq_length, cols,
                        C);
  RETURN_IF_ERROR(tp::ReduceScatterSequence<T>(tp_, sp_full_.data(), out, R, C));
  AddRowBias(bias, out, R, C);
  // Dropout masks indexed by the element's place in the whole [N, C] tensor.
  cpu::DropoutForward<T>(out, out, static_cast<size_t>(R) * C, p,
                         DropoutKeyFor(id, global_layer, site),
                         static_cast<uint64_t>(row_offset_) * C);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::GatheredOutputGradient(const MicrobatchId& id, int global_layer,
                                                         int site, const T* d_out) {
  const int R = local_rows_;
  const int C = shape_.hidden;
  std::fill(sp_rows_.begin(), sp_rows_.end(), T(0));
  cpu::DropoutBackward<T>(d_out, sp_rows_.data(), static_cast<size_t>(R) * C, options_.dropout,
                          DropoutKeyFor(id, global_layer, site),
                          static_cast<uint64_t>(row_offset_) * C);
  return tp::GatherSequence<T>(tp_, sp_rows_.data(), d_branch_.data(), R, C);
}

template <typename T>
absl::Status TransformerModel<T>::ScatteredColumnBackward(const T* d_cols, const T* in,
                                                          const T* weight, T* d_weight, T* d_bias,
                                                          int cols) {
  const int N = batch_ * shape_.seq_length;
  const int R = local_rows_;
  const int C = shape_.hidden;
  std::fill(d_ln_.begin(), d_ln_.end(), T(0));
  RETURN_IF_ERROR(tp::GatherSequence<T>(tp_, in, sp_full_.data(), R, C));
  cpu::MatmulBackward<T>(d_cols, sp_full_.data(), weight, d_ln_.data(), nullptr, nullptr, N, C,
                         cols);
  LinearWeightGradient(d_cols, sp_full_.data(), d_weight, d_bias, N, C, cols);
  return tp::ReduceScatterSequence<T>(tp_, d_ln_.data(), sp_rows_.data(), R, C);
}

template <typename T>
absl::Status TransformerModel<T>::AttentionBranchForwardSequenceParallel(int layer,
                                                                         const MicrobatchId& id,
                                                                         const T* in, T* out,
                                                                         LayerActivations<T>* s) {
  const LayerView<T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  RETURN_IF_ERROR(GatheredColumnForward(in, layer_blocks::QkvWeight(w), layer_blocks::QkvBias(w),
                                        s->qkv.data(), placement_.local_qkv(shape_)));
  layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, s->qkv.data(), N,
                                        shape_.seq_length, 0, /*inverse=*/false);
  const cpu::AttentionShape shape = LocalAttentionShape();
  cpu::AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                    placement_.tensor_rank * shape.heads, shape_.num_heads};
  T* attn_y = s->attn_y.empty() ? core_y_.data() : s->attn_y.data();
  T* lse = s->lse.empty() ? core_lse_.data() : s->lse.data();
  layer_blocks::AttentionCoreForward<T>(shape_, s->qkv.data(), lengths_, attn_y, lse, shape,
                                        att_dropout);
  return ScatteredRowForward(id, global_layer, kAttentionOutSite, attn_y, w.proj_weight,
                             w.proj_bias, placement_.local_query(shape_), out);
}

template <typename T>
absl::Status TransformerModel<T>::MlpBranchForwardSequenceParallel(int layer,
                                                                   const MicrobatchId& id,
                                                                   const T* in, T* out,
                                                                   LayerActivations<T>* s) {
  const LayerView<T>& w = p_.layers[layer];
  const int Fl = placement_.local_ffn(shape_);
  RETURN_IF_ERROR(GatheredColumnForward(in, layer_blocks::MlpInWeight(w),
                                        layer_blocks::MlpInBias(w), s->fc.data(),
                                        placement_.local_mlp_in(shape_)));
  layer_blocks::MlpActivationForward<T>(shape_, s->fc.data(), s->gelu.data(),
                                        batch_ * shape_.seq_length, Fl);
  return ScatteredRowForward(id, placement_.first_layer + layer, kMlpOutSite, s->gelu.data(),
                             w.fc_proj_weight, w.fc_proj_bias, Fl, out);
}

template <typename T>
absl::Status TransformerModel<T>::AttentionBranchBackwardSequenceParallel(
    int layer, const MicrobatchId& id, const T* in, const LayerActivations<T>& s, const T* d_out) {
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Ql = placement_.local_query(shape_);
  const auto zero = [](std::vector<T>& v) { std::fill(v.begin(), v.end(), T(0)); };
  RETURN_IF_ERROR(GatheredOutputGradient(id, global_layer, kAttentionOutSite, d_out));
  const cpu::AttentionShape shape = LocalAttentionShape();
  cpu::AttentionDropout att_dropout{options_.dropout,
                                    DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                    placement_.tensor_rank * shape.heads, shape_.num_heads};
  const auto [attn_y, lse] = AttentionCoreFor(s, shape, att_dropout);
  zero(d_attn_y_);
  tp::RowParallelLinearBackward<T>(d_branch_.data(), attn_y, w.proj_weight, d_attn_y_.data(),
                                   nullptr, nullptr, N, Ql, C);
  LinearWeightGradient(d_branch_.data(), attn_y, g.proj_weight, g.proj_bias, N, Ql, C);
  zero(d_qkv_);
  layer_blocks::AttentionCoreBackward<T>(shape_, d_attn_y_.data(), s.qkv.data(), attn_y, lse,
                                         lengths_, d_qkv_.data(), shape, att_dropout);
  layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, d_qkv_.data(), N,
                                        shape_.seq_length, 0, /*inverse=*/true);
  return ScatteredColumnBackward(d_qkv_.data(), in, layer_blocks::QkvWeight(w),
                                 layer_blocks::QkvWeight(g), layer_blocks::QkvBias(g),
                                 placement_.local_qkv(shape_));
}

template <typename T>
absl::Status TransformerModel<T>::MlpBranchBackwardSequenceParallel(
    int layer, const MicrobatchId& id, const T* in, const LayerActivations<T>& s, const T* d_out) {
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Fl = placement_.local_ffn(shape_);
  const auto zero = [](std::vector<T>& v) { std::fill(v.begin(), v.end(), T(0)); };
  RETURN_IF_ERROR(GatheredOutputGradient(id, placement_.first_layer + layer, kMlpOutSite, d_out));
  zero(d_gelu_);
  tp::RowParallelLinearBackward<T>(d_branch_.data(), s.gelu.data(), w.fc_proj_weight,
                                   d_gelu_.data(), nullptr, nullptr, N, Fl, C);
  LinearWeightGradient(d_branch_.data(), s.gelu.data(), g.fc_proj_weight, g.fc_proj_bias, N, Fl, C);
  zero(d_fc_);
  layer_blocks::MlpActivationBackward<T>(shape_, d_gelu_.data(), s.fc.data(), d_fc_.data(), N, Fl);
  return ScatteredColumnBackward(d_fc_.data(), in, layer_blocks::MlpInWeight(w),
                                 layer_blocks::MlpInWeight(g), layer_blocks::MlpInBias(g),
                                 placement_.local_mlp_in(shape_));
}

template <typename T>
absl::Status TransformerModel<T>::LayerForwardSequenceParallel(int layer, const MicrobatchId& id,
                                                               const T* x, T* out,
                                                               LayerActivations<T>* s) {
  const LayerView<T>& w = p_.layers[layer];
  const int R = local_rows_;
  const size_t RC = static_cast<size_t>(R) * shape_.hidden;
  // The LayerNorm outputs are kept for this rank's rows only; each branch gathers its input
  // (again in the backward).
  layer_blocks::NormForward<T>(shape_, x, w.ln1_gamma, w.ln1_beta, s->ln1.data(),
                               s->ln1_mean.data(), s->ln1_rstd.data(), R);
  RETURN_IF_ERROR(AttentionBranchForwardSequenceParallel(layer, id, s->ln1.data(), out, s));
  for (size_t i = 0; i < RC; ++i) s->h1[i] = x[i] + out[i];
  layer_blocks::NormForward<T>(shape_, s->h1.data(), w.ln2_gamma, w.ln2_beta, s->ln2.data(),
                               s->ln2_mean.data(), s->ln2_rstd.data(), R);
  RETURN_IF_ERROR(MlpBranchForwardSequenceParallel(layer, id, s->ln2.data(), out, s));
  for (size_t i = 0; i < RC; ++i) out[i] += s->h1[i];
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::LayerBackwardSequenceParallel(int layer, const MicrobatchId& id,
                                                                const T* x,
                                                                const LayerActivations<T>& s,
                                                                T* d_out, T* d_x) {
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int R = local_rows_;
  const size_t RC = static_cast<size_t>(R) * shape_.hidden;
  // d_out (this rank's rows) is the gradient of h1 + MLP branch; it doubles as d_h1.
  T* d_h1 = d_out;
  RETURN_IF_ERROR(MlpBranchBackwardSequenceParallel(layer, id, s.ln2.data(), s, d_out));
  layer_blocks::NormBackward<T>(shape_, sp_rows_.data(), s.h1.data(), w.ln2_gamma,
                                s.ln2_mean.data(), s.ln2_rstd.data(), d_h1, g.ln2_gamma, g.ln2_beta,
                                R);
  // Attention block: d_x = d_h1 + (through the attention branch).
  std::copy(d_h1, d_h1 + RC, d_x);
  RETURN_IF_ERROR(AttentionBranchBackwardSequenceParallel(layer, id, s.ln1.data(), s, d_h1));
  layer_blocks::NormBackward<T>(shape_, sp_rows_.data(), x, w.ln1_gamma, s.ln1_mean.data(),
                                s.ln1_rstd.data(), d_x, g.ln1_gamma, g.ln1_beta, R);
  return absl::OkStatus();
}

// The post placement (BERT's original) on this rank's rows: the attention reads the layer's
// input and the MLP h1, both gathered by their branch; the residual sums and the LayerNorms
// after them are this rank's rows, as the pre placement's LayerNorms are.
template <typename T>
absl::Status TransformerModel<T>::PostNormLayerForwardSequenceParallel(int layer,
                                                                       const MicrobatchId& id,
                                                                       const T* x, T* out,
                                                                       LayerActivations<T>* s) {
  const LayerView<T>& w = p_.layers[layer];
  const int R = local_rows_;
  const size_t RC = static_cast<size_t>(R) * shape_.hidden;
  RETURN_IF_ERROR(AttentionBranchForwardSequenceParallel(layer, id, x, out, s));
  for (size_t i = 0; i < RC; ++i) s->ln1[i] = x[i] + out[i];
  layer_blocks::NormForward<T>(shape_, s->ln1.data(), w.ln1_gamma, w.ln1_beta, s->h1.data(),
                               s->ln1_mean.data(), s->ln1_rstd.data(), R);
  RETURN_IF_ERROR(MlpBranchForwardSequenceParallel(layer, id, s->h1.data(), out, s));
  for (size_t i = 0; i < RC; ++i) s->ln2[i] = s->h1[i] + out[i];
  layer_blocks::NormForward<T>(shape_, s->ln2.data(), w.ln2_gamma, w.ln2_beta, out,
                               s->ln2_mean.data(), s->ln2_rstd.data(), R);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::PostNormLayerBackwardSequenceParallel(
    int layer, const MicrobatchId& id, const T* x, const LayerActivations<T>& s, T* d_out, T* d_x) {
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int R = local_rows_;
  const size_t RC = static_cast<size_t>(R) * shape_.hidden;
  // LayerNorm 2: d_x = the gradient of the second residual sum (h1 + the MLP branch).
  std::fill(d_x, d_x + RC, T(0));
  layer_blocks::NormBackward<T>(shape_, d_out, s.ln2.data(), w.ln2_gamma, s.ln2_mean.data(),
                                s.ln2_rstd.data(), d_x, g.ln2_gamma, g.ln2_beta, R);
  // d_out = d_h1: the residual part plus the MLP's.
  RETURN_IF_ERROR(MlpBranchBackwardSequenceParallel(layer, id, s.h1.data(), s, d_x));
  for (size_t i = 0; i < RC; ++i) d_out[i] = d_x[i] + sp_rows_[i];
  // LayerNorm 1: d_x = the gradient of the first residual sum (x + the attention branch),
  // then the attention's part of x's gradient added.
  std::fill(d_x, d_x + RC, T(0));
  layer_blocks::NormBackward<T>(shape_, d_out, s.ln1.data(), w.ln1_gamma, s.ln1_mean.data(),
                                s.ln1_rstd.data(), d_x, g.ln1_gamma, g.ln1_beta, R);
  RETURN_IF_ERROR(AttentionBranchBackwardSequenceParallel(layer, id, x, s, d_x));
  for (size_t i = 0; i < RC; ++i) d_x[i] += sp_rows_[i];
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::SumLayerNormGradients(int layer) {
  std::vector<std::pair<T*, int>> tensors;
  const int C = shape_.hidden;
  if (layer >= 0) {
    const LayerView<T>& g = g_.layers[layer];
    tensors = {{g.ln1_gamma, C}, {g.ln1_beta, C}, {g.ln2_gamma, C}, {g.ln2_beta, C}};
  } else if (layer == kEmbeddingNorm) {
    tensors = {{g_.emb_ln_gamma, C}, {g_.emb_ln_beta, C}};
  } else {
    tensors = {{g_.lnf_gamma, C}, {g_.lnf_beta, C}};
  }
  // One all-reduce for the layer's tensors, packed: each collective is a synchronisation
  // of the tensor group, and on small tensors its latency is all it costs.
  // RMSNorm has no bias.
  tensors.erase(
      std::remove_if(tensors.begin(), tensors.end(),
                     [](const std::pair<T*, int>& tensor) { return tensor.first == nullptr; }),
      tensors.end());
  size_t total = 0;
  for (const auto& [data, count] : tensors) total += static_cast<size_t>(count);
  layer_norm_sums_.resize(total);
  size_t at = 0;
  for (const auto& [data, count] : tensors) {
    std::copy(data, data + count, layer_norm_sums_.begin() + at);
    at += static_cast<size_t>(count);
  }
  RETURN_IF_ERROR(tp::AllReduceSum<T>(tp_, layer_norm_sums_.data(), total));
  at = 0;
  for (const auto& [data, count] : tensors) {
    std::copy(layer_norm_sums_.begin() + at, layer_norm_sums_.begin() + at + count, data);
    at += static_cast<size_t>(count);
  }
  return absl::OkStatus();
}

// Only the members defined here: the class itself is instantiated in transformer_model.cc.
#define MTRAIN_INSTANTIATE_SEQUENCE_PARALLEL(T)                                     \
  template absl::Status TransformerModel<T>::LayerForwardSequenceParallel(          \
      int, const MicrobatchId&, const T*, T*, LayerActivations<T>*);                \
  template absl::Status TransformerModel<T>::LayerBackwardSequenceParallel(         \
      int, const MicrobatchId&, const T*, const LayerActivations<T>&, T*, T*);      \
  template absl::Status TransformerModel<T>::PostNormLayerForwardSequenceParallel(  \
      int, const MicrobatchId&, const T*, T*, LayerActivations<T>*);                \
  template absl::Status TransformerModel<T>::PostNormLayerBackwardSequenceParallel( \
      int, const MicrobatchId&, const T*, const LayerActivations<T>&, T*, T*);      \
  template absl::Status TransformerModel<T>::SumLayerNormGradients(int);
MTRAIN_INSTANTIATE_SEQUENCE_PARALLEL(float)
MTRAIN_INSTANTIATE_SEQUENCE_PARALLEL(double)
#undef MTRAIN_INSTANTIATE_SEQUENCE_PARALLEL

}  // namespace mtrain
