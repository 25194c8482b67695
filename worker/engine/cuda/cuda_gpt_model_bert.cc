// BERT's parts of CudaGptModel (issue 35), as worker/engine/cpu/transformer_model_bert.cc on
// the CPU: the bidirectional attention over each sequence's real length, the token types and
// (post placement) the embedding LayerNorm, the post placement's layer (LayerNorm after each
// residual add, the original BERT), and the heads: the masked-LM head (dense, exact GeLU,
// LayerNorm, then the token embedding as the decoder with its own bias over this rank's
// vocabulary shard) on the masked rows only, and the pooler (each sequence's first row,
// dense, tanh) with the binary sentence-order head, or the multiple-choice head on the
// pooler (model.bert_head BERT_HEAD_MULTIPLE_CHOICE). The post layer under sequence
// parallelism is cuda_gpt_model_bert_sequence_parallel.cc.
//
// The heads run replicated on every tensor rank except the decoder, which is column-parallel
// over the vocabulary like the decoders' output layer: its input gradient is all-reduced, so
// everything below it is the same on every rank.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/bert_heads.h"
#include "kernels/cuda/bidirectional_attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gelu_exact.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/dropout.h"
#include "model/family_defaults.h"
#include "worker/engine/bert_inputs.h"
#include "worker/engine/cuda/cuda_gpt_model.h"
#include "worker/engine/cuda/cuda_layer_blocks.h"
#include "worker/engine/model_numerics.h"

namespace mtrain::cuda {
namespace {

constexpr bool kOverwrite = false;

template <typename T>
absl::Status AllocateBertBuffer(DeviceBuffer<T>* buffer, size_t n, const char* what) {
  ASSIGN_OR_RETURN(*buffer, DeviceBuffer<T>::Create(n, what));
  return absl::OkStatus();
}

template <typename T>
absl::Status ZeroBuffer(T* data, size_t n, cudaStream_t stream) {
  return CudaStatus(cudaMemsetAsync(data, 0, n * sizeof(T), stream), "zeroing a BERT buffer");
}

absl::Status Upload(int32_t* device, const int32_t* host, size_t n, cudaStream_t stream,
                    const char* what) {
  if (n == 0) return absl::OkStatus();
  return CudaStatus(
      cudaMemcpyAsync(device, host, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream), what);
}

template <typename T>
absl::Status Download(std::vector<T>* host, const T* device, size_t n, cudaStream_t stream,
                      const char* what) {
  host->resize(n);
  if (n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host->data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream), what));
  return CudaStatus(cudaStreamSynchronize(stream), what);
}

}  // namespace

