#include "worker/engine/cuda/cuda_engine.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/grad_scale.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/cuda/cuda_gpt_model.h"

namespace mtrain::cuda {

// One model chunk in the configured precision, with its activation sets: one per
// microbatch in flight (reused after its backward), and staging buffers for the hidden
// states that cross stages through the host (float there, T here).
class CudaEngine::Chunk {
 public:
  virtual ~Chunk() = default;
  virtual const ParameterLayout& layout() const = 0;
  // Forward of microbatch `index`; losses (device [B*S], may be null) with the head;
  // hidden_in/hidden_out: host float, as PipelineStages.
  virtual absl::Status Forward(int index, const Microbatch& mb, const float* hidden_in,
                               float* hidden_out, float* losses) = 0;
  virtual absl::Status Backward(int index, const float* d_hidden_out, float d_loss_per_token,
                                float* d_hidden_in,
                                const std::function<absl::Status(int)>* on_layer_done) = 0;
  // The backward in two parts (CudaGptModel::BackwardInput, BackwardWeight): the set of
  // microbatch `index` waits between them, still counted in flight.
  virtual absl::Status BackwardInput(int index, const float* d_hidden_out, float d_loss_per_token,
                                     float* d_hidden_in,
                                     const std::function<absl::Status(int)>* on_layer_done) = 0;
  virtual absl::Status BackwardWeight(int index,
                                      const std::function<absl::Status(int)>* on_layer_done) = 0;
  // Generation (CudaGptModel::Decode) with host float hidden states in and out, as
  // CudaEngine::GenerateChunk says.
  virtual absl::Status StartDecode(int capacity) = 0;
  virtual absl::Status Decode(const int32_t* tokens, const float* hidden_in, int count,
                              float* out) = 0;
  virtual void EndDecode() = 0;
  // Device bytes of the activation sets of microbatches in flight (forward done, backward
  // not yet), now.
  virtual size_t in_flight_activation_bytes() const = 0;
  // Which attention implementation this chunk's layers run, and why.
  virtual std::string attention_path() const = 0;
};

template <typename T>
class CudaEngine::TypedChunk : public CudaEngine::Chunk {
 public:
  TypedChunk(std::unique_ptr<CudaGptModel<T>> model, int micro_batch, cudaStream_t stream)
      : model_(std::move(model)), batch_(micro_batch), stream_(stream) {}

  const ParameterLayout& layout() const override { return model_->layout(); }
  std::string attention_path() const override { return model_->attention_path(); }

  absl::Status Forward(int index, const Microbatch& mb, const float* hidden_in, float* hidden_out,
                       float* losses) override {
    std::unique_ptr<CudaActivations<T>>& acts = in_flight_[index];
    if (acts != nullptr && acts->has_forward) {
      return absl::FailedPreconditionError(
          absl::StrCat("microbatch ", index, "'s forward ran twice"));
    }
    if (acts == nullptr) {
      if (!free_.empty()) {
        acts = std::move(free_.back());
        free_.pop_back();
      } else {
        ASSIGN_OR_RETURN(acts, model_->NewActivations());
      }
    }
    const size_t n = HiddenElements();
    CudaMicrobatchInput<T> input;
    input.id = mb.id;
    input.tokens = mb.tokens.data();
    input.targets = mb.targets.data();
    const bool bert = model_->layout().shape().family == ArchitectureFamily::kBert;
    if (bert) {
      input.token_types = mb.token_types.empty() ? nullptr : mb.token_types.data();
      input.lengths = mb.lengths.empty() ? nullptr : mb.lengths.data();
      input.sentence_order = mb.sentence_order.empty() ? nullptr : mb.sentence_order.data();
      input.choice_answers = mb.choice_answers.empty() ? nullptr : mb.choice_answers.data();
      input.d_loss_per_sequence = mb.d_loss_per_sequence;
      input.bert_totals = mb.bert_totals;
      input.outputs = mb.outputs;
    }
    // The model copies hidden_in into its residual stream before it writes hidden_out (one
    // stream), so both use the one staging buffer.
    if (hidden_in != nullptr || hidden_out != nullptr) RETURN_IF_ERROR(Stage());
    if (hidden_in != nullptr) {
      RETURN_IF_ERROR(ToDevice(hidden_in, n));
      input.hidden_in = staged_t_.get();
    }
    absl::Status status = model_->Forward(input, acts.get(), losses,
                                          hidden_out != nullptr ? staged_t_.get() : nullptr);
    if (status.ok() && losses != nullptr && mb.outputs != nullptr && !bert) {
      // Evaluation asks which targets were an argmax: the row's largest logit and the
      // target's, both over the whole vocabulary, decide it (the losses come separately).
      status = DownloadArgmax(*acts, mb.targets.size(), mb.outputs);
    }
    if (mb.id.evaluation || !status.ok()) {
      // Nothing will run backward on it: the set goes back to the pool (later work on the
      // one stream runs after this forward's, so reusing it at once is safe).
      acts->has_forward = false;
      free_.push_back(std::move(acts));
      in_flight_.erase(index);
    }
    RETURN_IF_ERROR(status);
    if (!mb.id.evaluation) in_flight_bytes_ += CudaActivationBytes(*acts);
    if (hidden_out != nullptr) RETURN_IF_ERROR(ToHost(hidden_out, n));
    return absl::OkStatus();
  }

