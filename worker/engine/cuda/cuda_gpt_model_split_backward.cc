// The backward in two parts for the zero-bubble schedules (plan/zero_bubble_schedule.h), as
// worker/engine/cpu/transformer_model_split_backward.cc does it on the CPU: BackwardInput
// runs Backward with each layer's four linear weight gradients recorded instead of added
// (the output gradient copied on the stream, the input read where the microbatch's saved
// activations hold it); BackwardWeight adds them later. The normalisations', embeddings'
// and head's gradients stay in BackwardInput: they are cheap, and the head's and
// embedding's feed the pipeline's tied-embedding exchange. The GEMMs are the same
// MatmulBackward calls in the same order per tensor, so the gradients equal Backward's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/cuda/cuda_gpt_model.h"

namespace mtrain::cuda {

template <typename T>
absl::Status CudaGptModel<T>::LinearBackward(int layer, const T* d_out, const T* in,
                                             const T* weight, T* d_in, float* d_weight,
                                             float* d_bias, int rows, int in_features,
                                             int out_features) {
  if (deferring_ == nullptr) {
    return MatmulBackward<T>(*blas_, d_out, in, weight, d_in, d_weight, d_bias, rows, in_features,
                             out_features, stream_, /*accumulate_d_in=*/false);
  }
  RETURN_IF_ERROR(MatmulBackward<T>(*blas_, d_out, in, weight, d_in, nullptr, nullptr, rows,
                                    in_features, out_features, stream_,
                                    /*accumulate_d_in=*/false));
  return DeferWeightGradient(layer, d_out, in, d_weight, d_bias, rows, in_features, out_features);
}

template <typename T>
absl::Status CudaGptModel<T>::DeferWeightGradient(int layer, const T* d_out, const T* in,
                                                  float* d_weight, float* d_bias, int rows,
                                                  int in_features, int out_features) {
  CudaActivations<T>& acts = *deferring_;
  if (acts.deferred_count == acts.deferred.size()) acts.deferred.emplace_back();
  CudaDeferredWeightGradient<T>& job = acts.deferred[acts.deferred_count++];
  const size_t out_elements = static_cast<size_t>(rows) * out_features;
  const size_t in_elements = static_cast<size_t>(rows) * in_features;
  // The buffers of an earlier step's job in this slot are reused (the same layer and shape
  // every step); a larger need gets new ones (their first use: stream-ordered copies below).
  if (job.d_out.size() < out_elements) {
    ASSIGN_OR_RETURN(job.d_out, DeviceBuffer<T>::Create(
                                    out_elements, "a deferred weight gradient's output gradient"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(job.d_out.get(), d_out, out_elements * sizeof(T),
                                             cudaMemcpyDeviceToDevice, stream_),
                             "keeping an output gradient for the weight gradient"));
  if (acts.Holds(in, in_elements)) {
    job.in_held = in;  // the set keeps it until BackwardWeight
  } else {
    job.in_held = nullptr;
    if (job.in.size() < in_elements) {
      ASSIGN_OR_RETURN(job.in,
                       DeviceBuffer<T>::Create(in_elements, "a deferred weight gradient's input"));
    }
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(job.in.get(), in, in_elements * sizeof(T),
                                               cudaMemcpyDeviceToDevice, stream_),
                               "keeping an input for the weight gradient"));
  }
  job.layer = layer;
  job.d_weight = d_weight;
  job.d_bias = d_bias;
  job.rows = rows;
  job.in_features = in_features;
  job.out_features = out_features;
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaGptModel<T>::BackwardInput(CudaActivations<T>* acts, const T* d_hidden_out,
                                            float d_loss_per_token, T* d_hidden_in,
                                            const LayerDoneHook* on_layer_done) {
  if (acts->weights_owed) {
    return absl::FailedPreconditionError(
        "BackwardInput of a microbatch whose BackwardWeight has not run");
  }
  // The layers' gradients are final only after BackwardWeight: Backward's per-layer reports
  // are held back, the rest's (-1) passed on. A hook still given makes Backward sum the
  // sequence-parallel LayerNorm gradients, which this part finalises.
  const LayerDoneHook only_the_rest = [on_layer_done](int layer) -> absl::Status {
    return layer < 0 ? (*on_layer_done)(layer) : absl::OkStatus();
  };
  acts->deferred_count = 0;
  deferring_ = acts;
  const absl::Status status = Backward(acts, d_hidden_out, d_loss_per_token, d_hidden_in,
                                       on_layer_done != nullptr ? &only_the_rest : nullptr);
  deferring_ = nullptr;
  RETURN_IF_ERROR(status);
  acts->weights_owed = true;
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaGptModel<T>::BackwardWeight(CudaActivations<T>* acts,
                                             const LayerDoneHook* on_layer_done) {
  if (!acts->weights_owed) {
    return absl::FailedPreconditionError("BackwardWeight without its BackwardInput");
  }
  acts->weights_owed = false;
  const size_t count = acts->deferred_count;
  acts->deferred_count = 0;
  // Jobs come layer by layer, the last layer first (Backward's order), four a layer: a
  // layer is done when the next job belongs to another.
  for (size_t k = 0; k < count; ++k) {
    const CudaDeferredWeightGradient<T>& job = acts->deferred[k];
    RETURN_IF_ERROR(MatmulBackward<T>(*blas_, job.d_out.get(), job.input(), /*weight=*/nullptr,
                                      /*d_in=*/nullptr, job.d_weight, job.d_bias, job.rows,
                                      job.in_features, job.out_features, stream_));
    const bool layer_done = k + 1 == count || acts->deferred[k + 1].layer != job.layer;
    if (layer_done && on_layer_done != nullptr) RETURN_IF_ERROR((*on_layer_done)(job.layer));
  }
  return absl::OkStatus();
}

// Only the members defined here: the class itself is instantiated in cuda_gpt_model.cc.
#define MTRAIN_INSTANTIATE_CUDA_SPLIT_BACKWARD(T)                                                \
  template absl::Status CudaGptModel<T>::LinearBackward(int, const T*, const T*, const T*, T*,   \
                                                        float*, float*, int, int, int);          \
  template absl::Status CudaGptModel<T>::DeferWeightGradient(int, const T*, const T*, float*,    \
                                                             float*, int, int, int);             \
  template absl::Status CudaGptModel<T>::BackwardInput(CudaActivations<T>*, const T*, float, T*, \
                                                       const LayerDoneHook*);                    \
  template absl::Status CudaGptModel<T>::BackwardWeight(CudaActivations<T>*, const LayerDoneHook*);
MTRAIN_INSTANTIATE_CUDA_SPLIT_BACKWARD(float)
MTRAIN_INSTANTIATE_CUDA_SPLIT_BACKWARD(__nv_bfloat16)
MTRAIN_INSTANTIATE_CUDA_SPLIT_BACKWARD(__half)
#undef MTRAIN_INSTANTIATE_CUDA_SPLIT_BACKWARD

}  // namespace mtrain::cuda
