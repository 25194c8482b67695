// The decoder model of one rank, GPT-2 or Llama-style (model/'s TransformerConfig): forward
// and backward written out layer by layer (no autograd), over the parameters and gradients
// of a ParameterLayout.
//
// Per transformer layer (pre-norm):
//   h1  = x  + Dropout(Attention(Norm1(x)) @ Wproj^T + bproj)
//   out = h1 + Dropout(Act(Norm2(h1) @ Win^T + bin) @ Wout^T + bout)
// GPT-2: LayerNorm, tanh GeLU on fc, learned positions, multi-head attention, biases.
// Llama: RMSNorm, SwiGLU on [gate | up], rotary q and k, grouped-query heads, optional
// biases (layer_blocks.h holds where the two differ). First stage: x0 = Dropout(wte[tokens]
// (+ wpe[positions])). Last stage: logits = NormF(x_L) @ W^T, W the untied output layer or
// wte (tied), softmax cross-entropy with padded vocabulary columns excluded.
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
//   GptModel<float> model(layout, micro_batch, options);
//   InitializeParameters(layout, seed, model.params());
//   auto acts = model.NewActivations();
//   ASSIGN_OR_RETURN(double loss_sum, model.Forward(in, acts.get()));
//   RETURN_IF_ERROR(model.Backward(acts.get(), nullptr, 1.0 / tokens, nullptr));
#ifndef MTRAIN_WORKER_ENGINE_CPU_GPT_MODEL_H_
#define MTRAIN_WORKER_ENGINE_CPU_GPT_MODEL_H_

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
#include "worker/engine/parameter_layout.h"
#include "worker/parallel/tensor_parallel.h"

namespace mtrain {

struct ModelOptions {
  float dropout = 0.0f;
  bool recompute = false;            // full recomputation
  int recompute_group = 1;           // full, uniform: layers recomputed together from one input
  int recompute_block = -1;          // full, block (>= 0): only the chunk's first this many layers
  bool selective_recompute = false;  // the attention core only
  // Sequence parallelism (gpt_model_sequence_parallel.cc; needs a tensor group of t > 1
  // and B * S % t == 0): the residual stream, and hidden_in / hidden_out, hold this tensor
  // rank's R = B * S / t rows.
  bool sequence_parallel = false;
  uint64_t seed = 0;
};

template <typename T>
struct MicrobatchInput {
  MicrobatchId id;
  const int32_t* tokens = nullptr;   // [B, S]; first stage only
  const int32_t* targets = nullptr;  // [B, S]; last stage only
  const T* hidden_in = nullptr;      // [B, S, C]; stages after the first
  TokenOutputs* outputs = nullptr;   // last stage, evaluation: each token's loss and argmax
};

// Buffers shared with other model chunks of the rank; offsets come from the layout.
template <typename T>
struct SharedParameterBuffers {
  T* params = nullptr;
  T* grads = nullptr;
};

// Called during Backward for each parameter tensor whose gradient this backward will not
// touch again (after its layer, the head or the embedding is done): the data-parallel
// gradient buckets start their all-reduce from it.
using GradReadyHook = std::function<void(const ParamTensor& tensor)>;

template <typename T>
class GptModel {
 public:
  // `layout` must outlive the model. `micro_batch` is B. Without `shared` buffers the model
  // owns buffers of layout.end_offset() elements.
  GptModel(const ParameterLayout& layout, int micro_batch, ModelOptions options,
           TensorParallelGroup<T> tensor_group = {}, SharedParameterBuffers<T> shared = {});
  ~GptModel();

  // Base of the parameter (gradient) buffer: tensor t is at params() + t.offset.
  T* params() { return params_; }
  T* grads() { return grads_; }
  const T* params() const { return params_; }
  const T* grads() const { return grads_; }
  // Elements of the buffer up to this model's last tensor.
  size_t num_params() const { return layout_.end_offset(); }
  const ParameterLayout& layout() const { return layout_; }
  // Zeroes this model's gradients (its layout's range only).
  void ZeroGrads();

