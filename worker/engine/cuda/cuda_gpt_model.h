// The model of worker/engine/cpu/transformer_model.h on one GPU, GPT-2, Llama-style or BERT: the
// same layers, parameter layout, dropout masks, recomputation and Megatron tensor
// parallelism, written out with the CUDA kernels of kernels/cuda (cuBLASLt GEMMs with bias
// and bias+GeLU epilogues, fused LayerNorm or RMSNorm, rotary positions, SwiGLU, flash
// attention with grouped-query heads, fused vocab-parallel cross-entropy, deterministic
// embedding gradients); cuda_layer_blocks.h holds where the families differ, and
// cuda_gpt_model_bert.cc BERT's parts (bidirectional attention over each sequence's real
// length, token types, the post placement's layers and embedding LayerNorm, the masked-LM
// and sentence-order heads or the multiple-choice head; under sequence parallelism too).
//
// T is the type of the parameters the layers read and of the activations: float (fp32
// training, checked against the CPU model), __nv_bfloat16 or __half (mixed precision: a
// 16-bit copy of fp32 master weights; fp16 with loss scaling by the caller). Parameter
// gradients are always fp32 ("main grads"), whatever T.
//
// Recomputation and sequence parallelism as the CPU model's (transformer_model.h): full
// recomputation keeps a layer's input only (uniform groups of N layers keep the group's
// first input, block B recomputes the chunk's first B layers), selective recomputation
// keeps everything but the attention core's output and log-sum-exp, which the backward
// reruns from the kept QKV (the flash kernels are deterministic: the same bits); under
// sequence parallelism (cuda_gpt_model_sequence_parallel.cc) the residual stream,
// LayerNorms, dropouts and residual adds hold this tensor rank's R = B * S / t rows.
//
// One model per model chunk of the rank (its ModelPlacement: any layers, the embeddings on
// the first pipeline stage, the head on the last, this rank's tensor-parallel slice).
// Tensor parallelism as on the CPU: QKV and fc column-parallel (input gradient all-reduced
// in the backward), attention output and MLP proj row-parallel (output all-reduced in the
// forward; the replicated bias is added by tensor rank 0 only, before the sum), the
// vocab-parallel embedding (output all-reduced) and cross-entropy (only per-token max, sum
// of exponentials and target logit cross ranks). The sums run in fp32 (16-bit activations
// are widened first) over a DeviceCollectives group.
//
// Everything is enqueued on one stream; Forward and Backward return once the work is
// enqueued, except around tensor-parallel collectives (which wait for it).
//
//   ASSIGN_OR_RETURN(auto model, CudaGptModel<T>::Create(layout, B, options, params, grads,
//                                                        blas, stream, &tensor_group));
//   ASSIGN_OR_RETURN(auto acts, model->NewActivations());
//   RETURN_IF_ERROR(model->Forward(input, acts.get(), losses));  // losses: device [B*S]
//   RETURN_IF_ERROR(model->Backward(acts.get(), nullptr, 1.0f / global_tokens));
#ifndef MTRAIN_WORKER_ENGINE_CUDA_CUDA_GPT_MODEL_H_
#define MTRAIN_WORKER_ENGINE_CUDA_CUDA_GPT_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/rotary.h"
#include "worker/engine/cpu/activations.h"
#include "worker/engine/cpu/model_chunk.h"
#include "worker/engine/cuda/device_buffer.h"
#include "worker/engine/cuda/device_collectives.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain::cuda {

// What one layer's backward needs from its forward, on the device (local sizes under
// tensor parallelism: qkv [N, Ql + 2 KVl] with q and k rotated under rotary positions,
// attn_y [N, Ql], fc [N, F/t] (SwiGLU: [N, 2F/t], gate and up) and gelu [N, F/t] (the
// activation's output); ln1, h1, ln2 and the normalisation statistics hold R rows under
// sequence parallelism; attn_y and lse are empty under selective recomputation).
template <typename T>
struct CudaLayerActivations {
  DeviceBuffer<T> ln1, qkv, attn_y, h1, ln2, fc, gelu;
  DeviceBuffer<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, lse;
};