  size_t in_flight_activation_bytes() const override { return in_flight_bytes_; }

  absl::Status Backward(int index, const float* d_hidden_out, float d_loss_per_token,
                        float* d_hidden_in,
                        const std::function<absl::Status(int)>* on_layer_done) override {
    return RunBackward(index, d_hidden_out, d_loss_per_token, d_hidden_in, on_layer_done,
                       /*split=*/false);
  }

  absl::Status BackwardInput(int index, const float* d_hidden_out, float d_loss_per_token,
                             float* d_hidden_in,
                             const std::function<absl::Status(int)>* on_layer_done) override {
    return RunBackward(index, d_hidden_out, d_loss_per_token, d_hidden_in, on_layer_done,
                       /*split=*/true);
  }

  absl::Status BackwardWeight(int index,
                              const std::function<absl::Status(int)>* on_layer_done) override {
    auto it = weights_owed_.find(index);
    if (it == weights_owed_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("BACKWARD_WEIGHT of microbatch ", index, " before its BACKWARD_INPUT"));
    }
    std::unique_ptr<CudaActivations<T>> acts = std::move(it->second);
    weights_owed_.erase(it);
    in_flight_bytes_ -= CudaActivationBytes(*acts);
    const absl::Status status = model_->BackwardWeight(acts.get(), on_layer_done);
    free_.push_back(std::move(acts));
    return status;
  }

  // Backward (split false) or BackwardInput (split true, the set then waits in
  // weights_owed_ for BackwardWeight) of microbatch `index`.
  absl::Status RunBackward(int index, const float* d_hidden_out, float d_loss_per_token,
                           float* d_hidden_in,
                           const std::function<absl::Status(int)>* on_layer_done, bool split) {
    auto it = in_flight_.find(index);
    if (it == in_flight_.end() || it->second == nullptr) {
      return absl::FailedPreconditionError("backward before forward");
    }
    std::unique_ptr<CudaActivations<T>> acts = std::move(it->second);
    in_flight_.erase(it);
    in_flight_bytes_ -= CudaActivationBytes(*acts);
    const size_t n = HiddenElements();
    // As in Forward: d_out is read into the model's buffer before d_in is written.
    if (d_hidden_out != nullptr || d_hidden_in != nullptr) {
      absl::Status staged = Stage();
      if (!staged.ok()) {
        free_.push_back(std::move(acts));
        return staged;
      }
    }
    const T* d_out = nullptr;
    absl::Status status = absl::OkStatus();
    if (d_hidden_out != nullptr) {
      status = ToDevice(d_hidden_out, n);
      d_out = staged_t_.get();
    }
    T* d_in = d_hidden_in != nullptr ? staged_t_.get() : nullptr;
    if (status.ok()) {
      status = split
                   ? model_->BackwardInput(acts.get(), d_out, d_loss_per_token, d_in, on_layer_done)
                   : model_->Backward(acts.get(), d_out, d_loss_per_token, d_in, on_layer_done);
    }
    if (split && status.ok()) {
      // Kept, with the copies its weight gradients read, until BackwardWeight.
      in_flight_bytes_ += CudaActivationBytes(*acts);
      weights_owed_[index] = std::move(acts);
    } else {
      acts->weights_owed = false;
      acts->deferred_count = 0;
      free_.push_back(std::move(acts));
    }
    RETURN_IF_ERROR(status);
    if (d_hidden_in != nullptr) RETURN_IF_ERROR(ToHost(d_hidden_in, n));
    return absl::OkStatus();
  }

