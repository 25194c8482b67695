#include "worker/engine/cuda/cuda_gpt_model.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/dropout.h"
#include "kernels/rotary.h"
#include "worker/engine/cuda/cuda_layer_blocks.h"
#include "worker/engine/model_numerics.h"

namespace mtrain::cuda {
namespace {

// For the kernels' `accumulate` argument: the output holds nothing to keep.
constexpr bool kOverwrite = false;

template <typename T>
absl::Status Zero(const DeviceBuffer<T>& buffer, cudaStream_t stream) {
  return CudaStatus(cudaMemsetAsync(buffer.get(), 0, buffer.bytes(), stream),
                    "zeroing a backward buffer");
}

template <typename T>
absl::Status AllocateBuffer(DeviceBuffer<T>* buffer, size_t n, const std::string& what) {
  ASSIGN_OR_RETURN(*buffer, DeviceBuffer<T>::Create(n, what));
  return absl::OkStatus();
}

}  // namespace

template <typename T>
CudaGptModel<T>::CudaGptModel(const ParameterLayout& layout, int micro_batch,
                              const ModelOptions& options, CublasLt* blas, cudaStream_t stream,
                              DeviceCollectives* tensor_group)
    : layout_(layout),
      shape_(layout.shape()),
      placement_(layout.placement()),
      batch_(micro_batch),
      options_(options),
      blas_(blas),
      stream_(stream),
      tp_(tensor_group),
      sequence_parallel_(options.sequence_parallel && tensor_group != nullptr &&
                         tensor_group->size() > 1),
      local_rows_(sequence_parallel_ ? micro_batch * shape_.seq_length / tensor_group->size()
                                     : micro_batch * shape_.seq_length),
      row_offset_(sequence_parallel_ ? tensor_group->rank() * local_rows_ : 0) {}

template <typename T>
absl::StatusOr<std::unique_ptr<CudaGptModel<T>>> CudaGptModel<T>::Create(
    const ParameterLayout& layout, int micro_batch, const ModelOptions& options, const T* params,
    float* grads, CublasLt* blas, cudaStream_t stream, DeviceCollectives* tensor_group) {
  const ModelPlacement& placement = layout.placement();
  const int group_size = tensor_group != nullptr ? tensor_group->size() : 1;
  const int group_rank = tensor_group != nullptr ? tensor_group->rank() : 0;
  if (placement.tensor_size != group_size || placement.tensor_rank != group_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the layout is tensor rank ", placement.tensor_rank, " of ", placement.tensor_size,
        " but the tensor-parallel group is rank ", group_rank, " of ", group_size));
  }
  if (micro_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("micro_batch ", micro_batch, " must be > 0"));
  }
  if (options.sequence_parallel && group_size > 1 &&
      (static_cast<int64_t>(micro_batch) * layout.shape().seq_length) % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.sequence_parallel: micro_batch * seq_length (", micro_batch, " * ",
        layout.shape().seq_length, ") does not split over ", group_size, " tensor ranks"));
  }
  std::unique_ptr<CudaGptModel> model(
      new CudaGptModel(layout, micro_batch, options, blas, stream, tensor_group));
  model->p_ = layout.View(params);
  model->g_ = layout.View(grads);
  RETURN_IF_ERROR(model->Allocate());
  return model;
}

template <typename T>
absl::Status CudaGptModel<T>::AllocateLayer(CudaLayerActivations<T>* s, bool keep_core) const {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t R = static_cast<size_t>(local_rows_);  // the LayerNorms' and residual's rows
  const size_t C = shape_.hidden;
  const size_t Ql = placement_.local_query(shape_);
  const size_t Fl = placement_.local_ffn(shape_);
  const size_t heads_rows =
      static_cast<size_t>(batch_) * placement_.local_heads(shape_) * shape_.seq_length;
  RETURN_IF_ERROR(AllocateBuffer(&s->ln1, R * C, "activations (ln1)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->qkv, N * placement_.local_qkv(shape_), "activations (qkv)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->h1, R * C, "activations (h1)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln2, R * C, "activations (ln2)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->fc, N * placement_.local_mlp_in(shape_), "activations (fc)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->gelu, N * Fl, "activations (gelu)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln1_mean, R, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln1_rstd, R, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln2_mean, R, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln2_rstd, R, "LayerNorm statistics"));
  if (!keep_core) return absl::OkStatus();
  RETURN_IF_ERROR(AllocateBuffer(&s->attn_y, N * Ql, "activations (attention output)"));
  return AllocateBuffer(&s->lse, heads_rows, "attention log-sum-exp");
}

template <typename T>
bool CudaGptModel<T>::Recomputed(int l) const {
  if (!options_.recompute) return false;
  return options_.recompute_block < 0 || l < options_.recompute_block;
}

template <typename T>
int CudaGptModel<T>::GroupStart(int l) const {
  const int group = options_.recompute_block < 0 ? std::max(1, options_.recompute_group) : 1;
  return l / group * group;
}

template <typename T>
bool CudaGptModel<T>::KeepsInput(int l) const {
  if (l == placement_.num_layers || !Recomputed(l)) return true;
  return GroupStart(l) == l;
}

