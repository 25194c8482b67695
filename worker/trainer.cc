#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spec/job_spec_validation.h"
#include "plan/layer_partition.h"
#include "kernels/cuda_device_query.h"
#include "kernels/grad_norm.h"
#include "checkpoint/checkpoint.h"
#include "worker/engine/cuda/cuda_engine.h"
#include "worker/engine/data/data_source.h"
#include "worker/engine/engine_choice.h"
#include "worker/engine/flops.h"
#include "worker/engine/memory_limits.h"
#include "worker/engine/rank_allocation_estimate.h"
#include "checkpoint/safetensors.h"

namespace mtrain {
namespace {

// Tags of the weight-gather and checkpoint-record messages on the world group: above every
// pipeline tag (microbatch < 2^32), below the 2^55 communicators accept.
constexpr uint64_t kGatherTag = uint64_t{1} << 54;
constexpr uint64_t kRecordSizeTag = kGatherTag + 1;
constexpr uint64_t kRecordTag = kGatherTag + 2;

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
  return tp;
}

// The chunk placements of the rank at `coords`, derived from the spec alone (every rank
// can compute every other rank's layout, which the weight gather relies on).
absl::StatusOr<std::vector<ModelPlacement>> PlacementsOf(const JobSpec& spec, int tp, int pp) {
  const ParallelSpec& par = spec.parallel();
  ASSIGN_OR_RETURN(
      std::vector<LayerRange> ranges,
      PartitionLayers(spec.model().num_layers(), par.pipeline(), par.virtual_stages(), pp));
  std::vector<ChunkLayers> layers;
  for (const LayerRange& r : ranges) layers.push_back({r.first_layer(), r.num_layers()});
  return ChunkPlacements(layers, pp, par.pipeline(), par.tensor(), tp);
}

bool IsTensorSharded(const ParamTensor& t) { return t.local_shape != t.global_shape; }

// The flat-buffer ranges of the tensors `keep` selects, adjacent ones merged (the whole
// model on one rank is a single range).
std::vector<cuda::FlatRange> MergedRanges(const std::vector<ParamTensor>& tensors,
                                          const std::function<bool(const ParamTensor&)>& keep) {
  std::vector<const ParamTensor*> kept;
  for (const ParamTensor& t : tensors) {
    if (keep(t)) kept.push_back(&t);
  }
  std::sort(kept.begin(), kept.end(),
            [](const ParamTensor* a, const ParamTensor* b) { return a->offset < b->offset; });
  std::vector<cuda::FlatRange> ranges;
  for (const ParamTensor* t : kept) {
    if (!ranges.empty() && ranges.back().begin + ranges.back().count == t->offset) {
      ranges.back().count += t->size;
    } else {
      ranges.push_back({t->offset, t->size});
    }
  }
  return ranges;
}

}  // namespace

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Assignment& assignment,
                                                         RankGroups groups,
                                                         const TrainerOptions& options) {
  const JobSpec& spec = assignment.spec();
  const ParallelSpec& par = spec.parallel();
  const RankCoordinates& rank = assignment.rank();
  // The engine: CPU, or CUDA where the spec and the machine allow (engine_choice.h). A job
  // that asked for the GPU never silently trains on the CPU.
  const absl::StatusOr<std::vector<CudaDeviceInfo>> gpus = QueryCudaDevices();
  ASSIGN_OR_RETURN(const EngineChoice engine, ChooseEngine(spec, gpus.status()));
  if (rank.world_size() != par.tensor() * par.pipeline() * par.data()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.rank.world_size ", rank.world_size(), " != tensor * pipeline * data (",
        par.tensor() * par.pipeline() * par.data(), ")"));
  }
  // Before anything is allocated: a spec that passes validation but cannot fit on this
  // machine is refused naming what it needs and what there is, instead of aborting in
  // std::bad_alloc halfway through building the model.
  ASSIGN_OR_RETURN(const RankAllocationEstimate need,
                   EstimateRankAllocation(assignment, engine.kind != EngineKind::kCuda));
  RETURN_IF_ERROR(CheckMemoryFits(
      absl::StrCat("rank ", rank.global_rank(), " of job ", assignment.job_id()), need.total(),
      absl::StrCat(need.Describe(),
                   "; lower model sizes or parallel.micro_batch_size, set train.recompute, or "
                   "spread the model over more tensor or pipeline ranks"),
      options.memory_limits.has_value() ? *options.memory_limits : CurrentMemoryLimits()));
  if (groups.tensor == nullptr || groups.data == nullptr || groups.model == nullptr ||
      groups.world == nullptr) {
    return absl::InvalidArgumentError("trainer needs the tensor, data, model and world groups");
  }
  std::unique_ptr<Trainer> t(new Trainer);
  t->assignment_ = assignment;
  t->groups_ = std::move(groups);
  t->engine_note_ = engine.note;
  t->memory_estimate_ = need;
  t->shape_ = ShapeFromSpec(spec);
  t->micro_batch_ = par.micro_batch_size();
  t->microbatches_ = NumMicrobatches(par);
  ASSIGN_OR_RETURN(t->data_, OpenDataset(spec.data()));
  RETURN_IF_ERROR(CheckTokensFitVocab(*t->data_, spec.model().vocab_size()));
  ASSIGN_OR_RETURN(
      SequenceSampler sampler,
      SequenceSampler::Create(t->data_->size(), t->shape_.seq_length, spec.train().seed()));
  t->sampler_ = std::make_unique<SequenceSampler>(sampler);

  std::vector<ChunkLayers> layers;
  for (const LayerRange& r : assignment.layers()) {
    layers.push_back({r.first_layer(), r.num_layers()});
  }
  ModelOptions model_options;
  model_options.dropout = spec.train().dropout();
  model_options.recompute = spec.train().recompute();
  model_options.seed = spec.train().seed();
  const bool zero = par.zero_stage() == 1 && par.data() > 1;
  ASSIGN_OR_RETURN(
      t->model_, RankModel::Create(t->shape_,
                                   ChunkPlacements(layers, rank.pp_rank(), par.pipeline(),
                                                   par.tensor(), rank.tp_rank()),
                                   t->micro_batch_, model_options,
                                   TensorGroupOf(t->groups_.tensor.get()), zero ? par.data() : 1));
  t->model_->Initialize(spec.train().seed());
  if (assignment.schedule().num_microbatches() != t->microbatches_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.schedule.num_microbatches ", assignment.schedule().num_microbatches(),
        " != ", t->microbatches_, " microbatches per replica of the spec"));
  }
  t->cpu_stages_ = std::make_unique<RankModelStages>(t->model_.get());
  t->executor_ =
      std::make_unique<PipelineExecutor>(t->cpu_stages_.get(), assignment.schedule(),
                                         rank.pp_rank(), par.pipeline(), t->groups_.world.get());
  std::vector<GradientRange> grad_ranges;
  for (const ParamTensor& tensor : t->model_->tensors()) {
    grad_ranges.push_back({tensor.offset, tensor.size});
  }
  t->buckets_ = std::make_unique<GradientBuckets>(grad_ranges, t->model_->grads(),
                                                  t->groups_.data.get(), options.bucket_elements);
  size_t begin = 0;
  size_t end = t->model_->num_params();
  if (zero) {
    t->shard_size_ = t->model_->buffer_size() / par.data();
    t->shard_begin_ = t->shard_size_ * rank.dp_rank();
    begin = std::min(t->shard_begin_, end);
    end = std::min(t->shard_begin_ + t->shard_size_, end);
  }
  t->optimizer_ =
      std::make_unique<AdamWOptimizer>(t->model_->tensors(), spec.optimizer(), begin, end);
  t->flops_per_step_ = ModelFlopsPerIteration(t->shape_, par.global_batch_size());
  t->peak_flops_ = PeakFlopsPerDevice(options.device_kind) * rank.world_size();
  if (engine.kind == EngineKind::kCuda) {
    // Ranks of one machine take its GPUs in turn (one worker per GPU gives each rank its
    // own; several ranks may share one, as in the tests on one GPU).
    cuda::CudaEngineConfig config;
    for (int c = 0; c < t->model_->num_chunks(); ++c) {
      config.chunks.push_back(&t->model_->chunk_layout(c));
    }
    config.buffer_size = t->model_->buffer_size();
    // Tensor-parallel sums with NCCL where train_main connected a GPU tensor group,
    // otherwise through host memory and the Gloo tensor group.
    config.tensor_group = t->groups_.device_tensor != nullptr ? t->groups_.device_tensor.get()
                                                              : t->groups_.tensor.get();
    config.tensor_group_on_device = t->groups_.device_tensor != nullptr;
    // AdamW's range: the whole model, or this replica's ZeRO-1 slice (as the CPU optimizer).
    config.optimizer_begin = t->optimizer_->begin();
    config.optimizer_end = t->optimizer_->end();
    config.micro_batch = t->micro_batch_;
    config.model = model_options;
    config.precision =
        spec.precision() == PRECISION_UNSPECIFIED ? PRECISION_FP32 : spec.precision();
    config.optimizer = spec.optimizer();
    // fp16 needs Megatron's dynamic loss scaling (loss_scaler.h); bf16 has fp32's range.
    if (config.precision == PRECISION_FP16) t->scaler_ = std::make_unique<DynamicLossScaler>();
    config.device = CudaDeviceForRank(rank.global_rank(), static_cast<int>(gpus->size()));
    ASSIGN_OR_RETURN(t->cuda_, cuda::CudaEngine::Create(config));
    // Tensor or pipeline parallelism: the schedule's actions run on the GPU chunks.
    t->executor_ =
        std::make_unique<PipelineExecutor>(t->cuda_.get(), assignment.schedule(), rank.pp_rank(),
                                           par.pipeline(), t->groups_.world.get());
    // Data-parallel sums overlapped with the backward: on the GPU where an NCCL data
    // group exists (train_main connects one), otherwise through the host and the Gloo
    // data group.
    if (t->groups_.device_data != nullptr) {
      t->cuda_->SetDataParallelGroup(t->groups_.device_data.get(), /*on_device=*/true);
    } else {
      t->cuda_->SetDataParallelGroup(t->groups_.data.get(), /*on_device=*/false);
    }
    t->engine_note_ += absl::StrCat(", ", t->cuda_->device_name(), " #", config.device, ", ",
                                    Precision_Name(config.precision));
    t->peak_flops_ = PeakFlopsPerDevice("cuda") * rank.world_size();
    RETURN_IF_ERROR(t->SyncToDevice());
  }
  return t;
}