template <typename T>
absl::Status CudaGptModel<T>::AllocateBert(CudaActivations<T>* acts) const {
  const size_t N = static_cast<size_t>(batch_) * shape_.seq_length;
  const size_t R = static_cast<size_t>(local_rows_);  // the embedding LayerNorm's rows
  const size_t C = shape_.hidden;
  const size_t B = batch_;
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->lengths, B, "sequence lengths"));
  if (placement_.has_embedding) {
    RETURN_IF_ERROR(AllocateBertBuffer(&acts->token_types, N, "token types"));
    if (shape_.norm_placement == NormPlacement::kPost) {
      RETURN_IF_ERROR(AllocateBertBuffer(&acts->emb_sum, R * C, "activations (embedding sum)"));
      RETURN_IF_ERROR(AllocateBertBuffer(&acts->emb_ln_mean, R, "LayerNorm statistics"));
      RETURN_IF_ERROR(AllocateBertBuffer(&acts->emb_ln_rstd, R, "LayerNorm statistics"));
    }
  }
  if (!placement_.has_head) return absl::OkStatus();
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->pooler_in, B * C, "activations (pooler)"));
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->pooled, B * C, "activations (pooler)"));
  if (shape_.bert_head == BertHeadKind::kMultipleChoice) {
    RETURN_IF_ERROR(AllocateBertBuffer(&acts->choice_in, B * C, "activations (choice head)"));
    return AllocateBertBuffer(&acts->choice_scores, B, "activations (choice head)");
  }
  // The masked rows: at most every row.
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->mlm_rows_d, N, "masked rows"));
  for (DeviceBuffer<T>* b : {&acts->mlm_in, &acts->mlm_fc, &acts->mlm_act, &acts->mlm_ln}) {
    RETURN_IF_ERROR(AllocateBertBuffer(b, N * C, "activations (masked-LM head)"));
  }
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->mlm_ln_mean, N, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->mlm_ln_rstd, N, "LayerNorm statistics"));
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->mlm_losses, N, "masked-LM losses"));
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->sentence_order, B, "sentence-order labels"));
  RETURN_IF_ERROR(AllocateBertBuffer(&acts->sop_logits, B * 2, "sentence-order logits"));
  for (DeviceBuffer<float>* b :
       {&acts->sop_max, &acts->sop_sum_exp, &acts->sop_target, &acts->sop_losses}) {
    RETURN_IF_ERROR(AllocateBertBuffer(b, B, "sentence-order statistics"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaGptModel<T>::TakeBertInputs(const CudaMicrobatchInput<T>& input,
                                             CudaActivations<T>* acts) {
  const int S = shape_.seq_length;
  const int N = batch_ * S;
  RETURN_IF_ERROR(CheckBertLengths(input.lengths, batch_, S));
  acts->host_lengths.assign(input.lengths, input.lengths + batch_);
  RETURN_IF_ERROR(Upload(acts->lengths.get(), acts->host_lengths.data(), batch_, stream_,
                         "uploading the sequence lengths"));
  lengths_ = acts->lengths.get();
  if (!placement_.has_embedding) return absl::OkStatus();
  RETURN_IF_ERROR(CheckTokenTypes(input.token_types, N, shape_.token_types));
  acts->host_token_types.assign(input.token_types, input.token_types + N);
  return Upload(acts->token_types.get(), acts->host_token_types.data(), N, stream_,
                "uploading the token types");
}

template <typename T>
absl::Status CudaGptModel<T>::BertEmbeddingForward(CudaActivations<T>* acts, T* x0) {
  // This rank's rows of the residual stream: every row, or under sequence parallelism
  // [row_offset_, row_offset_ + local_rows_).
  const int R = local_rows_;
  const int C = shape_.hidden;
  const size_t RC = static_cast<size_t>(R) * C;
  // x0 += tte[type]: the lookup into d_branch_ (a backward temporary, free during a
  // forward), then one rounded add, as the CPU's accumulating lookup.
  RETURN_IF_ERROR(TokenPositionEmbeddingForward<T>(acts->token_types.get() + row_offset_, p_.tte,
                                                   nullptr, d_branch_.get(), 1, R, C, 0,
                                                   shape_.token_types, stream_));
  RETURN_IF_ERROR(AddTensors<T>(x0, d_branch_.get(), x0, RC, stream_));
  if (shape_.norm_placement != NormPlacement::kPost) return absl::OkStatus();
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(acts->emb_sum.get(), x0, RC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
      "keeping the embedding sum"));
  return layer_blocks::NormForward<T>(shape_, acts->emb_sum.get(), p_.emb_ln_gamma, p_.emb_ln_beta,
                                      x0, acts->emb_ln_mean.get(), acts->emb_ln_rstd.get(), R,
                                      stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::BertEmbeddingNormBackward(CudaActivations<T>* acts, T* d_rows,
                                                        int rows) {
  if (shape_.norm_placement != NormPlacement::kPost) return absl::OkStatus();
  const size_t RC = static_cast<size_t>(rows) * shape_.hidden;
  RETURN_IF_ERROR(ZeroBuffer(d_ln_.get(), RC, stream_));
  RETURN_IF_ERROR(layer_blocks::NormBackward<T>(shape_, d_rows, acts->emb_sum.get(),
                                                p_.emb_ln_gamma, acts->emb_ln_mean.get(),
                                                acts->emb_ln_rstd.get(), nullptr, d_ln_.get(),
                                                g_.emb_ln_gamma, g_.emb_ln_beta, rows, stream_));
  return CudaStatus(
      cudaMemcpyAsync(d_rows, d_ln_.get(), RC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
      "the embeddings' gradient");
}

template <typename T>
absl::Status CudaGptModel<T>::BertTokenTypeBackward(CudaActivations<T>* acts, const T* d_full) {
  const int N = batch_ * shape_.seq_length;
  const int C = shape_.hidden;
  // Each type's rows summed in token order (the plan), as the CPU's sequential loop; the
  // plan's device buffers are the token embedding's, reused in stream order.
  type_plan_ = PlanEmbeddingGrad(acts->host_token_types.data(), N, 0, shape_.token_types);
  RETURN_IF_ERROR(UploadEmbeddingPlan(type_plan_));
  return TokenEmbeddingBackward<T>(d_full, plan_rows_.get(), plan_starts_.get(),
                                   plan_positions_.get(), static_cast<int>(type_plan_.rows.size()),
                                   C, g_.tte, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::AttentionCoreForward(const T* qkv, T* out, float* lse,
                                                   const AttentionShape& shape,
                                                   const AttentionDropout& dropout) {
  if (bert()) {
    return BidirectionalAttentionForward<T>(qkv, lengths_, out, lse, shape, dropout, stream_);
  }
  return FlashAttentionForward<T>(qkv, out, lse, shape, dropout, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::AttentionCoreBackward(const T* d_out, const T* qkv, const T* out,
                                                    const float* lse, T* d_qkv,
                                                    const AttentionShape& shape,
                                                    const AttentionDropout& dropout) {
  if (bert()) {
    return BidirectionalAttentionBackward<T>(d_out, qkv, out, lse, lengths_, d_qkv, shape, dropout,
                                             stream_, /*accumulate=*/false);
  }
  return FlashAttentionBackward<T>(d_out, qkv, out, lse, d_qkv, shape, dropout, stream_,
                                   /*accumulate=*/false);
}

template <typename T>
absl::Status CudaGptModel<T>::PostNormLayerForward(int layer, const MicrobatchId& id, const T* x,
                                                   T* out, CudaLayerActivations<T>& s) {
  const LayerView<const T>& w = p_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const size_t NC = static_cast<size_t>(N) * shape_.hidden;
  // The attention on the layer's input; ln1 keeps the residual sum LayerNorm 1 reads.
  RETURN_IF_ERROR(AttentionBranchForward(layer, id, x, out, s));
  RETURN_IF_ERROR(AddTensors<T>(x, out, s.ln1.get(), NC, stream_));
  RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, s.ln1.get(), w.ln1_gamma, w.ln1_beta,
                                               s.h1.get(), s.ln1_mean.get(), s.ln1_rstd.get(), N,
                                               stream_));
  // The MLP on h1; ln2 keeps the second residual sum.
  RETURN_IF_ERROR(MlpBranchForward(layer, id, s.h1.get(), out, s));
  RETURN_IF_ERROR(AddTensors<T>(s.h1.get(), out, s.ln2.get(), NC, stream_));
  return layer_blocks::NormForward<T>(shape_, s.ln2.get(), w.ln2_gamma, w.ln2_beta, out,
                                      s.ln2_mean.get(), s.ln2_rstd.get(), N, stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::PostNormLayerBackward(int layer, const MicrobatchId& id, const T* x,
                                                    const CudaLayerActivations<T>& s, T* d_out,
                                                    T* d_x) {
  const LayerView<const T>& w = p_.layers[layer];
  const LayerView<float>& g = g_.layers[layer];
  const int N = batch_ * shape_.seq_length;
  const size_t NC = static_cast<size_t>(N) * shape_.hidden;
  // LayerNorm 2: d_ln_ = the gradient of the second residual sum, which d_out then holds as
  // the residual part of h1's gradient; d_x (written last) holds the MLP's part meanwhile.
  RETURN_IF_ERROR(ZeroBuffer(d_ln_.get(), NC, stream_));
  RETURN_IF_ERROR(layer_blocks::NormBackward<T>(shape_, d_out, s.ln2.get(), w.ln2_gamma,
                                                s.ln2_mean.get(), s.ln2_rstd.get(), nullptr,
                                                d_ln_.get(), g.ln2_gamma, g.ln2_beta, N, stream_));
  T* d_h1 = d_out;
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d_h1, d_ln_.get(), NC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
      "the residual gradient"));
  RETURN_IF_ERROR(MlpBranchBackward(layer, id, s.h1.get(), s, d_ln_.get(), d_x));
  RETURN_IF_ERROR(AddTensors<T>(d_h1, d_x, d_h1, NC, stream_));
  // LayerNorm 1: d_ln_ = the gradient of the first residual sum; d_x is its residual part
  // plus the attention branch's (computed into d_out, free again).
  RETURN_IF_ERROR(ZeroBuffer(d_ln_.get(), NC, stream_));
  RETURN_IF_ERROR(layer_blocks::NormBackward<T>(shape_, d_h1, s.ln1.get(), w.ln1_gamma,
                                                s.ln1_mean.get(), s.ln1_rstd.get(), nullptr,
                                                d_ln_.get(), g.ln1_gamma, g.ln1_beta, N, stream_));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d_x, d_ln_.get(), NC * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
      "the residual gradient"));
  RETURN_IF_ERROR(AttentionBranchBackward(layer, id, x, s, d_ln_.get(), d_out));
  return AddTensors<T>(d_x, d_out, d_x, NC, stream_);
}

template <typename T>
absl::StatusOr<double> CudaGptModel<T>::BertHeadForward(const CudaMicrobatchInput<T>& input,
                                                        CudaActivations<T>* acts, const T* head_in,
                                                        float* losses) {
  const int B = batch_;
  const int N = B * shape_.seq_length;
  const int C = shape_.hidden;
  if (shape_.bert_head == BertHeadKind::kMultipleChoice) {
    return ChoiceHeadForward(input, acts, head_in, losses);
  }
  if (input.targets == nullptr) {
    return absl::InvalidArgumentError(
        "a BERT microbatch needs its masked-LM labels on the last stage");
  }
  RETURN_IF_ERROR(CheckSentenceOrder(input.sentence_order, B));
  acts->host_sentence_order.assign(input.sentence_order, input.sentence_order + B);
  // The masked rows and their labels (-1: not masked).
  ASSIGN_OR_RETURN(MaskedRows masked, MaskedRowsOf(input.targets, N, shape_.vocab));
  acts->mlm_rows = std::move(masked.rows);
  const std::vector<int32_t>& labels = masked.labels;
  const int M = static_cast<int>(acts->mlm_rows.size());
  const size_t MC = static_cast<size_t>(M) * C;
  const int Vl = placement_.local_vocab(shape_);
  const int start = placement_.vocab_start(shape_);
  if (losses != nullptr) RETURN_IF_ERROR(ZeroBuffer(losses, N, stream_));
  // Every tensor rank holds the same labels, so all of them skip (or run) the collectives.
  if (M > 0) {
    RETURN_IF_ERROR(Upload(acts->mlm_rows_d.get(), acts->mlm_rows.data(), M, stream_,
                           "uploading the masked rows"));
    RETURN_IF_ERROR(
        Upload(acts->targets.get(), labels.data(), M, stream_, "uploading the masked-LM labels"));
    RETURN_IF_ERROR(
        cuda::GatherRows<T>(head_in, acts->mlm_rows_d.get(), M, C, acts->mlm_in.get(), stream_));
    RETURN_IF_ERROR(MatmulForward<T>(*blas_, acts->mlm_in.get(), p_.mlm_weight, p_.mlm_bias,
                                     acts->mlm_fc.get(), M, C, C, stream_));
    RETURN_IF_ERROR(GeluExactForward<T>(acts->mlm_fc.get(), acts->mlm_act.get(), MC, stream_));
    RETURN_IF_ERROR(LayerNormForward<T>(
        acts->mlm_act.get(), p_.mlm_ln_gamma, p_.mlm_ln_beta, acts->mlm_ln.get(),
        acts->mlm_ln_mean.get(), acts->mlm_ln_rstd.get(), M, C, NormEpsilon(shape_), stream_));
    // The decoder: the token embedding, column-parallel over the vocabulary with its bias.
    RETURN_IF_ERROR(MatmulForward<T>(*blas_, acts->mlm_ln.get(), p_.wte, p_.mlm_output_bias,
                                     acts->logits.get(), M, C, Vl, stream_));
    const VocabShard shard{M, Vl, std::clamp(shape_.vocab - start, 0, Vl), start};
    RETURN_IF_ERROR(CrossEntropyLocalStats<T>(acts->logits.get(), acts->targets.get(), shard,
                                              acts->ce_local_max.get(), acts->ce_sum_exp.get(),
                                              acts->ce_target.get(), stream_));
    if (tp_ != nullptr && tp_->size() > 1) {
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(acts->ce_max.get(), acts->ce_local_max.get(),
                                     M * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                     "copying the cross-entropy's maxima"));
      RETURN_IF_ERROR(tp_->AllReduce(acts->ce_max.get(), M, ReduceOp::kMax, stream_));
      RETURN_IF_ERROR(CrossEntropyRescaleSums(acts->ce_local_max.get(), acts->ce_max.get(),
                                              acts->ce_sum_exp.get(), M, stream_));
      RETURN_IF_ERROR(tp_->AllReduce(acts->ce_sum_exp.get(), M, ReduceOp::kSum, stream_));
      RETURN_IF_ERROR(tp_->AllReduce(acts->ce_target.get(), M, ReduceOp::kSum, stream_));
    } else {
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(acts->ce_max.get(), acts->ce_local_max.get(),
                                     M * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                     "copying the cross-entropy's maxima"));
    }
    // Each masked row's loss at its row (0 elsewhere): the engine sums them in row order, as
    // the CPU sums the masked rows' losses.
    RETURN_IF_ERROR(CrossEntropyLosses(acts->ce_max.get(), acts->ce_sum_exp.get(),
                                       acts->ce_target.get(), M, acts->mlm_losses.get(), stream_));
    if (losses != nullptr) {
      RETURN_IF_ERROR(ScatterAddRows<float>(acts->mlm_losses.get(), acts->mlm_rows_d.get(), M, 1,
                                            losses, stream_));
    }
  }

  // Pooler and sentence-order head on each sequence's first row.
  RETURN_IF_ERROR(Upload(acts->sentence_order.get(), acts->host_sentence_order.data(), B, stream_,
                         "uploading the sentence-order labels"));
  RETURN_IF_ERROR(PoolerForward(acts, head_in));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, acts->pooled.get(), p_.sop_weight, p_.sop_bias,
                                   acts->sop_logits.get(), B, C, 2, stream_));
  const VocabShard two{B, 2, 2, 0};
  RETURN_IF_ERROR(CrossEntropyLocalStats<T>(acts->sop_logits.get(), acts->sentence_order.get(), two,
                                            acts->sop_max.get(), acts->sop_sum_exp.get(),
                                            acts->sop_target.get(), stream_));
  RETURN_IF_ERROR(CrossEntropyLosses(acts->sop_max.get(), acts->sop_sum_exp.get(),
                                     acts->sop_target.get(), B, acts->sop_losses.get(), stream_));
  acts->d_loss_per_sequence = input.d_loss_per_sequence;

  // What the host asked for: the heads' totals and each masked row's argmax (both wait for
  // the device).
  std::vector<float> mlm_max, mlm_target, mlm_losses;
  if (input.bert_totals != nullptr || input.outputs != nullptr) {
    RETURN_IF_ERROR(Download(&mlm_max, acts->ce_max.get(), M, stream_, "the masked-LM maxima"));
    RETURN_IF_ERROR(
        Download(&mlm_target, acts->ce_target.get(), M, stream_, "the masked-LM label logits"));
    RETURN_IF_ERROR(
        Download(&mlm_losses, acts->mlm_losses.get(), M, stream_, "the masked-LM losses"));
  }
  double mlm_sum = 0;
  for (float loss : mlm_losses) mlm_sum += static_cast<double>(loss);
  if (input.bert_totals != nullptr) {
    // The statistics hold the row's largest logit and the label's over the whole vocabulary
    // (all-reduced across tensor ranks): the label is an argmax when they tie.
    for (int m = 0; m < M; ++m) {
      input.bert_totals->masked_correct += mlm_target[m] >= mlm_max[m] ? 1 : 0;
    }
    std::vector<float> sop_losses, sop_max, sop_target;
    RETURN_IF_ERROR(
        Download(&sop_losses, acts->sop_losses.get(), B, stream_, "the sentence-order losses"));
    RETURN_IF_ERROR(
        Download(&sop_max, acts->sop_max.get(), B, stream_, "the sentence-order maxima"));
    RETURN_IF_ERROR(
        Download(&sop_target, acts->sop_target.get(), B, stream_, "the sentence-order logits"));
    double sop_sum = 0;
    for (float loss : sop_losses) sop_sum += static_cast<double>(loss);
    input.bert_totals->sentence_order_loss += sop_sum;
    for (int b = 0; b < B; ++b) {
      input.bert_totals->sentence_order_correct += sop_target[b] >= sop_max[b] ? 1 : 0;
    }
  }
  if (input.outputs != nullptr) {
    // Whether each masked row's label is an argmax; 0 on the other rows (the engine fills
    // the losses from `losses`).
    input.outputs->argmax.assign(N, 0);
    for (int m = 0; m < M; ++m) {
      input.outputs->argmax[acts->mlm_rows[m]] = mlm_target[m] >= mlm_max[m] ? 1 : 0;
    }
  }
  return mlm_sum;
}

template <typename T>
absl::Status CudaGptModel<T>::BertHeadBackward(CudaActivations<T>* acts, float d_loss_per_token,
                                               T* d_head_in) {
  const int B = batch_;
  const int N = B * shape_.seq_length;
  const int C = shape_.hidden;
  const int M = static_cast<int>(acts->mlm_rows.size());
  const size_t MC = static_cast<size_t>(M) * C;
  const int Vl = placement_.local_vocab(shape_);
  const int start = placement_.vocab_start(shape_);
  RETURN_IF_ERROR(ZeroBuffer(d_head_in, static_cast<size_t>(N) * C, stream_));
  if (shape_.bert_head == BertHeadKind::kMultipleChoice) {
    return ChoiceHeadBackward(acts, d_loss_per_token, d_head_in);
  }
  if (M > 0) {
    // The decoder's input gradient is all-reduced over the tensor group (its input was copied
    // in); the transform below it is replicated.
    const VocabShard shard{M, Vl, std::clamp(shape_.vocab - start, 0, Vl), start};
    RETURN_IF_ERROR(CrossEntropyBackward<T>(
        acts->logits.get(), acts->targets.get(), acts->ce_max.get(), acts->ce_sum_exp.get(), shard,
        d_loss_per_token, d_logits_.get(), stream_, kOverwrite));
    RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_logits_.get(), acts->mlm_ln.get(), p_.wte,
                                      d_mlm_a_.get(), g_.wte, g_.mlm_output_bias, M, C, Vl, stream_,
                                      kOverwrite));
    RETURN_IF_ERROR(TensorAllReduce(d_mlm_a_.get(), MC));
    RETURN_IF_ERROR(ZeroBuffer(d_mlm_b_.get(), MC, stream_));
    RETURN_IF_ERROR(LayerNormBackward<T>(
        d_mlm_a_.get(), acts->mlm_act.get(), p_.mlm_ln_gamma, acts->mlm_ln_mean.get(),
        acts->mlm_ln_rstd.get(), d_mlm_b_.get(), g_.mlm_ln_gamma, g_.mlm_ln_beta, M, C, stream_));
    RETURN_IF_ERROR(GeluExactBackward<T>(d_mlm_b_.get(), acts->mlm_fc.get(), d_mlm_a_.get(), MC,
                                         stream_, kOverwrite));
    RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_mlm_a_.get(), acts->mlm_in.get(), p_.mlm_weight,
                                      d_mlm_b_.get(), g_.mlm_weight, g_.mlm_bias, M, C, C, stream_,
                                      kOverwrite));
    RETURN_IF_ERROR(
        ScatterAddRows<T>(d_mlm_b_.get(), acts->mlm_rows_d.get(), M, C, d_head_in, stream_));
  }
  // The sentence-order head and the pooler, into each sequence's first row.
  const VocabShard two{B, 2, 2, 0};
  RETURN_IF_ERROR(CrossEntropyBackward<T>(acts->sop_logits.get(), acts->sentence_order.get(),
                                          acts->sop_max.get(), acts->sop_sum_exp.get(), two,
                                          acts->d_loss_per_sequence, d_sop_logits_.get(), stream_,
                                          kOverwrite));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_sop_logits_.get(), acts->pooled.get(), p_.sop_weight,
                                    d_pooled_.get(), g_.sop_weight, g_.sop_bias, B, C, 2, stream_,
                                    kOverwrite));
  return PoolerBackward(acts, d_head_in);
}

