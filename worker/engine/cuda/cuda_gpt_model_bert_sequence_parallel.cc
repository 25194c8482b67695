// BERT's post placement (LayerNorm after each residual add) under sequence parallelism, as
// the CPU model's (worker/engine/cpu/transformer_model_sequence_parallel.cc): the residual
// sums and the LayerNorms after them work on this tensor rank's rows [rank * R, (rank + 1) *
// R); the attention reads the layer's input and the MLP h1, each gathered by its branch; each
// branch's row-parallel output is reduce-scattered back to the rank's rows, its column-
// parallel input gradient likewise (the conjugates of the gathers). Dropout masks are indexed
// by the element's place in the whole [N, C] tensor. (The pre placement runs the decoders'
// sequence-parallel layer, cuda_gpt_model_sequence_parallel.cc, with BERT's attention.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/cuda/cuda_gpt_model.h"
#include "worker/engine/cuda/cuda_layer_blocks.h"
#include "worker/engine/model_numerics.h"

namespace mtrain::cuda {
namespace {

constexpr bool kOverwrite = false;

template <typename T>
absl::Status ZeroRows(T* data, size_t n, cudaStream_t stream) {
  return CudaStatus(cudaMemsetAsync(data, 0, n * sizeof(T), stream), "zeroing a gradient");
}

}  // namespace

template <typename T>
absl::Status CudaGptModel<T>::AttentionBranchForwardSequenceParallel(int layer,
                                                                     const MicrobatchId& id,
                                                                     const T* in, T* out,
                                                                     CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t RC = static_cast<size_t>(local_rows_) * C;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  RETURN_IF_ERROR(GatherRows(in, sp_full_.get()));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, sp_full_.get(), QkvWeight(w), QkvBias(w), s.qkv.get(), N,
                                   C, placement_.local_qkv(shape_), stream_));
  const AttentionShape shape = LocalAttentionShape();
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * shape.heads, shape_.num_heads};
  T* attn_y = s.attn_y.size() > 0 ? s.attn_y.get() : core_y_.get();
  float* lse = s.lse.size() > 0 ? s.lse.get() : core_lse_.get();
  RETURN_IF_ERROR(AttentionCoreForward(s.qkv.get(), attn_y, lse, shape, att_dropout));
  // Row-parallel: the replicated bias enters each row's sum once (tensor rank 0's).
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, attn_y, w.proj_weight,
                                   placement_.tensor_rank == 0 ? w.proj_bias : nullptr,
                                   sp_full_.get(), N, placement_.local_query(shape_), C, stream_));
  RETURN_IF_ERROR(ReduceScatterRows(sp_full_.get(), out));
  return DropoutForward<T>(out, out, RC, p, DropoutKeyFor(id, global_layer, kAttentionOutSite),
                           static_cast<uint64_t>(row_offset_) * C, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::MlpBranchForwardSequenceParallel(int layer, const MicrobatchId& id,
                                                               const T* in, T* out,
                                                               CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Fl = placement_.local_ffn(shape_);
  const size_t RC = static_cast<size_t>(local_rows_) * C;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  RETURN_IF_ERROR(GatherRows(in, sp_full_.get()));
  RETURN_IF_ERROR(layer_blocks::MlpInForward<T>(*blas_, shape_, sp_full_.get(), MlpInWeight(w),
                                                MlpInBias(w), s.fc.get(), s.gelu.get(), N, Fl,
                                                stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.gelu.get(), w.fc_proj_weight,
                                   placement_.tensor_rank == 0 ? w.fc_proj_bias : nullptr,
                                   sp_full_.get(), N, Fl, C, stream_));
  RETURN_IF_ERROR(ReduceScatterRows(sp_full_.get(), out));
  return DropoutForward<T>(out, out, RC, p, DropoutKeyFor(id, global_layer, kMlpOutSite),
                           static_cast<uint64_t>(row_offset_) * C, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::GatheredOutputGradient(const MicrobatchId& id, int global_layer,
                                                     int site, const T* d_out) {
  const size_t RC = static_cast<size_t>(local_rows_) * shape_.hidden;
  RETURN_IF_ERROR(DropoutBackward<T>(
      d_out, sp_rows_.get(), RC, options_.dropout, DropoutKeyFor(id, global_layer, site),
      static_cast<uint64_t>(row_offset_) * shape_.hidden, stream_, kOverwrite));
  return GatherRows(sp_rows_.get(), d_branch_.get());
}

template <typename T>
absl::Status CudaGptModel<T>::AttentionBranchBackwardSequenceParallel(
    int layer, const MicrobatchId& id, const T* in, const CudaLayerActivations<T>& s,
    const T* d_out, T* d_in) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  RETURN_IF_ERROR(GatheredOutputGradient(id, global_layer, kAttentionOutSite, d_out));
  const AttentionShape shape = LocalAttentionShape();
  const AttentionDropout att_dropout{options_.dropout,
                                     DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * shape.heads, shape_.num_heads};
  ASSIGN_OR_RETURN(const auto core, AttentionCoreFor(s, shape, att_dropout));
  const auto [attn_y, lse] = core;
  RETURN_IF_ERROR(LinearBackward(layer, d_branch_.get(), attn_y, w.proj_weight, d_attn_y_.get(),
                                 g.proj_weight, g.proj_bias, N, placement_.local_query(shape_), C));
  RETURN_IF_ERROR(AttentionCoreBackward(d_attn_y_.get(), s.qkv.get(), attn_y, lse, d_qkv_.get(),
                                        shape, att_dropout));
  // The QKV projection's input gathered again (kept for this rank's rows only); its input
  // gradient reduce-scattered to this rank's rows.
  RETURN_IF_ERROR(GatherRows(in, sp_full_.get()));
  RETURN_IF_ERROR(LinearBackward(layer, d_qkv_.get(), sp_full_.get(), QkvWeight(w), d_ln_.get(),
                                 QkvWeight(g), QkvBias(g), N, C, placement_.local_qkv(shape_)));
  return ReduceScatterRows(d_ln_.get(), d_in);
}

template <typename T>
absl::Status CudaGptModel<T>::MlpBranchBackwardSequenceParallel(int layer, const MicrobatchId& id,
                                                                const T* in,
                                                                const CudaLayerActivations<T>& s,
                                                                const T* d_out, T* d_in) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Fl = placement_.local_ffn(shape_);
  RETURN_IF_ERROR(GatheredOutputGradient(id, placement_.first_layer + layer, kMlpOutSite, d_out));
  const bool defer = deferring_ != nullptr;
  RETURN_IF_ERROR(layer_blocks::MlpOutBackward<T>(
      *blas_, shape_, d_branch_.get(), s.gelu.get(), s.fc.get(), w.fc_proj_weight, d_gelu_.get(),
      d_fc_.get(), defer ? nullptr : g.fc_proj_weight, defer ? nullptr : g.fc_proj_bias, N, Fl,
      stream_));
  if (defer) {
    RETURN_IF_ERROR(DeferWeightGradient(layer, d_branch_.get(), s.gelu.get(), g.fc_proj_weight,
                                        g.fc_proj_bias, N, Fl, C));
  }
  RETURN_IF_ERROR(GatherRows(in, sp_full_.get()));
  RETURN_IF_ERROR(LinearBackward(layer, d_fc_.get(), sp_full_.get(), MlpInWeight(w), d_ln_.get(),
                                 MlpInWeight(g), MlpInBias(g), N, C,
                                 placement_.local_mlp_in(shape_)));
  return ReduceScatterRows(d_ln_.get(), d_in);
}

template <typename T>
absl::Status CudaGptModel<T>::PostNormLayerForwardSequenceParallel(int layer,
                                                                   const MicrobatchId& id,
                                                                   const T* x, T* out,
                                                                   CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int R = local_rows_;
  const size_t RC = static_cast<size_t>(R) * shape_.hidden;
  RETURN_IF_ERROR(AttentionBranchForwardSequenceParallel(layer, id, x, out, s));
  RETURN_IF_ERROR(AddTensors<T>(x, out, s.ln1.get(), RC, stream_));
  RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, s.ln1.get(), w.ln1_gamma, w.ln1_beta,
                                               s.h1.get(), s.ln1_mean.get(), s.ln1_rstd.get(), R,
                                               stream_));
  RETURN_IF_ERROR(MlpBranchForwardSequenceParallel(layer, id, s.h1.get(), out, s));
  RETURN_IF_ERROR(AddTensors<T>(s.h1.get(), out, s.ln2.get(), RC, stream_));
  return layer_blocks::NormForward<T>(shape_, s.ln2.get(), w.ln2_gamma, w.ln2_beta, out,
                                      s.ln2_mean.get(), s.ln2_rstd.get(), R, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::PostNormLayerBackwardSequenceParallel(
    int layer, const MicrobatchId& id, const T* x, const CudaLayerActivations<T>& s, T* d_out,
    T* d_x) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int R = local_rows_;
  const size_t RC = static_cast<size_t>(R) * shape_.hidden;
  // LayerNorm 2: d_x = the gradient of the second residual sum (h1 + the MLP branch).
  RETURN_IF_ERROR(ZeroRows(d_x, RC, stream_));
  RETURN_IF_ERROR(layer_blocks::NormBackward<T>(shape_, d_out, s.ln2.get(), w.ln2_gamma,
                                                s.ln2_mean.get(), s.ln2_rstd.get(), nullptr, d_x,
                                                g.ln2_gamma, g.ln2_beta, R, stream_));
  // d_out = d_h1: the residual part plus the MLP's (which lands in sp_rows_).
  RETURN_IF_ERROR(MlpBranchBackwardSequenceParallel(layer, id, s.h1.get(), s, d_x, sp_rows_.get()));
  RETURN_IF_ERROR(AddTensors<T>(d_x, sp_rows_.get(), d_out, RC, stream_));
  // LayerNorm 1: d_x = the gradient of the first residual sum (x + the attention branch),
  // then the attention's part of x's gradient added.
  RETURN_IF_ERROR(ZeroRows(d_x, RC, stream_));
  RETURN_IF_ERROR(layer_blocks::NormBackward<T>(shape_, d_out, s.ln1.get(), w.ln1_gamma,
                                                s.ln1_mean.get(), s.ln1_rstd.get(), nullptr, d_x,
                                                g.ln1_gamma, g.ln1_beta, R, stream_));
  RETURN_IF_ERROR(AttentionBranchBackwardSequenceParallel(layer, id, x, s, d_x, sp_rows_.get()));
  return AddTensors<T>(d_x, sp_rows_.get(), d_x, RC, stream_);
}