// A layer's linear weight gradient that a BackwardInput left for BackwardWeight
// (zero-bubble schedules; worker/engine/cpu/activations.h's DeferredWeightGradient on the
// device). The output gradient is a copy (the backward's temporaries serve the next
// layer); the input is read where the microbatch's own activations keep it and copied
// only from a recomputed layer's or a gathered (sequence-parallel) scratch buffer. The
// copies' buffers stay with the activation set: its next BackwardInput reuses them.
template <typename T>
struct CudaDeferredWeightGradient {
  int layer = 0;               // local layer
  DeviceBuffer<T> d_out, in;   // capacity; [rows, out_features] and [rows, in_features] used
  const T* in_held = nullptr;  // the input inside the set's activations, or null
  float* d_weight = nullptr;
  float* d_bias = nullptr;  // may be null
  int rows = 0, in_features = 0, out_features = 0;

  const T* input() const { return in_held != nullptr ? in_held : in.get(); }
};

// One microbatch's forward state on one chunk, kept until its backward.
template <typename T>
struct CudaActivations {
  MicrobatchId id;
  bool has_forward = false;
  std::vector<int32_t> host_tokens;  // for the embedding gradient's plan
  DeviceBuffer<int32_t> tokens, targets;
  // Residual stream: the input of each local layer, then the output of the last ([R, C]
  // rows under sequence parallelism); empty for an input full recomputation does not keep.
  std::vector<DeviceBuffer<T>> layer_io;
  // Per layer; empty for a layer that full recomputation reruns (in the model's sets).
  std::vector<CudaLayerActivations<T>> saved;
  // Head (last stage): final LayerNorm (gathered to every row under sequence
  // parallelism; its statistics of R rows), this rank's logits [N, V/t] and the
  // cross-entropy's per-token statistics (global after the tensor-parallel reductions).
  DeviceBuffer<T> lnf, logits;
  DeviceBuffer<float> lnf_mean, lnf_rstd, ce_local_max, ce_max, ce_sum_exp, ce_target;
  // BERT (cuda_gpt_model_bert.cc): each sequence's real length (every stage) and token
  // types (first stage); the post placement's embedding LayerNorm input and statistics;
  // the masked-LM head over the M masked rows (their indices and labels; the head's input
  // rows, the transform before and after GeLU, its LayerNorm; the logits and cross-entropy
  // statistics above hold M rows); the pooler (each sequence's first row [B, C], tanh of
  // its dense layer) and the sentence-order head's logits [B, 2] and statistics.
  // The multiple-choice head instead of the pretraining heads: each question's answer (-1
  // padding), the pooler's output after dropout [B, C], each sequence's score [B] and its
  // softmax within the question (host).
  std::vector<int32_t> host_lengths, host_token_types, host_sentence_order, mlm_rows,
      choice_answers;
  std::vector<float> choice_probs;
  DeviceBuffer<T> choice_in, choice_scores;
  DeviceBuffer<int32_t> lengths, token_types, sentence_order, mlm_rows_d;
  DeviceBuffer<T> emb_sum, mlm_in, mlm_fc, mlm_act, mlm_ln, pooler_in, pooled, sop_logits;
  DeviceBuffer<float> emb_ln_mean, emb_ln_rstd, mlm_ln_mean, mlm_ln_rstd, mlm_losses, sop_max,
      sop_sum_exp, sop_target, sop_losses;
  float d_loss_per_sequence = 0;
  // A split backward: the first `deferred_count` jobs are owed to BackwardWeight (in the
  // order BackwardInput met them: the last layer's first); `weights_owed` from a
  // BackwardInput to its BackwardWeight.
  std::vector<CudaDeferredWeightGradient<T>> deferred;
  size_t deferred_count = 0;
  bool weights_owed = false;

  // Whether [data, data + count) lies inside the residual stream or a layer's saved
  // activations of this set (which a deferred weight gradient may then read in place).
  bool Holds(const T* data, size_t count) const {
    const auto inside = [&](const DeviceBuffer<T>& buffer) {
      // Integer addresses: comparing pointers into different arrays is unspecified.
      const auto begin = reinterpret_cast<std::uintptr_t>(buffer.get());
      const auto at = reinterpret_cast<std::uintptr_t>(data);
      return buffer.size() > 0 && at >= begin && at + count * sizeof(T) <= begin + buffer.bytes();
    };
    for (const DeviceBuffer<T>& io : layer_io) {
      if (inside(io)) return true;
    }
    for (const CudaLayerActivations<T>& s : saved) {
      for (const DeviceBuffer<T>* buffer :
           {&s.ln1, &s.qkv, &s.attn_y, &s.h1, &s.ln2, &s.fc, &s.gelu}) {
        if (inside(*buffer)) return true;
      }
    }
    return false;
  }
};

