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
      tp_(tensor_group) {}

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
  if (options.sequence_parallel) {
    return absl::UnimplementedError(
        "parallel.sequence_parallel: the CUDA engine does not split the sequence yet; it runs "
        "on the CPU engine (device DEVICE_CPU)");
  }
  if (options.selective_recompute || options.recompute_group > 1 || options.recompute_block >= 0) {
    return absl::UnimplementedError(
        "train.recompute_granularity: the CUDA engine recomputes whole layers one at a time "
        "(\"full\", uniform, recompute_num_layers 1) or nothing; \"selective\" and the "
        "other methods run on the CPU engine (device DEVICE_CPU)");
  }
  std::unique_ptr<CudaGptModel> model(
      new CudaGptModel(layout, micro_batch, options, blas, stream, tensor_group));
  model->p_ = layout.View(params);
  model->g_ = layout.View(grads);
  RETURN_IF_ERROR(model->Allocate());
  return model;
}

template <typename T>
absl::Status CudaGptModel<T>::AllocateLayer(CudaLayerActivations<T>* s) const {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t C = shape_.hidden;
  const size_t Cl = placement_.local_hidden(shape_);
  const size_t Fl = placement_.local_ffn(shape_);
  const size_t heads_rows =
      static_cast<size_t>(batch_) * placement_.local_heads(shape_) * shape_.seq_length;
  RETURN_IF_ERROR(AllocateBuffer(&s->ln1, N * C, "activations (ln1)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->qkv, N * 3 * Cl, "activations (qkv)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->attn_y, N * Cl, "activations (attention output)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->h1, N * C, "activations (h1)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln2, N * C, "activations (ln2)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->fc, N * Fl, "activations (fc)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->gelu, N * Fl, "activations (gelu)"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln1_mean, N, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln1_rstd, N, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln2_mean, N, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&s->ln2_rstd, N, "LayerNorm statistics"));
  return AllocateBuffer(&s->lse, heads_rows, "attention log-sum-exp");
}

