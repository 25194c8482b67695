// What the CPU rank holds of each of its model chunks (one without interleaving, v with
// it): a family's layer code behind one interface, so that the rank's stages, its engine
// and generation run any family without naming one. Today TransformerModel (transformer_model.h)
// implements it for GPT-2 and Llama-style decoders; NewModelChunk (model_chunk_factory.h)
// is the one place a family picks its implementation.
//
//   std::unique_ptr<ModelChunk<float>> chunk = NewModelChunk<float>(layout, B, options);
//   auto acts = chunk->NewActivations();
//   ASSIGN_OR_RETURN(double loss_sum, chunk->Forward(input, acts.get()));
//   RETURN_IF_ERROR(chunk->Backward(acts.get(), nullptr, 1.0 / tokens));
#ifndef MTRAIN_WORKER_ENGINE_CPU_MODEL_CHUNK_H_
#define MTRAIN_WORKER_ENGINE_CPU_MODEL_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/cpu/activations.h"
#include "worker/engine/model_options.h"
#include "worker/engine/parameter_layout.h"
#include "worker/parallel/microbatch.h"

namespace mtrain {

template <typename T>
struct MicrobatchInput {
  MicrobatchId id;
  const int32_t* tokens = nullptr;   // [B, S]; first stage only
  const int32_t* targets = nullptr;  // [B, S]; last stage only
  const T* hidden_in = nullptr;      // [B, S, C]; stages after the first
  TokenOutputs* outputs = nullptr;   // last stage, evaluation: each token's loss and argmax
  // BERT (model.family BERT). `targets` then hold the masked-LM labels: the original token
  // at each masked position, -1 elsewhere (no loss).
  const int32_t* token_types = nullptr;     // [B, S] segment A (0) or B (1); first stage
  const int32_t* lengths = nullptr;         // [B] real positions of each sequence; every stage
  const int32_t* sentence_order = nullptr;  // [B] 0 in order, 1 swapped; last stage
  // The sentence-order loss enters the step's loss per sequence, not per token: Backward
  // seeds it with this (the derivative of the step's loss with respect to one sequence's
  // loss), and Forward adds the microbatch's sentence-order losses and both heads' correct
  // predictions here (may be null).
  T d_loss_per_sequence = 0;
  BertHeadTotals* bert_totals = nullptr;
  // The multiple-choice head (model.bert_head BERT_HEAD_MULTIPLE_CHOICE) instead of the
  // sentence order: each question's correct option ([B / kRaceChoices], -1 padding); Forward
  // returns the questions' summed cross-entropy and Backward seeds each with
  // d_loss_per_token.
  const int32_t* choice_answers = nullptr;
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

// Generation's key-value cache of one sequence: each of the chunk's layers keeps the keys
// and values of its key-value heads for every position run so far.
template <typename T>
struct KvCache {
  int capacity = 0;                          // positions it can hold
  int length = 0;                            // positions cached so far
  std::vector<std::vector<T>> keys, values;  // per local layer: [capacity, local kv width]
};

template <typename T>
class ModelChunk {
 public:
  virtual ~ModelChunk() = default;

  // Base of the parameter (gradient) buffer: tensor t is at params() + t.offset.
  virtual T* params() = 0;
  virtual T* grads() = 0;
  virtual const T* params() const = 0;
  virtual const T* grads() const = 0;
  // Elements of the buffer up to this chunk's last tensor.
  virtual size_t num_params() const = 0;
  virtual const ParameterLayout& layout() const = 0;
  // Zeroes this chunk's gradients (its layout's range only).
  virtual void ZeroGrads() = 0;

  virtual std::unique_ptr<Activations<T>> NewActivations() const = 0;

  // This rank's part of the forward pass of one microbatch. On the last stage returns the
  // SUM of the per-token losses (0 elsewhere); stages before the last leave their output in
  // `hidden_out` ([B, S, C], this rank's rows under sequence parallelism).
  virtual absl::StatusOr<double> Forward(const MicrobatchInput<T>& input, Activations<T>* acts,
                                         T* hidden_out = nullptr) = 0;

  // Backward of the last Forward on `acts`; accumulates parameter gradients. The last
  // stage seeds it with d_loss_per_token (the derivative of the step's loss with respect to
  // each token's loss); other stages take d_hidden_out from the next stage. Stages after
  // the first write the gradient of their input into d_hidden_in. `on_grad_ready`, if
  // given, is called for each of this chunk's tensors as its gradient becomes final.
  virtual absl::Status Backward(Activations<T>* acts, const T* d_hidden_out, T d_loss_per_token,
                                T* d_hidden_in = nullptr,
                                const GradReadyHook* on_grad_ready = nullptr) = 0;

  // A split backward (zero-bubble schedules, plan/zero_bubble_schedule.h): BackwardInput is
  // Backward with the layers' linear weight gradients left in `acts` (everything else,
  // d_hidden_in included, as Backward); BackwardWeight later adds them. `acts` lives until
  // then. The two give Backward's gradients bit for bit; `on_grad_ready` sees each tensor
  // once, when its part is done.
  virtual absl::Status BackwardInput(Activations<T>* acts, const T* d_hidden_out,
                                     T d_loss_per_token, T* d_hidden_in = nullptr,
                                     const GradReadyHook* on_grad_ready = nullptr) = 0;
  virtual absl::Status BackwardWeight(Activations<T>* acts,
                                      const GradReadyHook* on_grad_ready = nullptr) = 0;

  // The logits of the last Forward (last stage): [B*S, V_local], padded columns included.
  virtual const T* logits(const Activations<T>& acts) const = 0;

  // ---- Generation, one sequence at a time.
  virtual KvCache<T> NewKvCache(int capacity) const = 0;
  // Runs positions [cache->length, cache->length + count) of the sequence (no dropout):
  // `tokens` [count] on a chunk with the embeddings, else `hidden_in` [count, C]; appends
  // their keys and values; writes `out`: [count, C] hidden states on a chunk without the
  // head, else the logits of the LAST new position over this rank's vocabulary shard
  // [V_local] (padded columns included). Collective over the tensor group.
  // OUT_OF_RANGE past the cache's capacity or model.seq_length.
  virtual absl::Status Decode(KvCache<T>* cache, const int32_t* tokens, const T* hidden_in,
                              int count, T* out) = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_MODEL_CHUNK_H_