// The device bytes `acts` holds: what a microbatch in flight keeps for its backward.
template <typename T>
size_t CudaActivationBytes(const CudaActivations<T>& acts) {
  size_t bytes = acts.tokens.bytes() + acts.targets.bytes() + acts.lnf.bytes() +
                 acts.logits.bytes() + acts.lnf_mean.bytes() + acts.lnf_rstd.bytes() +
                 acts.ce_local_max.bytes() + acts.ce_max.bytes() + acts.ce_sum_exp.bytes() +
                 acts.ce_target.bytes();
  for (const DeviceBuffer<T>& io : acts.layer_io) bytes += io.bytes();
  for (const CudaLayerActivations<T>& s : acts.saved) {
    bytes += s.ln1.bytes() + s.qkv.bytes() + s.attn_y.bytes() + s.h1.bytes() + s.ln2.bytes() +
             s.fc.bytes() + s.gelu.bytes() + s.ln1_mean.bytes() + s.ln1_rstd.bytes() +
             s.ln2_mean.bytes() + s.ln2_rstd.bytes() + s.lse.bytes();
  }
  for (const CudaDeferredWeightGradient<T>& job : acts.deferred) {
    bytes += job.d_out.bytes() + job.in.bytes();
  }
  for (const DeviceBuffer<T>* b :
       {&acts.emb_sum, &acts.mlm_in, &acts.mlm_fc, &acts.mlm_act, &acts.mlm_ln, &acts.pooler_in,
        &acts.pooled, &acts.sop_logits, &acts.choice_in, &acts.choice_scores}) {
    bytes += b->bytes();
  }
  for (const DeviceBuffer<float>* b :
       {&acts.emb_ln_mean, &acts.emb_ln_rstd, &acts.mlm_ln_mean, &acts.mlm_ln_rstd,
        &acts.mlm_losses, &acts.sop_max, &acts.sop_sum_exp, &acts.sop_target, &acts.sop_losses}) {
    bytes += b->bytes();
  }
  return bytes;
}

// The input of one microbatch's forward.
template <typename T>
struct CudaMicrobatchInput {
  MicrobatchId id;
  const int32_t* tokens = nullptr;   // host [B*S]; the chunk with the embeddings
  const int32_t* targets = nullptr;  // host [B*S]; the chunk with the head
  const T* hidden_in = nullptr;      // device [B*S, C]; chunks without the embeddings
  // BERT (host arrays, as MicrobatchInput's on the CPU): token_types [B*S] on the chunk
  // with the embeddings, lengths [B] on every chunk, sentence_order [B] and
  // d_loss_per_sequence on the chunk with the heads (or choice_answers [B / 4] with the
  // multiple-choice head); Forward adds the heads' totals to bert_totals (may be null) and,
  // when `outputs` is given, each masked row's argmax.
  const int32_t* token_types = nullptr;
  const int32_t* lengths = nullptr;
  const int32_t* sentence_order = nullptr;
  const int32_t* choice_answers = nullptr;
  float d_loss_per_sequence = 0;
  BertHeadTotals* bert_totals = nullptr;
  TokenOutputs* outputs = nullptr;
};

template <typename T>
class CudaGptModel {
 public:
  // `params` (T) and `grads` (float) are device buffers holding the layout's tensors at
  // their offsets; they, `layout`, `blas` and `tensor_group` (null: one tensor rank) must
  // outlive the model. INVALID_ARGUMENT if the tensor group does not match the placement;
  // RESOURCE_EXHAUSTED if the buffers do not fit.
  static absl::StatusOr<std::unique_ptr<CudaGptModel>> Create(
      const ParameterLayout& layout, int micro_batch, const ModelOptions& options, const T* params,
      float* grads, CublasLt* blas, cudaStream_t stream, DeviceCollectives* tensor_group = nullptr);

  const ParameterLayout& layout() const { return layout_; }

  // Which attention implementation a training step's layers run, and why
  // (kernels/cuda/attention.h's AttentionPathFor).
  std::string attention_path() const;

  // A set of activations for one microbatch in flight (RESOURCE_EXHAUSTED if it does not
  // fit); reusable once its backward is done.
  absl::StatusOr<std::unique_ptr<CudaActivations<T>>> NewActivations() const;