template <typename T>
absl::Status CudaGptModel<T>::PoolerForward(CudaActivations<T>* acts, const T* head_in) {
  const int B = batch_;
  const int C = shape_.hidden;
  RETURN_IF_ERROR(
      cuda::GatherRows<T>(head_in, first_rows_.get(), B, C, acts->pooler_in.get(), stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, acts->pooler_in.get(), p_.pooler_weight, p_.pooler_bias,
                                   acts->pooled.get(), B, C, C, stream_));
  return TanhForward<T>(acts->pooled.get(), acts->pooled.get(), static_cast<size_t>(B) * C,
                        stream_);
}

template <typename T>
absl::Status CudaGptModel<T>::PoolerBackward(CudaActivations<T>* acts, T* d_head_in) {
  const int B = batch_;
  const int C = shape_.hidden;
  RETURN_IF_ERROR(TanhBackward<T>(d_pooled_.get(), acts->pooled.get(), d_pooled_.get(),
                                  static_cast<size_t>(B) * C, stream_));
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_pooled_.get(), acts->pooler_in.get(),
                                    p_.pooler_weight, d_mlm_b_.get(), g_.pooler_weight,
                                    g_.pooler_bias, B, C, C, stream_, kOverwrite));
  return ScatterAddRows<T>(d_mlm_b_.get(), first_rows_.get(), B, C, d_head_in, stream_);
}