template <typename T>
absl::Status CudaGptModel<T>::Allocate() {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t C = shape_.hidden;
  const size_t Ql = placement_.local_query(shape_);
  const size_t Fl = placement_.local_ffn(shape_);
  const size_t R = static_cast<size_t>(local_rows_);
  const bool keep_core = !options_.selective_recompute;
  if (shape_.positions == Positions::kRotary) {
    const cpu::RotaryTable table =
        cpu::MakeRotaryTable(shape_.seq_length, shape_.head_dim, shape_.rope_theta);
    RETURN_IF_ERROR(AllocateBuffer(&rotary_cos_, table.cos.size(), "the rotary table"));
    RETURN_IF_ERROR(AllocateBuffer(&rotary_sin_, table.sin.size(), "the rotary table"));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpy(rotary_cos_.get(), table.cos.data(),
                                          table.cos.size() * sizeof(float), cudaMemcpyHostToDevice),
                               "uploading the rotary table"));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpy(rotary_sin_.get(), table.sin.data(),
                                          table.sin.size() * sizeof(float), cudaMemcpyHostToDevice),
                               "uploading the rotary table"));
    rotary_ = RotaryDeviceTable{rotary_cos_.get(), rotary_sin_.get(), table.positions, table.half};
  }
  if (options_.recompute) {
    // A set and an input per layer of the largest group, the group's output, and the
    // forward's two alternating inputs.
    const int group = std::min(std::max(1, options_.recompute_group), placement_.num_layers);
    recompute_scratch_.resize(group);
    for (CudaLayerActivations<T>& s : recompute_scratch_) {
      RETURN_IF_ERROR(AllocateLayer(&s, keep_core));
    }
    group_io_.resize(group + 1);
    for (DeviceBuffer<T>& io : group_io_) {
      RETURN_IF_ERROR(AllocateBuffer(&io, R * C, "recomputation inputs"));
    }
    forward_io_.resize(2);
    for (DeviceBuffer<T>& io : forward_io_) {
      RETURN_IF_ERROR(AllocateBuffer(&io, R * C, "the residual stream"));
    }
  }
  if (options_.selective_recompute) {
    RETURN_IF_ERROR(AllocateBuffer(&core_y_, N * Ql, "the recomputed attention core"));
    RETURN_IF_ERROR(AllocateBuffer(
        &core_lse_,
        static_cast<size_t>(batch_) * placement_.local_heads(shape_) * shape_.seq_length,
        "the recomputed attention core"));
  }
  if (sequence_parallel_) {
    RETURN_IF_ERROR(AllocateBuffer(&sp_full_, N * C, "sequence-parallel gathers"));
    RETURN_IF_ERROR(AllocateBuffer(&sp_rows_, R * C, "sequence-parallel rows"));
    RETURN_IF_ERROR(AllocateBuffer(&layer_norm_sums_, 4 * C, "LayerNorm gradient sums"));
    if (!std::is_same_v<T, float>) {
      RETURN_IF_ERROR(AllocateBuffer(&sp_rows_f_, R * C, "sequence-parallel rows"));
    }
  }
  if (placement_.has_head) {
    RETURN_IF_ERROR(
        AllocateBuffer(&d_logits_, N * placement_.local_vocab(shape_), "logit gradients"));
  }
  for (DeviceBuffer<T>* b : {&d_x_, &d_below_, &d_ln_, &d_branch_}) {
    RETURN_IF_ERROR(AllocateBuffer(b, N * C, "backward temporaries"));
  }
  RETURN_IF_ERROR(AllocateBuffer(&d_attn_y_, N * Ql, "backward temporaries"));
  RETURN_IF_ERROR(
      AllocateBuffer(&d_fc_, N * placement_.local_mlp_in(shape_), "backward temporaries"));
  RETURN_IF_ERROR(AllocateBuffer(&d_gelu_, N * Fl, "backward temporaries"));
  RETURN_IF_ERROR(
      AllocateBuffer(&d_qkv_, N * placement_.local_qkv(shape_), "backward temporaries"));
  if (placement_.has_embedding) {
    RETURN_IF_ERROR(AllocateBuffer(&plan_rows_, N, "the embedding gradient's plan"));
    RETURN_IF_ERROR(AllocateBuffer(&plan_starts_, N + 1, "the embedding gradient's plan"));
    RETURN_IF_ERROR(AllocateBuffer(&plan_positions_, N, "the embedding gradient's plan"));
  }
  if (placement_.tensor_size > 1 && !std::is_same_v<T, float>) {
    RETURN_IF_ERROR(AllocateBuffer(&reduce_scratch_, N * C, "tensor-parallel reductions"));
  }
  if (bert() && placement_.has_head) {
    // The heads' scratch: the masked rows' gradients (at most every row), the pooler's.
    RETURN_IF_ERROR(AllocateBuffer(&d_mlm_a_, N * C, "BERT head gradients"));
    RETURN_IF_ERROR(AllocateBuffer(&d_mlm_b_, N * C, "BERT head gradients"));
    RETURN_IF_ERROR(
        AllocateBuffer(&d_pooled_, static_cast<size_t>(batch_) * C, "BERT head gradients"));
    RETURN_IF_ERROR(
        AllocateBuffer(&d_sop_logits_, static_cast<size_t>(batch_) * 2, "BERT head gradients"));
    RETURN_IF_ERROR(AllocateBuffer(&d_choice_scores_, batch_, "BERT head gradients"));
    RETURN_IF_ERROR(AllocateBuffer(&choice_f_, batch_, "the choice scores"));
    std::vector<int32_t> first_rows(batch_);
    for (int b = 0; b < batch_; ++b) first_rows[b] = b * shape_.seq_length;
    RETURN_IF_ERROR(AllocateBuffer(&first_rows_, first_rows.size(), "the pooler's rows"));
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy(first_rows_.get(), first_rows.data(),
                              first_rows.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
                   "uploading the pooler's rows"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<std::unique_ptr<CudaActivations<T>>> CudaGptModel<T>::NewActivations() const {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t C = shape_.hidden;
  const size_t R = static_cast<size_t>(local_rows_);
  auto acts = std::make_unique<CudaActivations<T>>();
  if (placement_.has_embedding) RETURN_IF_ERROR(AllocateBuffer(&acts->tokens, N, "tokens"));
  // Only the inputs and sets the backward reads from this set.
  acts->layer_io.resize(placement_.num_layers + 1);
  for (int l = 0; l <= placement_.num_layers; ++l) {
    if (!KeepsInput(l)) continue;
    RETURN_IF_ERROR(AllocateBuffer(&acts->layer_io[l], R * C, "the residual stream"));
  }
  acts->saved.resize(placement_.num_layers);
  for (int l = 0; l < placement_.num_layers; ++l) {
    if (Recomputed(l)) continue;
    RETURN_IF_ERROR(AllocateLayer(&acts->saved[l], !options_.selective_recompute));
  }
  if (placement_.has_head) {
    RETURN_IF_ERROR(AllocateBuffer(&acts->targets, N, "targets"));
    RETURN_IF_ERROR(AllocateBuffer(&acts->lnf, N * C, "activations (final LayerNorm)"));
    RETURN_IF_ERROR(AllocateBuffer(&acts->logits, N * placement_.local_vocab(shape_), "logits"));
    for (DeviceBuffer<float>* b : {&acts->lnf_mean, &acts->lnf_rstd}) {
      RETURN_IF_ERROR(AllocateBuffer(b, R, "LayerNorm statistics"));
    }
    for (DeviceBuffer<float>* b :
         {&acts->ce_local_max, &acts->ce_max, &acts->ce_sum_exp, &acts->ce_target}) {
      RETURN_IF_ERROR(AllocateBuffer(b, N, "cross-entropy statistics"));
    }
  }
  if (bert()) RETURN_IF_ERROR(AllocateBert(acts.get()));
  return acts;
}

template <typename T>
absl::Status CudaGptModel<T>::TensorAllReduce(T* data, size_t n) {
  if (tp_ == nullptr || tp_->size() == 1) return absl::OkStatus();
  if constexpr (std::is_same_v<T, float>) {
    return tp_->AllReduce(data, n, ReduceOp::kSum, stream_);
  } else {
    // Summed in fp32: the partial sums are widened, reduced and rounded once.
    RETURN_IF_ERROR((ConvertTensor<T, float>(data, reduce_scratch_.get(), n, stream_)));
    RETURN_IF_ERROR(tp_->AllReduce(reduce_scratch_.get(), n, ReduceOp::kSum, stream_));
    return ConvertTensor<float, T>(reduce_scratch_.get(), data, n, stream_);
  }
}

template <typename T>
AttentionShape CudaGptModel<T>::LocalAttentionShape() const {
  return AttentionShape{batch_, shape_.seq_length, placement_.local_heads(shape_), shape_.head_dim,
                        placement_.local_kv_heads(shape_)};
}

template <typename T>
std::string CudaGptModel<T>::attention_path() const {
  return AttentionPathFor<T>(LocalAttentionShape(), options_.dropout);
}

template <typename T>
uint64_t CudaGptModel<T>::DropoutKeyFor(const MicrobatchId& id, int global_layer, int site) const {
  // The CPU model's keys (model_numerics.h): the same masks on either engine.
  return DropoutKeyOf(options_.seed, id, global_layer, site);
}

template <typename T>
absl::Status CudaGptModel<T>::LayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                                           CudaLayerActivations<T>& s) {
  if (shape_.norm_placement == NormPlacement::kPost) {
    return sequence_parallel_ ? PostNormLayerForwardSequenceParallel(layer, id, x, out, s)
                              : PostNormLayerForward(layer, id, x, out, s);
  }
  if (sequence_parallel_) return LayerForwardSequenceParallel(layer, id, x, out, s);
  const LayerView<const T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Ql = placement_.local_query(shape_);
  const int Fl = placement_.local_ffn(shape_);
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  // Row-parallel layers: the replicated bias enters the sum once.
  const bool adds_bias = placement_.tensor_rank == 0;
  // In 16 bits, with no tensor-parallel sum and no dropout between a projection and its
  // residual add, the add runs in the projection GEMM's epilogue (one rounding instead of
  // two, one pass over the stream fewer). fp32, the reference precision, keeps the adds.
  const bool residual_in_epilogue = !std::is_same_v<T, float> && p == 0.0f &&
                                    (tp_ == nullptr || tp_->size() == 1) &&
                                    blas_->fusions().residual;

  // Attention block: [q | k | v] column-parallel (this rank's query and key-value heads),
  // q and k rotated under rotary positions, output projection row-parallel.
  RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, x, w.ln1_gamma, w.ln1_beta, s.ln1.get(),
                                               s.ln1_mean.get(), s.ln1_rstd.get(), N, stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.ln1.get(), QkvWeight(w), QkvBias(w), s.qkv.get(), N, C,
                                   placement_.local_qkv(shape_), stream_));
  RETURN_IF_ERROR(layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, s.qkv.get(), N,
                                                        shape_.seq_length, 0, false, stream_));
  const AttentionShape shape = LocalAttentionShape();
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * shape.heads, shape_.num_heads};
  // Selective recomputation keeps no attention core: it goes to the model's buffers.
  T* attn_y = s.attn_y.size() > 0 ? s.attn_y.get() : core_y_.get();
  float* lse = s.lse.size() > 0 ? s.lse.get() : core_lse_.get();
  RETURN_IF_ERROR(AttentionCoreForward(s.qkv.get(), attn_y, lse, shape, att_dropout));
  if (residual_in_epilogue) {
    // h1 = x + the projection, added in the GEMM's epilogue (nothing runs between them).
    RETURN_IF_ERROR(MatmulForward<T>(*blas_, attn_y, w.proj_weight, w.proj_bias, s.h1.get(), N, Ql,
                                     C, stream_, /*pre_gelu=*/nullptr, /*residual=*/x));
  } else {
    RETURN_IF_ERROR(MatmulForward<T>(*blas_, attn_y, w.proj_weight,
                                     adds_bias ? w.proj_bias : nullptr, out, N, Ql, C, stream_));
    RETURN_IF_ERROR(TensorAllReduce(out, NC));
    RETURN_IF_ERROR(DropoutForward<T>(
        out, out, NC, p, DropoutKeyFor(id, global_layer, kAttentionOutSite), 0, stream_));
    RETURN_IF_ERROR(AddTensors<T>(x, out, s.h1.get(), NC, stream_));
  }

  // MLP block: the input projection column-parallel with its activation (GeLU in the GEMM's
  // epilogue, or SwiGLU on [gate | up]); the output projection row-parallel.
  RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, s.h1.get(), w.ln2_gamma, w.ln2_beta,
                                               s.ln2.get(), s.ln2_mean.get(), s.ln2_rstd.get(), N,
                                               stream_));
  RETURN_IF_ERROR(layer_blocks::MlpInForward<T>(*blas_, shape_, s.ln2.get(), MlpInWeight(w),
                                                MlpInBias(w), s.fc.get(), s.gelu.get(), N, Fl,
                                                stream_));
  if (residual_in_epilogue) {
    return MatmulForward<T>(*blas_, s.gelu.get(), w.fc_proj_weight, w.fc_proj_bias, out, N, Fl, C,
                            stream_, /*pre_gelu=*/nullptr, /*residual=*/s.h1.get());
  }
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.gelu.get(), w.fc_proj_weight,
                                   adds_bias ? w.fc_proj_bias : nullptr, out, N, Fl, C, stream_));
  RETURN_IF_ERROR(TensorAllReduce(out, NC));
  RETURN_IF_ERROR(
      DropoutForward<T>(out, out, NC, p, DropoutKeyFor(id, global_layer, kMlpOutSite), 0, stream_));
  return AddTensors<T>(out, s.h1.get(), out, NC, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::LayerBackward(int layer, const MicrobatchId& id, const T* x,
                                            const CudaLayerActivations<T>& s, T* d_out, T* d_x) {
  if (shape_.norm_placement == NormPlacement::kPost) {
    return sequence_parallel_ ? PostNormLayerBackwardSequenceParallel(layer, id, x, s, d_out, d_x)
                              : PostNormLayerBackward(layer, id, x, s, d_out, d_x);
  }
  if (sequence_parallel_) return LayerBackwardSequenceParallel(layer, id, x, s, d_out, d_x);
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  // d_out is the gradient of the layer output = h1 + MLP branch; it doubles as d_h1. It is
  // the same on every tensor rank, so the replicated parameters' gradients are too.
  T* d_h1 = d_out;
  RETURN_IF_ERROR(MlpBranchBackward(layer, id, s.ln2.get(), s, d_out, d_ln_.get()));
  RETURN_IF_ERROR(layer_blocks::NormBackward<T>(shape_, d_ln_.get(), s.h1.get(), w.ln2_gamma,
                                                s.ln2_mean.get(), s.ln2_rstd.get(), nullptr, d_h1,
                                                g.ln2_gamma, g.ln2_beta, N, stream_));
  // Attention block: d_x = d_h1 + (through the attention branch), the sum made by the
  // first norm's backward.
  RETURN_IF_ERROR(AttentionBranchBackward(layer, id, s.ln1.get(), s, d_h1, d_ln_.get()));
  return layer_blocks::NormBackward<T>(shape_, d_ln_.get(), x, w.ln1_gamma, s.ln1_mean.get(),
                                       s.ln1_rstd.get(), d_h1, d_x, g.ln1_gamma, g.ln1_beta, N,
                                       stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::AttentionBranchForward(int layer, const MicrobatchId& id, const T* in,
                                                     T* out, CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, in, QkvWeight(w), QkvBias(w), s.qkv.get(), N, C,
                                   placement_.local_qkv(shape_), stream_));
  RETURN_IF_ERROR(layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, s.qkv.get(), N,
                                                        shape_.seq_length, 0, false, stream_));
  const AttentionShape shape = LocalAttentionShape();
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * shape.heads, shape_.num_heads};
  T* attn_y = s.attn_y.size() > 0 ? s.attn_y.get() : core_y_.get();
  float* lse = s.lse.size() > 0 ? s.lse.get() : core_lse_.get();
  RETURN_IF_ERROR(AttentionCoreForward(s.qkv.get(), attn_y, lse, shape, att_dropout));
  // Row-parallel: the replicated bias enters the sum once.
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, attn_y, w.proj_weight,
                                   placement_.tensor_rank == 0 ? w.proj_bias : nullptr, out, N,
                                   placement_.local_query(shape_), C, stream_));
  RETURN_IF_ERROR(TensorAllReduce(out, NC));
  return DropoutForward<T>(out, out, NC, p, DropoutKeyFor(id, global_layer, kAttentionOutSite), 0,
                           stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::MlpBranchForward(int layer, const MicrobatchId& id, const T* in,
                                               T* out, CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Fl = placement_.local_ffn(shape_);
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  RETURN_IF_ERROR(layer_blocks::MlpInForward<T>(*blas_, shape_, in, MlpInWeight(w), MlpInBias(w),
                                                s.fc.get(), s.gelu.get(), N, Fl, stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.gelu.get(), w.fc_proj_weight,
                                   placement_.tensor_rank == 0 ? w.fc_proj_bias : nullptr, out, N,
                                   Fl, C, stream_));
  RETURN_IF_ERROR(TensorAllReduce(out, NC));
  return DropoutForward<T>(out, out, NC, p, DropoutKeyFor(id, global_layer, kMlpOutSite), 0,
                           stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::AttentionBranchBackward(int layer, const MicrobatchId& id,
                                                      const T* in, const CudaLayerActivations<T>& s,
                                                      const T* d_out, T* d_in) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = options_.dropout;
  const T* d_branch = d_out;
  if (p > 0) {
    RETURN_IF_ERROR(DropoutBackward<T>(d_out, d_branch_.get(), NC, p,
                                       DropoutKeyFor(id, global_layer, kAttentionOutSite), 0,
                                       stream_, kOverwrite));
    d_branch = d_branch_.get();
  }
  const AttentionShape shape = LocalAttentionShape();
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * shape.heads, shape_.num_heads};
  ASSIGN_OR_RETURN(const auto core, AttentionCoreFor(s, shape, att_dropout));
  const auto [attn_y, lse] = core;
  RETURN_IF_ERROR(LinearBackward(layer, d_branch, attn_y, w.proj_weight, d_attn_y_.get(),
                                 g.proj_weight, g.proj_bias, N, placement_.local_query(shape_), C));
  RETURN_IF_ERROR(AttentionCoreBackward(d_attn_y_.get(), s.qkv.get(), attn_y, lse, d_qkv_.get(),
                                        shape, att_dropout));
  // The gradients of the rotated q and k, rotated back: those of the projection's output.
  RETURN_IF_ERROR(layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, d_qkv_.get(),
                                                        N, shape_.seq_length, 0, true, stream_));
  RETURN_IF_ERROR(LinearBackward(layer, d_qkv_.get(), in, QkvWeight(w), d_in, QkvWeight(g),
                                 QkvBias(g), N, C, placement_.local_qkv(shape_)));
  return TensorAllReduce(d_in, NC);  // column-parallel input gradient
}

