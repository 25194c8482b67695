#include "worker/engine/cuda/cuda_engine.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/grad_scale.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/cuda/cuda_gpt_model.h"

namespace mtrain::cuda {

// The model of the configured precision with its cuBLASLt handle.
class CudaEngine::Model {
 public:
  std::unique_ptr<CublasLt> blas;
  std::unique_ptr<CudaGptModel<float>> fp32;
  std::unique_ptr<CudaGptModel<__nv_bfloat16>> bf16;
  std::unique_ptr<CudaGptModel<__half>> fp16;

  absl::Status Forward(const MicrobatchId& id, const int32_t* tokens, const int32_t* targets,
                       float* losses) {
    if (fp32) return fp32->Forward(id, tokens, targets, losses);
    if (bf16) return bf16->Forward(id, tokens, targets, losses);
    return fp16->Forward(id, tokens, targets, losses);
  }
  absl::Status Backward(float d_loss_per_token,
                        const std::function<absl::Status(int)>* on_layer_done) {
    if (fp32) return fp32->Backward(d_loss_per_token, on_layer_done);
    if (bf16) return bf16->Backward(d_loss_per_token, on_layer_done);
    return fp16->Backward(d_loss_per_token, on_layer_done);
  }
};

CudaEngine::~CudaEngine() {
  model_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Create(const CudaEngineConfig& config) {
  if (config.layout == nullptr) return absl::InvalidArgumentError("CudaEngineConfig.layout unset");
  if (config.buffer_size < config.layout->end_offset()) {
    return absl::InvalidArgumentError(absl::StrCat("buffer_size ", config.buffer_size,
                                                   " is smaller than the layout's ",
                                                   config.layout->end_offset(), " elements"));
  }
  if (config.precision != PRECISION_FP32 && config.precision != PRECISION_BF16 &&
      config.precision != PRECISION_FP16) {
    return absl::InvalidArgumentError(
        absl::StrCat("precision: ", Precision_Name(config.precision),
                     ": the CUDA engine trains in PRECISION_FP32, PRECISION_BF16 or "
                     "PRECISION_FP16"));
  }
  int count = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceCount(&count), "counting CUDA devices"));
  if (config.device < 0 || config.device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", config.device, " does not exist (", count, " visible)"));
  }
  std::unique_ptr<CudaEngine> engine(new CudaEngine);
  engine->config_ = config;
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(config.device), "selecting the CUDA device"));
  cudaDeviceProp props{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&props, config.device), "reading the device"));
  engine->device_name_ = props.name;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&engine->stream_, cudaStreamNonBlocking),
                             "creating the compute stream"));
  const size_t n = config.buffer_size;
  ASSIGN_OR_RETURN(engine->master_, DeviceBuffer<float>::Create(n, "fp32 master weights"));
  ASSIGN_OR_RETURN(engine->grads_, DeviceBuffer<float>::Create(n, "fp32 gradients"));
  ASSIGN_OR_RETURN(engine->m_, DeviceBuffer<float>::Create(n, "AdamW first moments"));
  ASSIGN_OR_RETURN(engine->v_, DeviceBuffer<float>::Create(n, "AdamW second moments"));
  ASSIGN_OR_RETURN(engine->sum_of_squares_, DeviceBuffer<double>::Create(1, "the gradient norm"));
  ASSIGN_OR_RETURN(engine->nonfinite_, DeviceBuffer<int>::Create(1, "the inf/NaN flag"));
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(engine->m_.get(), 0, engine->m_.bytes(),
                                             engine->stream_),
                             "zeroing the moments"));
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(engine->v_.get(), 0, engine->v_.bytes(),
                                             engine->stream_),
                             "zeroing the moments"));

  auto model = std::make_unique<Model>();
  ASSIGN_OR_RETURN(model->blas, CublasLt::Create());
  if (config.precision == PRECISION_FP16) {
    ASSIGN_OR_RETURN(engine->bf16_copy_,
                     DeviceBuffer<uint16_t>::Create(n, "the fp16 copy of the weights"));
    ASSIGN_OR_RETURN(model->fp16, CudaGptModel<__half>::Create(
                                      *config.layout, config.micro_batch, config.model,
                                      reinterpret_cast<const __half*>(engine->bf16_copy_.get()),
                                      engine->grads_.get(), model->blas.get(), engine->stream_));
  } else if (config.precision == PRECISION_BF16) {
    ASSIGN_OR_RETURN(engine->bf16_copy_,
                     DeviceBuffer<uint16_t>::Create(n, "the bf16 copy of the weights"));
    ASSIGN_OR_RETURN(model->bf16, CudaGptModel<__nv_bfloat16>::Create(
                                      *config.layout, config.micro_batch, config.model,
                                      reinterpret_cast<const __nv_bfloat16*>(engine->bf16_copy_.get()),
                                      engine->grads_.get(), model->blas.get(), engine->stream_));
  } else {
    ASSIGN_OR_RETURN(model->fp32, CudaGptModel<float>::Create(
                                      *config.layout, config.micro_batch, config.model,
                                      engine->master_.get(), engine->grads_.get(),
                                      model->blas.get(), engine->stream_));
  }
  engine->model_ = std::move(model);

  // Gradient ranges for the overlapped all-reduce: each layer's tensors are contiguous in
  // the layout; what is left (embeddings first, final LayerNorm last) is final at the end.
  const ModelShape& shape = config.layout->shape();
  std::vector<size_t> lo(shape.num_layers, SIZE_MAX), hi(shape.num_layers, 0);
  for (const ParamTensor& t : config.layout->tensors()) {
    if (t.name.rfind("layers.", 0) != 0) {
      engine->last_ranges_.push_back({t.offset, t.size});
      continue;
    }
    const int layer = std::stoi(t.name.substr(7));
    lo[layer] = std::min(lo[layer], t.offset);
    hi[layer] = std::max(hi[layer], t.offset + t.size);
  }
  for (int l = 0; l < shape.num_layers; ++l) engine->layer_ranges_.push_back({lo[l], hi[l] - lo[l]});
  return engine;
}

