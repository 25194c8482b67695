#include "worker/engine/cuda/cuda_training_engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/cuda/device_buffer.h"
#include "worker/engine/generation_step.h"
#include "worker/engine/parameter_init.h"

namespace mtrain::cuda {
namespace {

// The flat-buffer ranges of `tensors`, adjacent ones merged (the whole model on one rank
// is a single range).
std::vector<FlatRange> MergedRanges(const std::vector<ParamTensor>& tensors) {
  std::vector<const ParamTensor*> sorted;
  for (const ParamTensor& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamTensor* a, const ParamTensor* b) { return a->offset < b->offset; });
  std::vector<FlatRange> ranges;
  for (const ParamTensor* t : sorted) {
    if (!ranges.empty() && ranges.back().begin + ranges.back().count == t->offset) {
      ranges.back().count += t->size;
    } else {
      ranges.push_back({t->offset, t->size});
    }
  }
  return ranges;
}

}  // namespace

CudaTrainingEngine::~CudaTrainingEngine() = default;

absl::StatusOr<std::unique_ptr<CudaTrainingEngine>> CudaTrainingEngine::Create(
    const TrainingEngineConfig& config) {
  if (config.groups == nullptr || config.groups->tensor == nullptr ||
      config.groups->data == nullptr) {
    return absl::InvalidArgumentError("the CUDA engine needs the tensor and data groups");
  }
  ASSIGN_OR_RETURN(RankLayout layout,
                   RankLayout::Create(config.shape, config.chunks,
                                      static_cast<size_t>(std::max(1, config.zero_shards))));
  std::unique_ptr<CudaTrainingEngine> t(new CudaTrainingEngine(std::move(layout)));
  t->slice_ = OptimizerSliceOf(t->layout_, config.zero_shards, config.zero_rank);
  t->groups_ = config.groups;
  t->pipeline_ = config.pipeline;
  t->v_shape_ = config.v_shape;
  t->whole_model_ =
      t->layout_.num_chunks() == 1 && config.chunks[0].tensor_size == 1 && config.pipeline == 1;
  t->device_ = config.cuda_device;
  t->precision_ = config.precision;
  const RankGroups& groups = *config.groups;

  CudaEngineConfig engine;
  for (int c = 0; c < t->layout_.num_chunks(); ++c) engine.chunks.push_back(&t->layout_.chunk(c));
  engine.buffer_size = t->layout_.buffer_size();
  // Tensor-parallel sums with NCCL where the caller connected a GPU tensor group,
  // otherwise through host memory and the Gloo tensor group.
  engine.tensor_group =
      groups.device_tensor != nullptr ? groups.device_tensor.get() : groups.tensor.get();
  engine.tensor_group_on_device = groups.device_tensor != nullptr;
  engine.optimizer_begin = t->slice_.begin;
  engine.optimizer_end = t->slice_.end;
  engine.micro_batch = config.micro_batch;
  engine.model = config.model;
  engine.precision = config.precision;
  engine.optimizer = config.optimizer;
  engine.device = config.cuda_device;
  // Pipeline messages over NCCL point to point, in device memory, where the caller
  // connected the NCCL world (the Trainer hands the executor that group then). Not with
  // interleaving: NCCL matches messages by order alone, and an interleaved schedule sends
  // activations and gradients both ways between neighbours (CheckMessagesInOrder), so
  // its messages stay on the host and Gloo's tags.
  engine.pipeline_messages_on_device =
      config.pipeline > 1 && t->layout_.num_chunks() == 1 && groups.device_world != nullptr;
  ASSIGN_OR_RETURN(t->engine_, CudaEngine::Create(engine));
  // Data-parallel sums overlapped with the backward: on the GPU where an NCCL data group
  // exists, otherwise through the host and the Gloo data group. Under ZeRO-1 each replica
  // receives only its shard's sums; the tied embedding's two copies (first and last
  // stage) are summed before its data-parallel sum then, since its pieces may belong to
  // different shards on the two stages.
  t->sharded_sums_ = t->slice_.shard_size > 0 && groups.data->size() > 1;
  const size_t shard = t->sharded_sums_ ? t->slice_.shard_size : 0;
  if (groups.device_data != nullptr) {
    t->engine_->SetDataParallelGroup(groups.device_data.get(), /*on_device=*/true, shard);
  } else {
    t->engine_->SetDataParallelGroup(groups.data.get(), /*on_device=*/false, shard);
  }
  if (const ParamTensor* wte = t->layout_.FindCopyOnFirstAndLastStage();
      wte != nullptr && t->sharded_sums_ && config.pipeline > 1) {
    t->engine_->DeferGradientSum({wte->offset, wte->size});
  }
  // The initial weights are drawn on the host (parameter_init.h, layout-independent, the
  // CPU engine's values); the buffer lives only until it is on the device.
  {
    std::vector<float> params(t->layout_.buffer_size(), 0.0f);
    for (int c = 0; c < t->layout_.num_chunks(); ++c) {
      InitializeParameters(t->layout_.chunk(c), config.seed, params.data());
    }
    const std::vector<float> zeros(t->slice_.moment_size(), 0.0f);
    RETURN_IF_ERROR(t->engine_->UploadParameters(params.data()));
    RETURN_IF_ERROR(t->engine_->UploadMoments(zeros.data(), zeros.data()));
  }
  return t;
}