  absl::Status StartDecode(int capacity) override {
    ASSIGN_OR_RETURN(cache_, model_->NewKvCache(capacity));
    return absl::OkStatus();
  }
  void EndDecode() override {
    cache_ = typename CudaGptModel<T>::KvCache();
    decode_out_ = DeviceBuffer<T>();
    decode_out_f_ = DeviceBuffer<float>();
  }
  absl::Status Decode(const int32_t* tokens, const float* hidden_in, int count,
                      float* out) override {
    const ModelPlacement& placement = model_->layout().placement();
    const ModelShape& shape = model_->layout().shape();
    const size_t in_elements = static_cast<size_t>(count) * shape.hidden;
    const size_t out_elements =
        placement.has_head ? static_cast<size_t>(placement.local_vocab(shape)) : in_elements;
    // count <= seq_length: the stage buffers (a microbatch's hidden states) hold the input.
    if (hidden_in != nullptr) {
      RETURN_IF_ERROR(Stage());
      RETURN_IF_ERROR(ToDevice(hidden_in, in_elements));
    }
    if (decode_out_.size() < out_elements) {
      ASSIGN_OR_RETURN(decode_out_, DeviceBuffer<T>::Create(out_elements, "generation output"));
      if constexpr (!std::is_same_v<T, float>) {
        ASSIGN_OR_RETURN(decode_out_f_,
                         DeviceBuffer<float>::Create(out_elements, "generation output"));
      }
    }
    RETURN_IF_ERROR(model_->Decode(&cache_, tokens,
                                   hidden_in != nullptr ? staged_t_.get() : nullptr, count,
                                   decode_out_.get()));
    const float* from = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      from = decode_out_.get();
    } else {
      RETURN_IF_ERROR(
          (ConvertTensor<T, float>(decode_out_.get(), decode_out_f_.get(), out_elements, stream_)));
      from = decode_out_f_.get();
    }
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(out, from, out_elements * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "downloading the generation output"));
    return CudaStatus(cudaStreamSynchronize(stream_), "generating");
  }

 private:
  // A pipeline message: this rank's rows of the residual stream (all of them, or 1/t
  // under sequence parallelism).
  size_t HiddenElements() const {
    return static_cast<size_t>(model_->residual_rows()) * model_->layout().shape().hidden;
  }

  absl::Status Stage() {
    if (staged_t_.size() > 0) return absl::OkStatus();
    // Generation's inputs (up to seq_length rows) use the staging buffers too.
    const ModelShape& shape = model_->layout().shape();
    const size_t n =
        std::max(HiddenElements(), static_cast<size_t>(shape.seq_length) * shape.hidden);
    // The fp32 buffer first, staged_t_ (the "already staged" flag) last: a failed
    // allocation must not leave staged_t_ set with staged_f_ empty, or the next call
    // would report success and copy through a null staged_f_.
    if constexpr (!std::is_same_v<T, float>) {
      ASSIGN_OR_RETURN(staged_f_, DeviceBuffer<float>::Create(n, "hidden states between stages"));
    }
    ASSIGN_OR_RETURN(staged_t_, DeviceBuffer<T>::Create(n, "hidden states between stages"));
    return absl::OkStatus();
  }
  // Message float (host or device memory: cudaMemcpyDefault tells them apart) -> device T
  // (the stream's later work sees it).
  absl::Status ToDevice(const float* message, size_t n) {
    if constexpr (std::is_same_v<T, float>) {
      return CudaStatus(
          cudaMemcpyAsync(staged_t_.get(), message, n * sizeof(float), cudaMemcpyDefault, stream_),
          "uploading a hidden state");
    } else {
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(staged_f_.get(), message, n * sizeof(float), cudaMemcpyDefault, stream_),
          "uploading a hidden state"));
      return ConvertTensor<float, T>(staged_f_.get(), staged_t_.get(), n, stream_);
    }
  }
  // Whether each target was an argmax of its row (evaluation), waited for.
  absl::Status DownloadArgmax(const CudaActivations<T>& acts, size_t rows, TokenOutputs* outputs) {
    std::vector<float> largest(rows), target(rows);
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(largest.data(), acts.ce_max.get(), rows * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_),
                   "downloading the largest logits"));
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(target.data(), acts.ce_target.get(), rows * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_),
                   "downloading the target logits"));
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "waiting for the logits"));
    outputs->argmax.resize(rows);
    for (size_t i = 0; i < rows; ++i) outputs->argmax[i] = target[i] >= largest[i] ? 1 : 0;
    return absl::OkStatus();
  }

  // Device T -> message float (host or device memory), waited for: a communicator on
  // another stream reads it next.
  absl::Status ToHost(float* message, size_t n) {
    const float* from = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      from = staged_t_.get();
    } else {
      RETURN_IF_ERROR((ConvertTensor<T, float>(staged_t_.get(), staged_f_.get(), n, stream_)));
      from = staged_f_.get();
    }
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(message, from, n * sizeof(float), cudaMemcpyDefault, stream_),
                   "downloading a hidden state"));
    return CudaStatus(cudaStreamSynchronize(stream_), "downloading a hidden state");
  }

  std::unique_ptr<CudaGptModel<T>> model_;
  const int batch_;
  const cudaStream_t stream_;
  std::map<int, std::unique_ptr<CudaActivations<T>>> in_flight_;
  // Sets whose BackwardInput ran and BackwardWeight has not (counted in in_flight_bytes_).
  std::map<int, std::unique_ptr<CudaActivations<T>>> weights_owed_;
  std::vector<std::unique_ptr<CudaActivations<T>>> free_;
  DeviceBuffer<T> staged_t_;
  DeviceBuffer<float> staged_f_;
  size_t in_flight_bytes_ = 0;  // of the sets in in_flight_ and weights_owed_
  // Generation: the sequence's cache and the last chunk output (widened to float).
  typename CudaGptModel<T>::KvCache cache_;
  DeviceBuffer<T> decode_out_;
  DeviceBuffer<float> decode_out_f_;
};

