// The GPT-2 model of worker/engine/gpt_model.h on one GPU: the same layers, parameter
// layout, dropout masks and recomputation, written out with the CUDA kernels of
// kernels/cuda (cuBLASLt GEMMs with bias and bias+GeLU epilogues, fused LayerNorm,
// flash attention, fused cross-entropy, deterministic embedding gradients).
//
// T is the type of the parameters the layers read and of the activations: float (fp32
// training, checked against the CPU model), __nv_bfloat16 or __half (mixed precision: a
// 16-bit copy of fp32 master weights; fp16 with loss scaling by the caller). Parameter gradients are always fp32 ("main grads"), whatever T.
//
// One rank holding the whole model (tensor = pipeline = 1); the data-parallel replicas
// each run one. Everything is enqueued on one stream; Forward and Backward return once
// the work is enqueued (errors of kernels show up at the next synchronisation).
//
//   ASSIGN_OR_RETURN(auto model, CudaGptModel<T>::Create(layout, B, options, params, grads,
//                                                        blas, stream));
//   RETURN_IF_ERROR(model->Forward(id, tokens, targets, losses));  // losses: device [B*S]
//   RETURN_IF_ERROR(model->Backward(1.0f / global_tokens));        // grads += ...
#ifndef MTRAIN_WORKER_ENGINE_CUDA_CUDA_GPT_MODEL_H_
#define MTRAIN_WORKER_ENGINE_CUDA_CUDA_GPT_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/activations.h"
#include "worker/engine/cuda/device_buffer.h"
#include "worker/engine/gpt_model.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain::cuda {

// What one layer's backward needs from its forward, on the device.
template <typename T>
struct CudaLayerActivations {
  DeviceBuffer<T> ln1, qkv, attn_y, h1, ln2, fc, gelu;
  DeviceBuffer<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, lse;
};

template <typename T>
class CudaGptModel {
 public:
  // `params` (T) and `grads` (float) are device buffers laid out as `layout`, which must
  // outlive the model; so must `blas`. INVALID_ARGUMENT unless the layout holds the whole
  // model on one tensor rank; RESOURCE_EXHAUSTED if the activations do not fit.
  static absl::StatusOr<std::unique_ptr<CudaGptModel>> Create(const ParameterLayout& layout,
                                                              int micro_batch,
                                                              const ModelOptions& options,
                                                              const T* params, float* grads,
                                                              CublasLt* blas, cudaStream_t stream);

  // Forward of one microbatch (tokens and targets on the host, [B*S] each): writes the
  // per-token losses into `losses` (device, float [B*S]) and keeps what Backward needs.
  absl::Status Forward(const MicrobatchId& id, const int32_t* tokens, const int32_t* targets,
                       float* losses);
  // Called during Backward once a layer's gradient work is enqueued (its index), and with
  // -1 once the embeddings' is: from then on that part of the gradients is final for this
  // backward (the data-parallel all-reduce of the last microbatch starts from it).
  using LayerDoneHook = std::function<absl::Status(int layer)>;

  // Backward of the last Forward, seeded with the derivative of the step's loss with
  // respect to each token's loss; accumulates (+=) into the gradients.
  absl::Status Backward(float d_loss_per_token, const LayerDoneHook* on_layer_done = nullptr);

  // The logits of the last Forward: device [B*S, padded vocab].
  const T* logits() const { return logits_.get(); }

 private:
  CudaGptModel(const ParameterLayout& layout, int micro_batch, const ModelOptions& options,
               CublasLt* blas, cudaStream_t stream);
  absl::Status Allocate();
  absl::Status LayerForward(int layer, const T* x, T* out, CudaLayerActivations<T>& saved);
  absl::Status LayerBackward(int layer, const T* x, const CudaLayerActivations<T>& saved,
                             T* d_out, T* d_x);
  uint64_t DropoutKeyFor(int global_layer, int site) const;

  const ParameterLayout& layout_;
  const ModelShape shape_;
  const int batch_;
  const ModelOptions options_;
  CublasLt* const blas_;
  const cudaStream_t stream_;
  ModelView<const T> p_;
  ModelView<float> g_;

  MicrobatchId id_;
  bool has_forward_ = false;
  std::vector<int32_t> host_tokens_;
  DeviceBuffer<int32_t> tokens_, targets_;
  // The embedding gradient's plan (which tokens add into which row), built in Forward.
  DeviceBuffer<int32_t> plan_rows_, plan_starts_, plan_positions_;
  int plan_num_rows_ = 0;
  // Residual stream: the input of each layer, then the output of the last.
  std::vector<DeviceBuffer<T>> layer_io_;
  // Per layer without recomputation; one scratch set with it.
  std::vector<CudaLayerActivations<T>> saved_;
  // Head.
  DeviceBuffer<T> lnf_, logits_, d_logits_;
  DeviceBuffer<float> lnf_mean_, lnf_rstd_, ce_max_, ce_sum_exp_, ce_target_;
  // Backward temporaries.
  DeviceBuffer<T> d_x_, d_below_, d_ln_, d_branch_, d_fc_, d_gelu_, d_qkv_, d_attn_y_, discard_;
};

}  // namespace mtrain::cuda

#endif  // MTRAIN_WORKER_ENGINE_CUDA_CUDA_GPT_MODEL_H_