std::string CudaTrainingEngine::device_description() const {
  return absl::StrCat(engine_->device_name(), " #", device_, ", ", Precision_Name(precision_),
                      ", attention: ", engine_->attention_path());
}

absl::StatusOr<double> CudaTrainingEngine::ComputeGradients(
    PipelineExecutor& executor, const std::vector<Microbatch>& microbatches,
    float d_loss_per_token) {
  collective_seconds_ = 0;
  double loss_sum = 0;
  // Both paths sum the data-parallel replicas' gradients during the last backward
  // (SetDataParallelGroup in Create).
  if (whole_model_) {
    ASSIGN_OR_RETURN(loss_sum, engine_->ForwardBackward(microbatches, d_loss_per_token));
    collective_seconds_ += engine_->last_all_reduce_seconds();
  } else {
    RETURN_IF_ERROR(engine_->ZeroGradients());
    absl::StatusOr<double> run = executor.RunStep(microbatches, d_loss_per_token);
    const absl::Status summed = engine_->WaitForGradientSums();  // on failure too
    ASSIGN_OR_RETURN(loss_sum, std::move(run));
    RETURN_IF_ERROR(summed);
    // Before a deferred sum's wait replaces it.
    collective_seconds_ += engine_->last_all_reduce_seconds();
    if (const ParamTensor* wte = layout_.FindCopyOnFirstAndLastStage();
        wte != nullptr && pipeline_ > 1) {
      // The tied embedding's two copies (first and last stage) sum their gradients, each
      // already summed over its replicas (under ZeRO-1: not yet, its sum was deferred and
      // runs now, timed with the exchange).
      const auto exchange_start = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(engine_->AllReduceGradients(groups_->embedding.get(), /*on_device=*/false,
                                                  {{wte->offset, wte->size}}));
      if (sharded_sums_) RETURN_IF_ERROR(engine_->SumDeferredGradients());
      collective_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - exchange_start).count();
    }
  }
  return loss_sum;
}

absl::StatusOr<bool> CudaTrainingEngine::UnscaleGradients(float factor) {
  return engine_->UnscaleGradients(factor);
}