template <typename T>
absl::StatusOr<double> CudaGptModel<T>::ChoiceHeadForward(const CudaMicrobatchInput<T>& input,
                                                          CudaActivations<T>* acts,
                                                          const T* head_in, float* losses) {
  const int B = batch_;
  const int S = shape_.seq_length;
  const int C = shape_.hidden;
  RETURN_IF_ERROR(CheckChoiceAnswers(input.choice_answers, B));
  const int questions = B / kRaceChoices;
  acts->choice_answers.assign(input.choice_answers, input.choice_answers + questions);
  RETURN_IF_ERROR(PoolerForward(acts, head_in));
  // Dropout on the pooler's output with the microbatch's mask (the CPU's), then one score a
  // sequence: choice_weight [1, C] and its bias.
  const size_t BC = static_cast<size_t>(B) * C;
  const float p = input.id.evaluation ? 0.0f : options_.dropout;
  RETURN_IF_ERROR(DropoutForward<T>(acts->pooled.get(), acts->choice_in.get(), BC, p,
                                    DropoutKeyFor(input.id, -1, kPoolerOutSite), 0, stream_));
  RETURN_IF_ERROR(MatmulForward<T>(*blas_, acts->choice_in.get(), p_.choice_weight, p_.choice_bias,
                                   acts->choice_scores.get(), B, C, 1, stream_));
  // The softmax over each question's four scores on the host (four numbers a question), in
  // float as the CPU engine's model.
  RETURN_IF_ERROR(
      (ConvertTensor<T, float>(acts->choice_scores.get(), choice_f_.get(), B, stream_)));
  std::vector<float> scores;
  RETURN_IF_ERROR(Download(&scores, choice_f_.get(), B, stream_, "the choice scores"));
  acts->choice_probs.assign(B, 0.0f);
  std::vector<float> question_losses(static_cast<size_t>(B) * S, 0.0f);
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  for (int q = 0; q < questions; ++q) {
    const int32_t answer = acts->choice_answers[q];
    if (answer < 0) continue;  // padding: no loss, no gradient, not counted
    const float* row = scores.data() + static_cast<size_t>(q) * kRaceChoices;
    float* probs = acts->choice_probs.data() + static_cast<size_t>(q) * kRaceChoices;
    const float max = *std::max_element(row, row + kRaceChoices);
    float sum = 0;
    for (int j = 0; j < kRaceChoices; ++j) {
      probs[j] = std::exp(row[j] - max);
      sum += probs[j];
    }
    for (int j = 0; j < kRaceChoices; ++j) probs[j] /= sum;
    const float loss = std::log(sum) + max - row[answer];
    loss_sum += static_cast<double>(loss);
    // The question's loss at the first row of its first option: the engine's per-token sum
    // then gives the questions' sum.
    question_losses[static_cast<size_t>(q) * kRaceChoices * S] = loss;
    correct += row[answer] >= max ? 1 : 0;
    ++seen;
  }
  if (losses != nullptr) {
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(losses, question_losses.data(), question_losses.size() * sizeof(float),
                        cudaMemcpyHostToDevice, stream_),
        "uploading the questions' losses"));
  }
  if (input.bert_totals != nullptr) {
    input.bert_totals->choice_correct += correct;
    input.bert_totals->choice_questions += seen;
  }
  return loss_sum;
}

