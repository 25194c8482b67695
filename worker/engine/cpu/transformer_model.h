// The model chunk of one rank for every family of model/'s TransformerConfig (GPT-2,
// Llama-style decoders, BERT): forward and backward written out layer by layer (no
// autograd), over the parameters and gradients of a ParameterLayout.
//
// Per transformer layer, pre placement (GPT-2, Llama, Megatron's BERT):
//   h1  = x  + Dropout(Attention(Norm1(x)) @ Wproj^T + bproj)
//   out = h1 + Dropout(Act(Norm2(h1) @ Win^T + bin) @ Wout^T + bout)
// post placement (the original BERT):
//   h1  = Norm1(x  + Dropout(Attention(x) @ Wproj^T + bproj))
//   out = Norm2(h1 + Dropout(Act(h1 @ Win^T + bin) @ Wout^T + bout))
// GPT-2: LayerNorm, tanh GeLU on fc, learned positions, multi-head attention, biases.
// Llama: RMSNorm, SwiGLU on [gate | up], rotary q and k, grouped-query heads, optional
// biases. BERT: bidirectional attention over each sequence's real positions, exact GeLU
// (layer_blocks.h holds where the families differ). First stage: x0 = Dropout(wte[tokens]
// (+ wpe[positions]) (+ BERT's token types, LayerNorm under post)). Last stage, decoders:
// logits = NormF(x_L) @ W^T, W the untied output layer or wte (tied), softmax cross-entropy
// with padded vocabulary columns excluded; BERT (transformer_model_bert.cc): the masked-LM
// head on the masked rows and the pooler with the sentence-order head.
//
// Tensor parallelism enters through Megatron's layers (worker/parallel/tensor_parallel.h):
// QKV and MLP fc column-parallel, attention output and MLP proj row-parallel, the
// vocab-parallel embedding and cross-entropy; with one tensor rank they never communicate.
//
// Parameters live in a buffer the model may own (single rank) or share with the rank's
// other model chunks (interleaved pipeline): tensor offsets in the layout are absolute
// indices into that buffer.
//
// Recomputation (Megatron-Core's granularities) trades compute for activation memory, with
// the same dropout masks (counter-based), so results are bit-identical whatever is kept:
//   - full (`recompute`): a recomputed layer keeps nothing but its input; with
//     recompute_group N > 1 only the first layer of each group of N keeps its input and
//     the backward reruns the group's forwards from it (Megatron's "uniform" method); with
//     recompute_block B only the chunk's first B layers are recomputed ("block");
//   - selective: every layer keeps its activations except the attention core's output and
//     log-sum-exp, which the backward recomputes from the kept QKV.
//
// Usage (one microbatch, whole model):
//   TransformerModel<float> model(layout, micro_batch, options);
//   InitializeParameters(layout, seed, model.params());
//   auto acts = model.NewActivations();
//   ASSIGN_OR_RETURN(double loss_sum, model.Forward(in, acts.get()));
//   RETURN_IF_ERROR(model.Backward(acts.get(), nullptr, 1.0 / tokens, nullptr));
#ifndef MTRAIN_WORKER_ENGINE_CPU_DECODER_MODEL_H_
#define MTRAIN_WORKER_ENGINE_CPU_DECODER_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/attention.h"
#include "kernels/rotary.h"
#include "worker/engine/cpu/activations.h"
#include "worker/engine/cpu/model_chunk.h"
#include "worker/engine/parameter_layout.h"
#include "worker/parallel/tensor_parallel.h"

namespace mtrain {

template <typename T>
class TransformerModel final : public ModelChunk<T> {
 public:
  // `layout` must outlive the model. `micro_batch` is B. Without `shared` buffers the model
  // owns buffers of layout.end_offset() elements.
  TransformerModel(const ParameterLayout& layout, int micro_batch, ModelOptions options,
                   TensorParallelGroup<T> tensor_group = {}, SharedParameterBuffers<T> shared = {});
  ~TransformerModel() override;