void CudaEngine::SetDataParallelGroup(Communicator* group) {
  reducer_ = group != nullptr && group->size() > 1
                 ? std::make_unique<OverlappedAllReduce>(group, config_.device)
                 : nullptr;
}

double CudaEngine::last_all_reduce_seconds() const {
  return reducer_ != nullptr ? reducer_->last_busy_seconds() : 0.0;
}

absl::Status CudaEngine::RefreshModelCopy() {
  if (bf16_copy_.size() == 0) return absl::OkStatus();
  if (config_.precision == PRECISION_FP16) {
    return ConvertTensor<float, __half>(master_.get(), reinterpret_cast<__half*>(bf16_copy_.get()),
                                        master_.size(), stream_);
  }
  return ConvertTensor<float, __nv_bfloat16>(
      master_.get(), reinterpret_cast<__nv_bfloat16*>(bf16_copy_.get()), master_.size(), stream_);
}

namespace {

absl::Status Copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind,
                  cudaStream_t stream, const char* what) {
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(to, from, bytes, kind, stream), what));
  return CudaStatus(cudaStreamSynchronize(stream), what);
}

}  // namespace

absl::Status CudaEngine::UploadParameters(const float* params) {
  RETURN_IF_ERROR(Copy(master_.get(), params, master_.bytes(), cudaMemcpyHostToDevice, stream_,
                       "uploading the parameters"));
  RETURN_IF_ERROR(RefreshModelCopy());
  return CudaStatus(cudaStreamSynchronize(stream_), "converting the parameters to bf16");
}

absl::Status CudaEngine::DownloadParameters(float* params) {
  return Copy(params, master_.get(), master_.bytes(), cudaMemcpyDeviceToHost, stream_,
              "downloading the parameters");
}