template <typename T>
absl::Status CudaGptModel<T>::Allocate() {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t C = shape_.hidden;
  const size_t Cl = placement_.local_hidden(shape_);
  const size_t Fl = placement_.local_ffn(shape_);
  if (options_.recompute) RETURN_IF_ERROR(AllocateLayer(&scratch_));
  if (placement_.has_head) {
    RETURN_IF_ERROR(
        AllocateBuffer(&d_logits_, N * placement_.local_vocab(shape_), "logit gradients"));
  }
  for (DeviceBuffer<T>* b : {&d_x_, &d_below_, &d_ln_, &d_branch_, &discard_}) {
    RETURN_IF_ERROR(AllocateBuffer(b, N * C, "backward temporaries"));
  }
  RETURN_IF_ERROR(AllocateBuffer(&d_attn_y_, N * Cl, "backward temporaries"));
  RETURN_IF_ERROR(AllocateBuffer(&d_fc_, N * Fl, "backward temporaries"));
  RETURN_IF_ERROR(AllocateBuffer(&d_gelu_, N * Fl, "backward temporaries"));
  RETURN_IF_ERROR(AllocateBuffer(&d_qkv_, N * 3 * Cl, "backward temporaries"));
  if (placement_.has_embedding) {
    RETURN_IF_ERROR(AllocateBuffer(&plan_rows_, N, "the embedding gradient's plan"));
    RETURN_IF_ERROR(AllocateBuffer(&plan_starts_, N + 1, "the embedding gradient's plan"));
    RETURN_IF_ERROR(AllocateBuffer(&plan_positions_, N, "the embedding gradient's plan"));
  }
  if (placement_.tensor_size > 1 && !std::is_same_v<T, float>) {
    RETURN_IF_ERROR(AllocateBuffer(&reduce_scratch_, N * C, "tensor-parallel reductions"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<std::unique_ptr<CudaActivations<T>>> CudaGptModel<T>::NewActivations() const {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t C = shape_.hidden;
  auto acts = std::make_unique<CudaActivations<T>>();
  if (placement_.has_embedding) RETURN_IF_ERROR(AllocateBuffer(&acts->tokens, N, "tokens"));
  acts->layer_io.resize(placement_.num_layers + 1);
  for (auto& io : acts->layer_io) {
    RETURN_IF_ERROR(AllocateBuffer(&io, N * C, "the residual stream"));
  }
  if (!options_.recompute) {
    acts->saved.resize(placement_.num_layers);
    for (CudaLayerActivations<T>& s : acts->saved) RETURN_IF_ERROR(AllocateLayer(&s));
  }
  if (placement_.has_head) {
    RETURN_IF_ERROR(AllocateBuffer(&acts->targets, N, "targets"));
    RETURN_IF_ERROR(AllocateBuffer(&acts->lnf, N * C, "activations (final LayerNorm)"));
    RETURN_IF_ERROR(AllocateBuffer(&acts->logits, N * placement_.local_vocab(shape_), "logits"));
    for (DeviceBuffer<float>* b : {&acts->lnf_mean, &acts->lnf_rstd}) {
      RETURN_IF_ERROR(AllocateBuffer(b, N, "LayerNorm statistics"));
    }
    for (DeviceBuffer<float>* b :
         {&acts->ce_local_max, &acts->ce_max, &acts->ce_sum_exp, &acts->ce_target}) {
      RETURN_IF_ERROR(AllocateBuffer(b, N, "cross-entropy statistics"));
    }
  }
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
uint64_t CudaGptModel<T>::DropoutKeyFor(const MicrobatchId& id, int global_layer, int site) const {
  // The CPU model's keys (model_numerics.h): the same masks on either engine.
  return DropoutKeyOf(options_.seed, id, global_layer, site);
}

template <typename T>
absl::Status CudaGptModel<T>::LayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                                           CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Cl = placement_.local_hidden(shape_);
  const int Fl = placement_.local_ffn(shape_);
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = id.evaluation ? 0.0f : options_.dropout;
  // Row-parallel layers: the replicated bias enters the sum once.
  const bool adds_bias = placement_.tensor_rank == 0;

  // Attention block: QKV column-parallel (this rank's heads), output projection
  // row-parallel.
  RETURN_IF_ERROR(LayerNormForward<T>(x, w.ln1_gamma, w.ln1_beta, s.ln1.get(), s.ln1_mean.get(),
                                      s.ln1_rstd.get(), N, C, kLayerNormEps, stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.ln1.get(), w.qkv_weight, w.qkv_bias, s.qkv.get(), N, C,
                                   3 * Cl, stream_));
  const int heads = placement_.local_heads(shape_);
  const AttentionShape shape{batch_, shape_.seq_length, heads, shape_.head_dim()};
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * heads, shape_.num_heads};
  RETURN_IF_ERROR(FlashAttentionForward<T>(s.qkv.get(), s.attn_y.get(), s.lse.get(), shape,
                                           att_dropout, stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.attn_y.get(), w.proj_weight,
                                   adds_bias ? w.proj_bias : nullptr, out, N, Cl, C, stream_));
  RETURN_IF_ERROR(TensorAllReduce(out, NC));
  RETURN_IF_ERROR(DropoutForward<T>(
      out, out, NC, p, DropoutKeyFor(id, global_layer, kAttentionOutSite), 0, stream_));
  RETURN_IF_ERROR(AddTensors<T>(x, out, s.h1.get(), NC, stream_));

  // MLP block: fc column-parallel, its GEMM's epilogue adding the bias and applying GeLU
  // (keeping its input); proj row-parallel.
  RETURN_IF_ERROR(LayerNormForward<T>(s.h1.get(), w.ln2_gamma, w.ln2_beta, s.ln2.get(),
                                      s.ln2_mean.get(), s.ln2_rstd.get(), N, C, kLayerNormEps,
                                      stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.ln2.get(), w.fc_weight, w.fc_bias, s.gelu.get(), N, C,
                                   Fl, stream_, /*pre_gelu=*/s.fc.get()));
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
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int global_layer = placement_.first_layer + layer;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int Cl = placement_.local_hidden(shape_);
  const int Fl = placement_.local_ffn(shape_);
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = options_.dropout;

  // d_out is the gradient of the layer output = h1 + MLP branch; it doubles as d_h1. It is
  // the same on every tensor rank, so the replicated parameters' gradients are too.
  T* d_h1 = d_out;
  // The temporaries below hold one contribution each: the kernels overwrite them
  // (kOverwrite) rather than accumulate into zeroed buffers, saving a memset and a read.
  RETURN_IF_ERROR(DropoutBackward<T>(d_out, d_branch_.get(), NC, p,
                                     DropoutKeyFor(id, global_layer, kMlpOutSite), 0, stream_,
                                     kOverwrite));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_branch_.get(), s.gelu.get(), w.fc_proj_weight,
                                    d_gelu_.get(), g.fc_proj_weight, g.fc_proj_bias, N, Fl, C,
                                    stream_, kOverwrite));
  RETURN_IF_ERROR(GeluBackward<T>(d_gelu_.get(), s.fc.get(), d_fc_.get(),
                                  static_cast<size_t>(N) * Fl, stream_, kOverwrite));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_fc_.get(), s.ln2.get(), w.fc_weight, d_ln_.get(),
                                    g.fc_weight, g.fc_bias, N, C, Fl, stream_, kOverwrite));
  RETURN_IF_ERROR(TensorAllReduce(d_ln_.get(), NC));  // column-parallel input gradient
  RETURN_IF_ERROR(LayerNormBackward<T>(d_ln_.get(), s.h1.get(), w.ln2_gamma, s.ln2_mean.get(),
                                       s.ln2_rstd.get(), d_h1, g.ln2_gamma, g.ln2_beta, N, C,
                                       stream_));

  // Attention block: d_x = d_h1 + (through the attention branch).
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(d_x, d_h1, NC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
                 "copying the residual gradient"));
  RETURN_IF_ERROR(DropoutBackward<T>(d_h1, d_branch_.get(), NC, p,
                                     DropoutKeyFor(id, global_layer, kAttentionOutSite), 0, stream_,
                                     kOverwrite));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_branch_.get(), s.attn_y.get(), w.proj_weight,
                                    d_attn_y_.get(), g.proj_weight, g.proj_bias, N, Cl, C, stream_,
                                    kOverwrite));
  RETURN_IF_ERROR(Zero(d_qkv_, stream_));  // the attention backward accumulates
  const int heads = placement_.local_heads(shape_);
  const AttentionShape shape{batch_, shape_.seq_length, heads, shape_.head_dim()};
  const AttentionDropout att_dropout{p, DropoutKeyFor(id, global_layer, kAttentionProbSite),
                                     placement_.tensor_rank * heads, shape_.num_heads};
  RETURN_IF_ERROR(FlashAttentionBackward<T>(d_attn_y_.get(), s.qkv.get(), s.attn_y.get(),
                                            s.lse.get(), d_qkv_.get(), shape, att_dropout,
                                            stream_));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_qkv_.get(), s.ln1.get(), w.qkv_weight, d_ln_.get(),
                                    g.qkv_weight, g.qkv_bias, N, C, 3 * Cl, stream_, kOverwrite));
  RETURN_IF_ERROR(TensorAllReduce(d_ln_.get(), NC));  // column-parallel input gradient
  return LayerNormBackward<T>(d_ln_.get(), x, w.ln1_gamma, s.ln1_mean.get(), s.ln1_rstd.get(), d_x,
                              g.ln1_gamma, g.ln1_beta, N, C, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::Forward(const CudaMicrobatchInput<T>& input, CudaActivations<T>* acts,
                                      float* losses, T* hidden_out) {
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const size_t NC = static_cast<size_t>(N) * C;
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

  T* x0 = acts->layer_io[0].get();
  if (placement_.has_embedding) {
    RETURN_IF_ERROR(check_ids(input.tokens, "token"));
    acts->host_tokens.assign(input.tokens, input.tokens + N);
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(acts->tokens.get(), acts->host_tokens.data(),
                                   N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                   "uploading the tokens"));
    // Vocab-parallel: each rank looks up the tokens in its rows; the position embedding
    // (replicated) is added by tensor rank 0 only, before the sum.
    const T* wpe = placement_.tensor_rank == 0 ? p_.wpe : nullptr;
    RETURN_IF_ERROR(TokenPositionEmbeddingForward<T>(
        acts->tokens.get(), p_.wte, wpe, x0, batch_, shape_.seq_length, C,
        placement_.vocab_start(shape_), placement_.local_vocab(shape_), stream_));
    RETURN_IF_ERROR(TensorAllReduce(x0, NC));
    RETURN_IF_ERROR(DropoutForward<T>(x0, x0, NC, input.id.evaluation ? 0.0f : options_.dropout,
                                      DropoutKeyFor(input.id, -1, kEmbeddingSite), 0, stream_));
  } else {
    if (input.hidden_in == nullptr) {
      return absl::InvalidArgumentError("a chunk without the embeddings needs hidden_in");
    }
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(x0, input.hidden_in, NC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
        "taking the previous stage's output"));
  }
  for (int l = 0; l < placement_.num_layers; ++l) {
    CudaLayerActivations<T>& s = options_.recompute ? scratch_ : acts->saved[l];
    RETURN_IF_ERROR(
        LayerForward(l, input.id, acts->layer_io[l].get(), acts->layer_io[l + 1].get(), s));
  }

  const T* x_last = acts->layer_io[placement_.num_layers].get();
  if (!placement_.has_head) {
    if (hidden_out != nullptr) {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(hidden_out, x_last, NC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
          "copying the stage's output"));
    }
    acts->has_forward = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(check_ids(input.targets, "target"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(acts->targets.get(), input.targets,
                                             N * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                             "uploading the targets"));
  RETURN_IF_ERROR(LayerNormForward<T>(x_last, p_.lnf_gamma, p_.lnf_beta, acts->lnf.get(),
                                      acts->lnf_mean.get(), acts->lnf_rstd.get(), N, C,
                                      kLayerNormEps, stream_));
  // The tied output layer (column-parallel over the vocabulary); padded vocabulary
  // columns are excluded from the softmax.
  const int Vl = placement_.local_vocab(shape_);
  const int start = placement_.vocab_start(shape_);
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, acts->lnf.get(), p_.wte, nullptr, acts->logits.get(), N,
                                   C, Vl, stream_));
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

  if (placement_.has_head) {
    // Cross-entropy (local columns, global statistics), the tied output layer (its input
    // gradient summed over the vocabulary shards), the final LayerNorm.
    const int Vl = placement_.local_vocab(shape_);
    const int start = placement_.vocab_start(shape_);
    const VocabShard shard{N, Vl, std::clamp(shape_.vocab - start, 0, Vl), start};
    RETURN_IF_ERROR(CrossEntropyBackward<T>(
        acts->logits.get(), acts->targets.get(), acts->ce_max.get(), acts->ce_sum_exp.get(), shard,
        d_loss_per_token, d_logits_.get(), stream_, kOverwrite));
    RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_logits_.get(), acts->lnf.get(), p_.wte, d_ln_.get(),
                                      g_.wte, nullptr, N, C, Vl, stream_, kOverwrite));
    RETURN_IF_ERROR(TensorAllReduce(d_ln_.get(), NC));
    RETURN_IF_ERROR(Zero(d_x_, stream_));
    RETURN_IF_ERROR(LayerNormBackward<T>(d_ln_.get(), acts->layer_io[placement_.num_layers].get(),
                                         p_.lnf_gamma, acts->lnf_mean.get(), acts->lnf_rstd.get(),
                                         d_x_.get(), g_.lnf_gamma, g_.lnf_beta, N, C, stream_));
  } else {
    if (d_hidden_out == nullptr) {
      return absl::InvalidArgumentError("a chunk without the head needs d_hidden_out");
    }
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d_x_.get(), d_hidden_out, NC * sizeof(T),
                                               cudaMemcpyDeviceToDevice, stream_),
                               "taking the next stage's gradient"));
  }

  for (int l = placement_.num_layers - 1; l >= 0; --l) {
    const T* x = acts->layer_io[l].get();
    CudaLayerActivations<T>& s = options_.recompute ? scratch_ : acts->saved[l];
    if (options_.recompute) {
      // Same input, same dropout keys: the recomputed activations are bit-identical.
      RETURN_IF_ERROR(LayerForward(l, id, x, discard_.get(), s));
    }
    RETURN_IF_ERROR(LayerBackward(l, id, x, s, d_x_.get(), d_below_.get()));
    std::swap(d_x_, d_below_);
    if (on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(l));
  }

  if (!placement_.has_embedding) {
    if (d_hidden_in != nullptr) {
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d_hidden_in, d_x_.get(), NC * sizeof(T),
                                                 cudaMemcpyDeviceToDevice, stream_),
                                 "copying the input gradient"));
    }
    if (on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(-1));
    return absl::OkStatus();
  }
  // Embeddings: this rank's token rows go into the tied wte gradient; the position
  // embedding's gradient is the same on every tensor rank.
  RETURN_IF_ERROR(DropoutBackward<T>(d_x_.get(), d_branch_.get(), NC, options_.dropout,
                                     DropoutKeyFor(id, -1, kEmbeddingSite), 0, stream_,
                                     kOverwrite));
  plan_ = PlanEmbeddingGrad(acts->host_tokens.data(), N, placement_.vocab_start(shape_),
                            placement_.local_vocab(shape_));
  const int num_rows = static_cast<int>(plan_.rows.size());
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(plan_rows_.get(), plan_.rows.data(), plan_.rows.size() * sizeof(int32_t),
                      cudaMemcpyHostToDevice, stream_),
      "uploading the embedding gradient's plan"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(plan_starts_.get(), plan_.starts.data(),
                      plan_.starts.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
      "uploading the embedding gradient's plan"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(plan_positions_.get(), plan_.positions.data(),
                      plan_.positions.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
      "uploading the embedding gradient's plan"));
  RETURN_IF_ERROR(TokenEmbeddingBackward<T>(d_branch_.get(), plan_rows_.get(), plan_starts_.get(),
                                            plan_positions_.get(), num_rows, C, g_.wte, stream_));
  RETURN_IF_ERROR(
      PositionEmbeddingBackward<T>(d_branch_.get(), batch_, shape_.seq_length, C, g_.wpe, stream_));
  if (on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(-1));
  // No synchronisation: the host can prepare the next microbatch while the GPU works (the
  // plan's host arrays are members, kept until the next backward replaces them).
  return absl::OkStatus();
}

template class CudaGptModel<float>;
template class CudaGptModel<__nv_bfloat16>;
template class CudaGptModel<__half>;

}  // namespace mtrain::cuda