template <typename T>
absl::Status CudaGptModel<T>::MlpBranchBackward(int layer, const MicrobatchId& id, const T* in,
                                                const CudaLayerActivations<T>& s, const T* d_out,
                                                T* d_in) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Fl = placement_.local_ffn(shape_);
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = options_.dropout;
  const T* d_branch = d_out;
  if (p > 0) {
    RETURN_IF_ERROR(DropoutBackward<T>(d_out, d_branch_.get(), NC, p,
                                       DropoutKeyFor(id, global_layer, kMlpOutSite), 0, stream_,
                                       kOverwrite));
    d_branch = d_branch_.get();
  }
  const bool defer = deferring_ != nullptr;
  RETURN_IF_ERROR(layer_blocks::MlpOutBackward<T>(
      *blas_, shape_, d_branch, s.gelu.get(), s.fc.get(), w.fc_proj_weight, d_gelu_.get(),
      d_fc_.get(), defer ? nullptr : g.fc_proj_weight, defer ? nullptr : g.fc_proj_bias, N, Fl,
      stream_));
  if (defer) {
    RETURN_IF_ERROR(DeferWeightGradient(layer, d_branch, s.gelu.get(), g.fc_proj_weight,
                                        g.fc_proj_bias, N, Fl, C));
  }
  RETURN_IF_ERROR(LinearBackward(layer, d_fc_.get(), in, MlpInWeight(w), d_in, MlpInWeight(g),
                                 MlpInBias(g), N, C, placement_.local_mlp_in(shape_)));
  return TensorAllReduce(d_in, NC);  // column-parallel input gradient
}