absl::Status CudaEngine::UploadMoments(const float* m, const float* v) {
  RETURN_IF_ERROR(
      Copy(m_.get(), m, m_.bytes(), cudaMemcpyHostToDevice, stream_, "uploading AdamW moments"));
  return Copy(v_.get(), v, v_.bytes(), cudaMemcpyHostToDevice, stream_, "uploading AdamW moments");
}

absl::Status CudaEngine::DownloadMoments(float* m, float* v) {
  RETURN_IF_ERROR(
      Copy(m, m_.get(), m_.bytes(), cudaMemcpyDeviceToHost, stream_, "downloading AdamW moments"));
  return Copy(v, v_.get(), v_.bytes(), cudaMemcpyDeviceToHost, stream_,
              "downloading AdamW moments");
}

absl::Status CudaEngine::UploadGradients(const float* grads) {
  return Copy(grads_.get(), grads, grads_.bytes(), cudaMemcpyHostToDevice, stream_,
              "uploading the gradients");
}

absl::Status CudaEngine::DownloadGradients(float* grads) {
  return Copy(grads, grads_.get(), grads_.bytes(), cudaMemcpyDeviceToHost, stream_,
              "downloading the gradients");
}

absl::StatusOr<double> CudaEngine::ForwardBackward(const std::vector<Microbatch>& microbatches,
                                                   float d_loss_per_token) {
  const ModelShape& shape = config_.layout->shape();
  const size_t tokens = static_cast<size_t>(config_.micro_batch) * shape.seq_length;
  if (losses_.size() < tokens * microbatches.size()) {
    ASSIGN_OR_RETURN(losses_, DeviceBuffer<float>::Create(tokens * microbatches.size(),
                                                           "per-token losses"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_),
                             "zeroing the gradients"));
  for (size_t k = 0; k < microbatches.size(); ++k) {
    const Microbatch& mb = microbatches[k];
    if (mb.tokens.size() != tokens || mb.targets.size() != tokens) {
      return absl::InvalidArgumentError(absl::StrCat("microbatch ", k, " has ", mb.tokens.size(),
                                                     " tokens; the model takes ", tokens));
    }
    RETURN_IF_ERROR(model_->Forward(mb.id, mb.tokens.data(), mb.targets.data(),
                                    losses_.get() + k * tokens));
    // The last microbatch's backward finalises each layer's gradients in turn: their
    // all-reduce starts right away, overlapped with the layers below.
    const std::function<absl::Status(int)> all_reduce = [&](int layer) -> absl::Status {
      if (layer >= 0) {
        const FlatRange& r = layer_ranges_[layer];
        return reducer_->Enqueue(stream_, grads_.get() + r.begin, r.count);
      }
      for (const FlatRange& r : last_ranges_) {
        RETURN_IF_ERROR(reducer_->Enqueue(stream_, grads_.get() + r.begin, r.count));
      }
      return absl::OkStatus();
    };
    const bool last = k + 1 == microbatches.size();
    const absl::Status backward =
        model_->Backward(d_loss_per_token, reducer_ != nullptr && last ? &all_reduce : nullptr);
    if (!backward.ok()) {
      if (reducer_ != nullptr) reducer_->Finish().IgnoreError();  // nothing may stay queued
      return backward;
    }
  }
  if (reducer_ != nullptr) RETURN_IF_ERROR(reducer_->Finish());
  std::vector<float> losses(tokens * microbatches.size());
  RETURN_IF_ERROR(Copy(losses.data(), losses_.get(), losses.size() * sizeof(float),
                       cudaMemcpyDeviceToHost, stream_, "downloading the losses"));
  double loss_sum = 0;
  for (size_t k = 0; k < microbatches.size(); ++k) {
    double microbatch_sum = 0;
    for (size_t i = 0; i < tokens; ++i) microbatch_sum += losses[k * tokens + i];
    loss_sum += microbatch_sum;
  }
  return loss_sum;
}