CudaEngine::~CudaEngine() {
  chunks_.clear();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Create(const CudaEngineConfig& config) {
  if (config.chunks.empty()) return absl::InvalidArgumentError("CudaEngineConfig.chunks is empty");
  for (size_t c = 0; c < config.chunks.size(); ++c) {
    if (config.chunks[c] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("CudaEngineConfig.chunks[", c, "] is null"));
    }
    if (config.buffer_size < config.chunks[c]->end_offset()) {
      return absl::InvalidArgumentError(absl::StrCat("buffer_size ", config.buffer_size,
                                                     " is smaller than chunk ", c, "'s layout (",
                                                     config.chunks[c]->end_offset(), " elements)"));
    }
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
  // Kernels take small stream-ordered scratch (cudaMallocAsync) every step; by default the
  // pool hands freed memory back to the driver at each synchronisation, so keep it.
  cudaMemPool_t pool = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetDefaultMemPool(&pool, config.device),
                             "reading the device's memory pool"));
  uint64_t keep_everything = UINT64_MAX;
  RETURN_IF_ERROR(
      CudaStatus(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything),
                 "setting the memory pool's release threshold"));
  const size_t n = config.buffer_size;
  ASSIGN_OR_RETURN(engine->master_, DeviceBuffer<float>::Create(n, "fp32 master weights"));
  ASSIGN_OR_RETURN(engine->grads_, DeviceBuffer<float>::Create(n, "fp32 gradients"));
  if (engine->config_.optimizer_end == SIZE_MAX) engine->config_.optimizer_end = n;
  if (engine->config_.optimizer_begin > engine->config_.optimizer_end ||
      engine->config_.optimizer_end > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer range [", engine->config_.optimizer_begin, ", ", engine->config_.optimizer_end,
        ") is not within the buffer's ", n, " elements"));
  }
  // Under ZeRO-1 only this replica's slice has moments: that is the memory it saves (one
  // element at least, so that an empty slice still has a buffer).
  const size_t moments = engine->config_.optimizer_end - engine->config_.optimizer_begin;
  ASSIGN_OR_RETURN(
      engine->m_, DeviceBuffer<float>::Create(std::max<size_t>(moments, 1), "AdamW first moments"));
  ASSIGN_OR_RETURN(engine->v_, DeviceBuffer<float>::Create(std::max<size_t>(moments, 1),
                                                           "AdamW second moments"));
  ASSIGN_OR_RETURN(engine->sum_of_squares_, DeviceBuffer<double>::Create(1, "the gradient norm"));
  ASSIGN_OR_RETURN(engine->nonfinite_, DeviceBuffer<int>::Create(1, "the inf/NaN flag"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(engine->m_.get(), 0, engine->m_.bytes(), engine->stream_),
                 "zeroing the moments"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(engine->v_.get(), 0, engine->v_.bytes(), engine->stream_),
                 "zeroing the moments"));

  ASSIGN_OR_RETURN(engine->blas_, CublasLt::Create());
  engine->tensor_group_ = DeviceCollectives(config.tensor_group, config.tensor_group_on_device);
  DeviceCollectives* tensor_group = &engine->tensor_group_;
  if (config.precision != PRECISION_FP32) {
    ASSIGN_OR_RETURN(engine->bf16_copy_,
                     DeviceBuffer<uint16_t>::Create(n, "the 16-bit copy of the weights"));
  }
  for (const ParameterLayout* layout : config.chunks) {
    engine->tensors_.insert(engine->tensors_.end(), layout->tensors().begin(),
                            layout->tensors().end());
    if (config.precision == PRECISION_FP16) {
      ASSIGN_OR_RETURN(auto model, CudaGptModel<__half>::Create(
                                       *layout, config.micro_batch, config.model,
                                       reinterpret_cast<const __half*>(engine->bf16_copy_.get()),
                                       engine->grads_.get(), engine->blas_.get(), engine->stream_,
                                       tensor_group));
      engine->chunks_.push_back(std::make_unique<TypedChunk<__half>>(
          std::move(model), config.micro_batch, engine->stream_));
    } else if (config.precision == PRECISION_BF16) {
      ASSIGN_OR_RETURN(
          auto model,
          CudaGptModel<__nv_bfloat16>::Create(
              *layout, config.micro_batch, config.model,
              reinterpret_cast<const __nv_bfloat16*>(engine->bf16_copy_.get()),
              engine->grads_.get(), engine->blas_.get(), engine->stream_, tensor_group));
      engine->chunks_.push_back(std::make_unique<TypedChunk<__nv_bfloat16>>(
          std::move(model), config.micro_batch, engine->stream_));
    } else {
      ASSIGN_OR_RETURN(auto model, CudaGptModel<float>::Create(
                                       *layout, config.micro_batch, config.model,
                                       engine->master_.get(), engine->grads_.get(),
                                       engine->blas_.get(), engine->stream_, tensor_group));
      engine->chunks_.push_back(std::make_unique<TypedChunk<float>>(
          std::move(model), config.micro_batch, engine->stream_));
    }
  }
  std::sort(engine->tensors_.begin(), engine->tensors_.end(),
            [](const ParamTensor& a, const ParamTensor& b) { return a.offset < b.offset; });

  // Gradient ranges for the overlapped data-parallel all-reduce, per chunk: each layer's
  // tensors are contiguous in the layout and final once the chunk's last backward has
  // passed the layer; the rest (embeddings, final LayerNorm, the head's copy of the tied
  // embedding) once that backward is done.
  for (const ParameterLayout* layout : config.chunks) {
    const ModelPlacement& placement = layout->placement();
    const int layers = placement.num_layers;
    ChunkRanges ranges;
    std::vector<size_t> lo(layers, SIZE_MAX), hi(layers, 0);
    for (const ParamTensor& t : layout->tensors()) {
      if (t.name.rfind("layers.", 0) != 0) {
        ranges.last.push_back({t.offset, t.size});
        continue;
      }
      const int layer = std::stoi(t.name.substr(7)) - placement.first_layer;
      lo[layer] = std::min(lo[layer], t.offset);
      hi[layer] = std::max(hi[layer], t.offset + t.size);
    }
    for (int l = 0; l < layers; ++l) ranges.layers.push_back({lo[l], hi[l] - lo[l]});
    engine->chunk_ranges_.push_back(std::move(ranges));
  }
  const ModelPlacement& first = config.chunks.front()->placement();
  engine->whole_model_ =
      config.chunks.size() == 1 && first.tensor_size == 1 && first.has_embedding && first.has_head;
  return engine;
}