bool Trainer::computes_loss() const {
  return assignment_.rank().pp_rank() == assignment_.spec().parallel().pipeline() - 1;
}

absl::StatusOr<std::vector<Microbatch>> Trainer::LoadMicrobatches(long long step) const {
  const int S = shape_.seq_length;
  std::vector<Microbatch> microbatches(microbatches_);
  for (int k = 0; k < microbatches_; ++k) {
    // Microbatch k of replica r is microbatch r * m + k of the global batch.
    const int64_t first =
        (static_cast<int64_t>(assignment_.rank().dp_rank()) * microbatches_ + k) * micro_batch_;
    std::vector<int64_t> indices(micro_batch_);
    for (int i = 0; i < micro_batch_; ++i) indices[i] = first + i;
    Microbatch& mb = microbatches[k];
    mb.id = {step, first};
    mb.tokens.resize(static_cast<size_t>(micro_batch_) * S);
    mb.targets.resize(static_cast<size_t>(micro_batch_) * S);
    RETURN_IF_ERROR(sampler_->Fill(*data_, step, indices, absl::MakeSpan(mb.tokens),
                                   absl::MakeSpan(mb.targets)));
  }
  return microbatches;
}

bool Trainer::IsTiedCopyElsewhere(const ParamTensor& tensor) const {
  // With pipelining the tied embedding lives on the first and the last stage; its
  // gradient is all-reduced between them, and the first stage's copy is the one counted.
  return tensor.name == "wte" && assignment_.spec().parallel().pipeline() > 1 &&
         assignment_.rank().pp_rank() != 0;
}