  std::unique_ptr<Activations<T>> NewActivations() const;

  // Runs this rank's part of the forward pass. On the last stage returns the SUM of the
  // per-token losses of the microbatch (0 elsewhere). Stages before the last leave their
  // output in `hidden_out` ([B, S, C]).
  absl::StatusOr<double> Forward(const MicrobatchInput<T>& input, Activations<T>* acts,
                                 T* hidden_out = nullptr);

  // Backward of the last Forward on `acts`; accumulates parameter gradients. The last
  // stage seeds it with d_loss_per_token (the derivative of the step's loss with respect to
  // each token's loss); other stages take d_hidden_out from the next stage. Stages after
  // the first write the gradient of their input into d_hidden_in.
  // `on_grad_ready`, if given, is called for each of this model's tensors as its gradient
  // becomes final for this backward.
  absl::Status Backward(Activations<T>* acts, const T* d_hidden_out, T d_loss_per_token,
                        T* d_hidden_in = nullptr, const GradReadyHook* on_grad_ready = nullptr);

  // The logits of the last Forward (last stage): [B*S, V_local], padded columns included.
  const T* logits(const Activations<T>& acts) const;

  // ---- Generation with a key-value cache (gpt_model_decode.cc), one sequence at a time.
  // Each of this rank's layers keeps the keys and values of its heads for every position
  // run so far, so a new token costs one row through the model instead of the whole
  // context again.
  struct KvCache {
    int capacity = 0;                          // positions it can hold
    int length = 0;                            // positions cached so far
    std::vector<std::vector<T>> keys, values;  // per local layer: [capacity, local hidden]
  };
  KvCache NewKvCache(int capacity) const;
  // Runs positions [cache->length, cache->length + count) of the sequence (no dropout):
  // `tokens` [count] on a chunk with the embeddings, else `hidden_in` [count, C]; appends
  // their keys and values; writes `out`: [count, C] hidden states on a chunk without the
  // head, else the logits of the LAST new position over this rank's vocabulary shard
  // [V_local] (padded columns included). Collective over the tensor group.
  // OUT_OF_RANGE past the cache's capacity or model.seq_length.
  absl::Status Decode(KvCache* cache, const int32_t* tokens, const T* hidden_in, int count, T* out);

 private:
  absl::Status LayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                            LayerActivations<T>* saved);
  absl::Status LayerBackward(int layer, const MicrobatchId& id, const T* x,
                             const LayerActivations<T>& saved, T* d_out, T* d_x);
  // Under sequence parallelism (gpt_model_sequence_parallel.cc): x, out, d_out and d_x are
  // this rank's rows.
  absl::Status LayerForwardSequenceParallel(int layer, const MicrobatchId& id, const T* x, T* out,
                                            LayerActivations<T>* saved);
  absl::Status LayerBackwardSequenceParallel(int layer, const MicrobatchId& id, const T* x,
                                             const LayerActivations<T>& saved, T* d_out, T* d_x);
  // The attention core's output and log-sum-exp for the backward of the layer that saved
  // `s`: its own, or under selective recomputation recomputed from its QKV (same dropout
  // key: the forward's bit for bit) into the model's buffers.
  std::pair<const T*, const T*> AttentionCoreFor(const LayerActivations<T>& s,
                                                 const cpu::AttentionShape& shape,
                                                 const cpu::AttentionDropout& dropout);
  // Sums local layer `layer`'s LayerNorm gradients (-1: the final LayerNorm's) over the
  // tensor group: under sequence parallelism each rank computed them from its rows.
  absl::Status SumLayerNormGradients(int layer);
  cpu::VocabShard VocabShardOf(int rows) const;
  // This rank's heads (and key-value heads) for the attention core.
  cpu::AttentionShape LocalAttentionShape() const;
  uint64_t DropoutKeyFor(const MicrobatchId& id, int global_layer, int site) const;
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
  const ParamTensor* wte_tensor_ = nullptr;
  const ParamTensor* wpe_tensor_ = nullptr;
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
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_GPT_MODEL_H_