void CudaEngine::SetDataParallelGroup(Communicator* group, bool on_device, size_t shard_size) {
  reducer_ = group != nullptr && group->size() > 1
                 ? std::make_unique<OverlappedAllReduce>(group, on_device, config_.device)
                 : nullptr;
  gradient_shard_ = reducer_ != nullptr ? shard_size : 0;
}

void CudaEngine::DeferGradientSum(FlatRange range) { deferred_.push_back(range); }

absl::Status CudaEngine::SumDeferredGradients() {
  if (reducer_ == nullptr) return absl::OkStatus();
  for (const FlatRange& r : deferred_) {
    const absl::Status queued = QueueGradientSum(r);
    if (!queued.ok()) {
      reducer_->Finish().IgnoreError();  // nothing may stay queued
      return queued;
    }
  }
  return reducer_->Finish();
}

absl::Status CudaEngine::QueueGradientSum(const FlatRange& range) {
  if (gradient_shard_ == 0) {
    return reducer_->Enqueue(stream_, grads_.get() + range.begin, range.count);
  }
  const size_t end = range.begin + range.count;
  for (size_t at = range.begin; at < end;) {
    const size_t owner = at / gradient_shard_;
    const size_t piece_end = std::min(end, (owner + 1) * gradient_shard_);
    RETURN_IF_ERROR(
        reducer_->Enqueue(stream_, grads_.get() + at, piece_end - at, static_cast<int>(owner)));
    at = piece_end;
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::WaitForGradientSums() {
  return reducer_ != nullptr ? reducer_->Finish() : absl::OkStatus();
}

std::function<absl::Status(int)> CudaEngine::GradientSumsAfterLayers(int chunk) {
  // Layer l's range once the backward has passed it; the rest (-1) at the end. Without
  // replicas nothing is summed (the model still needs the hook: it marks the step's last
  // backward, where sequence parallelism sums the LayerNorms' gradients).
  return [this, chunk](int layer) -> absl::Status {
    if (reducer_ == nullptr) return absl::OkStatus();
    const ChunkRanges& ranges = chunk_ranges_[chunk];
    if (layer >= 0) return QueueGradientSum(ranges.layers[layer]);
    for (const FlatRange& r : ranges.last) {
      const bool deferred =
          std::any_of(deferred_.begin(), deferred_.end(),
                      [&](const FlatRange& d) { return d.begin == r.begin && d.count == r.count; });
      if (!deferred) RETURN_IF_ERROR(QueueGradientSum(r));
    }
    return absl::OkStatus();
  };
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
  if (bytes == 0) return absl::OkStatus();  // e.g. the moments of an empty ZeRO slice
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
      Copy(m_.get(), m, MomentBytes(), cudaMemcpyHostToDevice, stream_, "uploading AdamW moments"));
  return Copy(v_.get(), v, MomentBytes(), cudaMemcpyHostToDevice, stream_,
              "uploading AdamW moments");
}

absl::Status CudaEngine::DownloadMoments(float* m, float* v) {
  RETURN_IF_ERROR(Copy(m, m_.get(), MomentBytes(), cudaMemcpyDeviceToHost, stream_,
                       "downloading AdamW moments"));
  return Copy(v, v_.get(), MomentBytes(), cudaMemcpyDeviceToHost, stream_,
              "downloading AdamW moments");
}

absl::StatusOr<double> CudaEngine::ForwardBackward(const std::vector<Microbatch>& microbatches,
                                                   float d_loss_per_token) {
  if (!whole_model_) {
    return absl::FailedPreconditionError(
        "ForwardBackward runs the whole model on one rank; drive pipeline stages or "
        "tensor-parallel chunks through a PipelineExecutor");
  }
  const ModelShape& s = shape();
  const size_t tokens = static_cast<size_t>(config_.micro_batch) * s.seq_length;
  if (losses_.size() < tokens * microbatches.size()) {
    ASSIGN_OR_RETURN(losses_,
                     DeviceBuffer<float>::Create(tokens * microbatches.size(), "per-token losses"));
  }
  RETURN_IF_ERROR(ZeroGradients());
  Chunk& chunk = *chunks_.front();
  for (size_t k = 0; k < microbatches.size(); ++k) {
    const Microbatch& mb = microbatches[k];
    if (mb.tokens.size() != tokens || mb.targets.size() != tokens) {
      return absl::InvalidArgumentError(absl::StrCat("microbatch ", k, " has ", mb.tokens.size(),
                                                     " tokens; the model takes ", tokens));
    }
    // One activation set, reused: each backward directly follows its forward.
    RETURN_IF_ERROR(chunk.Forward(0, mb, nullptr, nullptr, losses_.get() + k * tokens));
    NoteActivations();
    // The last microbatch's backward finalises each layer's gradients in turn: their
    // all-reduce starts right away, overlapped with the layers below.
    const std::function<absl::Status(int)> all_reduce = GradientSumsAfterLayers(0);
    const bool last = k + 1 == microbatches.size();
    const absl::Status backward = chunk.Backward(
        0, nullptr, d_loss_per_token, nullptr, reducer_ != nullptr && last ? &all_reduce : nullptr);
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

int CudaEngine::num_chunks() const { return static_cast<int>(chunks_.size()); }

const ModelPlacement& CudaEngine::placement(int chunk) const {
  return chunks_[chunk]->layout().placement();
}

const ModelShape& CudaEngine::shape() const { return chunks_.front()->layout().shape(); }

absl::Status CudaEngine::StartGeneration(int capacity) {
  for (const std::unique_ptr<Chunk>& chunk : chunks_) {
    absl::Status started = chunk->StartDecode(capacity);
    if (!started.ok()) {
      EndGeneration();
      return started;
    }
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::GenerateChunk(int chunk, const int32_t* tokens, const float* hidden_in,
                                       int count, float* out) {
  if (chunk < 0 || chunk >= num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk, " of ", num_chunks()));
  }
  return chunks_[chunk]->Decode(tokens, hidden_in, count, out);
}

absl::StatusOr<std::unique_ptr<MessageBuffer>> CudaEngine::NewMessage(size_t elements) {
  if (!config_.pipeline_messages_on_device) return PipelineStages::NewMessage(elements);
  if (message_pool_ == nullptr) message_pool_ = DeviceMessagePool::Create(stream_);
  return message_pool_->Take(elements);
}

void CudaEngine::EndGeneration() {
  for (const std::unique_ptr<Chunk>& chunk : chunks_) chunk->EndDecode();
}

absl::StatusOr<double> CudaEngine::Forward(int chunk, int index, const Microbatch& microbatch,
                                           const float* hidden_in, float* hidden_out) {
  if (chunk < 0 || chunk >= num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk, " of ", num_chunks()));
  }
  const size_t tokens = static_cast<size_t>(config_.micro_batch) * shape().seq_length;
  const bool head = placement(chunk).has_head;
  if ((placement(chunk).has_embedding && microbatch.tokens.size() != tokens) ||
      (head && microbatch.targets.size() != tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch ", index, " has ",
                                                   microbatch.tokens.size(),
                                                   " tokens; the model takes ", tokens));
  }
  if (head && losses_.size() < tokens) {
    ASSIGN_OR_RETURN(losses_, DeviceBuffer<float>::Create(tokens, "per-token losses"));
  }
  RETURN_IF_ERROR(chunks_[chunk]->Forward(index, microbatch, hidden_in, hidden_out,
                                          head ? losses_.get() : nullptr));
  NoteActivations();
  if (!head) return 0.0;
  // The loss is summed on the host in double, in token order, as the CPU engine does.
  std::vector<float> losses(tokens);
  RETURN_IF_ERROR(Copy(losses.data(), losses_.get(), tokens * sizeof(float), cudaMemcpyDeviceToHost,
                       stream_, "downloading the losses"));
  double sum = 0;
  for (float l : losses) sum += l;
  if (microbatch.outputs != nullptr) microbatch.outputs->loss = std::move(losses);
  return sum;
}

