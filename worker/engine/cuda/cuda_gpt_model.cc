#include "worker/engine/cuda/cuda_gpt_model.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
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

namespace mtrain::cuda {
namespace {

// As the CPU model (gpt_model.cc): the same epsilon and dropout sites give the same
// numbers and the same masks.
constexpr float kLayerNormEps = 1e-5f;
enum DropoutSite {
  kEmbeddingSite = 0,
  kAttentionProbSite = 1,
  kAttentionOutSite = 2,
  kMlpOutSite = 3
};

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
                              const ModelOptions& options, CublasLt* blas, cudaStream_t stream)
    : layout_(layout),
      shape_(layout.shape()),
      batch_(micro_batch),
      options_(options),
      blas_(blas),
      stream_(stream) {}

template <typename T>
absl::StatusOr<std::unique_ptr<CudaGptModel<T>>> CudaGptModel<T>::Create(
    const ParameterLayout& layout, int micro_batch, const ModelOptions& options, const T* params,
    float* grads, CublasLt* blas, cudaStream_t stream) {
  const ModelPlacement& placement = layout.placement();
  if (placement.tensor_size != 1 || !placement.has_embedding || !placement.has_head ||
      placement.first_layer != 0 || placement.num_layers != layout.shape().num_layers) {
    return absl::InvalidArgumentError(
        "the CUDA model holds the whole model on one rank (tensor = pipeline = 1)");
  }
  if (micro_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("micro_batch ", micro_batch, " must be > 0"));
  }
  std::unique_ptr<CudaGptModel> model(new CudaGptModel(layout, micro_batch, options, blas, stream));
  model->p_ = layout.View(params);
  model->g_ = layout.View(grads);
  RETURN_IF_ERROR(model->Allocate());
  return model;
}