bool Trainer::IsCountedInNorm(const ParamTensor& tensor) const {
  // Replicated across tensor ranks: counted on tensor rank 0 only.
  if (!IsTensorSharded(tensor) && assignment_.rank().tp_rank() != 0) return false;
  return !IsTiedCopyElsewhere(tensor);
}

double Trainer::GradientSumOfSquares() const {
  double sum = 0;
  for (const ParamTensor& t : model_->tensors()) {
    if (IsCountedInNorm(t)) sum += cpu::SumOfSquares(model_->grads() + t.offset, t.size);
  }
  return sum;
}

bool Trainer::WholeModelOnRank() const {
  const ParallelSpec& par = assignment_.spec().parallel();
  return model_->num_chunks() == 1 && par.tensor() == 1 && par.pipeline() == 1;
}

absl::StatusOr<StepMetrics> Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const long long step = step_ + 1;
  const JobSpec& spec = assignment_.spec();
  const ParallelSpec& par = spec.parallel();
  const double global_tokens = static_cast<double>(par.global_batch_size()) * shape_.seq_length;
  ASSIGN_OR_RETURN(const std::vector<Microbatch> microbatches, LoadMicrobatches(step));

  double loss_sum = 0;
  double host_collective_seconds = 0;
  // fp16: the backward is seeded with the scaled loss so that small gradients survive.
  const double loss_scale = scaler_ != nullptr ? scaler_->scale() : 1.0;
  if (cuda_ != nullptr) {
    const float d_loss = static_cast<float>(loss_scale / global_tokens);
    // Both paths sum the data-parallel replicas' gradients during the last backward
    // (SetDataParallelGroup above).
    if (WholeModelOnRank()) {
      ASSIGN_OR_RETURN(loss_sum, cuda_->ForwardBackward(microbatches, d_loss));
    } else {
      RETURN_IF_ERROR(cuda_->ZeroGradients());
      absl::StatusOr<double> run = executor_->RunStep(microbatches, d_loss);
      const absl::Status summed = cuda_->WaitForGradientSums();  // on failure too
      ASSIGN_OR_RETURN(loss_sum, std::move(run));
      RETURN_IF_ERROR(summed);
      if (const ParamTensor* wte = model_->Find("wte"); wte != nullptr && par.pipeline() > 1) {
        // The tied embedding's two copies (first and last stage) sum their gradients,
        // each already summed over its replicas.
        const auto exchange_start = std::chrono::steady_clock::now();
        RETURN_IF_ERROR(cuda_->AllReduceGradients(groups_.embedding.get(), /*on_device=*/false,
                                                  {{wte->offset, wte->size}}));
        host_collective_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - exchange_start)
                .count();
      }
    }
    host_collective_seconds += cuda_->last_all_reduce_seconds();
  } else {
    model_->ZeroGrads();
    buckets_->StartStep();
    const bool tied_elsewhere = par.pipeline() > 1;
    const GradReadyHook hook = [&](const ParamTensor& tensor) {
      // The tied embedding is final only after the exchange between the stages below.
      if (tied_elsewhere && tensor.name == "wte") return;
      buckets_->MarkReady(tensor.offset);
    };
    cpu_stages_->SetFinalGradsHook(&hook);
    absl::StatusOr<double> run =
        executor_->RunStep(microbatches, static_cast<float>(1.0 / global_tokens));
    cpu_stages_->SetFinalGradsHook(nullptr);
    ASSIGN_OR_RETURN(loss_sum, std::move(run));
    if (const ParamTensor* wte = model_->Find("wte"); wte != nullptr && tied_elsewhere) {
      RETURN_IF_ERROR(
          groups_.embedding->AllReduce(model_->grads() + wte->offset, wte->size, ReduceOp::kSum));
      buckets_->MarkReady(wte->offset);
    }
    RETURN_IF_ERROR(buckets_->Finish());
  }

  StepMetrics metrics;
  if (computes_loss()) {
    RETURN_IF_ERROR(groups_.data->AllReduce(&loss_sum, 1, ReduceOp::kSum));
    metrics.set_loss(loss_sum / global_tokens);
  }
  // fp16: unscale; an overflow on any rank of the replica skips the step everywhere (the
  // replicas saw the same summed gradients, so they agree already).
  bool apply = true;
  if (scaler_ != nullptr) {
    ASSIGN_OR_RETURN(const bool overflow,
                     cuda_->UnscaleGradients(static_cast<float>(1.0 / loss_scale)));
    double found = overflow ? 1.0 : 0.0;
    RETURN_IF_ERROR(groups_.model->AllReduce(&found, 1, ReduceOp::kMax));
    apply = scaler_->Update(found > 0);
  }
  double grad_norm = 0;
  // As Megatron: the schedule advances with applied updates only (an fp16 step skipped for
  // overflow moves neither the weights nor the learning rate). Without loss scaling every
  // step is applied. A skipped step reports the rate its update will get when applied.
  const long long update = step - skipped_steps() + (apply ? 0 : 1);
  const double lr = optimizer_->LearningRate(update);
  if (apply) {
    double sum_squares = 0;
    if (cuda_ != nullptr) {
      ASSIGN_OR_RETURN(
          sum_squares,
          cuda_->GradientSumOfSquares(MergedRanges(
              model_->tensors(), [this](const ParamTensor& t) { return IsCountedInNorm(t); })));
    } else {
      sum_squares = GradientSumOfSquares();
    }
    RETURN_IF_ERROR(groups_.model->AllReduce(&sum_squares, 1, ReduceOp::kSum));
    grad_norm = std::sqrt(sum_squares);
    if (!std::isfinite(grad_norm)) {
      return absl::InternalError(
          absl::StrCat("step ", step, ": gradient norm is not finite: training diverged"));
    }
    const double clip = cpu::ClipCoefficient(grad_norm, spec.optimizer().grad_clip());
    if (cuda_ != nullptr) {
      RETURN_IF_ERROR(cuda_->Update(update, lr, clip));
    } else {
      optimizer_->Update(model_->params(), model_->grads(), step, lr, clip);
    }
  }
  if (shard_size_ > 0 && cuda_ != nullptr) {
    // ZeRO-1 on the GPU: each replica updated its slice of the masters; gather them.
    RETURN_IF_ERROR(groups_.device_data != nullptr
                        ? cuda_->AllGatherParameters(groups_.device_data.get(), true, shard_size_)
                        : cuda_->AllGatherParameters(groups_.data.get(), false, shard_size_));
  } else if (shard_size_ > 0) {
    // ZeRO-1: each replica updated its slice; every replica needs all of them.
    std::vector<float> gathered(model_->buffer_size());
    RETURN_IF_ERROR(
        groups_.data->AllGather(model_->params() + shard_begin_, gathered.data(), shard_size_));
    std::copy(gathered.begin(), gathered.end(), model_->params());
  }
  step_ = step;

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics.set_job_id(assignment_.job_id());
  metrics.set_generation(assignment_.generation());
  metrics.set_global_rank(assignment_.rank().global_rank());
  metrics.set_step(step);
  metrics.set_lr(lr);
  metrics.set_grad_norm(grad_norm);
  metrics.set_step_seconds(seconds);
  metrics.set_tokens_per_second(global_tokens / seconds);
  metrics.set_model_tflops(flops_per_step_ / seconds / 1e12);
  metrics.set_mfu(flops_per_step_ / seconds / peak_flops_);
  metrics.set_loss_scale(scaler_ != nullptr ? scaler_->scale() : 1.0);
  metrics.set_skipped_steps(skipped_steps());
  metrics.set_collective_seconds(
      cuda_ != nullptr ? host_collective_seconds
                       : std::max(0.0, seconds - executor_->last_timings().compute_seconds));
  metrics.set_pipeline_wait_seconds(executor_->last_timings().wait_seconds);
  if (cuda_ != nullptr) {
    metrics.set_device_memory_peak_bytes(static_cast<int64_t>(cuda::DeviceBufferPeakBytes()));
  }
  // The engine goes to the coordinator once, with rank 0's first step of this process.
  if (!engine_reported_ && assignment_.rank().global_rank() == 0) {
    metrics.set_engine(engine_note_);
    engine_reported_ = true;
  }
  return metrics;
}