absl::Status CudaEngine::Backward(int chunk, int index, const float* d_hidden_out,
                                  float d_loss_per_token, float* d_hidden_in, bool last_of_step) {
  if (chunk < 0 || chunk >= num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk, " of ", num_chunks()));
  }
  if (!last_of_step) {
    return chunks_[chunk]->Backward(index, d_hidden_out, d_loss_per_token, d_hidden_in, nullptr);
  }
  // The chunk's gradients become final layer by layer: their data-parallel sums start
  // while the backward goes on (the caller waits for them with WaitForGradientSums).
  const std::function<absl::Status(int)> all_reduce = GradientSumsAfterLayers(chunk);
  return chunks_[chunk]->Backward(index, d_hidden_out, d_loss_per_token, d_hidden_in, &all_reduce);
}

absl::Status CudaEngine::BackwardInput(int chunk, int index, const float* d_hidden_out,
                                       float d_loss_per_token, float* d_hidden_in,
                                       bool last_of_step) {
  if (chunk < 0 || chunk >= num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk, " of ", num_chunks()));
  }
  // The chunk's last BACKWARD_INPUT finalises everything but the layers' linear weights:
  // the model reports only the rest (-1) to the hook; BackwardWeight reports the layers.
  const std::function<absl::Status(int)> all_reduce = GradientSumsAfterLayers(chunk);
  RETURN_IF_ERROR(chunks_[chunk]->BackwardInput(index, d_hidden_out, d_loss_per_token, d_hidden_in,
                                                last_of_step ? &all_reduce : nullptr));
  NoteActivations();  // the set now also holds its weight gradients' copies
  return absl::OkStatus();
}