  // Rows of the residual stream this rank holds, and so of hidden_in / hidden_out and
  // their gradients: B * S, or B * S / t under sequence parallelism.
  int residual_rows() const { return local_rows_; }

  // Forward of one microbatch into `acts`. With the head, writes the per-token losses
  // into `losses` (device, float [B*S]; may be null); otherwise, if `hidden_out` (device
  // [residual_rows(), C]) is given, copies the chunk's output there.
  absl::Status Forward(const CudaMicrobatchInput<T>& input, CudaActivations<T>* acts, float* losses,
                       T* hidden_out = nullptr);

  // Called during Backward once a layer's gradient work is enqueued (its local index), and
  // with -1 once the embeddings' and the head's is: from then on that part of the
  // gradients is final for the step (the data-parallel all-reduce starts from it). Given
  // to the step's last backward of the chunk only: under sequence parallelism that
  // backward also sums the LayerNorms' gradients (each rank's from its rows) over the
  // tensor group before calling it.
  using LayerDoneHook = std::function<absl::Status(int layer)>;

  // Backward of the forward in `acts`, accumulating (+=) into the gradients. The chunk
  // with the head seeds it with d_loss_per_token (the derivative of the step's loss with
  // respect to each token's loss); others take d_hidden_out (device [B*S, C]). Chunks
  // without the embeddings write the gradient of their input into d_hidden_in (device,
  // if given). Under sequence parallelism both are [residual_rows(), C]. Returns once the work is
  // enqueued (errors of kernels show up at the next synchronisation).
  absl::Status Backward(CudaActivations<T>* acts, const T* d_hidden_out, float d_loss_per_token,
                        T* d_hidden_in = nullptr, const LayerDoneHook* on_layer_done = nullptr);

  // The backward in two parts (zero-bubble schedules, cuda_gpt_model_split_backward.cc), as
  // the CPU model's: BackwardInput is Backward with each layer's four linear weight
  // gradients (QKV, the attention's output projection, the MLP's two projections, with
  // their biases) left in `acts`; everything else (normalisations, embeddings, the head,
  // d_hidden_in) as Backward. BackwardWeight adds them later; `acts` must live until then.
  // The same GEMM calls per tensor in the same order: the gradients equal Backward's.
  // on_layer_done(l) comes from BackwardWeight once layer l's weights are done (the
  // layer's other gradients are final by the step's last BackwardInput, which comes
  // first), and (-1) from BackwardInput. FAILED_PRECONDITION for a BackwardWeight without
  // its BackwardInput, or a second BackwardInput before it.
  absl::Status BackwardInput(CudaActivations<T>* acts, const T* d_hidden_out,
                             float d_loss_per_token, T* d_hidden_in = nullptr,
                             const LayerDoneHook* on_layer_done = nullptr);
  absl::Status BackwardWeight(CudaActivations<T>* acts,
                              const LayerDoneHook* on_layer_done = nullptr);

  // ---- Generation with a key-value cache (cuda_gpt_model_decode.cc), one sequence at a
  // time, as TransformerModel::Decode on the CPU: each local layer keeps its key-value heads'
  // keys and values of every position run so far.
  struct KvCache {
    int capacity = 0;                           // positions it can hold
    int length = 0;                             // positions cached so far
    std::vector<DeviceBuffer<T>> keys, values;  // per local layer: [capacity, KVl]
  };
  absl::StatusOr<KvCache> NewKvCache(int capacity) const;
  // Runs positions [cache->length, cache->length + count) (no dropout): `tokens` (host
  // [count]) on a chunk with the embeddings, else `hidden_in` (device [count, C]); appends
  // their keys and values; writes `out` (device): [count, C] hidden states on a chunk
  // without the head, else the logits of the LAST new position over this rank's
  // vocabulary shard [V_local] (padded columns included). Collective over the tensor
  // group. OUT_OF_RANGE past the cache or model.seq_length; INVALID_ARGUMENT for a token
  // outside the vocabulary.
  absl::Status Decode(KvCache* cache, const int32_t* tokens, const T* hidden_in, int count, T* out);