  // ModelChunk (model_chunk.h says what each does).
  T* params() override { return params_; }
  T* grads() override { return grads_; }
  const T* params() const override { return params_; }
  const T* grads() const override { return grads_; }
  size_t num_params() const override { return layout_.end_offset(); }
  const ParameterLayout& layout() const override { return layout_; }
  void ZeroGrads() override;
  std::unique_ptr<Activations<T>> NewActivations() const override;
  absl::StatusOr<double> Forward(const MicrobatchInput<T>& input, Activations<T>* acts,
                                 T* hidden_out = nullptr) override;
  absl::Status Backward(Activations<T>* acts, const T* d_hidden_out, T d_loss_per_token,
                        T* d_hidden_in = nullptr,
                        const GradReadyHook* on_grad_ready = nullptr) override;
  // Zero-bubble schedules (transformer_model_split_backward.cc): Backward with the layers'
  // linear weight gradients left in acts->deferred, then those alone. Together they give
  // Backward's gradients bit for bit.
  absl::Status BackwardInput(Activations<T>* acts, const T* d_hidden_out, T d_loss_per_token,
                             T* d_hidden_in = nullptr,
                             const GradReadyHook* on_grad_ready = nullptr) override;
  absl::Status BackwardWeight(Activations<T>* acts,
                              const GradReadyHook* on_grad_ready = nullptr) override;
  const T* logits(const Activations<T>& acts) const override;
  // Generation (transformer_model_decode.cc): each local layer keeps its key-value heads' keys
  // and values, so a new token costs one row through the model instead of the context.
  KvCache<T> NewKvCache(int capacity) const override;
  absl::Status Decode(KvCache<T>* cache, const int32_t* tokens, const T* hidden_in, int count,
                      T* out) override;

