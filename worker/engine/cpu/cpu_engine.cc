#include "worker/engine/cpu/cpu_engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu_bf16_gemm.h"
#include "kernels/cpu_gemm_library.h"
#include "kernels/cpu_isa.h"
#include "kernels/cpu_peak.h"
#include "kernels/grad_norm.h"
#include "worker/engine/generation_step.h"

namespace mtrain {
namespace {

TensorParallelGroup<float> TensorGroupOf(Communicator* group) {
  TensorParallelGroup<float> tp;
  tp.size = group->size();
  tp.rank = group->rank();
  tp.all_reduce = [group](float* data, size_t count, ReduceOp op) {
    return group->AllReduce(data, count, op);
  };
  tp.all_gather = [group](const float* in, float* out, size_t count) {
    return group->AllGather(in, out, count);
  };
  tp.reduce_scatter = [group](const float* in, float* out, size_t count) {
    return group->ReduceScatter(in, out, count, ReduceOp::kSum);
  };
  return tp;
}

}  // namespace

CpuEngine::~CpuEngine() = default;

std::string CpuEngine::device_description() const {
  const std::string bf16 =
      cpu::CurrentGemmPrecision() == cpu::GemmPrecision::kBf16
          ? absl::StrCat("linear layers' GEMMs in bf16 (oneDNN matmul ",
                         cpu::Bf16GemmImplementation(256, 256, 256), ", fp32 sums); ")
          : "";
  return absl::StrCat(bf16, "GEMM ", cpu::EnsureBestGemmKernel().Describe(),
                      "; element-wise kernels ", cpu::KernelIsaName(cpu::CpuKernelIsa()), "; peak ",
                      cpu::CpuPeakOfThisMachine().Describe());
}

absl::StatusOr<std::unique_ptr<CpuEngine>> CpuEngine::Create(const TrainingEngineConfig& config) {
  // fp32 throughout, or bf16 GEMMs (fp32 sums, master weights and everything else) on a
  // processor that multiplies bf16 in hardware (kernels/cpu_bf16_gemm.h).
  if (config.precision == PRECISION_BF16) {
    RETURN_IF_ERROR(cpu::CpuBf16Support(cpu::CpuFeaturesOfThisMachine()));
  } else if (config.precision != PRECISION_FP32) {
    return absl::InvalidArgumentError(
        absl::StrCat("precision: the CPU engine trains in PRECISION_FP32 or PRECISION_BF16, not ",
                     Precision_Name(config.precision)));
  }
  cpu::SetGemmPrecision(config.precision == PRECISION_BF16 ? cpu::GemmPrecision::kBf16
                                                           : cpu::GemmPrecision::kFp32);
  if (config.groups == nullptr || config.groups->tensor == nullptr ||
      config.groups->data == nullptr) {
    return absl::InvalidArgumentError("the CPU engine needs the tensor and data groups");
  }
  // The memory report counts what the engine allocates from here on.
  const int64_t heap_before = HeapBytesInUse();
  std::unique_ptr<CpuEngine> engine(new CpuEngine);
  engine->groups_ = config.groups;
  engine->pipeline_ = config.pipeline;
  engine->v_shape_ = config.v_shape;
  ASSIGN_OR_RETURN(engine->model_,
                   RankModel::Create(config.shape, config.chunks, config.micro_batch, config.model,
                                     TensorGroupOf(config.groups->tensor.get()),
                                     static_cast<size_t>(std::max(1, config.zero_shards))));
  engine->model_->Initialize(config.seed);
  engine->stages_ = std::make_unique<RankModelStages>(engine->model_.get(), heap_before);
  std::vector<GradientRange> grad_ranges;
  for (const ParamTensor& tensor : engine->model_->tensors()) {
    grad_ranges.push_back({tensor.offset, tensor.size});
  }
  engine->slice_ = OptimizerSliceOf(engine->model_->layout(), config.zero_shards, config.zero_rank);
  // ZeRO-1: each replica needs only its shard's gradient sums (reduce-scatter).
  engine->buckets_ = std::make_unique<GradientBuckets>(
      grad_ranges, engine->model_->grads(), config.groups->data.get(), config.bucket_elements,
      engine->slice_.shard_size);
  engine->optimizer_ = std::make_unique<AdamWOptimizer>(engine->model_->tensors(), config.optimizer,
                                                        engine->slice_.begin, engine->slice_.end);
  return engine;
}

absl::StatusOr<double> CpuEngine::ComputeGradients(PipelineExecutor& executor,
                                                   const std::vector<Microbatch>& microbatches,
                                                   float d_loss_per_token) {
  model_->ZeroGrads();
  buckets_->StartStep();
  const bool tied_elsewhere = pipeline_ > 1;
  const GradReadyHook hook = [&](const ParamTensor& tensor) {
    // The tied embedding is final only after the exchange between the stages below, or,
    // where two chunks of this rank share it (ZB-V), after both chunks' last backwards:
    // each chunk reports it at its own.
    if (tied_elsewhere && tensor.copy_on_first_and_last_stage) return;
    buckets_->MarkReady(tensor.offset);
  };
  stages_->SetFinalGradsHook(&hook);
  absl::StatusOr<double> run = executor.RunStep(microbatches, d_loss_per_token);
  stages_->SetFinalGradsHook(nullptr);
  ASSIGN_OR_RETURN(const double loss_sum, std::move(run));
  if (const ParamTensor* wte = model_->FindCopyOnFirstAndLastStage();
      wte != nullptr && tied_elsewhere) {
    // The first and the last stage sum their copies' gradients (one shared copy already
    // holds the sum), then the buckets sum the result over the replicas.
    if (!model_->layout().SharesTiedCopy()) {
      RETURN_IF_ERROR(
          groups_->embedding->AllReduce(model_->grads() + wte->offset, wte->size, ReduceOp::kSum));
    }
    buckets_->MarkReady(wte->offset);
  }
  RETURN_IF_ERROR(buckets_->Finish());
  return loss_sum;
}

absl::StatusOr<bool> CpuEngine::UnscaleGradients(float factor) {
  // The CPU engine trains in fp32 without loss scaling; this keeps the interface whole.
  bool overflow = false;
  float* grads = model_->grads();
  for (size_t i = 0; i < model_->buffer_size(); ++i) {
    grads[i] *= factor;
    if (!std::isfinite(grads[i])) overflow = true;
  }
  return overflow;
}

absl::StatusOr<double> CpuEngine::GradientSumOfSquares(const std::vector<ParamTensor>& counted) {
  double sum = 0;
  if (slice_.shard_size == 0) {
    for (const ParamTensor& t : counted) {
      sum += cpu::SumOfSquares(model_->grads() + t.offset, t.size);
    }
    return sum;
  }
  // ZeRO-1: only this replica's shard holds summed gradients; its part of each tensor.
  const size_t shard_end = slice_.shard_begin + slice_.shard_size;
  for (const ParamTensor& t : counted) {
    const size_t begin = std::max(t.offset, slice_.shard_begin);
    const size_t end = std::min(t.offset + t.size, shard_end);
    if (begin < end) sum += cpu::SumOfSquares(model_->grads() + begin, end - begin);
  }
  return sum;
}

absl::Status CpuEngine::Update(long long step, double lr, double clip_coefficient) {
  optimizer_->Update(model_->params(), model_->grads(), step, lr, clip_coefficient);
  return absl::OkStatus();
}

absl::Status CpuEngine::GatherParameters() {
  if (slice_.shard_size == 0) return absl::OkStatus();
  // Each replica updated its share; every replica needs all of them.
  std::vector<float> gathered(model_->buffer_size());
  RETURN_IF_ERROR(groups_->data->AllGather(model_->params() + slice_.shard_begin, gathered.data(),
                                           slice_.shard_size));
  std::copy(gathered.begin(), gathered.end(), model_->params());
  return absl::OkStatus();
}

double CpuEngine::CollectiveSeconds(double step_seconds, const PipelineTimings& timings) const {
  return std::max(0.0, step_seconds - timings.compute_seconds);
}

TrainingEngine::HostState CpuEngine::host_state() {
  HostState state;
  state.params = model_->params();
  state.first_moment = optimizer_->first_moment().data();
  state.second_moment = optimizer_->second_moment().data();
  return state;
}

absl::Status CpuEngine::StartGeneration(int capacity) {
  kv_caches_.clear();
  for (int c = 0; c < model_->num_chunks(); ++c) {
    kv_caches_.push_back(model_->chunk(c).NewKvCache(capacity));
  }
  generated_positions_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> CpuEngine::GenerateStep(const std::vector<int32_t>& tokens) {
  if (kv_caches_.empty()) {
    return absl::FailedPreconditionError("generation: StartGeneration first");
  }
  const ModelShape& shape = model_->shape();
  const int count = static_cast<int>(tokens.size());
  std::vector<GenerationChunk> chunks;
  for (int c = 0; c < model_->num_chunks(); ++c) {
    const ModelPlacement& placement = model_->chunk(c).layout().placement();
    chunks.push_back({placement.has_embedding, placement.has_head, placement.local_vocab(shape)});
  }
  const int64_t first = generated_positions_;
  generated_positions_ += count;
  return RunGenerationStep(*groups_, chunks, v_shape_, count, shape.hidden, shape.vocab, first,
                           [&](int c, const float* hidden_in, float* out) {
                             return model_->chunk(c).Decode(&kv_caches_[c], tokens.data(),
                                                            hidden_in, count, out);
                           });
}

}  // namespace mtrain