absl::StatusOr<std::map<std::string, FullTensor>> Trainer::GatherWeights() {
  const JobSpec& spec = assignment_.spec();
  const ParallelSpec& par = spec.parallel();
  const int me = assignment_.rank().global_rank();
  ASSIGN_OR_RETURN(const RankGrid grid, RankGrid::Create(par.tensor(), par.pipeline(), par.data()));
  RETURN_IF_ERROR(SyncFromDevice());
  Communicator& world = *groups_.world;
  // Replica 0 holds every parameter once (data-parallel replicas are identical).
  if (me != 0) {
    if (grid.Coordinates(me).dp == 0) {
      RETURN_IF_ERROR(
          world.Send(model_->params(), model_->num_params() * sizeof(float), 0, kGatherTag));
    }
    return std::map<std::string, FullTensor>();
  }
  std::map<std::string, FullTensor> full;
  std::map<std::string, std::vector<char>> written;  // which elements are filled
  for (int rank = 0; rank < grid.world_size(); ++rank) {
    const GridCoordinates c = grid.Coordinates(rank);
    if (c.dp != 0) continue;
    ASSIGN_OR_RETURN(std::vector<ModelPlacement> placements, PlacementsOf(spec, c.tp, c.pp));
    std::vector<ParamTensor> tensors;
    size_t offset = 0;
    for (const ModelPlacement& p : placements) {
      ParameterLayout layout(shape_, p, offset);
      offset = layout.end_offset();
      tensors.insert(tensors.end(), layout.tensors().begin(), layout.tensors().end());
    }
    std::vector<float> received;
    const float* values = model_->params();
    if (rank != 0) {
      received.resize(offset);
      RETURN_IF_ERROR(world.Recv(received.data(), offset * sizeof(float), rank, kGatherTag));
      values = received.data();
    }
    for (const ParamTensor& t : tensors) {
      FullTensor& out = full[t.name];
      std::vector<char>& filled = written[t.name];
      if (out.values.empty()) {
        out.shape = t.global_shape;
        int64_t n = 1;
        for (int64_t d : t.global_shape) n *= d;
        out.values.assign(n, 0.0f);
        filled.assign(n, 0);
      }
      for (size_t i = 0; i < t.size; ++i) {
        const int64_t g = GlobalIndex(t, static_cast<int64_t>(i));
        const float v = values[t.offset + i];
        if (filled[g] && out.values[g] != v) {
          return absl::InternalError(absl::StrCat("replicas of ", t.name, " disagree at element ",
                                                  g, " (rank ", rank, " has ", v, ", another rank ",
                                                  out.values[g], ")"));
        }
        out.values[g] = v;
        filled[g] = 1;
      }
    }
  }
  return full;
}