template <typename T>
absl::Status CudaGptModel<T>::ChoiceHeadBackward(CudaActivations<T>* acts,
                                                 float d_loss_per_question, T* d_head_in) {
  const int B = batch_;
  const int C = shape_.hidden;
  const size_t BC = static_cast<size_t>(B) * C;
  // d score_j = seed (p_j - [j is the answer]) within each answered question.
  std::vector<float> d_scores(B, 0.0f);
  for (int q = 0; q < B / kRaceChoices; ++q) {
    const int32_t answer = acts->choice_answers[q];
    if (answer < 0) continue;
    for (int j = 0; j < kRaceChoices; ++j) {
      const int b = q * kRaceChoices + j;
      d_scores[b] = d_loss_per_question * (acts->choice_probs[b] - (j == answer ? 1.0f : 0.0f));
    }
  }
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(choice_f_.get(), d_scores.data(), B * sizeof(float),
                                             cudaMemcpyHostToDevice, stream_),
                             "uploading the scores' gradient"));
  RETURN_IF_ERROR((ConvertTensor<float, T>(choice_f_.get(), d_choice_scores_.get(), B, stream_)));
  // The score's weights and its input (the dropped pooler output), then the dropout, into
  // the pooler's gradient.
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_choice_scores_.get(), acts->choice_in.get(),
                                    p_.choice_weight, d_mlm_a_.get(), g_.choice_weight,
                                    g_.choice_bias, B, C, 1, stream_, kOverwrite));
  RETURN_IF_ERROR(DropoutBackward<T>(d_mlm_a_.get(), d_pooled_.get(), BC, options_.dropout,
                                     DropoutKeyFor(acts->id, -1, kPoolerOutSite), 0, stream_,
                                     kOverwrite));
  return PoolerBackward(acts, d_head_in);
}