absl::Status CudaEngine::BackwardWeight(int chunk, int index, bool last_of_step) {
  if (chunk < 0 || chunk >= num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk, " of ", num_chunks()));
  }
  // The chunk's last BACKWARD_WEIGHT comes after its last BACKWARD_INPUT (each microbatch's
  // W after its B): each layer's gradients are final as it passes, and summed from there.
  const std::function<absl::Status(int)> all_reduce = GradientSumsAfterLayers(chunk);
  return chunks_[chunk]->BackwardWeight(index, last_of_step ? &all_reduce : nullptr);
}

void CudaEngine::NoteActivations() {
  size_t bytes = 0;
  for (const std::unique_ptr<Chunk>& chunk : chunks_) bytes += chunk->in_flight_activation_bytes();
  activation_peak_bytes_ = std::max(activation_peak_bytes_, bytes);
}

absl::Status CudaEngine::ZeroGradients() {
  return CudaStatus(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), stream_),
                    "zeroing the gradients");
}

absl::Status CudaEngine::AllReduceGradients(Communicator* group, bool on_device,
                                            const std::vector<FlatRange>& ranges) {
  if (group == nullptr || group->size() == 1) return absl::OkStatus();
  DeviceCollectives collectives(group, on_device);
  if (ranges.empty()) {
    return collectives.AllReduce(grads_.get(), grads_.size(), ReduceOp::kSum, stream_);
  }
  for (const FlatRange& r : ranges) {
    if (r.begin + r.count > grads_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient range [", r.begin, ", ",
                                                     r.begin + r.count, ") is past the buffer's ",
                                                     grads_.size(), " elements"));
    }
    RETURN_IF_ERROR(
        collectives.AllReduce(grads_.get() + r.begin, r.count, ReduceOp::kSum, stream_));
  }
  return absl::OkStatus();
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

