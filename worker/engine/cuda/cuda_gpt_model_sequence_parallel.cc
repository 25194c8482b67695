// CudaGptModel's layers under sequence parallelism (Korthikanti et al. 2022), as the CPU
// model's (transformer_model_sequence_parallel.cc): the residual stream, norms, dropouts and
// residual adds work on this tensor rank's rows [rank * R, (rank + 1) * R) of the [N, C]
// activations (R = N / t); each column-parallel block takes the all-gathered LayerNorm
// output, each row-parallel block's partial output is reduce-scattered back to the rank's
// rows (the conjugates in the backward). The LayerNorm outputs are kept for the rank's rows
// only and gathered again for the backward's weight gradients. Dropout masks are indexed
// by the element's place in the whole [N, C] tensor, so every layout drops the same
// elements. The row-parallel biases are added by tensor rank 0 before the reduce-scatter
// (in the GEMM's epilogue, as without sequence parallelism), so they enter each row's sum
// once. The LayerNorms' parameter gradients, from this rank's rows only, are summed over
// the tensor group by the step's last backward (SumLayerNormGradients).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "common/status_macros.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/cuda/cuda_gpt_model.h"
#include "worker/engine/cuda/cuda_layer_blocks.h"
#include "worker/engine/model_numerics.h"

namespace mtrain::cuda {
namespace {

// For the kernels' `accumulate` argument: the output holds nothing to keep.
constexpr bool kOverwrite = false;

}  // namespace

template <typename T>
absl::Status CudaGptModel<T>::GatherRows(const T* rows, T* full) {
  const size_t RC = static_cast<size_t>(local_rows_) * shape_.hidden;
  const size_t bytes = RC * sizeof(T);
  if (bytes % sizeof(float) == 0) {
    // An all-gather only moves bits: 16-bit rows travel as pairs packed in 4-byte words,
    // half the bytes of widening them, and every rank's block lands where it belongs.
    return tp_->AllGather(reinterpret_cast<const float*>(rows), reinterpret_cast<float*>(full),
                          bytes / sizeof(float), stream_);
  }
  // An odd count of 16-bit elements: widened to fp32 (exact) and back.
  if constexpr (std::is_same_v<T, float>) {
    return tp_->AllGather(rows, full, RC, stream_);
  } else {
    RETURN_IF_ERROR((ConvertTensor<T, float>(rows, sp_rows_f_.get(), RC, stream_)));
    RETURN_IF_ERROR(tp_->AllGather(sp_rows_f_.get(), reduce_scratch_.get(), RC, stream_));
    return ConvertTensor<float, T>(reduce_scratch_.get(), full, RC * tp_->size(), stream_);
  }
}

template <typename T>
absl::Status CudaGptModel<T>::ReduceScatterRows(const T* full, T* rows) {
  const size_t RC = static_cast<size_t>(local_rows_) * shape_.hidden;
  if constexpr (std::is_same_v<T, float>) {
    return tp_->ReduceScatter(full, rows, RC, stream_);
  } else {
    // Summed in fp32: the partial sums are widened, reduced and rounded once.
    const size_t NC = RC * tp_->size();
    RETURN_IF_ERROR((ConvertTensor<T, float>(full, reduce_scratch_.get(), NC, stream_)));
    RETURN_IF_ERROR(tp_->ReduceScatter(reduce_scratch_.get(), sp_rows_f_.get(), RC, stream_));
    return ConvertTensor<float, T>(sp_rows_f_.get(), rows, RC, stream_);
  }
}

template <typename T>
absl::Status CudaGptModel<T>::SumLayerNormGradients(int layer) {
  const size_t C = static_cast<size_t>(shape_.hidden);
  std::vector<float*> tensors;
  if (layer >= 0) {
    const LayerView<float>& g = g_.layers[layer];
    tensors = {g.ln1_gamma, g.ln1_beta, g.ln2_gamma, g.ln2_beta};
  } else if (layer == kEmbeddingNorm) {
    tensors = {g_.emb_ln_gamma, g_.emb_ln_beta};
  } else {
    tensors = {g_.lnf_gamma, g_.lnf_beta};
  }
  // RMSNorm has no bias; BERT's post placement has no final norm.
  tensors.erase(std::remove(tensors.begin(), tensors.end(), nullptr), tensors.end());
  if (tensors.empty()) return absl::OkStatus();
  // One all-reduce for the layer's tensors, packed: on small tensors a collective's
  // latency is all it costs (on the CPU engine, packing took sequence parallelism's step
  // from +29% to +22% over t=2 alone).
  for (size_t k = 0; k < tensors.size(); ++k) {
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(layer_norm_sums_.get() + k * C, tensors[k], C * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream_),
                   "packing the LayerNorm gradients"));
  }
  RETURN_IF_ERROR(
      tp_->AllReduce(layer_norm_sums_.get(), tensors.size() * C, ReduceOp::kSum, stream_));
  for (size_t k = 0; k < tensors.size(); ++k) {
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(tensors[k], layer_norm_sums_.get() + k * C, C * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream_),
                   "unpacking the LayerNorm gradients"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaGptModel<T>::LayerForwardSequenceParallel(int layer, const MicrobatchId& id,
                                                           const T* x, T* out,
                                                           CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int R = local_rows_;
  const int C = shape_.hidden;
  const int Ql = placement_.local_query(shape_);
  const int Fl = placement_.local_ffn(shape_);
  const size_t RC = static_cast<size_t>(R) * C;
  const uint64_t first = static_cast<uint64_t>(row_offset_) * C;  // dropout element index
  const float p = id.evaluation ? 0.0f : options_.dropout;
  const bool adds_bias = placement_.tensor_rank == 0;

  // Attention block. The norm's output is kept for this rank's rows only and gathered for
  // the column-parallel GEMM (again in the backward).
  RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, x, w.ln1_gamma, w.ln1_beta, s.ln1.get(),
                                               s.ln1_mean.get(), s.ln1_rstd.get(), R, stream_));
  RETURN_IF_ERROR(GatherRows(s.ln1.get(), sp_full_.get()));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, sp_full_.get(), QkvWeight(w), QkvBias(w), s.qkv.get(), N,
                                   C, placement_.local_qkv(shape_), stream_));
  RETURN_IF_ERROR(layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, s.qkv.get(), N,
                                                        shape_.seq_length, 0, false, stream_));
  const AttentionShape shape = LocalAttentionShape();
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * shape.heads, shape_.num_heads};
  T* attn_y = s.attn_y.size() > 0 ? s.attn_y.get() : core_y_.get();
  float* lse = s.lse.size() > 0 ? s.lse.get() : core_lse_.get();
  RETURN_IF_ERROR(AttentionCoreForward(s.qkv.get(), attn_y, lse, shape, att_dropout));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, attn_y, w.proj_weight, adds_bias ? w.proj_bias : nullptr,
                                   sp_full_.get(), N, Ql, C, stream_));
  RETURN_IF_ERROR(ReduceScatterRows(sp_full_.get(), out));
  RETURN_IF_ERROR(DropoutForward<T>(
      out, out, RC, p, DropoutKeyFor(id, global_layer, kAttentionOutSite), first, stream_));
  RETURN_IF_ERROR(AddTensors<T>(x, out, s.h1.get(), RC, stream_));

  // MLP block.
  RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, s.h1.get(), w.ln2_gamma, w.ln2_beta,
                                               s.ln2.get(), s.ln2_mean.get(), s.ln2_rstd.get(), R,
                                               stream_));
  RETURN_IF_ERROR(GatherRows(s.ln2.get(), sp_full_.get()));
  RETURN_IF_ERROR(layer_blocks::MlpInForward<T>(*blas_, shape_, sp_full_.get(), MlpInWeight(w),
                                                MlpInBias(w), s.fc.get(), s.gelu.get(), N, Fl,
                                                stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.gelu.get(), w.fc_proj_weight,
                                   adds_bias ? w.fc_proj_bias : nullptr, sp_full_.get(), N, Fl, C,
                                   stream_));
  RETURN_IF_ERROR(ReduceScatterRows(sp_full_.get(), out));
  RETURN_IF_ERROR(DropoutForward<T>(out, out, RC, p, DropoutKeyFor(id, global_layer, kMlpOutSite),
                                    first, stream_));
  return AddTensors<T>(out, s.h1.get(), out, RC, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::LayerBackwardSequenceParallel(int layer, const MicrobatchId& id,
                                                            const T* x,
                                                            const CudaLayerActivations<T>& s,
                                                            T* d_out, T* d_x) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int R = local_rows_;
  const int C = shape_.hidden;
  const int Ql = placement_.local_query(shape_);
  const int Fl = placement_.local_ffn(shape_);
  const size_t RC = static_cast<size_t>(R) * C;
  const uint64_t first = static_cast<uint64_t>(row_offset_) * C;
  const float p = options_.dropout;

  // d_out (this rank's rows) is the gradient of h1 + MLP branch; it doubles as d_h1. The
  // branch's gradient is gathered: the same [N, C] on every rank, so the replicated
  // biases' gradients are too.
  T* d_h1 = d_out;
  RETURN_IF_ERROR(DropoutBackward<T>(d_out, sp_rows_.get(), RC, p,
                                     DropoutKeyFor(id, global_layer, kMlpOutSite), first, stream_,
                                     kOverwrite));
  RETURN_IF_ERROR(GatherRows(sp_rows_.get(), d_branch_.get()));
  const bool defer = deferring_ != nullptr;
  RETURN_IF_ERROR(layer_blocks::MlpOutBackward<T>(
      *blas_, shape_, d_branch_.get(), s.gelu.get(), s.fc.get(), w.fc_proj_weight, d_gelu_.get(),
      d_fc_.get(), defer ? nullptr : g.fc_proj_weight, defer ? nullptr : g.fc_proj_bias, N, Fl,
      stream_));
  if (defer) {
    RETURN_IF_ERROR(DeferWeightGradient(layer, d_branch_.get(), s.gelu.get(), g.fc_proj_weight,
                                        g.fc_proj_bias, N, Fl, C));
  }
  RETURN_IF_ERROR(GatherRows(s.ln2.get(), sp_full_.get()));
  RETURN_IF_ERROR(LinearBackward(layer, d_fc_.get(), sp_full_.get(), MlpInWeight(w), d_ln_.get(),
                                 MlpInWeight(g), MlpInBias(g), N, C,
                                 placement_.local_mlp_in(shape_)));
  RETURN_IF_ERROR(ReduceScatterRows(d_ln_.get(), sp_rows_.get()));
  RETURN_IF_ERROR(layer_blocks::NormBackward<T>(shape_, sp_rows_.get(), s.h1.get(), w.ln2_gamma,
                                                s.ln2_mean.get(), s.ln2_rstd.get(), nullptr, d_h1,
                                                g.ln2_gamma, g.ln2_beta, R, stream_));

  // Attention block: d_x = d_h1 + (through the attention branch), the sum made by the
  // first norm's backward.
  RETURN_IF_ERROR(DropoutBackward<T>(d_h1, sp_rows_.get(), RC, p,
                                     DropoutKeyFor(id, global_layer, kAttentionOutSite), first,
                                     stream_, kOverwrite));
  RETURN_IF_ERROR(GatherRows(sp_rows_.get(), d_branch_.get()));
  const AttentionShape shape = LocalAttentionShape();
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * shape.heads, shape_.num_heads};
  ASSIGN_OR_RETURN(const auto core, AttentionCoreFor(s, shape, att_dropout));
  const auto [attn_y, lse] = core;
  RETURN_IF_ERROR(LinearBackward(layer, d_branch_.get(), attn_y, w.proj_weight, d_attn_y_.get(),
                                 g.proj_weight, g.proj_bias, N, Ql, C));
  RETURN_IF_ERROR(AttentionCoreBackward(d_attn_y_.get(), s.qkv.get(), attn_y, lse, d_qkv_.get(),
                                        shape, att_dropout));
  RETURN_IF_ERROR(layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, d_qkv_.get(),
                                                        N, shape_.seq_length, 0, true, stream_));
  RETURN_IF_ERROR(GatherRows(s.ln1.get(), sp_full_.get()));
  RETURN_IF_ERROR(LinearBackward(layer, d_qkv_.get(), sp_full_.get(), QkvWeight(w), d_ln_.get(),
                                 QkvWeight(g), QkvBias(g), N, C, placement_.local_qkv(shape_)));
  RETURN_IF_ERROR(ReduceScatterRows(d_ln_.get(), sp_rows_.get()));
  return layer_blocks::NormBackward<T>(shape_, sp_rows_.get(), x, w.ln1_gamma, s.ln1_mean.get(),
                                       s.ln1_rstd.get(), d_h1, d_x, g.ln1_gamma, g.ln1_beta, R,
                                       stream_);
}

// Only the members defined here: the class itself is instantiated in cuda_gpt_model.cc.
#define MTRAIN_INSTANTIATE_CUDA_SEQUENCE_PARALLEL(T)                      \
  template absl::Status CudaGptModel<T>::GatherRows(const T*, T*);        \
  template absl::Status CudaGptModel<T>::ReduceScatterRows(const T*, T*); \
  template absl::Status CudaGptModel<T>::SumLayerNormGradients(int);      \
  template absl::Status CudaGptModel<T>::LayerForwardSequenceParallel(    \
      int, const MicrobatchId&, const T*, T*, CudaLayerActivations<T>&);  \
  template absl::Status CudaGptModel<T>::LayerBackwardSequenceParallel(   \
      int, const MicrobatchId&, const T*, const CudaLayerActivations<T>&, T*, T*);
MTRAIN_INSTANTIATE_CUDA_SEQUENCE_PARALLEL(float)
MTRAIN_INSTANTIATE_CUDA_SEQUENCE_PARALLEL(__nv_bfloat16)
MTRAIN_INSTANTIATE_CUDA_SEQUENCE_PARALLEL(__half)
#undef MTRAIN_INSTANTIATE_CUDA_SEQUENCE_PARALLEL

}  // namespace mtrain::cuda