template <typename T>
absl::Status CudaGptModel<T>::Forward(const CudaMicrobatchInput<T>& input, CudaActivations<T>* acts,
                                      float* losses, T* hidden_out) {
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
  const size_t RC = static_cast<size_t>(local_rows_) * C;  // this rank's rows
  if (acts->layer_io.size() != static_cast<size_t>(placement_.num_layers) + 1) {
    return absl::InvalidArgumentError("activations of another model chunk");
  }
  acts->id = input.id;
  acts->has_forward = false;
  auto check_ids = [&](const int32_t* ids, const char* what) -> absl::Status {
    if (ids == nullptr) return absl::InvalidArgumentError(absl::StrCat("no ", what, " given"));
    for (int i = 0; i < N; ++i) {
      if (ids[i] < 0 || ids[i] >= shape_.vocab) {
        return absl::InvalidArgumentError(absl::StrCat(what, " ", i, " of the microbatch (", ids[i],
                                                       ") is outside the vocabulary [0, ",
                                                       shape_.vocab, ")"));
      }
    }
    return absl::OkStatus();
  };

  if (bert()) RETURN_IF_ERROR(TakeBertInputs(input, acts));
  T* x0 = acts->layer_io[0].get();
  if (placement_.has_embedding) {
    RETURN_IF_ERROR(check_ids(input.tokens, "token"));
    acts->host_tokens.assign(input.tokens, input.tokens + N);
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(acts->tokens.get(), acts->host_tokens.data(),
                                   N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                   "uploading the tokens"));
    // Vocab-parallel: each rank looks up the tokens in its rows; the position embedding
    // (replicated) is added by tensor rank 0 only, before the sum. Under sequence
    // parallelism the sum is reduce-scattered to this rank's rows (half the bytes of the
    // all-reduce) and the dropout runs on them (masks indexed in the whole tensor).
    const T* wpe = placement_.tensor_rank == 0 ? p_.wpe : nullptr;
    T* embedded = sequence_parallel_ ? sp_full_.get() : x0;
    RETURN_IF_ERROR(TokenPositionEmbeddingForward<T>(
        acts->tokens.get(), p_.wte, wpe, embedded, batch_, shape_.seq_length, C,
        placement_.vocab_start(shape_), placement_.local_vocab(shape_), stream_));
    if (sequence_parallel_) {
      RETURN_IF_ERROR(ReduceScatterRows(embedded, x0));
    } else {
      RETURN_IF_ERROR(TensorAllReduce(x0, NC));
    }
    if (bert()) RETURN_IF_ERROR(BertEmbeddingForward(acts, x0));
    RETURN_IF_ERROR(DropoutForward<T>(x0, x0, RC, input.id.evaluation ? 0.0f : options_.dropout,
                                      DropoutKeyFor(input.id, -1, kEmbeddingSite),
                                      static_cast<uint64_t>(row_offset_) * C, stream_));
  } else {
    if (input.hidden_in == nullptr) {
      return absl::InvalidArgumentError("a chunk without the embeddings needs hidden_in");
    }
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(x0, input.hidden_in, RC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
        "taking the previous stage's output"));
  }
  // An input the set does not keep lives in one of two alternating buffers (the next
  // layer's input never shares the current one's).
  const auto io = [&](int l) {
    return KeepsInput(l) ? acts->layer_io[l].get() : forward_io_[l % 2].get();
  };
  for (int l = 0; l < placement_.num_layers; ++l) {
    CudaLayerActivations<T>& s = Recomputed(l) ? recompute_scratch_.front() : acts->saved[l];
    RETURN_IF_ERROR(LayerForward(l, input.id, io(l), io(l + 1), s));
  }

  const T* x_last = acts->layer_io[placement_.num_layers].get();
  if (!placement_.has_head) {
    if (hidden_out != nullptr) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(hidden_out, x_last, RC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
          "copying the stage's output"));
    }
    acts->has_forward = true;
    return absl::OkStatus();
  }
  if (bert()) {
    // The heads read every row of the last layer's output (post) or of the final
    // LayerNorm's (pre); under sequence parallelism this rank's rows, gathered into lnf.
    const T* head_in = x_last;
    const bool pre = shape_.norm_placement == NormPlacement::kPre;
    if (pre) {
      T* normed = sequence_parallel_ ? sp_rows_.get() : acts->lnf.get();
      RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, x_last, p_.lnf_gamma, p_.lnf_beta,
                                                   normed, acts->lnf_mean.get(),
                                                   acts->lnf_rstd.get(), local_rows_, stream_));
      head_in = normed;
    }
    if (sequence_parallel_) {
      RETURN_IF_ERROR(GatherRows(head_in, acts->lnf.get()));
      head_in = acts->lnf.get();
    } else if (pre) {
      head_in = acts->lnf.get();
    }
    RETURN_IF_ERROR(BertHeadForward(input, acts, head_in, losses).status());
    acts->has_forward = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(check_ids(input.targets, "target"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(acts->targets.get(), input.targets,
                                             N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                             "uploading the targets"));
  if (sequence_parallel_) {
    // The final norm on this rank's rows, gathered for the vocab-parallel head.
    RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, x_last, p_.lnf_gamma, p_.lnf_beta,
                                                 sp_rows_.get(), acts->lnf_mean.get(),
                                                 acts->lnf_rstd.get(), local_rows_, stream_));
    RETURN_IF_ERROR(GatherRows(sp_rows_.get(), acts->lnf.get()));
  } else {
    RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, x_last, p_.lnf_gamma, p_.lnf_beta,
                                                 acts->lnf.get(), acts->lnf_mean.get(),
                                                 acts->lnf_rstd.get(), N, stream_));
  }
  // The output layer (column-parallel over the vocabulary: the tied token embedding or an
  // untied one); padded vocabulary columns are excluded from the softmax.
  const int Vl = placement_.local_vocab(shape_);
  const int start = placement_.vocab_start(shape_);
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, acts->lnf.get(), OutputWeight(p_), nullptr,
                                   acts->logits.get(), N, C, Vl, stream_));
  const VocabShard shard{N, Vl, std::clamp(shape_.vocab - start, 0, Vl), start};
  RETURN_IF_ERROR(CrossEntropyLocalStats<T>(acts->logits.get(), acts->targets.get(), shard,
                                            acts->ce_local_max.get(), acts->ce_sum_exp.get(),
                                            acts->ce_target.get(), stream_));
  if (tp_ != nullptr && tp_->size() > 1) {
    // Only per-token scalars cross ranks: the global max, then the sums relative to it.
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(acts->ce_max.get(), acts->ce_local_max.get(), N * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream_),
                   "copying the cross-entropy's maxima"));
    RETURN_IF_ERROR(tp_->AllReduce(acts->ce_max.get(), N, ReduceOp::kMax, stream_));
    RETURN_IF_ERROR(CrossEntropyRescaleSums(acts->ce_local_max.get(), acts->ce_max.get(),
                                            acts->ce_sum_exp.get(), N, stream_));
    RETURN_IF_ERROR(tp_->AllReduce(acts->ce_sum_exp.get(), N, ReduceOp::kSum, stream_));
    RETURN_IF_ERROR(tp_->AllReduce(acts->ce_target.get(), N, ReduceOp::kSum, stream_));
  } else {
    std::swap(acts->ce_max, acts->ce_local_max);
  }
  if (losses != nullptr) {
    RETURN_IF_ERROR(CrossEntropyLosses(acts->ce_max.get(), acts->ce_sum_exp.get(),
                                       acts->ce_target.get(), N, losses, stream_));
  }
  acts->has_forward = true;
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaGptModel<T>::Backward(CudaActivations<T>* acts, const T* d_hidden_out,
                                       float d_loss_per_token, T* d_hidden_in,
                                       const LayerDoneHook* on_layer_done) {
  if (!acts->has_forward) return absl::FailedPreconditionError("Backward without Forward");
  acts->has_forward = false;
  const MicrobatchId id = acts->id;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
  const size_t RC = static_cast<size_t>(local_rows_) * C;  // this rank's rows
  const int L = placement_.num_layers;
  if (bert()) lengths_ = acts->lengths.get();

  if (placement_.has_head && bert()) {
    // The heads' input gradient (the same on every tensor rank) into d_ln_, then through
    // the final LayerNorm (pre) or as it is (post) into the residual stream's.
    RETURN_IF_ERROR(BertHeadBackward(acts, d_loss_per_token, d_ln_.get()));
    const T* x_last = acts->layer_io[L].get();
    // Under sequence parallelism each rank takes its own rows of it (no sum: every rank
    // holds all of it).
    const T* d_rows = d_ln_.get() + static_cast<size_t>(row_offset_) * C;
    if (shape_.norm_placement == NormPlacement::kPre) {
      RETURN_IF_ERROR(Zero(d_x_, stream_));
      RETURN_IF_ERROR(layer_blocks::NormBackward<T>(
          shape_, d_rows, x_last, p_.lnf_gamma, acts->lnf_mean.get(), acts->lnf_rstd.get(), nullptr,
          d_x_.get(), g_.lnf_gamma, g_.lnf_beta, local_rows_, stream_));
    } else {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(d_x_.get(), d_rows, RC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
          "taking the heads' gradient"));
    }
  } else if (placement_.has_head) {
    // Cross-entropy (local columns, global statistics), the output layer (its input
    // gradient summed over the vocabulary shards), the final norm.
    const int Vl = placement_.local_vocab(shape_);
    const int start = placement_.vocab_start(shape_);
    const VocabShard shard{N, Vl, std::clamp(shape_.vocab - start, 0, Vl), start};
    RETURN_IF_ERROR(CrossEntropyBackward<T>(
        acts->logits.get(), acts->targets.get(), acts->ce_max.get(), acts->ce_sum_exp.get(), shard,
        d_loss_per_token, d_logits_.get(), stream_, kOverwrite));
    RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_logits_.get(), acts->lnf.get(), OutputWeight(p_),
                                      d_ln_.get(), OutputWeight(g_), nullptr, N, C, Vl, stream_,
                                      kOverwrite));
    RETURN_IF_ERROR(Zero(d_x_, stream_));
    const T* x_last = acts->layer_io[L].get();
    if (sequence_parallel_) {
      // The head's input gradient reduce-scattered to this rank's rows (the conjugate of
      // the forward's gather), then the final norm on them.
      RETURN_IF_ERROR(ReduceScatterRows(d_ln_.get(), sp_rows_.get()));
      RETURN_IF_ERROR(layer_blocks::NormBackward<T>(
          shape_, sp_rows_.get(), x_last, p_.lnf_gamma, acts->lnf_mean.get(), acts->lnf_rstd.get(),
          nullptr, d_x_.get(), g_.lnf_gamma, g_.lnf_beta, local_rows_, stream_));
    } else {
      RETURN_IF_ERROR(TensorAllReduce(d_ln_.get(), NC));
      RETURN_IF_ERROR(layer_blocks::NormBackward<T>(
          shape_, d_ln_.get(), x_last, p_.lnf_gamma, acts->lnf_mean.get(), acts->lnf_rstd.get(),
          nullptr, d_x_.get(), g_.lnf_gamma, g_.lnf_beta, N, stream_));
    }
  } else {
    if (d_hidden_out == nullptr) {
      return absl::InvalidArgumentError("a chunk without the head needs d_hidden_out");
    }
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d_x_.get(), d_hidden_out, RC * sizeof(T),
                                               cudaMemcpyDeviceToDevice, stream_),
                               "taking the next stage's gradient"));
  }

  for (int l = L - 1; l >= 0; --l) {
    const T* x = acts->layer_io[l].get();
    const CudaLayerActivations<T>* s = &acts->saved[l];
    if (Recomputed(l)) {
      // The top layer of a group reruns the group's forwards from its kept input: same
      // inputs, same dropout keys, so the activations are bit-identical to the forward's.
      const int first = GroupStart(l);
      if (l == L - 1 || GroupStart(l + 1) != first || !Recomputed(l + 1)) {
        for (int k = first; k <= l; ++k) {
          const T* in = k == first ? acts->layer_io[first].get() : group_io_[k - first].get();
          RETURN_IF_ERROR(LayerForward(k, id, in, group_io_[k - first + 1].get(),
                                       recompute_scratch_[k - first]));
        }
      }
      x = l == first ? acts->layer_io[first].get() : group_io_[l - first].get();
      s = &recompute_scratch_[l - first];
    }
    RETURN_IF_ERROR(LayerBackward(l, id, x, *s, d_x_.get(), d_below_.get()));
    std::swap(d_x_, d_below_);
    if (on_layer_done != nullptr) {
      if (sequence_parallel_) RETURN_IF_ERROR(SumLayerNormGradients(l));
      RETURN_IF_ERROR((*on_layer_done)(l));
    }
  }
  // The final LayerNorm's gradients are final with the embeddings' (the -1 report).
  if (on_layer_done != nullptr && sequence_parallel_ && placement_.has_head) {
    RETURN_IF_ERROR(SumLayerNormGradients(kFinalNorm));
  }

  if (!placement_.has_embedding) {
    if (d_hidden_in != nullptr) {
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d_hidden_in, d_x_.get(), RC * sizeof(T),
                                                 cudaMemcpyDeviceToDevice, stream_),
                                 "copying the input gradient"));
    }
    if (on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(-1));
    return absl::OkStatus();
  }
  // Embeddings: this rank's token rows go into the token embedding's gradient; the learned
  // position embedding's (if any) is the same on every tensor rank. Under sequence parallelism the
  // dropout's backward runs on this rank's rows, then every token's gradient is gathered.
  if (sequence_parallel_) {
    RETURN_IF_ERROR(DropoutBackward<T>(
        d_x_.get(), sp_rows_.get(), RC, options_.dropout, DropoutKeyFor(id, -1, kEmbeddingSite),
        static_cast<uint64_t>(row_offset_) * C, stream_, kOverwrite));
    if (bert()) {
      // BERT's embedding LayerNorm (post) on this rank's rows, as in the forward.
      RETURN_IF_ERROR(BertEmbeddingNormBackward(acts, sp_rows_.get(), local_rows_));
      if (on_layer_done != nullptr && shape_.norm_placement == NormPlacement::kPost) {
        RETURN_IF_ERROR(SumLayerNormGradients(kEmbeddingNorm));
      }
    }
    RETURN_IF_ERROR(GatherRows(sp_rows_.get(), d_branch_.get()));
  } else if (options_.dropout > 0) {
    RETURN_IF_ERROR(DropoutBackward<T>(d_x_.get(), d_branch_.get(), NC, options_.dropout,
                                       DropoutKeyFor(id, -1, kEmbeddingSite), 0, stream_,
                                       kOverwrite));
  }
  // Without dropout (and sequence parallelism) the embeddings' gradient is d_x_ itself.
  const T* d_embedded = sequence_parallel_ || options_.dropout > 0 ? d_branch_.get() : d_x_.get();
  // BERT: through the embedding LayerNorm (post), and the token types' gradient.
  if (bert() && !sequence_parallel_) {
    // Through the embedding LayerNorm (post) in place: into d_branch_ (a copy when the
    // gradient is still d_x_).
    if (shape_.norm_placement == NormPlacement::kPost) {
      if (d_embedded != d_branch_.get()) {
        RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d_branch_.get(), d_embedded, NC * sizeof(T),
                                                   cudaMemcpyDeviceToDevice, stream_),
                                   "the embeddings' gradient"));
        d_embedded = d_branch_.get();
      }
      RETURN_IF_ERROR(BertEmbeddingNormBackward(acts, d_branch_.get(), N));
    }
  }
  if (bert()) RETURN_IF_ERROR(BertTokenTypeBackward(acts, d_embedded));
  plan_ = PlanEmbeddingGrad(acts->host_tokens.data(), N, placement_.vocab_start(shape_),
                            placement_.local_vocab(shape_));
  RETURN_IF_ERROR(UploadEmbeddingPlan(plan_));
  RETURN_IF_ERROR(TokenEmbeddingBackward<T>(
      d_embedded, plan_rows_.get(), plan_starts_.get(), plan_positions_.get(),
      static_cast<int>(plan_.rows.size()), C, g_.wte, stream_));
  if (g_.wpe != nullptr) {
    RETURN_IF_ERROR(
        PositionEmbeddingBackward<T>(d_embedded, batch_, shape_.seq_length, C, g_.wpe, stream_));
  }
  if (on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(-1));
  // No synchronisation: the host can prepare the next microbatch while the GPU works (the
  // plan's host arrays are members, kept until the next backward replaces them).
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaGptModel<T>::UploadEmbeddingPlan(const EmbeddingGradPlan& plan) {
  const auto upload = [&](int32_t* device, const std::vector<int32_t>& host) {
    return CudaStatus(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream_),
                      "uploading an embedding gradient's plan");
  };
  RETURN_IF_ERROR(upload(plan_rows_.get(), plan.rows));
  RETURN_IF_ERROR(upload(plan_starts_.get(), plan.starts));
  return upload(plan_positions_.get(), plan.positions);
}

template <typename T>
absl::StatusOr<std::pair<const T*, const float*>> CudaGptModel<T>::AttentionCoreFor(
    const CudaLayerActivations<T>& s, const AttentionShape& shape,
    const AttentionDropout& dropout) {
  if (s.attn_y.size() > 0) return std::pair<const T*, const float*>{s.attn_y.get(), s.lse.get()};
  RETURN_IF_ERROR(
      AttentionCoreForward(s.qkv.get(), core_y_.get(), core_lse_.get(), shape, dropout));
  return std::pair<const T*, const float*>{core_y_.get(), core_lse_.get()};
}

template class CudaGptModel<float>;
template class CudaGptModel<__nv_bfloat16>;
template class CudaGptModel<__half>;

}  // namespace mtrain::cuda