absl::StatusOr<double> CudaEngine::GradientSumOfSquares(const std::vector<FlatRange>& ranges) {
  const std::vector<FlatRange> all = {{0, grads_.size()}};
  const std::vector<FlatRange>& todo = ranges.empty() ? all : ranges;
  // Each range sums into its own slot and they share one inf/NaN flag: one read back for
  // all of them (a tensor-parallel rank has a few ranges per layer).
  if (sum_of_squares_.size() < todo.size()) {
    ASSIGN_OR_RETURN(sum_of_squares_,
                     DeviceBuffer<double>::Create(todo.size(), "the gradient norm"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(nonfinite_.get(), 0, sizeof(int), stream_),
                             "clearing the inf/NaN flag"));
  for (size_t k = 0; k < todo.size(); ++k) {
    const FlatRange& r = todo[k];
    if (r.begin + r.count > grads_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient range [", r.begin, ", ",
                                                     r.begin + r.count, ") is past the buffer's ",
                                                     grads_.size(), " elements"));
    }
    RETURN_IF_ERROR(SumOfSquaresAndNonFinite<float>(
        grads_.get() + r.begin, r.count, sum_of_squares_.get() + k, nonfinite_.get(), stream_));
  }
  std::vector<double> sums(todo.size());
  int nonfinite = 0;
  RETURN_IF_ERROR(Copy(sums.data(), sum_of_squares_.get(), sums.size() * sizeof(double),
                       cudaMemcpyDeviceToHost, stream_, "reading the gradient norm"));
  RETURN_IF_ERROR(Copy(&nonfinite, nonfinite_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_,
                       "reading the inf/NaN flag"));
  double sum = 0;
  for (double range_sum : sums) sum += range_sum;  // in range order
  // NaN rather than an error: the caller sums this over the model-parallel ranks, and a
  // rank that failed here alone would leave the others waiting in that sum; with NaN every
  // rank sees the non-finite norm and fails alike (as the CPU engine's do).
  if (nonfinite != 0) return std::numeric_limits<double>::quiet_NaN();
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
  if (adamw_chunks_.size() == 0) {
    // Consecutive tensors with the same decay setting make one range, clipped to the
    // optimizer range (moments are indexed from its start); the ranges are cut into chunks
    // once, and every step updates them all in one launch.
    const std::vector<ParamTensor>& tensors = tensors_;
    const size_t range_begin = config_.optimizer_begin;
    const size_t range_end = config_.optimizer_end;
    std::vector<AdamWRange> ranges;
    size_t i = 0;
    while (i < tensors.size()) {
      size_t j = i + 1;
      while (j < tensors.size() && tensors[j].weight_decay == tensors[i].weight_decay &&
             tensors[j].offset == tensors[j - 1].offset + tensors[j - 1].size) {
        ++j;
      }
      const size_t begin = std::max(tensors[i].offset, range_begin);
      const size_t end = std::min(tensors[j - 1].offset + tensors[j - 1].size, range_end);
      const float decay = tensors[i].weight_decay ? config_.optimizer.weight_decay() : 0.0f;
      i = j;
      if (begin < end) ranges.push_back(AdamWRange{begin, end, decay});
    }
    const std::vector<AdamWChunk> chunks = MakeAdamWChunks(ranges);
    ASSIGN_OR_RETURN(adamw_chunks_,
                     DeviceBuffer<AdamWChunk>::Create(chunks.size(), "AdamW chunks"));
    if (!chunks.empty()) {
      RETURN_IF_ERROR(Copy(adamw_chunks_.get(), chunks.data(), chunks.size() * sizeof(AdamWChunk),
                           cudaMemcpyHostToDevice, stream_, "uploading the AdamW chunks"));
    }
  }
  const int num_chunks = static_cast<int>(adamw_chunks_.size());
  const size_t moment_offset = config_.optimizer_begin;
  if (num_chunks == 0) {
    // Nothing of this rank's in the optimizer range.
  } else if (half_copy != nullptr) {
    RETURN_IF_ERROR((AdamWUpdateChunks<float, __half>(
        master_.get(), grads_.get(), m_.get(), v_.get(), half_copy, moment_offset,
        adamw_chunks_.get(), num_chunks, h, stream_)));
  } else if (copy != nullptr) {
    RETURN_IF_ERROR((AdamWUpdateChunks<float, __nv_bfloat16>(
        master_.get(), grads_.get(), m_.get(), v_.get(), copy, moment_offset, adamw_chunks_.get(),
        num_chunks, h, stream_)));
  } else {
    RETURN_IF_ERROR((AdamWUpdateChunks<float, float>(master_.get(), grads_.get(), m_.get(),
                                                     v_.get(), nullptr, moment_offset,
                                                     adamw_chunks_.get(), num_chunks, h, stream_)));
  }
  return CudaStatus(cudaStreamSynchronize(stream_), "the optimizer step");
}

absl::Status CudaEngine::AllGatherParameters(Communicator* group, bool on_device, size_t shard) {
  if (group == nullptr || group->size() == 1) return absl::OkStatus();
  const size_t n = master_.size();
  if (shard * static_cast<size_t>(group->size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("ZeRO shard ", shard, " x ", group->size(),
                                                   " replicas != ", n, " buffer elements"));
  }
  const size_t mine = shard * static_cast<size_t>(group->rank());
  // The group takes distinct input and output buffers.
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "the update before the gather"));
  if (on_device) {
    ASSIGN_OR_RETURN(DeviceBuffer<float> gathered,
                     DeviceBuffer<float>::Create(n, "the ZeRO parameter gather"));
    RETURN_IF_ERROR(group->AllGather(master_.get() + mine, gathered.get(), shard));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(master_.get(), gathered.get(), master_.bytes(),
                                               cudaMemcpyDeviceToDevice, stream_),
                               "taking the gathered parameters"));
    // `gathered` is freed at the end of this block: the copy out of it must be done.
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "taking the gathered parameters"));
  } else {
    std::vector<float> slice(shard), gathered(n);
    RETURN_IF_ERROR(Copy(slice.data(), master_.get() + mine, shard * sizeof(float),
                         cudaMemcpyDeviceToHost, stream_, "staging the ZeRO slice"));
    RETURN_IF_ERROR(group->AllGather(slice.data(), gathered.data(), shard));
    RETURN_IF_ERROR(Copy(master_.get(), gathered.data(), master_.bytes(), cudaMemcpyHostToDevice,
                         stream_, "uploading the gathered parameters"));
  }
  RETURN_IF_ERROR(RefreshModelCopy());
  return CudaStatus(cudaStreamSynchronize(stream_), "the ZeRO parameter gather");
}

std::string CudaEngine::attention_path() const {
  return chunks_.empty() ? std::string() : chunks_.front()->attention_path();
}

}  // namespace mtrain::cuda