 private:
  CudaGptModel(const ParameterLayout& layout, int micro_batch, const ModelOptions& options,
               CublasLt* blas, cudaStream_t stream, DeviceCollectives* tensor_group);
  absl::Status Allocate();
  // One layer's activation set; without the attention core under selective
  // recomputation (keep_core false).
  absl::Status AllocateLayer(CudaLayerActivations<T>* s, bool keep_core) const;
  absl::Status LayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                            CudaLayerActivations<T>& saved);
  absl::Status LayerBackward(int layer, const MicrobatchId& id, const T* x,
                             const CudaLayerActivations<T>& saved, T* d_out, T* d_x);
  // Under sequence parallelism (cuda_gpt_model_sequence_parallel.cc): x, out, d_out and
  // d_x are this rank's rows.
  absl::Status LayerForwardSequenceParallel(int layer, const MicrobatchId& id, const T* x, T* out,
                                            CudaLayerActivations<T>& saved);
  absl::Status LayerBackwardSequenceParallel(int layer, const MicrobatchId& id, const T* x,
                                             const CudaLayerActivations<T>& saved, T* d_out,
                                             T* d_x);
  // Sequence parallelism's collectives over the tensor group: rows[R, C] of every rank
  // into full[N, C] in rank order (the bits moved as they are), and the sum over ranks of
  // full[N, C] with this rank's rows into rows[R, C] (summed in fp32).
  absl::Status GatherRows(const T* rows, T* full);
  absl::Status ReduceScatterRows(const T* full, T* rows);
  // Sums local layer `layer`'s normalisation gradients (kFinalNorm: the final norm's,
  // kEmbeddingNorm: BERT's embedding LayerNorm's) over the tensor group: under sequence
  // parallelism each rank computed them from its rows.
  static constexpr int kFinalNorm = -1;
  static constexpr int kEmbeddingNorm = -2;
  absl::Status SumLayerNormGradients(int layer);
  // The attention core's output and log-sum-exp for the backward of the layer that saved
  // `s`: its own, or under selective recomputation rerun from its QKV into core_y_ and
  // core_lse_.
  absl::StatusOr<std::pair<const T*, const float*>> AttentionCoreFor(
      const CudaLayerActivations<T>& s, const AttentionShape& shape,
      const AttentionDropout& dropout);
  // This rank's query and key-value heads for the attention kernels.
  AttentionShape LocalAttentionShape() const;
  // ---- BERT (cuda_gpt_model_bert.cc).
  // Checks and uploads the microbatch's lengths (and token types on the first chunk) into
  // `acts`; the layers' attention then reads lengths_.
  absl::Status TakeBertInputs(const CudaMicrobatchInput<T>& input, CudaActivations<T>* acts);
  absl::Status AllocateBert(CudaActivations<T>* acts) const;
  // Adds the token types' embedding to x0 [N, C] and, under post placement, applies the
  // embedding LayerNorm (its input kept in acts->emb_sum).
  absl::Status BertEmbeddingForward(CudaActivations<T>* acts, T* x0);
  // Under post placement, d_rows (this rank's `rows` rows of the embeddings' gradient, in
  // place) through the embedding LayerNorm.
  absl::Status BertEmbeddingNormBackward(CudaActivations<T>* acts, T* d_rows, int rows);
  // The token types' gradient from the embeddings' gradient of every row, d_full [N, C].
  absl::Status BertTokenTypeBackward(CudaActivations<T>* acts, const T* d_full);
  // The heads on head_in [N, C]: returns the masked-LM loss summed over the masked rows, and
  // writes each token's masked-LM loss (0 on unmasked rows) into `losses` (device [N], may
  // be null).
  absl::StatusOr<double> BertHeadForward(const CudaMicrobatchInput<T>& input,
                                         CudaActivations<T>* acts, const T* head_in, float* losses);
  // d_head_in [N, C] (overwritten): the same on every tensor rank.
  absl::Status BertHeadBackward(CudaActivations<T>* acts, float d_loss_per_token, T* d_head_in);
  // The pooler (each sequence's first row of head_in, dense, tanh) and its backward, which
  // adds into d_head_in from d_pooled_.
  absl::Status PoolerForward(CudaActivations<T>* acts, const T* head_in);
  absl::Status PoolerBackward(CudaActivations<T>* acts, T* d_head_in);
  // The multiple-choice head: returns the questions' summed loss (each question's loss also
  // at the first row of its first option in `losses`).
  absl::StatusOr<double> ChoiceHeadForward(const CudaMicrobatchInput<T>& input,
                                           CudaActivations<T>* acts, const T* head_in,
                                           float* losses);
  absl::Status ChoiceHeadBackward(CudaActivations<T>* acts, float d_loss_per_question,
                                  T* d_head_in);
  // The post placement's layer (LayerNorm after each residual add).
  absl::Status PostNormLayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                                    CudaLayerActivations<T>& s);
  absl::Status PostNormLayerBackward(int layer, const MicrobatchId& id, const T* x,
                                     const CudaLayerActivations<T>& s, T* d_out, T* d_x);
  // A layer's two branches on their input `in` (the norm's output under pre placement, the
  // layer's input or h1 under post), in cuda_gpt_model.cc: the attention (QKV, rotary, core,
  // output projection, its dropout) and the MLP (input projection with its activation,
  // output projection, its dropout), each row-parallel output summed over the tensor group;
  // the backwards from the branch's output gradient d_out, d_in overwritten with its input
  // gradient (summed over the tensor group). The pre placement's forward runs its own form
  // (the residual add can ride the projection's epilogue).
  absl::Status AttentionBranchForward(int layer, const MicrobatchId& id, const T* in, T* out,
                                      CudaLayerActivations<T>& s);
  absl::Status MlpBranchForward(int layer, const MicrobatchId& id, const T* in, T* out,
                                CudaLayerActivations<T>& s);
  absl::Status AttentionBranchBackward(int layer, const MicrobatchId& id, const T* in,
                                       const CudaLayerActivations<T>& s, const T* d_out, T* d_in);
  absl::Status MlpBranchBackward(int layer, const MicrobatchId& id, const T* in,
                                 const CudaLayerActivations<T>& s, const T* d_out, T* d_in);
  // The same under sequence parallelism (cuda_gpt_model_bert_sequence_parallel.cc): `in`,
  // `out`, `d_out` and `d_in` are this rank's rows; each branch gathers its input and its
  // output gradient, and reduce-scatters its output and input gradient.
  absl::Status PostNormLayerForwardSequenceParallel(int layer, const MicrobatchId& id, const T* x,
                                                    T* out, CudaLayerActivations<T>& s);
  absl::Status PostNormLayerBackwardSequenceParallel(int layer, const MicrobatchId& id, const T* x,
                                                     const CudaLayerActivations<T>& s, T* d_out,
                                                     T* d_x);
  absl::Status AttentionBranchForwardSequenceParallel(int layer, const MicrobatchId& id,
                                                      const T* in, T* out,
                                                      CudaLayerActivations<T>& s);
  absl::Status MlpBranchForwardSequenceParallel(int layer, const MicrobatchId& id, const T* in,
                                                T* out, CudaLayerActivations<T>& s);
  absl::Status AttentionBranchBackwardSequenceParallel(int layer, const MicrobatchId& id,
                                                       const T* in,
                                                       const CudaLayerActivations<T>& s,
                                                       const T* d_out, T* d_in);
  absl::Status MlpBranchBackwardSequenceParallel(int layer, const MicrobatchId& id, const T* in,
                                                 const CudaLayerActivations<T>& s, const T* d_out,
                                                 T* d_in);
  // A branch's output gradient (this rank's rows) through its dropout, gathered into
  // d_branch_ [N, C].
  absl::Status GatheredOutputGradient(const MicrobatchId& id, int global_layer, int site,
                                      const T* d_out);
  // The attention core of the family: causal flash attention, or BERT's bidirectional one
  // over lengths_.
  absl::Status AttentionCoreForward(const T* qkv, T* out, float* lse, const AttentionShape& shape,
                                    const AttentionDropout& dropout);
  absl::Status AttentionCoreBackward(const T* d_out, const T* qkv, const T* out, const float* lse,
                                     T* d_qkv, const AttentionShape& shape,
                                     const AttentionDropout& dropout);
  bool bert() const { return shape_.family == ArchitectureFamily::kBert; }

  // A layer's linear backward (MatmulBackward, d_in overwritten): the input gradient now;
  // the weight's and bias's too, or during a BackwardInput recorded in deferring_.
  absl::Status LinearBackward(int layer, const T* d_out, const T* in, const T* weight, T* d_in,
                              float* d_weight, float* d_bias, int rows, int in_features,
                              int out_features);
  // Records one weight gradient in deferring_ (copying d_out, and `in` unless the set
  // holds it).
  absl::Status DeferWeightGradient(int layer, const T* d_out, const T* in, float* d_weight,
                                   float* d_bias, int rows, int in_features, int out_features);
  // Copies `plan` (kept on the host until the stream has read it: a member) into the plan's
  // device buffers, in stream order.
  absl::Status UploadEmbeddingPlan(const EmbeddingGradPlan& plan);
  // Sums data[n] over the tensor-parallel group (in fp32).
  absl::Status TensorAllReduce(T* data, size_t n);
  uint64_t DropoutKeyFor(const MicrobatchId& id, int global_layer, int site) const;
  // Whether local layer l keeps no activations (full recomputation), whether the residual
  // stream's input of layer l (l == num_layers: the chunk's output) is kept, and the
  // first local layer of l's recomputation group (transformer_model.cc's rules).
  bool Recomputed(int l) const;
  bool KeepsInput(int l) const;
  int GroupStart(int l) const;

  const ParameterLayout& layout_;
  const ModelShape shape_;
  const ModelPlacement placement_;
  const int batch_;
  const ModelOptions options_;
  CublasLt* const blas_;
  const cudaStream_t stream_;
  DeviceCollectives* const tp_;  // null: one tensor rank
  // Sequence parallelism: this rank's rows of the residual stream, from row_offset_.
  const bool sequence_parallel_;
  const int local_rows_;
  const int row_offset_;
  ModelView<const T> p_;
  ModelView<float> g_;

  // Full recomputation: one activation set and input per layer of a group (the group's
  // forwards rerun into them before its backwards), and the forward's two alternating
  // buffers for the inputs a group does not keep.
  std::vector<CudaLayerActivations<T>> recompute_scratch_;
  std::vector<DeviceBuffer<T>> group_io_, forward_io_;
  // Selective recomputation: the attention core's output and log-sum-exp of the layer
  // being run or differentiated.
  DeviceBuffer<T> core_y_;
  DeviceBuffer<float> core_lse_;
  // Sequence parallelism: one [N, C] whole, one [R, C] block of this rank's rows, and
  // the fp32 rows a 16-bit reduce-scatter lands in.
  DeviceBuffer<T> sp_full_, sp_rows_;
  DeviceBuffer<float> sp_rows_f_;
  DeviceBuffer<float> layer_norm_sums_;  // a layer's (up to) 4 norm gradients, packed
  // Rotary positions: the CPU's cos/sin table (cpu::MakeRotaryTable) on the device, so both
  // engines rotate by the same floats; empty with learned positions.
  DeviceBuffer<float> rotary_cos_, rotary_sin_;
  RotaryDeviceTable rotary_;
  // The embedding gradient's plan (which tokens add into which row), on the host and its
  // device copy.
  EmbeddingGradPlan plan_;
  DeviceBuffer<int32_t> plan_rows_, plan_starts_, plan_positions_;
  // BERT: the lengths (device [B]) of the microbatch being run or differentiated; each
  // sequence's first row index (device [B], for the pooler); the heads' backward scratch;
  // the token types' gradient plan.
  const int32_t* lengths_ = nullptr;
  DeviceBuffer<int32_t> first_rows_;
  DeviceBuffer<T> d_mlm_a_, d_mlm_b_, d_pooled_, d_sop_logits_, d_choice_scores_;
  DeviceBuffer<float> choice_f_;  // the scores' and their gradients' fp32 staging [B]
  EmbeddingGradPlan type_plan_;
  // The activations of the BackwardInput running (its weight gradients go there); null
  // otherwise.
  CudaActivations<T>* deferring_ = nullptr;
  // Backward temporaries, shared by every microbatch (one backward at a time).
  DeviceBuffer<T> d_logits_;
  DeviceBuffer<T> d_x_, d_below_, d_ln_, d_branch_, d_fc_, d_gelu_, d_qkv_, d_attn_y_;
  DeviceBuffer<float> reduce_scratch_;  // fp32 widening of 16-bit tensor-parallel sums
  // Decode's temporaries, grown to the largest run so far.
  struct DecodeScratch {
    int rows = 0;
    size_t score_count = 0;
    DeviceBuffer<int32_t> tokens;
    DeviceBuffer<T> x, ln, qkv, y, branch, fc, gelu;
    DeviceBuffer<float> mean, rstd, scores;
  };
  DecodeScratch decode_;
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_CUDA_GPT_MODEL_H_