 private:
  absl::Status LayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                            LayerActivations<T>* saved);
  absl::Status LayerBackward(int layer, const MicrobatchId& id, const T* x,
                             const LayerActivations<T>& saved, T* d_out, T* d_x);
  // A layer's two branches on `in` [N, C] (the normalised input under pre, the input itself
  // under post): out = Dropout(Attention(in) @ Wproj^T + bproj), and
  // out = Dropout(Act(in @ Win^T + bin) @ Wout^T + bout), keeping what their backward needs
  // in `s`. The backwards take the gradient of `out` and write d_in (summed over the tensor
  // group), accumulating the branch's parameter gradients.
  absl::Status AttentionBranchForward(int layer, const MicrobatchId& id, const T* in, T* out,
                                      LayerActivations<T>* s);
  absl::Status MlpBranchForward(int layer, const MicrobatchId& id, const T* in, T* out,
                                LayerActivations<T>* s);
  absl::Status AttentionBranchBackward(int layer, const MicrobatchId& id, const T* in,
                                       const LayerActivations<T>& s, const T* d_out, T* d_in);
  absl::Status MlpBranchBackward(int layer, const MicrobatchId& id, const T* in,
                                 const LayerActivations<T>& s, const T* d_out, T* d_in);
  // The post placement's layer (transformer_model_bert.cc).
  absl::Status PostNormLayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                                    LayerActivations<T>* saved);
  absl::Status PostNormLayerBackward(int layer, const MicrobatchId& id, const T* x,
                                     const LayerActivations<T>& saved, T* d_out, T* d_x);
  // Copies and checks a BERT microbatch's lengths (every stage) and token types (first
  // stage) into `acts`.
  absl::Status TakeBertInputs(const MicrobatchInput<T>& input, Activations<T>* acts);
  // BERT's additions to the embedding on `rows` rows of x0 (from row `row_offset`): the
  // token types, and under post the embedding LayerNorm (its input kept in acts).
  void BertEmbeddingForward(Activations<T>* acts, T* x0, int rows, int row_offset);
  // Under post, from d_x0 (after the dropout's backward; `rows` rows from `row_offset`, this
  // rank's under sequence parallelism) to the gradient of the embeddings' sum, in place,
  // accumulating the embedding LayerNorm's gradients; nothing under pre.
  void BertEmbeddingNormBackward(Activations<T>* acts, T* d_x0, int rows);
  // The token types' gradient from the gradient of the embeddings' sum (all N rows).
  void BertTokenTypeBackward(Activations<T>* acts, const T* d_sum, int rows);
  // BERT's heads on `head_in` [N, C] (the final LayerNorm's output under pre, the last
  // layer's under post): returns the masked rows' summed losses and adds the sentence-order
  // losses and the correct predictions to input.bert_totals.
  absl::StatusOr<double> BertHeadForward(const MicrobatchInput<T>& input, Activations<T>* acts,
                                         const T* head_in);
  // Writes d_head_in [N, C] (the same on every tensor rank).
  absl::Status BertHeadBackward(Activations<T>* acts, T d_loss_per_token, T* d_head_in);
  // The pooler (both heads): tanh of a dense layer over each sequence's first row of
  // head_in, into acts->pooled; its backward from d_pooled_ (overwritten) adds into the
  // first rows of d_head_in.
  void PoolerForward(Activations<T>* acts, const T* head_in);
  void PoolerBackward(Activations<T>* acts, T* d_head_in);
  // The multiple-choice head (transformer_model_bert_choice.cc) in place of the masked-LM
  // and sentence-order heads: a score per sequence from the pooler's output (after its
  // dropout), the cross-entropy over each question's options. Returns the questions'
  // summed loss; the backward seeds each with d_loss_per_question.
  absl::StatusOr<double> ChoiceHeadForward(const MicrobatchInput<T>& input, Activations<T>* acts,
                                           const T* head_in);
  void ChoiceHeadBackward(Activations<T>* acts, T d_loss_per_question, T* d_head_in);
  // Under sequence parallelism (transformer_model_sequence_parallel.cc): x, out, d_out and d_x are
  // this rank's rows. The pre placement's layer, and the post placement's.
  absl::Status LayerForwardSequenceParallel(int layer, const MicrobatchId& id, const T* x, T* out,
                                            LayerActivations<T>* saved);
  absl::Status LayerBackwardSequenceParallel(int layer, const MicrobatchId& id, const T* x,
                                             const LayerActivations<T>& saved, T* d_out, T* d_x);
  absl::Status PostNormLayerForwardSequenceParallel(int layer, const MicrobatchId& id, const T* x,
                                                    T* out, LayerActivations<T>* saved);
  absl::Status PostNormLayerBackwardSequenceParallel(int layer, const MicrobatchId& id, const T* x,
                                                     const LayerActivations<T>& saved, T* d_out,
                                                     T* d_x);
  // The two branches under sequence parallelism: `in` and `out` are this rank's rows [R, C];
  // `in` is gathered for the column-parallel GEMM (again in the backward, for the weight
  // gradients), the row-parallel GEMM's partial output reduce-scattered into `out`. The
  // backwards take the gradient of `out` (this rank's rows) and leave the gradient of `in`
  // (this rank's rows) in sp_rows_.
  absl::Status AttentionBranchForwardSequenceParallel(int layer, const MicrobatchId& id,
                                                      const T* in, T* out, LayerActivations<T>* s);
  absl::Status MlpBranchForwardSequenceParallel(int layer, const MicrobatchId& id, const T* in,
                                                T* out, LayerActivations<T>* s);
  absl::Status AttentionBranchBackwardSequenceParallel(int layer, const MicrobatchId& id,
                                                       const T* in, const LayerActivations<T>& s,
                                                       const T* d_out);
  absl::Status MlpBranchBackwardSequenceParallel(int layer, const MicrobatchId& id, const T* in,
                                                 const LayerActivations<T>& s, const T* d_out);
  // The branches' ends under sequence parallelism. GatheredColumnForward: out_cols[N, cols]
  // = gather(in) W^T + b. ScatteredRowForward: out (this rank's rows) = the dropout of the
  // reduce-scattered in_cols W^T, plus b. GatheredOutputGradient: the gradient of such an
  // `out` through its dropout, gathered into d_branch_. ScatteredColumnBackward: the
  // column-parallel GEMM's weight gradients (`in` gathered again) and its input's gradient
  // reduce-scattered into sp_rows_.
  absl::Status GatheredColumnForward(const T* in, const T* weight, const T* bias, T* out_cols,
                                     int cols);
  absl::Status ScatteredRowForward(const MicrobatchId& id, int global_layer, int site,
                                   const T* in_cols, const T* weight, const T* bias, int cols,
                                   T* out);
  absl::Status GatheredOutputGradient(const MicrobatchId& id, int global_layer, int site,
                                      const T* d_out);
  absl::Status ScatteredColumnBackward(const T* d_cols, const T* in, const T* weight, T* d_weight,
                                       T* d_bias, int cols);
  // The attention core's output and log-sum-exp for the backward of the layer that saved
  // `s`: its own, or under selective recomputation recomputed from its QKV (same dropout
  // key: the forward's bit for bit) into the model's buffers.
  std::pair<const T*, const T*> AttentionCoreFor(const LayerActivations<T>& s,
                                                 const cpu::AttentionShape& shape,
                                                 const cpu::AttentionDropout& dropout);
  // Sums local layer `layer`'s LayerNorm gradients (kFinalNorm: the final LayerNorm's,
  // kEmbeddingNorm: BERT's embedding LayerNorm under post) over the tensor group: under
  // sequence parallelism each rank computed them from its rows.
  static constexpr int kFinalNorm = -1;
  static constexpr int kEmbeddingNorm = -2;
  absl::Status SumLayerNormGradients(int layer);
  cpu::VocabShard VocabShardOf(int rows) const;
  // This rank's heads (and key-value heads) for the attention core.
  cpu::AttentionShape LocalAttentionShape() const;
  uint64_t DropoutKeyFor(const MicrobatchId& id, int global_layer, int site) const;
  // A linear layer's weight gradient (d_weight += d_out^T @ in, d_bias += column sums):
  // now, or kept in deferring_->deferred during a BackwardInput.
  void LinearWeightGradient(const T* d_out, const T* in, T* d_weight, T* d_bias, int rows,
                            int in_features, int out_features);
  // Whether a BackwardInput leaves `tensor`'s gradient to BackwardWeight (the layers'
  // linear weights and biases).
  bool DeferredByBackwardInput(const ParamTensor& tensor) const;
  void AllocateScratch();
  // Whether local layer l keeps no activations (full recomputation), and whether the
  // residual stream's input of layer l (l == num_layers: the chunk's output) is kept.
  bool Recomputed(int l) const;
  bool KeepsInput(int l) const;
  // The first local layer of l's recomputation group.
  int GroupStart(int l) const;

  const ParameterLayout& layout_;
  const ModelShape shape_;
  const ModelPlacement placement_;
  const int batch_;
  const ModelOptions options_;
  TensorParallelGroup<T> tp_;
  // Sequence parallelism: this rank's rows of the residual stream, from row_offset_.
  const bool sequence_parallel_;
  const int local_rows_;
  const int row_offset_;
  std::vector<T> owned_params_, owned_grads_;  // empty with shared buffers
  T* params_;
  T* grads_;
  // Rotary positions' angles for every position (empty with learned positions).
  cpu::RotaryTable rotary_;
  ModelView<T> p_;  // views into params_
  ModelView<T> g_;  // views into grads_
  // The tensors reported to GradReadyHook: per local layer, the head's (final LayerNorm),
  // and the embeddings (null when absent).
  std::vector<std::vector<const ParamTensor*>> layer_tensors_;
  std::vector<const ParamTensor*> head_tensors_;
  // The token embedding (reported by the stage that finishes its gradient), and the first
  // stage's other tensors: positions, and BERT's token types and embedding LayerNorm.
  const ParamTensor* wte_tensor_ = nullptr;
  std::vector<const ParamTensor*> embedding_tensors_;
  // BERT: the real positions of each sequence of the microbatch being run (its
  // Activations' lengths), for the attention core; null for the decoders.
  const int32_t* lengths_ = nullptr;
  // Backward temporaries, shared by all microbatches (one backward runs at a time);
  // allocated by the first Forward or Backward.
  bool scratch_allocated_ = false;
  // Full recomputation: one activation set and input per layer of a group (the group's
  // forwards rerun into them before its backwards), and the forward's two alternating
  // buffers for the inputs a group does not keep.
  std::vector<std::unique_ptr<LayerActivations<T>>> recompute_scratch_;
  std::vector<std::vector<T>> group_io_, forward_io_;
  // Selective recomputation: the attention core's output and log-sum-exp of the layer
  // being run (forward) or differentiated (backward).
  std::vector<T> core_y_, core_lse_;
  // Sequence parallelism: one [R, C] block of this rank's rows and one [N, C] whole, and
  // a layer's LayerNorm gradients packed for their sum over the tensor group.
  std::vector<T> sp_rows_, sp_full_, layer_norm_sums_;
  std::vector<T> d_ln_, d_fc_, d_gelu_, d_qkv_, d_attn_y_, d_branch_;
  // Backward: the residual gradient and the one below it (swapped layer by layer), the
  // logits' gradient.
  std::vector<T> d_residual_, d_residual_below_, d_logits_;
  // BERT's heads' backward temporaries.
  std::vector<T> d_mlm_a_, d_mlm_b_, d_pooled_, d_sop_logits_;
  // The activations of the BackwardInput running (its weight gradients go there); null in
  // a whole Backward.
  Activations<T>* deferring_ = nullptr;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_DECODER_MODEL_H_