absl::Status Trainer::FullMoments(std::vector<float>* m, std::vector<float>* v) {
  m->assign(model_->buffer_size(), 0.0f);
  v->assign(model_->buffer_size(), 0.0f);
  const size_t begin = optimizer_->begin();
  std::copy(optimizer_->first_moment().begin(), optimizer_->first_moment().end(),
            m->begin() + begin);
  std::copy(optimizer_->second_moment().begin(), optimizer_->second_moment().end(),
            v->begin() + begin);
  if (shard_size_ == 0) return absl::OkStatus();
  // ZeRO-1: every replica holds 1/d of the moments; gather them like the parameters.
  for (std::vector<float>* moments : {m, v}) {
    std::vector<float> gathered(model_->buffer_size());
    RETURN_IF_ERROR(
        groups_.data->AllGather(moments->data() + shard_begin_, gathered.data(), shard_size_));
    *moments = std::move(gathered);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Trainer::SaveCheckpoint(const std::string& root,
                                                    CheckpointUploader* uploader) {
  const JobSpec& spec = assignment_.spec();
  const ParallelSpec& par = spec.parallel();
  const RankCoordinates& me = assignment_.rank();
  const std::string dir = absl::StrCat(root, "/", CheckpointDirName(step_));
  RETURN_IF_ERROR(SyncFromDevice());
  std::vector<float> m, v;
  RETURN_IF_ERROR(FullMoments(&m, &v));
  ASSIGN_OR_RETURN(const RankGrid grid, RankGrid::Create(par.tensor(), par.pipeline(), par.data()));
  Communicator& world = *groups_.world;
  // Data-parallel replicas are identical: replica 0 writes.
  std::string records;
  if (me.dp_rank() == 0) {
    ASSIGN_OR_RETURN(RankShardRecords mine,
                     WriteRankShards(dir, me.global_rank(), step_, ShardsOf(model_->tensors()),
                                     model_->params(), m.data(), v.data()));
    if (uploader != nullptr) {
      // Uploaded before the records go to rank 0: rank 0 commits only after every
      // writer's file is in the store.
      const std::string file = ShardFileName(me.global_rank());
      RETURN_IF_ERROR(uploader->UploadShard(step_, dir, file));
      std::error_code ignored;
      std::filesystem::remove(absl::StrCat(dir, "/", file), ignored);
    }
    records = SerializeRankShardRecords(mine);
  }
  if (me.global_rank() != 0) {
    if (me.dp_rank() == 0) {
      const uint64_t size = records.size();
      RETURN_IF_ERROR(world.Send(&size, sizeof(size), 0, kRecordSizeTag));
      RETURN_IF_ERROR(world.Send(records.data(), records.size(), 0, kRecordTag));
    }
  } else {
    std::vector<RankShardRecords> all;
    for (int rank = 0; rank < grid.world_size(); ++rank) {
      if (grid.Coordinates(rank).dp != 0) continue;
      std::string bytes = records;
      if (rank != 0) {
        uint64_t size = 0;
        RETURN_IF_ERROR(world.Recv(&size, sizeof(size), rank, kRecordSizeTag));
        bytes.resize(size);
        RETURN_IF_ERROR(world.Recv(bytes.data(), size, rank, kRecordTag));
      }
      ASSIGN_OR_RETURN(RankShardRecords parsed, ParseRankShardRecords(bytes));
      all.push_back(std::move(parsed));
    }
    TrainingState state;
    state.set_step(step_);
    state.set_data_position(step_ * par.global_batch_size());
    state.set_loss_scale(1.0);
    if (scaler_ != nullptr) scaler_->SaveTo(&state);
    SetRngSeed(spec.train().seed(), &state);
    ASSIGN_OR_RETURN(const CheckpointManifest manifest,
                     BuildManifest(assignment_.job_id(), {par.tensor(), par.pipeline(), par.data()},
                                   state, all));
    // Last: only now does the checkpoint exist.
    if (uploader != nullptr) {
      RETURN_IF_ERROR(uploader->CommitManifest(step_, manifest));
    } else {
      RETURN_IF_ERROR(WriteManifest(dir, manifest));
    }
  }
  // Nobody moves on (or reads the checkpoint) before the manifest is written.
  RETURN_IF_ERROR(world.Barrier());
  return dir;
}

std::vector<std::string> Trainer::CheckpointFilesNeeded(const CheckpointManifest& manifest) const {
  return FilesOverlapping(manifest, ShardsOf(model_->tensors()), /*with_moments=*/true);
}

absl::Status Trainer::LoadCheckpoint(const std::string& dir, bool subset) {
  // Each rank reads only the files its shards overlap, checking each one's CRC-32C.
  ASSIGN_OR_RETURN(Checkpoint checkpoint,
                   OpenCheckpoint(dir, subset ? ChecksumVerification::kOnFirstUseSubset
                                              : ChecksumVerification::kOnFirstUse));
  // Every tensor of the checkpoint must be one of this model's: a checkpoint of a deeper
  // model (or another architecture) would otherwise load its common part and silently
  // drop the rest.
  {
    const ParameterLayout whole(shape_, WholeModel(shape_), 0);
    std::set<std::string> names;
    for (const ParamTensor& t : whole.tensors()) {
      names.insert(t.name);
      names.insert(FirstMomentName(t.name));
      names.insert(SecondMomentName(t.name));
    }
    for (const TensorEntry& entry : checkpoint.manifest().tensors()) {
      if (names.count(entry.name()) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, " holds tensor ", entry.name(), ", which the spec's model (", shape_.num_layers,
            " layers) does not have [rule: a checkpoint loads only into the "
            "model it was written for]"));
      }
    }
  }
  const TrainingState& state = checkpoint.manifest().state();
  const bool parameters_only =
      !model_->tensors().empty() &&
      checkpoint.Find(FirstMomentName(model_->tensors().front().name)) == nullptr;
  if (parameters_only) {
    // Initial weights: nothing random has been drawn yet, so the seed need not match.
    if (state.step() != 0) {
      return absl::DataLossError(absl::StrCat(
          dir, " has no optimizer moments but is at step ", state.step(),
          " [rule: only step-0 checkpoints (initial weights) may be parameters only]"));
    }
    RETURN_IF_ERROR(LoadRankTensors(checkpoint, ShardsOf(model_->tensors()), model_->params(),
                                    nullptr, nullptr));
    step_ = 0;
    return SyncToDevice();
  }
  ASSIGN_OR_RETURN(const uint64_t seed, GetRngSeed(state));
  if (seed != assignment_.spec().train().seed()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, " was trained with train.seed ", seed, " but the spec says ",
                     assignment_.spec().train().seed(), " [rule: a resumed run keeps its seed]"));
  }
  std::vector<float> m(model_->buffer_size()), v(model_->buffer_size());
  RETURN_IF_ERROR(LoadRankTensors(checkpoint, ShardsOf(model_->tensors()), model_->params(),
                                  m.data(), v.data()));
  const size_t begin = optimizer_->begin();
  std::copy(m.begin() + begin, m.begin() + begin + optimizer_->first_moment().size(),
            optimizer_->first_moment().begin());
  std::copy(v.begin() + begin, v.begin() + begin + optimizer_->second_moment().size(),
            optimizer_->second_moment().begin());
  if (scaler_ != nullptr) RETURN_IF_ERROR(scaler_->RestoreFrom(state));
  step_ = state.step();
  return SyncToDevice();
}

absl::Status Trainer::SyncFromDevice() {
  if (cuda_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(cuda_->DownloadParameters(model_->params()));
  // The engine keeps moments for the optimizer's range exactly (the ZeRO-1 slice or the
  // whole model), as the host optimizer does.
  return cuda_->DownloadMoments(optimizer_->first_moment().data(),
                                optimizer_->second_moment().data());
}

absl::Status Trainer::SyncToDevice() {
  if (cuda_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(cuda_->UploadParameters(model_->params()));
  return cuda_->UploadMoments(optimizer_->first_moment().data(),
                              optimizer_->second_moment().data());
}

absl::Status Trainer::SaveWeights(const std::string& path) {
  ASSIGN_OR_RETURN(const auto full, GatherWeights());
  if (assignment_.rank().global_rank() != 0) return absl::OkStatus();
  SafetensorsFile file;
  for (const auto& [name, tensor] : full) {
    file.tensors[name] = MakeF32Tensor(tensor.shape, tensor.values.data());
  }
  file.metadata["step"] = std::to_string(step_);
  return WriteSafetensors(path, file);
}

}  // namespace mtrain
