#include "worker/engine/cpu/transformer_model.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/status_macros.h"
#include "kernels/array_ops.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "worker/engine/cpu/layer_blocks.h"
#include "worker/engine/model_numerics.h"

namespace mtrain {
namespace {

template <typename T>
void Zero(std::vector<T>& v) {
  cpu::ZeroArray(v.data(), v.size());
}

// The gradient of a branch's input to its output dropout: d_out itself when nothing is
// dropped (no pass over it), else the masked and rescaled copy in `scratch`.
template <typename T>
const T* ThroughDropout(const T* d_out, std::vector<T>& scratch, size_t n, float p, uint64_t key) {
  if (p == 0.0f) return d_out;
  cpu::ZeroArray(scratch.data(), n);
  cpu::DropoutBackward<T>(d_out, scratch.data(), n, p, key, 0);
  return scratch.data();
}

}  // namespace

template <typename T>
TransformerModel<T>::TransformerModel(const ParameterLayout& layout, int micro_batch,
                                      ModelOptions options, TensorParallelGroup<T> tensor_group,
                                      SharedParameterBuffers<T> shared)
    : layout_(layout),
      shape_(layout.shape()),
      placement_(layout.placement()),
      batch_(micro_batch),
      options_(options),
      tp_(std::move(tensor_group)),
      sequence_parallel_(options.sequence_parallel && tp_.size > 1),
      local_rows_(sequence_parallel_ ? micro_batch * shape_.seq_length / tp_.size
                                     : micro_batch * shape_.seq_length),
      row_offset_(sequence_parallel_ ? tp_.rank * local_rows_ : 0) {
  if (shape_.positions == Positions::kRotary) {
    rotary_ = cpu::MakeRotaryTable(shape_.seq_length, shape_.head_dim, shape_.rope_theta);
  }
  if (shared.params != nullptr) {
    params_ = shared.params;
    grads_ = shared.grads;
  } else {
    owned_params_.resize(layout.end_offset());
    owned_grads_.resize(layout.end_offset());
    params_ = owned_params_.data();
    grads_ = owned_grads_.data();
  }
  p_ = layout_.View(params_);
  g_ = layout_.View(grads_);
  // The first stage's tensors, each layer's, and the head's.
  layer_tensors_.resize(placement_.num_layers);
  for (const ParamTensor& tensor : layout_.tensors()) {
    if (tensor.role == ParameterRole::kTokenEmbedding) {
      wte_tensor_ = &tensor;
    } else if (tensor.role == ParameterRole::kPositionEmbedding ||
               tensor.role == ParameterRole::kTokenTypeEmbedding ||
               tensor.role == ParameterRole::kEmbeddingNormWeight ||
               tensor.role == ParameterRole::kEmbeddingNormBias) {
      embedding_tensors_.push_back(&tensor);
    } else if (tensor.layer < 0) {
      head_tensors_.push_back(&tensor);
    } else {
      layer_tensors_[tensor.layer - placement_.first_layer].push_back(&tensor);
    }
  }
}

template <typename T>
void TransformerModel<T>::AllocateScratch() {
  // On first use, not in the constructor: a model that only holds parameters (the host
  // copy next to the CUDA engine) never needs these.
  if (scratch_allocated_) return;
  scratch_allocated_ = true;
  const size_t n = static_cast<size_t>(batch_) * shape_.seq_length;
  d_ln_.resize(n * shape_.hidden);
  d_branch_.resize(n * shape_.hidden);
  d_fc_.resize(n * placement_.local_mlp_in(shape_));
  d_gelu_.resize(n * placement_.local_ffn(shape_));
  d_qkv_.resize(n * placement_.local_qkv(shape_));
  d_attn_y_.resize(n * placement_.local_query(shape_));
  d_residual_.resize(n * shape_.hidden);
  d_residual_below_.resize(n * shape_.hidden);
  if (placement_.has_head) d_logits_.resize(n * placement_.local_vocab(shape_));
  if (options_.recompute) {
    const int group = std::min(std::max(1, options_.recompute_group), placement_.num_layers);
    for (int i = 0; i < group; ++i) {
      recompute_scratch_.push_back(std::make_unique<LayerActivations<T>>(
          shape_, placement_, batch_, true, static_cast<size_t>(local_rows_)));
    }
    // The group's inputs after its first, and the top layer's output (not needed: the
    // next layer's input is kept); this rank's rows under sequence parallelism.
    const size_t stream = static_cast<size_t>(local_rows_) * shape_.hidden;
    group_io_.assign(group + 1, std::vector<T>(stream));
    forward_io_.assign(2, std::vector<T>(stream));
  }
  if (sequence_parallel_) {
    sp_rows_.resize(static_cast<size_t>(local_rows_) * shape_.hidden);
    sp_full_.resize(n * shape_.hidden);
  }
  if (options_.selective_recompute) {
    core_y_.resize(n * placement_.local_query(shape_));
    core_lse_.resize(static_cast<size_t>(batch_) * placement_.local_heads(shape_) *
                     shape_.seq_length);
  }
}

template <typename T>
bool TransformerModel<T>::Recomputed(int l) const {
  if (!options_.recompute) return false;
  return options_.recompute_block < 0 || l < options_.recompute_block;
}

template <typename T>
int TransformerModel<T>::GroupStart(int l) const {
  const int group = options_.recompute_block < 0 ? std::max(1, options_.recompute_group) : 1;
  return l / group * group;
}

template <typename T>
bool TransformerModel<T>::KeepsInput(int l) const {
  if (l == placement_.num_layers || !Recomputed(l)) return true;
  return GroupStart(l) == l;
}

template <typename T>
TransformerModel<T>::~TransformerModel() = default;

template <typename T>
void TransformerModel<T>::ZeroGrads() {
  std::fill(grads_ + layout_.begin_offset(), grads_ + layout_.end_offset(), T(0));
}

template <typename T>
std::unique_ptr<Activations<T>> TransformerModel<T>::NewActivations() const {
  auto acts = std::make_unique<Activations<T>>();
  const size_t n = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t C = shape_.hidden;
  acts->tokens.resize(n);
  acts->targets.resize(n);
  acts->positions.resize(n);
  for (size_t i = 0; i < n; ++i) acts->positions[i] = static_cast<int32_t>(i % shape_.seq_length);
  if (shape_.family == ArchitectureFamily::kBert) {
    acts->token_types.resize(n);
    acts->lengths.resize(batch_);
  }
  // Only the inputs and activation sets that the backward reads from this set.
  // The residual stream: this rank's rows under sequence parallelism.
  const size_t rows = static_cast<size_t>(local_rows_);
  acts->layer_io.resize(placement_.num_layers + 1);
  for (int l = 0; l <= placement_.num_layers; ++l) {
    if (KeepsInput(l)) acts->layer_io[l].resize(rows * C);
  }
  acts->saved.resize(placement_.num_layers);
  for (int l = 0; l < placement_.num_layers; ++l) {
    if (Recomputed(l)) continue;
    acts->saved[l] = std::make_unique<LayerActivations<T>>(shape_, placement_, batch_,
                                                           !options_.selective_recompute, rows);
  }
  if (placement_.has_head) {
    const size_t Vl = placement_.local_vocab(shape_);
    acts->lnf.resize(n * C);
    if (shape_.normalization == NormKind::kLayerNorm) acts->lnf_mean.resize(rows);
    acts->lnf_rstd.resize(rows);
    acts->logits.resize(n * Vl);
    acts->ce_max.resize(n);
    acts->ce_sum_exp.resize(n);
    acts->ce_target.resize(n);
  }
  return acts;
}

template <typename T>
cpu::VocabShard TransformerModel<T>::VocabShardOf(int rows) const {
  const int local = placement_.local_vocab(shape_);
  const int start = placement_.vocab_start(shape_);
  // Columns past the real vocabulary are padding, excluded from the softmax.
  return cpu::VocabShard{rows, local, std::clamp(shape_.vocab - start, 0, local), start};
}

template <typename T>
uint64_t TransformerModel<T>::DropoutKeyFor(const MicrobatchId& id, int global_layer,
                                            int site) const {
  return DropoutKeyOf(options_.seed, id, global_layer, site);
}

template <typename T>
cpu::AttentionShape TransformerModel<T>::LocalAttentionShape() const {
  return cpu::AttentionShape{batch_, shape_.seq_length, placement_.local_heads(shape_),
                             shape_.head_dim, placement_.local_kv_heads(shape_)};
}

template <typename T>
absl::Status TransformerModel<T>::AttentionBranchForward(int layer, const MicrobatchId& id,
                                                         const T* in, T* out,
                                                         LayerActivations<T>* s) {
  const LayerView<T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  tp::ColumnParallelLinearForward<T>(in, layer_blocks::QkvWeight(w), layer_blocks::QkvBias(w),
                                     s->qkv.data(), N, shape_.hidden, placement_.local_qkv(shape_));
  layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, s->qkv.data(), N,
                                        shape_.seq_length, 0, /*inverse=*/false);
  const cpu::AttentionShape shape = LocalAttentionShape();
  cpu::AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                    placement_.tensor_rank * shape.heads, shape_.num_heads};
  // Selective recomputation keeps no attention core: it goes to the model's buffers.
  T* attn_y = s->attn_y.empty() ? core_y_.data() : s->attn_y.data();
  T* lse = s->lse.empty() ? core_lse_.data() : s->lse.data();
  layer_blocks::AttentionCoreForward<T>(shape_, s->qkv.data(), lengths_, attn_y, lse, shape,
                                        att_dropout);
  RETURN_IF_ERROR(tp::RowParallelLinearForward<T>(tp_, attn_y, w.proj_weight, w.proj_bias, out, N,
                                                  placement_.local_query(shape_), shape_.hidden));
  cpu::DropoutForward<T>(out, out, static_cast<size_t>(N) * shape_.hidden, p,
                         DropoutKeyFor(id, global_layer, kAttentionOutSite), 0);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::MlpBranchForward(int layer, const MicrobatchId& id, const T* in,
                                                   T* out, LayerActivations<T>* s) {
  const LayerView<T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Fl = placement_.local_ffn(shape_);
  const float p = id.evaluation ? 0.0f : options_.dropout;
  tp::ColumnParallelLinearForward<T>(in, layer_blocks::MlpInWeight(w), layer_blocks::MlpInBias(w),
                                     s->fc.data(), N, C, placement_.local_mlp_in(shape_));
  layer_blocks::MlpActivationForward<T>(shape_, s->fc.data(), s->gelu.data(), N, Fl);
  RETURN_IF_ERROR(tp::RowParallelLinearForward<T>(tp_, s->gelu.data(), w.fc_proj_weight,
                                                  w.fc_proj_bias, out, N, Fl, C));
  cpu::DropoutForward<T>(out, out, static_cast<size_t>(N) * C, p,
                         DropoutKeyFor(id, global_layer, kMlpOutSite), 0);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::AttentionBranchBackward(int layer, const MicrobatchId& id,
                                                          const T* in, const LayerActivations<T>& s,
                                                          const T* d_out, T* d_in) {
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = options_.dropout;
  const T* d_branch =
      ThroughDropout(d_out, d_branch_, NC, p, DropoutKeyFor(id, global_layer, kAttentionOutSite));
  const cpu::AttentionShape shape = LocalAttentionShape();
  cpu::AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                    placement_.tensor_rank * shape.heads, shape_.num_heads};
  const auto [attn_y, lse] = AttentionCoreFor(s, shape, att_dropout);
  tp::RowParallelLinearBackward<T>(d_branch, attn_y, w.proj_weight, d_attn_y_.data(), nullptr,
                                   nullptr, N, placement_.local_query(shape_), C,
                                   cpu::InputGradient::kOverwrite);
  LinearWeightGradient(d_branch, attn_y, g.proj_weight, g.proj_bias, N,
                       placement_.local_query(shape_), C);
  Zero(d_qkv_);
  layer_blocks::AttentionCoreBackward<T>(shape_, d_attn_y_.data(), s.qkv.data(), attn_y, lse,
                                         lengths_, d_qkv_.data(), shape, att_dropout);
  layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, d_qkv_.data(), N,
                                        shape_.seq_length, 0, /*inverse=*/true);
  // Only this layer's contribution in d_in when the tensor group sums it (overwritten).
  RETURN_IF_ERROR(tp::ColumnParallelLinearBackward<T>(
      tp_, d_qkv_.data(), in, layer_blocks::QkvWeight(w), d_in, nullptr, nullptr, N, C,
      placement_.local_qkv(shape_), cpu::InputGradient::kOverwrite));
  LinearWeightGradient(d_qkv_.data(), in, layer_blocks::QkvWeight(g), layer_blocks::QkvBias(g), N,
                       C, placement_.local_qkv(shape_));
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::MlpBranchBackward(int layer, const MicrobatchId& id, const T* in,
                                                    const LayerActivations<T>& s, const T* d_out,
                                                    T* d_in) {
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Fl = placement_.local_ffn(shape_);
  const size_t NC = static_cast<size_t>(N) * C;
  const T* d_branch = ThroughDropout(d_out, d_branch_, NC, options_.dropout,
                                     DropoutKeyFor(id, global_layer, kMlpOutSite));
  tp::RowParallelLinearBackward<T>(d_branch, s.gelu.data(), w.fc_proj_weight, d_gelu_.data(),
                                   nullptr, nullptr, N, Fl, C, cpu::InputGradient::kOverwrite);
  LinearWeightGradient(d_branch, s.gelu.data(), g.fc_proj_weight, g.fc_proj_bias, N, Fl, C);
  Zero(d_fc_);
  layer_blocks::MlpActivationBackward<T>(shape_, d_gelu_.data(), s.fc.data(), d_fc_.data(), N, Fl);
  RETURN_IF_ERROR(tp::ColumnParallelLinearBackward<T>(
      tp_, d_fc_.data(), in, layer_blocks::MlpInWeight(w), d_in, nullptr, nullptr, N, C,
      placement_.local_mlp_in(shape_), cpu::InputGradient::kOverwrite));
  LinearWeightGradient(d_fc_.data(), in, layer_blocks::MlpInWeight(g), layer_blocks::MlpInBias(g),
                       N, C, placement_.local_mlp_in(shape_));
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::LayerForward(int layer, const MicrobatchId& id, const T* x,
                                               T* out, LayerActivations<T>* s) {
  if (shape_.norm_placement == NormPlacement::kPost) {
    return sequence_parallel_ ? PostNormLayerForwardSequenceParallel(layer, id, x, out, s)
                              : PostNormLayerForward(layer, id, x, out, s);
  }
  if (sequence_parallel_) return LayerForwardSequenceParallel(layer, id, x, out, s);
  const LayerView<T>& w = p_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const size_t NC = static_cast<size_t>(N) * shape_.hidden;
  layer_blocks::NormForward<T>(shape_, x, w.ln1_gamma, w.ln1_beta, s->ln1.data(),
                               s->ln1_mean.data(), s->ln1_rstd.data(), N);
  RETURN_IF_ERROR(AttentionBranchForward(layer, id, s->ln1.data(), out, s));
  cpu::AddArrays(x, out, s->h1.data(), NC);
  layer_blocks::NormForward<T>(shape_, s->h1.data(), w.ln2_gamma, w.ln2_beta, s->ln2.data(),
                               s->ln2_mean.data(), s->ln2_rstd.data(), N);
  RETURN_IF_ERROR(MlpBranchForward(layer, id, s->ln2.data(), out, s));
  cpu::AddToArray(s->h1.data(), out, NC);
  return absl::OkStatus();
}

template <typename T>
absl::Status TransformerModel<T>::LayerBackward(int layer, const MicrobatchId& id, const T* x,
                                                const LayerActivations<T>& s, T* d_out, T* d_x) {
  if (shape_.norm_placement == NormPlacement::kPost) {
    return sequence_parallel_ ? PostNormLayerBackwardSequenceParallel(layer, id, x, s, d_out, d_x)
                              : PostNormLayerBackward(layer, id, x, s, d_out, d_x);
  }
  if (sequence_parallel_) return LayerBackwardSequenceParallel(layer, id, x, s, d_out, d_x);
  const LayerView<T>& w = p_.layers[layer];
  const LayerView<T>& g = g_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const size_t NC = static_cast<size_t>(N) * shape_.hidden;
  // d_out is the gradient of the layer output = h1 + mlp branch. Reuse it as d_h1.
  T* d_h1 = d_out;
  RETURN_IF_ERROR(MlpBranchBackward(layer, id, s.ln2.data(), s, d_out, d_ln_.data()));
  layer_blocks::NormBackward<T>(shape_, d_ln_.data(), s.h1.data(), w.ln2_gamma, s.ln2_mean.data(),
                                s.ln2_rstd.data(), d_h1, g.ln2_gamma, g.ln2_beta, N);
  // d_x = d_h1 + (through the attention branch).
  cpu::CopyArray(d_h1, d_x, NC);
  RETURN_IF_ERROR(AttentionBranchBackward(layer, id, s.ln1.data(), s, d_h1, d_ln_.data()));
  layer_blocks::NormBackward<T>(shape_, d_ln_.data(), x, w.ln1_gamma, s.ln1_mean.data(),
                                s.ln1_rstd.data(), d_x, g.ln1_gamma, g.ln1_beta, N);
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<double> TransformerModel<T>::Forward(const MicrobatchInput<T>& input,
                                                    Activations<T>* acts, T* hidden_out) {
  AllocateScratch();
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
  acts->id = input.id;
  const size_t RC = static_cast<size_t>(local_rows_) * C;  // this rank's rows
  T* x0 = acts->layer_io[0].data();
  const bool bert = shape_.family == ArchitectureFamily::kBert;
  if (bert) {
    RETURN_IF_ERROR(TakeBertInputs(input, acts));
    lengths_ = acts->lengths.data();
  }
  if (placement_.has_embedding) {
    std::copy(input.tokens, input.tokens + N, acts->tokens.begin());
    const float dropout = input.id.evaluation ? 0.0f : options_.dropout;
    if (sequence_parallel_) {
      // This rank's vocabulary rows of every token, reduce-scattered to this rank's rows
      // of tokens (as Megatron; half the bytes of the all-reduce without the split), then
      // the positions and the dropout on those rows (masks indexed in the whole tensor).
      cpu::EmbeddingForward<T>(input.tokens, p_.wte, sp_full_.data(), N, C,
                               placement_.vocab_start(shape_), placement_.local_vocab(shape_),
                               /*accumulate=*/false);
      RETURN_IF_ERROR(tp::ReduceScatterSequence<T>(tp_, sp_full_.data(), x0, local_rows_, C));
      if (p_.wpe != nullptr) {
        cpu::EmbeddingForward<T>(acts->positions.data() + row_offset_, p_.wpe, x0, local_rows_, C,
                                 0, shape_.seq_length, /*accumulate=*/true);
      }
      if (bert) BertEmbeddingForward(acts, x0, local_rows_, row_offset_);
      cpu::DropoutForward<T>(x0, x0, RC, dropout, DropoutKeyFor(input.id, -1, kEmbeddingSite),
                             static_cast<uint64_t>(row_offset_) * C);
    } else {
      RETURN_IF_ERROR(tp::VocabParallelEmbeddingForward<T>(tp_, input.tokens, p_.wte, x0, N, C,
                                                           placement_.vocab_start(shape_),
                                                           placement_.local_vocab(shape_)));
      if (p_.wpe != nullptr) {
        cpu::EmbeddingForward<T>(acts->positions.data(), p_.wpe, x0, N, C, 0, shape_.seq_length,
                                 /*accumulate=*/true);
      }
      if (bert) BertEmbeddingForward(acts, x0, N, 0);
      cpu::DropoutForward<T>(x0, x0, NC, dropout, DropoutKeyFor(input.id, -1, kEmbeddingSite), 0);
    }
  } else {
    std::copy(input.hidden_in, input.hidden_in + RC, acts->layer_io[0].data());
  }
  // An input the set does not keep lives in one of two alternating buffers (the next
  // layer's input never shares the current one's).
  const auto io = [&](int l) {
    return KeepsInput(l) ? acts->layer_io[l].data() : forward_io_[l % 2].data();
  };
  for (int l = 0; l < placement_.num_layers; ++l) {
    LayerActivations<T>* saved =
        Recomputed(l) ? recompute_scratch_.front().get() : acts->saved[l].get();
    RETURN_IF_ERROR(LayerForward(l, input.id, io(l), io(l + 1), saved));
  }
  acts->has_forward = true;
  const T* x_last = acts->layer_io[placement_.num_layers].data();
  if (!placement_.has_head) {
    if (hidden_out != nullptr) std::copy(x_last, x_last + RC, hidden_out);
    return 0.0;
  }

  std::copy(input.targets, input.targets + N, acts->targets.begin());
  if (bert && shape_.norm_placement == NormPlacement::kPost) {
    if (!sequence_parallel_) return BertHeadForward(input, acts, x_last);
    // The heads take every row: the last layer's rows gathered.
    RETURN_IF_ERROR(tp::GatherSequence<T>(tp_, x_last, acts->lnf.data(), local_rows_, C));
    return BertHeadForward(input, acts, acts->lnf.data());
  }
  if (sequence_parallel_) {
    // The final LayerNorm on this rank's rows, gathered for the vocab-parallel head.
    layer_blocks::NormForward<T>(shape_, x_last, p_.lnf_gamma, p_.lnf_beta, sp_rows_.data(),
                                 acts->lnf_mean.data(), acts->lnf_rstd.data(), local_rows_);
    RETURN_IF_ERROR(tp::GatherSequence<T>(tp_, sp_rows_.data(), acts->lnf.data(), local_rows_, C));
  } else {
    layer_blocks::NormForward<T>(shape_, x_last, p_.lnf_gamma, p_.lnf_beta, acts->lnf.data(),
                                 acts->lnf_mean.data(), acts->lnf_rstd.data(), N);
  }
  if (bert) return BertHeadForward(input, acts, acts->lnf.data());
  const int Vl = placement_.local_vocab(shape_);
  // The output layer (tied: the token embedding): column-parallel over the vocabulary (the
  // input was copied in), its logits never gathered.
  tp::ColumnParallelLinearForward<T>(acts->lnf.data(), OutputWeight(p_), nullptr,
                                     acts->logits.data(), N, C, Vl);
  std::vector<T> losses(N);
  RETURN_IF_ERROR(tp::VocabParallelCrossEntropyForward<T>(
      tp_, acts->logits.data(), acts->targets.data(), VocabShardOf(N),
      {acts->ce_max.data(), acts->ce_sum_exp.data(), acts->ce_target.data()}, losses.data()));
  double sum = 0;
  for (T loss : losses) sum += static_cast<double>(loss);
  if (input.outputs != nullptr) {
    // The statistics hold the row's largest logit and the target's over the whole
    // vocabulary (all-reduced across tensor ranks): the target is an argmax when they tie.
    input.outputs->loss.assign(losses.begin(), losses.end());
    input.outputs->argmax.resize(N);
    for (int i = 0; i < N; ++i) {
      input.outputs->argmax[i] = acts->ce_target[i] >= acts->ce_max[i] ? 1 : 0;
    }
  }
  return sum;
}

template <typename T>
absl::Status TransformerModel<T>::Backward(Activations<T>* acts, const T* d_hidden_out,
                                           T d_loss_per_token, T* d_hidden_in,
                                           const GradReadyHook* on_grad_ready) {
  if (!acts->has_forward) return absl::FailedPreconditionError("Backward without Forward");
  AllocateScratch();
  const bool bert = shape_.family == ArchitectureFamily::kBert;
  if (bert) lengths_ = acts->lengths.data();
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
  // d_x holds the gradient of the residual stream as it flows down the layers. The buffers
  // are the model's (AllocateScratch): fresh ones each microbatch cost page faults.
  std::vector<T>& d_x = d_residual_;
  std::vector<T>& d_below = d_residual_below_;
  Zero(d_x);
  auto report = [&](const ParamTensor* tensor) {
    if (on_grad_ready == nullptr || tensor == nullptr) return;
    // A BackwardInput's linear weight gradients are not final: BackwardWeight reports them.
    if (deferring_ != nullptr && DeferredByBackwardInput(*tensor)) return;
    (*on_grad_ready)(*tensor);
  };
  if (placement_.has_head && bert) {
    RETURN_IF_ERROR(BertHeadBackward(acts, d_loss_per_token, d_ln_.data()));
    const T* x_last = acts->layer_io[placement_.num_layers].data();
    if (shape_.norm_placement == NormPlacement::kPost) {
      // The heads' input gradient is the same on every tensor rank: under sequence
      // parallelism each takes its own rows of it.
      const auto from = d_ln_.begin() + static_cast<std::ptrdiff_t>(row_offset_) * C;
      std::copy(from, from + static_cast<std::ptrdiff_t>(local_rows_) * C, d_x.begin());
    } else {
      // The heads' input gradient is the same on every tensor rank: under sequence
      // parallelism each takes its own rows of it through the final LayerNorm.
      layer_blocks::NormBackward<T>(shape_, d_ln_.data() + static_cast<size_t>(row_offset_) * C,
                                    x_last, p_.lnf_gamma, acts->lnf_mean.data(),
                                    acts->lnf_rstd.data(), d_x.data(), g_.lnf_gamma, g_.lnf_beta,
                                    local_rows_);
      if (sequence_parallel_ && on_grad_ready != nullptr) {
        RETURN_IF_ERROR(SumLayerNormGradients(kFinalNorm));
      }
    }
    for (const ParamTensor* tensor : head_tensors_) report(tensor);
    if (!placement_.has_embedding) report(wte_tensor_);
  } else if (placement_.has_head) {
    const int Vl = placement_.local_vocab(shape_);
    std::vector<T>& d_logits = d_logits_;
    Zero(d_logits);
    tp::VocabParallelCrossEntropyBackward<T>(
        acts->logits.data(), acts->targets.data(), VocabShardOf(N),
        {acts->ce_max.data(), acts->ce_sum_exp.data(), acts->ce_target.data()}, d_loss_per_token,
        d_logits.data());
    if (sequence_parallel_) {
      Zero(d_ln_);
      // The head's input gradient reduce-scattered to this rank's rows (the conjugate of
      // the forward's gather), then the final LayerNorm on them.
      cpu::MatmulBackward<T>(d_logits.data(), acts->lnf.data(), OutputWeight(p_), d_ln_.data(),
                             OutputWeight(g_), nullptr, N, C, Vl);
      RETURN_IF_ERROR(
          tp::ReduceScatterSequence<T>(tp_, d_ln_.data(), sp_rows_.data(), local_rows_, C));
      layer_blocks::NormBackward<T>(shape_, sp_rows_.data(),
                                    acts->layer_io[placement_.num_layers].data(), p_.lnf_gamma,
                                    acts->lnf_mean.data(), acts->lnf_rstd.data(), d_x.data(),
                                    g_.lnf_gamma, g_.lnf_beta, local_rows_);
      // Final for the step once the last backward reports it: the ranks' rows summed.
      if (on_grad_ready != nullptr) RETURN_IF_ERROR(SumLayerNormGradients(kFinalNorm));
    } else {
      RETURN_IF_ERROR(tp::ColumnParallelLinearBackward<T>(
          tp_, d_logits.data(), acts->lnf.data(), OutputWeight(p_), d_ln_.data(), OutputWeight(g_),
          nullptr, N, C, Vl, cpu::InputGradient::kOverwrite));
      layer_blocks::NormBackward<T>(
          shape_, d_ln_.data(), acts->layer_io[placement_.num_layers].data(), p_.lnf_gamma,
          acts->lnf_mean.data(), acts->lnf_rstd.data(), d_x.data(), g_.lnf_gamma, g_.lnf_beta, N);
    }
    for (const ParamTensor* tensor : head_tensors_) report(tensor);
    // The embedding stage also adds the input embedding's gradient to the tied table.
    if (!placement_.has_embedding) report(wte_tensor_);
  } else {
    std::copy(d_hidden_out, d_hidden_out + static_cast<size_t>(local_rows_) * C, d_x.begin());
  }

  for (int l = placement_.num_layers - 1; l >= 0; --l) {
    const T* x = acts->layer_io[l].data();
    const LayerActivations<T>* saved = acts->saved[l].get();
    if (Recomputed(l)) {
      // The top layer of a group reruns the group's forwards from its kept input: same
      // inputs, same dropout keys, so the activations are bit-identical to the forward's.
      const int first = GroupStart(l);
      if (l == placement_.num_layers - 1 || GroupStart(l + 1) != first || !Recomputed(l + 1)) {
        for (int k = first; k <= l; ++k) {
          const T* in = k == first ? acts->layer_io[first].data() : group_io_[k - first].data();
          T* out = group_io_[k - first + 1].data();
          RETURN_IF_ERROR(LayerForward(k, acts->id, in, out, recompute_scratch_[k - first].get()));
        }
      }
      x = l == first ? acts->layer_io[first].data() : group_io_[l - first].data();
      saved = recompute_scratch_[l - first].get();
    }
    RETURN_IF_ERROR(LayerBackward(l, acts->id, x, *saved, d_x.data(), d_below.data()));
    d_x.swap(d_below);
    if (sequence_parallel_ && on_grad_ready != nullptr) RETURN_IF_ERROR(SumLayerNormGradients(l));
    for (const ParamTensor* tensor : layer_tensors_[l]) report(tensor);
  }

  if (placement_.has_embedding) {
    const uint64_t key = DropoutKeyFor(acts->id, -1, kEmbeddingSite);
    if (sequence_parallel_) {
      // The dropout's backward on this rank's rows, then every token's gradient gathered
      // (each rank's vocabulary rows and the replicated positions take all of them).
      Zero(sp_rows_);
      cpu::DropoutBackward<T>(d_x.data(), sp_rows_.data(), static_cast<size_t>(local_rows_) * C,
                              options_.dropout, key, static_cast<uint64_t>(row_offset_) * C);
      // BERT's embedding LayerNorm (post) on this rank's rows, as in the forward.
      if (bert) BertEmbeddingNormBackward(acts, sp_rows_.data(), local_rows_);
      if (bert && on_grad_ready != nullptr && shape_.norm_placement == NormPlacement::kPost) {
        RETURN_IF_ERROR(SumLayerNormGradients(kEmbeddingNorm));
      }
      RETURN_IF_ERROR(
          tp::GatherSequence<T>(tp_, sp_rows_.data(), d_branch_.data(), local_rows_, C));
    } else {
      Zero(d_branch_);
      cpu::DropoutBackward<T>(d_x.data(), d_branch_.data(), NC, options_.dropout, key, 0);
      if (bert) BertEmbeddingNormBackward(acts, d_branch_.data(), N);
    }
    if (bert) BertTokenTypeBackward(acts, d_branch_.data(), N);
    tp::VocabParallelEmbeddingBackward<T>(acts->tokens.data(), d_branch_.data(), g_.wte, N, C,
                                          placement_.vocab_start(shape_),
                                          placement_.local_vocab(shape_));
    if (g_.wpe != nullptr) {
      cpu::EmbeddingBackward<T>(acts->positions.data(), d_branch_.data(), g_.wpe, N, C, 0,
                                shape_.seq_length);
    }
    report(wte_tensor_);
    for (const ParamTensor* tensor : embedding_tensors_) report(tensor);
  } else if (d_hidden_in != nullptr) {
    std::copy(d_x.begin(), d_x.begin() + static_cast<size_t>(local_rows_) * C, d_hidden_in);
  }
  return absl::OkStatus();
}

template <typename T>
std::pair<const T*, const T*> TransformerModel<T>::AttentionCoreFor(
    const LayerActivations<T>& s, const cpu::AttentionShape& shape,
    const cpu::AttentionDropout& dropout) {
  if (!s.attn_y.empty()) return {s.attn_y.data(), s.lse.data()};
  layer_blocks::AttentionCoreForward<T>(shape_, s.qkv.data(), lengths_, core_y_.data(),
                                        core_lse_.data(), shape, dropout);
  return {core_y_.data(), core_lse_.data()};
}

template <typename T>
const T* TransformerModel<T>::logits(const Activations<T>& acts) const {
  return acts.logits.data();
}

template class TransformerModel<float>;
template class TransformerModel<double>;

}  // namespace mtrain