absl::StatusOr<double> CudaTrainingEngine::GradientSumOfSquares(
    const std::vector<ParamTensor>& counted) {
  std::vector<FlatRange> ranges = MergedRanges(counted);
  if (sharded_sums_) {
    // Only this replica's shard holds summed gradients: each range's part in it.
    const size_t shard_end = slice_.shard_begin + slice_.shard_size;
    std::vector<FlatRange> own;
    for (const FlatRange& r : ranges) {
      const size_t begin = std::max(r.begin, slice_.shard_begin);
      const size_t end = std::min(r.begin + r.count, shard_end);
      if (begin < end) own.push_back({begin, end - begin});
    }
    // An empty list means the whole buffer to the engine: a shard holding none of the
    // counted tensors adds nothing.
    if (own.empty()) return 0.0;
    ranges = std::move(own);
  }
  return engine_->GradientSumOfSquares(ranges);
}

absl::Status CudaTrainingEngine::Update(long long step, double lr, double clip_coefficient) {
  return engine_->Update(step, lr, clip_coefficient);
}

absl::Status CudaTrainingEngine::GatherParameters() {
  if (slice_.shard_size == 0) return absl::OkStatus();
  // ZeRO-1: each replica updated its share of the masters; gather them.
  return groups_->device_data != nullptr
             ? engine_->AllGatherParameters(groups_->device_data.get(), true, slice_.shard_size)
             : engine_->AllGatherParameters(groups_->data.get(), false, slice_.shard_size);
}

double CudaTrainingEngine::CollectiveSeconds(double step_seconds,
                                             const PipelineTimings& timings) const {
  return collective_seconds_;
}

std::optional<int64_t> CudaTrainingEngine::device_memory_peak_bytes() const {
  return static_cast<int64_t>(DeviceBufferPeakBytes());
}

TrainingEngine::HostState CudaTrainingEngine::host_state() {
  if (host_params_.empty()) {
    host_params_.assign(layout_.buffer_size(), 0.0f);
    host_m_.assign(slice_.moment_size(), 0.0f);
    host_v_.assign(slice_.moment_size(), 0.0f);
  }
  HostState state;
  state.params = host_params_.data();
  state.first_moment = host_m_.data();
  state.second_moment = host_v_.data();
  return state;
}

absl::Status CudaTrainingEngine::SyncToHost() {
  const HostState host = host_state();
  RETURN_IF_ERROR(engine_->DownloadParameters(host.params));
  // The engine keeps moments for the optimizer's range exactly (the ZeRO-1 share or the
  // whole model).
  return engine_->DownloadMoments(host.first_moment, host.second_moment);
}

absl::Status CudaTrainingEngine::SyncFromHost() {
  const HostState host = host_state();
  RETURN_IF_ERROR(engine_->UploadParameters(host.params));
  return engine_->UploadMoments(host.first_moment, host.second_moment);
}

absl::Status CudaTrainingEngine::StartGeneration(int capacity) {
  RETURN_IF_ERROR(engine_->StartGeneration(capacity));
  generating_ = true;
  generated_positions_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> CudaTrainingEngine::GenerateStep(
    const std::vector<int32_t>& tokens) {
  if (!generating_) return absl::FailedPreconditionError("generation: StartGeneration first");
  const ModelShape& shape = engine_->shape();
  const int count = static_cast<int>(tokens.size());
  std::vector<GenerationChunk> chunks;
  for (int c = 0; c < engine_->num_chunks(); ++c) {
    const ModelPlacement& placement = engine_->placement(c);
    chunks.push_back({placement.has_embedding, placement.has_head, placement.local_vocab(shape)});
  }
  const int64_t first = generated_positions_;
  generated_positions_ += count;
  return RunGenerationStep(*groups_, chunks, v_shape_, count, shape.hidden, shape.vocab, first,
                           [&](int c, const float* hidden_in, float* out) {
                             return engine_->GenerateChunk(c, tokens.data(), hidden_in, count, out);
                           });
}

void CudaTrainingEngine::EndGeneration() {
  engine_->EndGeneration();
  generating_ = false;
}

}  // namespace mtrain::cuda
