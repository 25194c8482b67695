// The GPT-2 model of one rank: forward and backward written out layer by layer (no
// autograd), over the parameters and gradients of a ParameterLayout.
//
// Per transformer layer (pre-LN, as GPT-2):
//   h1  = x  + Dropout(Attention(LN1(x)) @ Wproj^T + bproj)
//   out = h1 + Dropout(GeLU(LN2(h1) @ Wfc^T + bfc) @ Wfcproj^T + bfcproj)
// First stage: x0 = Dropout(wte[tokens] + wpe[positions]). Last stage:
// logits = LNf(x_L) @ wte^T (tied), softmax cross-entropy with padded vocabulary columns
// excluded.
//
// Tensor parallelism enters only through `TensorParallelOps` at Megatron's conjugate
// points (all-reduce after the row-parallel GEMMs in forward, all-reduce of the input
// gradients of the column-parallel GEMMs in backward, the vocab-parallel embedding and
// cross-entropy scalars); with one tensor rank they are never called.
//
// With recompute on, a layer keeps only its input and recomputes the rest in backward,
// with the same dropout masks (counter-based), so results are bit-identical either way.
//
// Usage (one microbatch, whole model):
//   GptModel<float> model(layout, micro_batch, options);
//   InitializeParameters(layout, seed, model.params());
//   auto acts = model.NewActivations();
//   ASSIGN_OR_RETURN(double loss_sum, model.Forward(in, acts.get()));
//   RETURN_IF_ERROR(model.Backward(acts.get(), nullptr, 1.0 / tokens, nullptr));
#ifndef MTRAIN_WORKER_ENGINE_GPT_MODEL_H_
#define MTRAIN_WORKER_ENGINE_GPT_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/activations.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {

enum class ReduceOp { kSum, kMax };

// Collectives over this rank's tensor-parallel group. Unused when tensor_size == 1.
template <typename T>
struct TensorParallelOps {
  std::function<absl::Status(T* data, size_t count, ReduceOp op)> all_reduce;
};

struct ModelOptions {
  float dropout = 0.0f;
  bool recompute = false;
  uint64_t seed = 0;
};

template <typename T>
struct MicrobatchInput {
  MicrobatchId id;
  const int32_t* tokens = nullptr;    // [B, S]; first stage only
  const int32_t* targets = nullptr;   // [B, S]; last stage only
  const T* hidden_in = nullptr;       // [B, S, C]; stages after the first
};


template <typename T>
class GptModel {
 public:
  // `layout` must outlive the model. `micro_batch` is B.
  GptModel(const ParameterLayout& layout, int micro_batch, ModelOptions options,
           TensorParallelOps<T> tensor_ops = {});
  ~GptModel();

  T* params() { return params_.data(); }
  T* grads() { return grads_.data(); }
  const T* params() const { return params_.data(); }
  const T* grads() const { return grads_.data(); }
  size_t num_params() const { return params_.size(); }
  const ParameterLayout& layout() const { return layout_; }
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
  absl::Status Backward(Activations<T>* acts, const T* d_hidden_out, T d_loss_per_token,
                        T* d_hidden_in = nullptr);

  // The logits of the last Forward (last stage): [B*S, V_local], padded columns included.
  const T* logits(const Activations<T>& acts) const;

 private:
  absl::Status AllReduce(T* data, size_t count, ReduceOp op);
  absl::Status LayerForward(int layer, const MicrobatchId& id, const T* x, T* out,
                            LayerActivations<T>* saved);
  absl::Status LayerBackward(int layer, const MicrobatchId& id, const T* x,
                             const LayerActivations<T>& saved, T* d_out, T* d_x);
  uint64_t DropoutKeyFor(const MicrobatchId& id, int global_layer, int site) const;

  const ParameterLayout& layout_;
  const ModelShape shape_;
  const ModelPlacement placement_;
  const int batch_;
  const ModelOptions options_;
  TensorParallelOps<T> tensor_ops_;
  std::vector<T> params_;
  std::vector<T> grads_;
  ModelView<T> p_;  // views into params_
  ModelView<T> g_;  // views into grads_
  // Backward temporaries, shared by all microbatches (one backward runs at a time).
  std::unique_ptr<LayerActivations<T>> recompute_scratch_;
  std::vector<T> d_ln_, d_fc_, d_gelu_, d_qkv_, d_attn_y_, d_branch_, d_att_scratch_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_GPT_MODEL_H_