// Only the members defined here: the class itself is instantiated in cuda_gpt_model.cc.
#define MTRAIN_INSTANTIATE_CUDA_BERT(T)                                                           \
  template absl::Status CudaGptModel<T>::AllocateBert(CudaActivations<T>*) const;                 \
  template absl::Status CudaGptModel<T>::TakeBertInputs(const CudaMicrobatchInput<T>&,            \
                                                        CudaActivations<T>*);                     \
  template absl::Status CudaGptModel<T>::BertEmbeddingForward(CudaActivations<T>*, T*);           \
  template absl::Status CudaGptModel<T>::BertEmbeddingNormBackward(CudaActivations<T>*, T*, int); \
  template absl::Status CudaGptModel<T>::BertTokenTypeBackward(CudaActivations<T>*, const T*);    \
  template absl::Status CudaGptModel<T>::PoolerForward(CudaActivations<T>*, const T*);            \
  template absl::Status CudaGptModel<T>::PoolerBackward(CudaActivations<T>*, T*);                 \
  template absl::StatusOr<double> CudaGptModel<T>::ChoiceHeadForward(                             \
      const CudaMicrobatchInput<T>&, CudaActivations<T>*, const T*, float*);                      \
  template absl::Status CudaGptModel<T>::ChoiceHeadBackward(CudaActivations<T>*, float, T*);      \
  template absl::Status CudaGptModel<T>::AttentionCoreForward(                                    \
      const T*, T*, float*, const AttentionShape&, const AttentionDropout&);                      \
  template absl::Status CudaGptModel<T>::AttentionCoreBackward(                                   \
      const T*, const T*, const T*, const float*, T*, const AttentionShape&,                      \
      const AttentionDropout&);                                                                   \
  template absl::Status CudaGptModel<T>::PostNormLayerForward(int, const MicrobatchId&, const T*, \
                                                              T*, CudaLayerActivations<T>&);      \
  template absl::Status CudaGptModel<T>::PostNormLayerBackward(                                   \
      int, const MicrobatchId&, const T*, const CudaLayerActivations<T>&, T*, T*);                \
  template absl::StatusOr<double> CudaGptModel<T>::BertHeadForward(                               \
      const CudaMicrobatchInput<T>&, CudaActivations<T>*, const T*, float*);                      \
  template absl::Status CudaGptModel<T>::BertHeadBackward(CudaActivations<T>*, float, T*);
MTRAIN_INSTANTIATE_CUDA_BERT(float)
MTRAIN_INSTANTIATE_CUDA_BERT(__nv_bfloat16)
MTRAIN_INSTANTIATE_CUDA_BERT(__half)
#undef MTRAIN_INSTANTIATE_CUDA_BERT

}  // namespace mtrain::cuda