// Only the members defined here: the class itself is instantiated in cuda_gpt_model.cc.
#define MTRAIN_INSTANTIATE_CUDA_BERT_SEQUENCE_PARALLEL(T)                                      \
  template absl::Status CudaGptModel<T>::AttentionBranchForwardSequenceParallel(               \
      int, const MicrobatchId&, const T*, T*, CudaLayerActivations<T>&);                       \
  template absl::Status CudaGptModel<T>::MlpBranchForwardSequenceParallel(                     \
      int, const MicrobatchId&, const T*, T*, CudaLayerActivations<T>&);                       \
  template absl::Status CudaGptModel<T>::GatheredOutputGradient(const MicrobatchId&, int, int, \
                                                                const T*);                     \
  template absl::Status CudaGptModel<T>::AttentionBranchBackwardSequenceParallel(              \
      int, const MicrobatchId&, const T*, const CudaLayerActivations<T>&, const T*, T*);       \
  template absl::Status CudaGptModel<T>::MlpBranchBackwardSequenceParallel(                    \
      int, const MicrobatchId&, const T*, const CudaLayerActivations<T>&, const T*, T*);       \
  template absl::Status CudaGptModel<T>::PostNormLayerForwardSequenceParallel(                 \
      int, const MicrobatchId&, const T*, T*, CudaLayerActivations<T>&);                       \
  template absl::Status CudaGptModel<T>::PostNormLayerBackwardSequenceParallel(                \
      int, const MicrobatchId&, const T*, const CudaLayerActivations<T>&, T*, T*);
MTRAIN_INSTANTIATE_CUDA_BERT_SEQUENCE_PARALLEL(float)
MTRAIN_INSTANTIATE_CUDA_BERT_SEQUENCE_PARALLEL(__nv_bfloat16)
MTRAIN_INSTANTIATE_CUDA_BERT_SEQUENCE_PARALLEL(__half)
#undef MTRAIN_INSTANTIATE_CUDA_BERT_SEQUENCE_PARALLEL

}  // namespace mtrain::cuda
