// The backward in two parts for the zero-bubble schedules (plan/zero_bubble_schedule.h):
// BackwardInput runs Backward with each layer's four linear weight gradients (QKV or Q/K/V,
// the attention's output projection, the MLP's input and output projections, with their
// biases) recorded instead of summed (each output gradient copied, each input read in the
// microbatch's saved activations where they hold it); BackwardWeight sums them later. Everything
// else (the normalisations', the embeddings', the head's) stays in BackwardInput: it is cheap, and
// the head's and the embedding's feed the pipeline's tied-embedding exchange. The GEMMs are
// the same calls in the same order per tensor (kernels/matmul.h), so the gradients equal
// Backward's bit for bit.
#include <algorithm>
#include <vector>

#include "kernels/matmul.h"
#include "worker/engine/cpu/transformer_model.h"

namespace mtrain {

template <typename T>
bool TransformerModel<T>::DeferredByBackwardInput(const ParamTensor& tensor) const {
  if (tensor.layer < 0) return false;
  switch (tensor.role) {
    case ParameterRole::kQkvWeight:
    case ParameterRole::kQkvBias:
    case ParameterRole::kQueryWeight:
    case ParameterRole::kKeyWeight:
    case ParameterRole::kValueWeight:
    case ParameterRole::kQueryBias:
    case ParameterRole::kKeyBias:
    case ParameterRole::kValueBias:
    case ParameterRole::kAttentionOutWeight:
    case ParameterRole::kAttentionOutBias:
    case ParameterRole::kMlpInWeight:
    case ParameterRole::kMlpInBias:
    case ParameterRole::kMlpGateWeight:
    case ParameterRole::kMlpUpWeight:
    case ParameterRole::kMlpOutWeight:
    case ParameterRole::kMlpOutBias:
      return true;
    default:
      return false;
  }
}

template <typename T>
void TransformerModel<T>::LinearWeightGradient(const T* d_out, const T* in, T* d_weight, T* d_bias,
                                               int rows, int in_features, int out_features) {
  if (deferring_ == nullptr) {
    cpu::MatmulBackward<T>(d_out, in, nullptr, nullptr, d_weight, d_bias, rows, in_features,
                           out_features);
    return;
  }
  DeferredWeightGradient<T> job;
  job.d_out.assign(d_out, d_out + static_cast<size_t>(rows) * out_features);
  const size_t in_elements = static_cast<size_t>(rows) * in_features;
  if (deferring_->Holds(in, in_elements)) {
    job.in_held = in;  // the set keeps it until BackwardWeight
  } else {
    job.in.assign(in, in + in_elements);
  }
  job.d_weight = d_weight;
  job.d_bias = d_bias;
  job.rows = rows;
  job.in_features = in_features;
  job.out_features = out_features;
  deferring_->deferred.push_back(std::move(job));
}

template <typename T>
absl::Status TransformerModel<T>::BackwardInput(Activations<T>* acts, const T* d_hidden_out,
                                                T d_loss_per_token, T* d_hidden_in,
                                                const GradReadyHook* on_grad_ready) {
  acts->deferred.clear();
  deferring_ = acts;
  const absl::Status status =
      Backward(acts, d_hidden_out, d_loss_per_token, d_hidden_in, on_grad_ready);
  deferring_ = nullptr;
  return status;
}

template <typename T>
absl::Status TransformerModel<T>::BackwardWeight(Activations<T>* acts,
                                                 const GradReadyHook* on_grad_ready) {
  for (const DeferredWeightGradient<T>& job : acts->deferred) {
    cpu::MatmulBackward<T>(job.d_out.data(), job.input(), nullptr, nullptr, job.d_weight,
                           job.d_bias, job.rows, job.in_features, job.out_features);
  }
  acts->deferred.clear();
  acts->deferred.shrink_to_fit();
  if (on_grad_ready != nullptr) {
    // In the order Backward reports layers: the last first.
    for (int l = placement_.num_layers - 1; l >= 0; --l) {
      for (const ParamTensor* tensor : layer_tensors_[l]) {
        if (DeferredByBackwardInput(*tensor)) (*on_grad_ready)(*tensor);
      }
    }
  }
  return absl::OkStatus();
}

// Only the members defined here: the class itself is instantiated in transformer_model.cc.
#define MTRAIN_INSTANTIATE_SPLIT_BACKWARD(T)                                                    \
  template bool TransformerModel<T>::DeferredByBackwardInput(const ParamTensor&) const;         \
  template void TransformerModel<T>::LinearWeightGradient(const T*, const T*, T*, T*, int, int, \
                                                          int);                                 \
  template absl::Status TransformerModel<T>::BackwardInput(Activations<T>*, const T*, T, T*,    \
                                                           const GradReadyHook*);               \
  template absl::Status TransformerModel<T>::BackwardWeight(Activations<T>*, const GradReadyHook*);
MTRAIN_INSTANTIATE_SPLIT_BACKWARD(float)
MTRAIN_INSTANTIATE_SPLIT_BACKWARD(double)
#undef MTRAIN_INSTANTIATE_SPLIT_BACKWARD

}  // namespace mtrain