absl::StatusOr<bool> CudaEngine::UnscaleGradients(float factor) {
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(nonfinite_.get(), 0, sizeof(int), stream_),
                             "clearing the inf/NaN flag"));
  RETURN_IF_ERROR(
      ScaleAndCheckFinite<float>(grads_.get(), grads_.size(), factor, nonfinite_.get(), stream_));
  int nonfinite = 0;
  RETURN_IF_ERROR(Copy(&nonfinite, nonfinite_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_,
                       "reading the inf/NaN flag"));
  return nonfinite != 0;
}

absl::StatusOr<double> CudaEngine::GradientSumOfSquares() {
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(nonfinite_.get(), 0, sizeof(int), stream_),
                             "clearing the inf/NaN flag"));
  RETURN_IF_ERROR(SumOfSquaresAndNonFinite<float>(grads_.get(), grads_.size(),
                                                  sum_of_squares_.get(), nonfinite_.get(),
                                                  stream_));
  double sum = 0;
  int nonfinite = 0;
  RETURN_IF_ERROR(Copy(&sum, sum_of_squares_.get(), sizeof(double), cudaMemcpyDeviceToHost,
                       stream_, "reading the gradient norm"));
  RETURN_IF_ERROR(Copy(&nonfinite, nonfinite_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_,
                       "reading the inf/NaN flag"));
  if (nonfinite != 0 || !std::isfinite(sum)) {
    return absl::InternalError("a gradient is inf or NaN: training diverged");
  }
  return sum;
}

absl::Status CudaEngine::Update(long long step, double lr, double grad_scale) {
  cpu::AdamWHyperparameters h;
  h.lr = static_cast<float>(lr);
  h.beta1 = config_.optimizer.beta1();
  h.beta2 = config_.optimizer.beta2();
  h.eps = config_.optimizer.eps();
  h.step = step;
  h.grad_scale = static_cast<float>(grad_scale);
  const bool fp16 = config_.precision == PRECISION_FP16;
  __nv_bfloat16* copy = fp16 ? nullptr : reinterpret_cast<__nv_bfloat16*>(bf16_copy_.get());
  __half* half_copy = fp16 ? reinterpret_cast<__half*>(bf16_copy_.get()) : nullptr;
  // Consecutive tensors with the same decay setting are updated by one launch.
  const std::vector<ParamTensor>& tensors = config_.layout->tensors();
  size_t i = 0;
  while (i < tensors.size()) {
    size_t j = i + 1;
    while (j < tensors.size() && tensors[j].weight_decay == tensors[i].weight_decay &&
           tensors[j].offset == tensors[j - 1].offset + tensors[j - 1].size) {
      ++j;
    }
    const size_t begin = tensors[i].offset;
    const size_t count = tensors[j - 1].offset + tensors[j - 1].size - begin;
    h.weight_decay = tensors[i].weight_decay ? config_.optimizer.weight_decay() : 0.0f;
    if (half_copy != nullptr) {
      const absl::Status updated = AdamWUpdate<float, __half>(
          master_.get() + begin, grads_.get() + begin, m_.get() + begin, v_.get() + begin,
          half_copy + begin, count, h, stream_);
      RETURN_IF_ERROR(updated);
    } else if (copy != nullptr) {
      const absl::Status updated = AdamWUpdate<float, __nv_bfloat16>(
          master_.get() + begin, grads_.get() + begin, m_.get() + begin, v_.get() + begin,
          copy + begin, count, h, stream_);
      RETURN_IF_ERROR(updated);
    } else {
      const absl::Status updated =
          AdamWUpdate<float, float>(master_.get() + begin, grads_.get() + begin, m_.get() + begin,
                                    v_.get() + begin, nullptr, count, h, stream_);
      RETURN_IF_ERROR(updated);
    }
    i = j;
  }
  return CudaStatus(cudaStreamSynchronize(stream_), "the optimizer step");
}

}  // namespace mtrain::cuda