template <typename T>
absl::Status CudaGptModel<T>::Allocate() {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t C = shape_.hidden;
  const size_t F = shape_.ffn_hidden();
  const size_t V = shape_.padded_vocab;
  const size_t heads_rows = static_cast<size_t>(batch_) * shape_.num_heads * shape_.seq_length;
  RETURN_IF_ERROR(AllocateBuffer(&tokens_, N, "tokens"));
  RETURN_IF_ERROR(AllocateBuffer(&targets_, N, "targets"));
  layer_io_.resize(shape_.num_layers + 1);
  for (auto& io : layer_io_) RETURN_IF_ERROR(AllocateBuffer(&io, N * C, "the residual stream"));
  saved_.resize(options_.recompute ? 1 : shape_.num_layers);
  for (CudaLayerActivations<T>& s : saved_) {
    RETURN_IF_ERROR(AllocateBuffer(&s.ln1, N * C, "activations (ln1)"));
    RETURN_IF_ERROR(AllocateBuffer(&s.qkv, N * 3 * C, "activations (qkv)"));
    RETURN_IF_ERROR(AllocateBuffer(&s.attn_y, N * C, "activations (attention output)"));
    RETURN_IF_ERROR(AllocateBuffer(&s.h1, N * C, "activations (h1)"));
    RETURN_IF_ERROR(AllocateBuffer(&s.ln2, N * C, "activations (ln2)"));
    RETURN_IF_ERROR(AllocateBuffer(&s.fc, N * F, "activations (fc)"));
    RETURN_IF_ERROR(AllocateBuffer(&s.gelu, N * F, "activations (gelu)"));
    RETURN_IF_ERROR(AllocateBuffer(&s.ln1_mean, N, "LayerNorm statistics"));
    RETURN_IF_ERROR(AllocateBuffer(&s.ln1_rstd, N, "LayerNorm statistics"));
    RETURN_IF_ERROR(AllocateBuffer(&s.ln2_mean, N, "LayerNorm statistics"));
    RETURN_IF_ERROR(AllocateBuffer(&s.ln2_rstd, N, "LayerNorm statistics"));
    RETURN_IF_ERROR(AllocateBuffer(&s.lse, heads_rows, "attention log-sum-exp"));
  }
  RETURN_IF_ERROR(AllocateBuffer(&lnf_, N * C, "activations (final LayerNorm)"));
  RETURN_IF_ERROR(AllocateBuffer(&logits_, N * V, "logits"));
  RETURN_IF_ERROR(AllocateBuffer(&d_logits_, N * V, "logit gradients"));
  RETURN_IF_ERROR(AllocateBuffer(&lnf_mean_, N, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&lnf_rstd_, N, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&ce_max_, N, "cross-entropy statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&ce_sum_exp_, N, "cross-entropy statistics"));
  RETURN_IF_ERROR(AllocateBuffer(&ce_target_, N, "cross-entropy statistics"));
  for (DeviceBuffer<T>* b : {&d_x_, &d_below_, &d_ln_, &d_branch_, &d_attn_y_, &discard_}) {
    RETURN_IF_ERROR(AllocateBuffer(b, N * C, "backward temporaries"));
  }
  RETURN_IF_ERROR(AllocateBuffer(&d_fc_, N * F, "backward temporaries"));
  RETURN_IF_ERROR(AllocateBuffer(&d_gelu_, N * F, "backward temporaries"));
  RETURN_IF_ERROR(AllocateBuffer(&d_qkv_, N * 3 * C, "backward temporaries"));
  return absl::OkStatus();
}

template <typename T>
uint64_t CudaGptModel<T>::DropoutKeyFor(int global_layer, int site) const {
  return cpu::DropoutKey(options_.seed, static_cast<uint64_t>(id_.step),
                         static_cast<uint64_t>(id_.first_sample),
                         static_cast<uint64_t>((global_layer + 1) * 4 + site));
}

template <typename T>
absl::Status CudaGptModel<T>::LayerForward(int layer, const T* x, T* out,
                                           CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int F = shape_.ffn_hidden();
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = options_.dropout;

  // Attention block.
  RETURN_IF_ERROR(LayerNormForward<T>(x, w.ln1_gamma, w.ln1_beta, s.ln1.get(), s.ln1_mean.get(),
                                      s.ln1_rstd.get(), N, C, kLayerNormEps, stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.ln1.get(), w.qkv_weight, w.qkv_bias, s.qkv.get(), N,
                                   C, 3 * C, stream_));
  const AttentionShape shape{batch_, shape_.seq_length, shape_.num_heads, shape_.head_dim()};
  const AttentionDropout att_dropout{p, DropoutKeyFor(layer, kAttentionProbSite), 0,
                                     shape_.num_heads};
  RETURN_IF_ERROR(
      FlashAttentionForward<T>(s.qkv.get(), s.attn_y.get(), s.lse.get(), shape, att_dropout,
                               stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.attn_y.get(), w.proj_weight, w.proj_bias, out, N, C,
                                   C, stream_));
  RETURN_IF_ERROR(
      DropoutForward<T>(out, out, NC, p, DropoutKeyFor(layer, kAttentionOutSite), 0, stream_));
  RETURN_IF_ERROR(AddTensors<T>(x, out, s.h1.get(), NC, stream_));

  // MLP block: the GEMM's epilogue adds the bias and applies GeLU, keeping its input.
  RETURN_IF_ERROR(LayerNormForward<T>(s.h1.get(), w.ln2_gamma, w.ln2_beta, s.ln2.get(),
                                      s.ln2_mean.get(), s.ln2_rstd.get(), N, C, kLayerNormEps,
                                      stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.ln2.get(), w.fc_weight, w.fc_bias, s.gelu.get(), N, C,
                                   F, stream_, /*pre_gelu=*/s.fc.get()));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, s.gelu.get(), w.fc_proj_weight, w.fc_proj_bias, out, N,
                                   F, C, stream_));
  RETURN_IF_ERROR(
      DropoutForward<T>(out, out, NC, p, DropoutKeyFor(layer, kMlpOutSite), 0, stream_));
  return AddTensors<T>(out, s.h1.get(), out, NC, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::LayerBackward(int layer, const T* x,
                                            const CudaLayerActivations<T>& s, T* d_out, T* d_x) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int F = shape_.ffn_hidden();
  const size_t NC = static_cast<size_t>(N) * C;
  const float p = options_.dropout;

  // d_out is the gradient of the layer output = h1 + MLP branch; it doubles as d_h1.
  T* d_h1 = d_out;
  RETURN_IF_ERROR(Zero(d_branch_, stream_));
  RETURN_IF_ERROR(DropoutBackward<T>(d_out, d_branch_.get(), NC, p,
                                     DropoutKeyFor(layer, kMlpOutSite), 0, stream_));
  RETURN_IF_ERROR(Zero(d_gelu_, stream_));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_branch_.get(), s.gelu.get(), w.fc_proj_weight,
                                    d_gelu_.get(), g.fc_proj_weight, g.fc_proj_bias, N, F, C,
                                    stream_));
  RETURN_IF_ERROR(Zero(d_fc_, stream_));
  RETURN_IF_ERROR(
      GeluBackward<T>(d_gelu_.get(), s.fc.get(), d_fc_.get(), static_cast<size_t>(N) * F, stream_));
  RETURN_IF_ERROR(Zero(d_ln_, stream_));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_fc_.get(), s.ln2.get(), w.fc_weight, d_ln_.get(),
                                    g.fc_weight, g.fc_bias, N, C, F, stream_));
  RETURN_IF_ERROR(LayerNormBackward<T>(d_ln_.get(), s.h1.get(), w.ln2_gamma, s.ln2_mean.get(),
                                       s.ln2_rstd.get(), d_h1, g.ln2_gamma, g.ln2_beta, N, C,
                                       stream_));

  // Attention block: d_x = d_h1 + (through the attention branch).
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d_x, d_h1, NC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
      "copying the residual gradient"));
  RETURN_IF_ERROR(Zero(d_branch_, stream_));
  RETURN_IF_ERROR(DropoutBackward<T>(d_h1, d_branch_.get(), NC, p,
                                     DropoutKeyFor(layer, kAttentionOutSite), 0, stream_));
  RETURN_IF_ERROR(Zero(d_attn_y_, stream_));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_branch_.get(), s.attn_y.get(), w.proj_weight,
                                    d_attn_y_.get(), g.proj_weight, g.proj_bias, N, C, C,
                                    stream_));
  RETURN_IF_ERROR(Zero(d_qkv_, stream_));
  const AttentionShape shape{batch_, shape_.seq_length, shape_.num_heads, shape_.head_dim()};
  const AttentionDropout att_dropout{p, DropoutKeyFor(layer, kAttentionProbSite), 0,
                                     shape_.num_heads};
  RETURN_IF_ERROR(FlashAttentionBackward<T>(d_attn_y_.get(), s.qkv.get(), s.attn_y.get(),
                                            s.lse.get(), d_qkv_.get(), shape, att_dropout,
                                            stream_));
  RETURN_IF_ERROR(Zero(d_ln_, stream_));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_qkv_.get(), s.ln1.get(), w.qkv_weight, d_ln_.get(),
                                    g.qkv_weight, g.qkv_bias, N, C, 3 * C, stream_));
  return LayerNormBackward<T>(d_ln_.get(), x, w.ln1_gamma, s.ln1_mean.get(), s.ln1_rstd.get(),
                              d_x, g.ln1_gamma, g.ln1_beta, N, C, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::Forward(const MicrobatchId& id, const int32_t* tokens,
                                      const int32_t* targets, float* losses) {
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int V = shape_.padded_vocab;
  const size_t NC = static_cast<size_t>(N) * C;
  id_ = id;
  host_tokens_.assign(tokens, tokens + N);
  for (int i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= shape_.vocab || targets[i] < 0 ||
        targets[i] >= shape_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", i, " of the microbatch (", tokens[i], " -> ", targets[i],
          ") is outside the vocabulary [0, ", shape_.vocab, ")"));
    }
  }
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(tokens_.get(), tokens, N * sizeof(int32_t),
                                             cudaMemcpyHostToDevice, stream_),
                             "uploading the tokens"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(targets_.get(), targets, N * sizeof(int32_t),
                                             cudaMemcpyHostToDevice, stream_),
                             "uploading the targets"));

  T* x0 = layer_io_[0].get();
  RETURN_IF_ERROR(TokenPositionEmbeddingForward<T>(tokens_.get(), p_.wte, p_.wpe, x0, batch_,
                                                   shape_.seq_length, C, 0, V, stream_));
  RETURN_IF_ERROR(DropoutForward<T>(x0, x0, NC, options_.dropout,
                                    DropoutKeyFor(-1, kEmbeddingSite), 0, stream_));
  for (int l = 0; l < shape_.num_layers; ++l) {
    CudaLayerActivations<T>& s = saved_[options_.recompute ? 0 : l];
    RETURN_IF_ERROR(LayerForward(l, layer_io_[l].get(), layer_io_[l + 1].get(), s));
  }

  const T* x_last = layer_io_[shape_.num_layers].get();
  RETURN_IF_ERROR(LayerNormForward<T>(x_last, p_.lnf_gamma, p_.lnf_beta, lnf_.get(),
                                      lnf_mean_.get(), lnf_rstd_.get(), N, C, kLayerNormEps,
                                      stream_));
  // The tied output layer; padded vocabulary columns are excluded from the softmax.
  RETURN_IF_ERROR(
      MatmulForward<T>(*blas_, lnf_.get(), p_.wte, nullptr, logits_.get(), N, C, V, stream_));
  const VocabShard shard{N, V, shape_.vocab, 0};
  RETURN_IF_ERROR(CrossEntropyLocalStats<T>(logits_.get(), targets_.get(), shard, ce_max_.get(),
                                            ce_sum_exp_.get(), ce_target_.get(), stream_));
  RETURN_IF_ERROR(
      CrossEntropyLosses(ce_max_.get(), ce_sum_exp_.get(), ce_target_.get(), N, losses, stream_));
  has_forward_ = true;
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaGptModel<T>::Backward(float d_loss_per_token,
                                       const LayerDoneHook* on_layer_done) {
  if (!has_forward_) return absl::FailedPreconditionError("Backward without Forward");
  has_forward_ = false;
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  const int V = shape_.padded_vocab;
  const size_t NC = static_cast<size_t>(N) * C;

  // Head: cross-entropy, the tied output layer, the final LayerNorm.
  const VocabShard shard{N, V, shape_.vocab, 0};
  RETURN_IF_ERROR(Zero(d_logits_, stream_));
  RETURN_IF_ERROR(CrossEntropyBackward<T>(logits_.get(), targets_.get(), ce_max_.get(),
                                          ce_sum_exp_.get(), shard, d_loss_per_token,
                                          d_logits_.get(), stream_));
  RETURN_IF_ERROR(Zero(d_ln_, stream_));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_logits_.get(), lnf_.get(), p_.wte, d_ln_.get(),
                                    g_.wte, nullptr, N, C, V, stream_));
  RETURN_IF_ERROR(Zero(d_x_, stream_));
  RETURN_IF_ERROR(LayerNormBackward<T>(d_ln_.get(), layer_io_[shape_.num_layers].get(),
                                       p_.lnf_gamma, lnf_mean_.get(), lnf_rstd_.get(), d_x_.get(),
                                       g_.lnf_gamma, g_.lnf_beta, N, C, stream_));

  for (int l = shape_.num_layers - 1; l >= 0; --l) {
    const T* x = layer_io_[l].get();
    CudaLayerActivations<T>& s = saved_[options_.recompute ? 0 : l];
    if (options_.recompute) {
      // Same input, same dropout keys: the recomputed activations are bit-identical.
      RETURN_IF_ERROR(LayerForward(l, x, discard_.get(), s));
    }
    RETURN_IF_ERROR(LayerBackward(l, x, s, d_x_.get(), d_below_.get()));
    std::swap(d_x_, d_below_);
    if (on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(l));
  }

  // Embeddings: the token table's gradient goes into the tied wte gradient.
  RETURN_IF_ERROR(Zero(d_branch_, stream_));
  RETURN_IF_ERROR(DropoutBackward<T>(d_x_.get(), d_branch_.get(), NC, options_.dropout,
                                     DropoutKeyFor(-1, kEmbeddingSite), 0, stream_));
  const EmbeddingGradPlan plan = PlanEmbeddingGrad(host_tokens_.data(), N, 0, V);
  plan_num_rows_ = static_cast<int>(plan.rows.size());
  if (plan_rows_.size() < static_cast<size_t>(N)) {
    RETURN_IF_ERROR(AllocateBuffer(&plan_rows_, N, "the embedding gradient's plan"));
    RETURN_IF_ERROR(AllocateBuffer(&plan_starts_, N + 1, "the embedding gradient's plan"));
    RETURN_IF_ERROR(AllocateBuffer(&plan_positions_, N, "the embedding gradient's plan"));
  }
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(plan_rows_.get(), plan.rows.data(), plan.rows.size() * sizeof(int32_t),
                      cudaMemcpyHostToDevice, stream_),
      "uploading the embedding gradient's plan"));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(plan_starts_.get(), plan.starts.data(), plan.starts.size() * sizeof(int32_t),
                      cudaMemcpyHostToDevice, stream_),
      "uploading the embedding gradient's plan"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(plan_positions_.get(), plan.positions.data(),
                                             plan.positions.size() * sizeof(int32_t),
                                             cudaMemcpyHostToDevice, stream_),
                             "uploading the embedding gradient's plan"));
  RETURN_IF_ERROR(TokenEmbeddingBackward<T>(d_branch_.get(), plan_rows_.get(), plan_starts_.get(),
                                            plan_positions_.get(), plan_num_rows_, C, g_.wte,
                                            stream_));
  RETURN_IF_ERROR(
      PositionEmbeddingBackward<T>(d_branch_.get(), batch_, shape_.seq_length, C, g_.wpe, stream_));
  if (on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(-1));
  // The plan's host vectors must outlive the copies above (pageable memory is copied
  // before cudaMemcpyAsync returns, but keep that independent of the allocator).
  return CudaStatus(cudaStreamSynchronize(stream_), "the backward pass");
}

template class CudaGptModel<float>;
template class CudaGptModel<__nv_bfloat16>;
template class CudaGptModel<__half>;

}  // namespace mtrain::cuda
