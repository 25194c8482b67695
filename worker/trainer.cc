#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "common/status_macros.h"
#include "data/data_source.h"
#include "kernels/grad_norm.h"
#include "model/model_flops.h"
#include "model/transformer_config.h"
#include "plan/pipeline_placement.h"
#include "plan/rank_grid.h"
#include "spec/job_spec_validation.h"
#include "worker/engine/cpu/cpu_engine.h"
#include "worker/engine/cuda/cuda_training_engine.h"
#include "worker/engine/flops.h"
#include "worker/engine/memory_limits.h"
#include "worker/engine/rank_allocation_estimate.h"
#include "worker/engine/recompute_options.h"
#include "worker/parallel/counting_communicator.h"

namespace mtrain {
namespace {

// Ranks on a host -> hosts that run that many; static mode (no map) runs every rank on one
// host.
std::map<int, int> HostsByRankCount(const Assignment& assignment) {
  std::map<int, int> hosts(assignment.hosts_by_rank_count().begin(),
                           assignment.hosts_by_rank_count().end());
  if (hosts.empty()) hosts[std::max(1, assignment.rank().world_size())] = 1;
  return hosts;
}

// Tags of the weight-gather and checkpoint-record messages on the world group: above every
// pipeline tag (microbatch < 2^32), below the 2^55 communicators accept.
constexpr uint64_t kGatherTag = uint64_t{1} << 54;
constexpr uint64_t kRecordSizeTag = kGatherTag + 1;
constexpr uint64_t kRecordTag = kGatherTag + 2;
constexpr uint64_t kDescriptionSizeTag = kGatherTag + 3;
constexpr uint64_t kDescriptionTag = kGatherTag + 4;

// Shard descriptions travel in this message: `tensors` only, each with one shard (its
// global offset and local shape). Every rank describes its own tensors; nobody derives
// another rank's layout.
std::string SerializeShardDescriptions(const std::vector<ParamTensor>& tensors) {
  CheckpointManifest descriptions;
  for (const ParamTensor& t : tensors) {
    TensorEntry* entry = descriptions.add_tensors();
    entry->set_name(t.name);
    entry->mutable_global_shape()->Add(t.global_shape.begin(), t.global_shape.end());
    entry->set_dtype(kCheckpointDtypeF32);
    TensorShard* shard = entry->add_shards();
    shard->mutable_global_offset()->Add(t.global_offset.begin(), t.global_offset.end());
    shard->mutable_shape()->Add(t.local_shape.begin(), t.local_shape.end());
  }
  return descriptions.SerializeAsString();
}

// The tensors `bytes` describe, their values packed one after another in that order
// (ParamTensor::offset into the packed values). DATA_LOSS if they do not parse or do not
// describe a shard of their global shape.
absl::StatusOr<std::vector<ParamTensor>> ParseShardDescriptions(const std::string& bytes,
                                                                int from_rank) {
  CheckpointManifest descriptions;
  if (!descriptions.ParseFromString(bytes)) {
    return absl::DataLossError(
        absl::StrCat("weight gather: rank ", from_rank, "'s shard descriptions do not parse"));
  }
  std::vector<ParamTensor> tensors;
  size_t offset = 0;
  for (const TensorEntry& entry : descriptions.tensors()) {
    if (entry.shards_size() != 1 ||
        entry.shards(0).global_offset_size() != entry.global_shape_size() ||
        entry.shards(0).shape_size() != entry.global_shape_size()) {
      return absl::DataLossError(
          absl::StrCat("weight gather: rank ", from_rank, " describes ", entry.name(),
                       " without exactly one shard of its number of dimensions"));
    }
    ParamTensor t;
    t.name = entry.name();
    t.global_shape.assign(entry.global_shape().begin(), entry.global_shape().end());
    t.global_offset.assign(entry.shards(0).global_offset().begin(),
                           entry.shards(0).global_offset().end());
    t.local_shape.assign(entry.shards(0).shape().begin(), entry.shards(0).shape().end());
    size_t size = 1;
    for (size_t d = 0; d < t.local_shape.size(); ++d) {
      if (t.local_shape[d] < 0 || t.global_offset[d] < 0 ||
          t.global_offset[d] + t.local_shape[d] > t.global_shape[d]) {
        return absl::DataLossError(absl::StrCat("weight gather: rank ", from_rank, "'s shard of ",
                                                t.name, " lies outside its global shape"));
      }
      size *= static_cast<size_t>(t.local_shape[d]);
    }
    t.offset = offset;
    t.size = size;
    offset += size;
    tensors.push_back(std::move(t));
  }
  return tensors;
}

// `tensors`' values from the flat buffer `params`, packed in the order of `tensors`.
std::vector<float> PackedValues(const std::vector<ParamTensor>& tensors, const float* params) {
  std::vector<float> packed;
  for (const ParamTensor& t : tensors) {
    packed.insert(packed.end(), params + t.offset, params + t.offset + t.size);
  }
  return packed;
}

bool IsTensorSharded(const ParamTensor& t) { return t.local_shape != t.global_shape; }

}  // namespace

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Assignment& assignment,
                                                         RankGroups groups,
                                                         const TrainerOptions& options) {
  const JobSpec& spec = assignment.spec();
  const ParallelSpec& par = spec.parallel();
  const RankCoordinates& rank = assignment.rank();
  // The engine was chosen by the caller (engine_choice.h): a job that asked for the GPU
  // never silently trains on the CPU.
  const bool cuda = options.engine.kind == EngineKind::kCuda;
  if (rank.world_size() != par.tensor() * par.pipeline() * par.data()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.rank.world_size ", rank.world_size(), " != tensor * pipeline * data (",
        par.tensor() * par.pipeline() * par.data(), ")"));
  }
  // Before anything is allocated: a spec that passes validation but cannot fit on this
  // machine is refused naming what it needs and what there is, instead of aborting in
  // std::bad_alloc halfway through building the model.
  ASSIGN_OR_RETURN(const RankAllocationEstimate need, EstimateRankAllocation(assignment, !cuda));
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
  t->engine_note_ = options.engine.note;
  t->uses_cuda_ = cuda;
  t->memory_estimate_ = need;
  t->shape_ = ShapeFromSpec(spec);
  t->micro_batch_ = par.micro_batch_size();
  t->microbatches_ = NumMicrobatches(par);
  if (t->is_bert()) {
    ASSIGN_OR_RETURN(t->bert_samples_, OpenBertSplitSamples(spec));
  } else {
    ASSIGN_OR_RETURN(t->samples_, OpenSplitSamples(spec));
  }
  if (assignment.schedule().num_microbatches() != t->microbatches_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.schedule.num_microbatches ", assignment.schedule().num_microbatches(),
        " != ", t->microbatches_, " microbatches per replica of the spec"));
  }

  // The engine, from the layer ranges the assignment hands this rank.
  std::vector<ChunkLayers> layers;
  for (const LayerRange& r : assignment.layers()) {
    layers.push_back({r.first_layer(), r.num_layers()});
  }
  const bool zero = par.zero_stage() == 1 && par.data() > 1;
  TrainingEngineConfig config;
  config.shape = t->shape_;
  config.chunks = ChunkPlacements(layers, spec.model().num_layers(), par.tensor(), rank.tp_rank());
  config.micro_batch = t->micro_batch_;
  config.model.dropout = spec.train().dropout();
  ApplyRecompute(spec.train(), &config.model);
  config.model.sequence_parallel = par.sequence_parallel() && par.tensor() > 1;
  config.model.seed = spec.train().seed();
  config.optimizer = spec.optimizer();
  config.precision = spec.precision() == PRECISION_UNSPECIFIED ? PRECISION_FP32 : spec.precision();
  config.pipeline = par.pipeline();
  config.v_shape = par.schedule() == SCHEDULE_ZB_V;
  config.zero_shards = zero ? par.data() : 1;
  config.zero_rank = rank.dp_rank();
  config.seed = spec.train().seed();
  config.bucket_elements = options.bucket_elements;
  config.cuda_device = options.cuda_device;
  config.groups = &t->groups_;
  if (cuda) {
    ASSIGN_OR_RETURN(t->engine_, cuda::CudaTrainingEngine::Create(config));
  } else {
    ASSIGN_OR_RETURN(t->engine_, CpuEngine::Create(config));
  }
  if (const std::string device = t->engine_->device_description(); !device.empty()) {
    t->engine_note_ += absl::StrCat(", ", device);
  }
  // Scatter/gather pipeline messages: on by default under tensor parallelism (sequence
  // parallelism splits them already).
  const bool sequence_parallel = par.sequence_parallel() && par.tensor() > 1;
  const bool scatter_gather =
      !sequence_parallel && (par.has_scatter_gather() ? par.scatter_gather() : par.tensor() > 1);
  // Messages in device memory (the CUDA engine with NCCL groups) go over the NCCL world
  // and tensor groups; host messages over Gloo's.
  PipelineStages& stages = t->engine_->stages();
  Communicator* p2p =
      stages.messages_on_device() ? t->groups_.device_world.get() : t->groups_.world.get();
  Communicator* tensor_group =
      stages.messages_on_device() ? t->groups_.device_tensor.get() : t->groups_.tensor.get();
  if (stages.messages_on_device()) {
    if (p2p == nullptr || (scatter_gather && par.tensor() > 1 && tensor_group == nullptr)) {
      return absl::FailedPreconditionError(
          "the engine keeps its pipeline messages on the GPU but no NCCL group connects the "
          "ranks");
    }
    // NCCL pairs a receive with the sender's sends by their order alone.
    RETURN_IF_ERROR(CheckMessagesInOrder(assignment.schedule()));
    t->engine_note_ += ", pipeline messages over NCCL";
  }
  t->executor_ = std::make_unique<PipelineExecutor>(
      &stages, assignment.schedule(), rank.pp_rank(), par.pipeline(), p2p,
      scatter_gather ? tensor_group : nullptr, sequence_parallel ? par.tensor() : 1);
  for (const ParamTensor& tensor : t->engine_->layout().tensors()) {
    if (t->IsCountedInNorm(tensor)) t->counted_in_norm_.push_back(tensor);
  }
  t->lr_schedule_ = LrScheduleOf(spec.optimizer());
  // fp16 needs Megatron's dynamic loss scaling (loss_scaler.h); bf16 has fp32's range.
  if (config.precision == PRECISION_FP16) t->scaler_ = std::make_unique<DynamicLossScaler>();
  t->flops_per_step_ = ModelFlopsPerStep(TransformerConfigOf(spec), par.global_batch_size());
  if (cuda) {
    t->peak_flops_ = GpuPeakFlops() * rank.world_size();
  } else {
    // The job's peak: each rank's share of its host (hosts taken to be like this one).
    t->peak_flops_ = 0;
    for (const auto& [ranks, hosts] : HostsByRankCount(assignment)) {
      t->peak_flops_ += hosts * ranks *
                        CpuRankPeakFlops(options.cpu_threads, ranks,
                                         /*bf16_gemms=*/config.precision == PRECISION_BF16);
    }
  }
  return t;
}

std::string Trainer::data_note() const {
  if (is_bert()) {
    std::string note = absl::StrCat("data: ", bert_samples_.train->Describe());
    if (bert_samples_.validation != nullptr) {
      absl::StrAppend(&note, "; ", bert_samples_.validation->Describe());
    }
    return note;
  }
  std::string note = absl::StrCat("data: ", samples_.train->Describe());
  if (samples_.validation != nullptr) {
    absl::StrAppend(&note, "; ", samples_.validation->Describe());
  }
  if (!samples_.blend_note.empty()) absl::StrAppend(&note, "; ", samples_.blend_note);
  return note;
}

bool Trainer::computes_loss() const {
  const ParallelSpec& par = assignment_.spec().parallel();
  return assignment_.rank().pp_rank() == LossStage(par.pipeline(), par.schedule() == SCHEDULE_ZB_V);
}

absl::StatusOr<std::vector<Microbatch>> Trainer::LoadMicrobatches(SampleSource& source,
                                                                  int64_t first_sample,
                                                                  long long step,
                                                                  bool evaluation) const {
  const int S = shape_.seq_length;
  std::vector<int32_t> sample(static_cast<size_t>(S) + 1);
  std::vector<Microbatch> microbatches(microbatches_);
  for (int k = 0; k < microbatches_; ++k) {
    // Microbatch k of replica r is microbatch r * m + k of the global batch.
    const int64_t first =
        (static_cast<int64_t>(assignment_.rank().dp_rank()) * microbatches_ + k) * micro_batch_;
    Microbatch& mb = microbatches[k];
    mb.id = {step, first, evaluation};
    mb.tokens.resize(static_cast<size_t>(micro_batch_) * S);
    mb.targets.resize(static_cast<size_t>(micro_batch_) * S);
    for (int i = 0; i < micro_batch_; ++i) {
      RETURN_IF_ERROR(source.Fill(first_sample + first + i, absl::MakeSpan(sample)));
      std::copy(sample.begin(), sample.end() - 1, mb.tokens.begin() + static_cast<size_t>(i) * S);
      std::copy(sample.begin() + 1, sample.end(), mb.targets.begin() + static_cast<size_t>(i) * S);
    }
  }
  return microbatches;
}

absl::StatusOr<std::vector<Microbatch>> Trainer::LoadSplit(bool validation, int64_t first_sample,
                                                           long long step, bool evaluation) {
  if (is_bert()) {
    BertSampleSource& samples = validation ? *bert_samples_.validation : *bert_samples_.train;
    return LoadBertMicrobatches(samples, first_sample, step, evaluation);
  }
  SampleSource& source = validation ? *samples_.validation : *samples_.train;
  return LoadMicrobatches(source, first_sample, step, evaluation);
}

absl::StatusOr<std::vector<TokenOutputs>> Trainer::ForwardSequences(
    const std::vector<std::vector<int32_t>>& sequences) {
  // Data-parallel replica 0 evaluates; the others have nothing to do (they wait for it
  // at their next collective).
  if (assignment_.rank().dp_rank() != 0) return std::vector<TokenOutputs>();
  const int S = shape_.seq_length;
  const int vocab = assignment_.spec().model().vocab_size();
  for (size_t s = 0; s < sequences.size(); ++s) {
    if (sequences[s].size() < 2 || sequences[s].size() > static_cast<size_t>(S) + 1) {
      return absl::InvalidArgumentError(absl::StrCat("evaluation sequence ", s, " has ",
                                                     sequences[s].size(), " tokens; 2 to ", S + 1,
                                                     " fit model.seq_length"));
    }
    for (int32_t id : sequences[s]) {
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("evaluation sequence ", s,
                                                       " holds token id ", id,
                                                       ", outside model.vocab_size (", vocab, ")"));
      }
    }
  }
  const size_t batch = static_cast<size_t>(microbatches_) * micro_batch_;
  std::vector<TokenOutputs> results(computes_loss() ? sequences.size() : 0);
  for (size_t first = 0; first < sequences.size(); first += batch) {
    std::vector<Microbatch> microbatches(microbatches_);
    std::vector<TokenOutputs> outputs(microbatches_);
    for (int k = 0; k < microbatches_; ++k) {
      Microbatch& mb = microbatches[k];
      mb.id = {0, static_cast<int64_t>(k) * micro_batch_, /*evaluation=*/true};
      mb.tokens.assign(static_cast<size_t>(micro_batch_) * S, 0);
      mb.targets.assign(static_cast<size_t>(micro_batch_) * S, 0);
      mb.outputs = &outputs[k];
      for (int i = 0; i < micro_batch_; ++i) {
        const size_t index = first + static_cast<size_t>(k) * micro_batch_ + i;
        if (index >= sequences.size()) break;  // padding: zeros, never read back
        const std::vector<int32_t>& tokens = sequences[index];
        std::copy(tokens.begin(), tokens.end() - 1, mb.tokens.begin() + static_cast<size_t>(i) * S);
        std::copy(tokens.begin() + 1, tokens.end(),
                  mb.targets.begin() + static_cast<size_t>(i) * S);
      }
    }
    RETURN_IF_ERROR(engine_->ComputeLoss(*executor_, microbatches).status());
    if (!computes_loss()) continue;
    for (int k = 0; k < microbatches_; ++k) {
      for (int i = 0; i < micro_batch_; ++i) {
        const size_t index = first + static_cast<size_t>(k) * micro_batch_ + i;
        if (index >= sequences.size()) break;
        const size_t n = sequences[index].size() - 1;
        const size_t at = static_cast<size_t>(i) * S;
        results[index].loss.assign(outputs[k].loss.begin() + at, outputs[k].loss.begin() + at + n);
        results[index].argmax.assign(outputs[k].argmax.begin() + at,
                                     outputs[k].argmax.begin() + at + n);
      }
    }
  }
  return results;
}

absl::StatusOr<double> Trainer::Validate(StepMetrics* metrics) {
  const ParallelSpec& par = assignment_.spec().parallel();
  const int iters = assignment_.spec().train().eval_iters();
  // BERT: the heads' totals and the masked positions (the multiple-choice head: the questions).
  double loss_sum = 0;
  BertHeadTotals totals;
  double masked = 0;
  for (int it = 0; it < iters; ++it) {
    // The same samples at every evaluation, so that the points of the curve compare.
    ASSIGN_OR_RETURN(
        std::vector<Microbatch> microbatches,
        LoadSplit(/*validation=*/true, static_cast<int64_t>(it) * par.global_batch_size(), it + 1,
                  /*evaluation=*/true));
    if (is_bert()) {
      ASSIGN_OR_RETURN(const double count, PrepareBertLoss(&microbatches, 1.0, &totals));
      masked += count;
    }
    ASSIGN_OR_RETURN(const double sum, engine_->ComputeLoss(*executor_, microbatches));
    loss_sum += sum;
  }
  if (!computes_loss()) return 0.0;
  if (is_multiple_choice()) {
    double sums[2] = {loss_sum, static_cast<double>(totals.choice_correct)};
    RETURN_IF_ERROR(groups_.data->AllReduce(sums, 2, ReduceOp::kSum));
    metrics->set_validation_choice_accuracy(sums[1] / masked);
    return sums[0] / masked;
  }
  if (is_bert()) {
    double sums[4] = {loss_sum, totals.sentence_order_loss,
                      static_cast<double>(totals.masked_correct),
                      static_cast<double>(totals.sentence_order_correct)};
    RETURN_IF_ERROR(groups_.data->AllReduce(sums, 4, ReduceOp::kSum));
    const double sequences = static_cast<double>(iters) * par.global_batch_size();
    metrics->set_validation_mlm_loss(sums[0] / masked);
    metrics->set_validation_sop_loss(sums[1] / sequences);
    metrics->set_validation_mlm_accuracy(sums[2] / masked);
    metrics->set_validation_sop_accuracy(sums[3] / sequences);
    return sums[0] / masked + sums[1] / sequences;
  }
  RETURN_IF_ERROR(groups_.data->AllReduce(&loss_sum, 1, ReduceOp::kSum));
  return loss_sum / (static_cast<double>(iters) * par.global_batch_size() * shape_.seq_length);
}

bool Trainer::IsTiedCopyElsewhere(const ParamTensor& tensor) const {
  // With pipelining the tied embedding lives on the first and the last stage; its
  // gradient is all-reduced between them, and the first stage's copy is the one counted.
  return tensor.copy_on_first_and_last_stage && assignment_.spec().parallel().pipeline() > 1 &&
         assignment_.rank().pp_rank() != 0;
}

bool Trainer::IsCountedInNorm(const ParamTensor& tensor) const {
  // Replicated across tensor ranks: counted on tensor rank 0 only.
  if (!IsTensorSharded(tensor) && assignment_.rank().tp_rank() != 0) return false;
  return !IsTiedCopyElsewhere(tensor);
}

Trainer::LinkBytes Trainer::BytesSent() const {
  LinkBytes bytes;
  bytes.tensor = BytesSentBy(groups_.tensor.get()) + BytesSentBy(groups_.device_tensor.get());
  bytes.pipeline = BytesSentBy(groups_.world.get()) + BytesSentBy(groups_.device_world.get()) +
                   BytesSentBy(groups_.pipeline.get()) + BytesSentBy(groups_.embedding.get());
  bytes.data = BytesSentBy(groups_.data.get()) + BytesSentBy(groups_.device_data.get());
  return bytes;
}

absl::StatusOr<StepMetrics> Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const LinkBytes sent_before = BytesSent();
  const long long step = step_ + 1;
  const JobSpec& spec = assignment_.spec();
  const ParallelSpec& par = spec.parallel();
  const double global_tokens = static_cast<double>(par.global_batch_size()) * shape_.seq_length;
  ASSIGN_OR_RETURN(std::vector<Microbatch> microbatches,
                   LoadSplit(/*validation=*/false, (step - 1) * par.global_batch_size(), step,
                             /*evaluation=*/false));

  // fp16: the backward is seeded with the scaled loss so that small gradients survive.
  const double loss_scale = scaler_ != nullptr ? scaler_->scale() : 1.0;
  // What the per-token losses average over: every token, or BERT's masked positions (its
  // sentence-order losses then average over the sequences, in sums[1]).
  double loss_tokens = global_tokens;
  double sums[2] = {0, 0};  // the losses; BERT: the sentence-order losses or choices right
  BertHeadTotals totals;
  if (is_bert()) {
    ASSIGN_OR_RETURN(loss_tokens, PrepareBertLoss(&microbatches, loss_scale, &totals));
  }
  ASSIGN_OR_RETURN(sums[0],
                   engine_->ComputeGradients(*executor_, microbatches,
                                             static_cast<float>(loss_scale / loss_tokens)));

  StepMetrics metrics;
  if (computes_loss()) {
    sums[1] = is_multiple_choice() ? static_cast<double>(totals.choice_correct)
                                   : totals.sentence_order_loss;
    RETURN_IF_ERROR(groups_.data->AllReduce(sums, is_bert() ? 2 : 1, ReduceOp::kSum));
    metrics.set_loss(sums[0] / loss_tokens);
    if (is_multiple_choice()) {
      // loss_tokens: the global batch's questions.
      metrics.set_choice_accuracy(sums[1] / loss_tokens);
    } else if (is_bert()) {
      metrics.set_mlm_loss(sums[0] / loss_tokens);
      metrics.set_sop_loss(sums[1] / par.global_batch_size());
      metrics.set_loss(metrics.mlm_loss() + metrics.sop_loss());
    }
  }
  // fp16: unscale; an overflow on any rank of the replica skips the step everywhere (the
  // replicas saw the same summed gradients, so they agree already, unless each holds only
  // its shard's sums).
  bool apply = true;
  if (scaler_ != nullptr) {
    ASSIGN_OR_RETURN(const bool overflow,
                     engine_->UnscaleGradients(static_cast<float>(1.0 / loss_scale)));
    double found = overflow ? 1.0 : 0.0;
    RETURN_IF_ERROR(groups_.model->AllReduce(&found, 1, ReduceOp::kMax));
    // With sharded sums a sum may overflow in the one replica whose shard holds it.
    if (engine_->gradient_sums_sharded()) {
      RETURN_IF_ERROR(groups_.data->AllReduce(&found, 1, ReduceOp::kMax));
    }
    apply = scaler_->Update(found > 0);
  }
  double grad_norm = 0;
  // As Megatron: the schedule advances with applied updates only (an fp16 step skipped for
  // overflow moves neither the weights nor the learning rate). Without loss scaling every
  // step is applied. A skipped step reports the rate its update will get when applied.
  const long long update = step - skipped_steps() + (apply ? 0 : 1);
  const double lr = cpu::LearningRate(lr_schedule_, update);
  if (apply) {
    ASSIGN_OR_RETURN(double sum_squares, engine_->GradientSumOfSquares(counted_in_norm_));
    RETURN_IF_ERROR(groups_.model->AllReduce(&sum_squares, 1, ReduceOp::kSum));
    // ZeRO-1 by reduce-scatter: each replica summed its own shard.
    if (engine_->gradient_sums_sharded()) {
      RETURN_IF_ERROR(groups_.data->AllReduce(&sum_squares, 1, ReduceOp::kSum));
    }
    grad_norm = std::sqrt(sum_squares);
    if (!std::isfinite(grad_norm)) {
      return absl::InternalError(
          absl::StrCat("step ", step, ": gradient norm is not finite: training diverged"));
    }
    const double clip = cpu::ClipCoefficient(grad_norm, spec.optimizer().grad_clip());
    RETURN_IF_ERROR(engine_->Update(update, lr, clip));
  }
  // ZeRO-1: each replica updated its share; every replica needs all of them.
  RETURN_IF_ERROR(engine_->GatherParameters());
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
  metrics.set_collective_seconds(engine_->CollectiveSeconds(seconds, executor_->last_timings()));
  metrics.set_pipeline_wait_seconds(executor_->last_timings().wait_seconds);
  const LinkBytes sent = BytesSent();
  metrics.set_tensor_bytes_sent(sent.tensor - sent_before.tensor);
  metrics.set_pipeline_bytes_sent(sent.pipeline - sent_before.pipeline);
  metrics.set_data_bytes_sent(sent.data - sent_before.data);
  if (const std::optional<int64_t> peak = engine_->activation_memory_peak_bytes();
      peak.has_value()) {
    metrics.set_activation_memory_peak_bytes(*peak);
  }
  if (const std::optional<int64_t> peak = engine_->device_memory_peak_bytes(); peak.has_value()) {
    metrics.set_device_memory_peak_bytes(*peak);
  }
  if (const std::optional<int64_t> peak = engine_->host_memory_peak_bytes();
      peak.has_value() && *peak > 0) {
    metrics.set_host_memory_peak_bytes(*peak);
  }
  const int eval_interval = spec.train().eval_interval();
  if (eval_interval > 0 && (step % eval_interval == 0 || step == spec.train().steps())) {
    ASSIGN_OR_RETURN(const double validation_loss, Validate(&metrics));
    if (computes_loss()) metrics.set_validation_loss(validation_loss);
  }
  // The engine goes to the coordinator once, with rank 0's first step of this process.
  if (!engine_reported_ && assignment_.rank().global_rank() == 0) {
    metrics.set_engine(engine_note_);
    engine_reported_ = true;
  }
  return metrics;
}

absl::StatusOr<std::map<std::string, FullTensor>> Trainer::GatherWeights() {
  const ParallelSpec& par = assignment_.spec().parallel();
  const RankCoordinates& me = assignment_.rank();
  ASSIGN_OR_RETURN(const RankGrid grid, RankGrid::Create(par.tensor(), par.pipeline(), par.data()));
  RETURN_IF_ERROR(engine_->SyncToHost());
  const std::vector<ParamTensor>& tensors = engine_->layout().tensors();
  const float* params = engine_->host_state().params;
  Communicator& world = *groups_.world;
  // Replica 0 holds every parameter once (data-parallel replicas are identical). Each of
  // its ranks sends what it holds: its shards' descriptions (name, global shape, global
  // offset, local shape), then their values.
  if (me.global_rank() != 0) {
    if (me.dp_rank() == 0) {
      const std::string descriptions = SerializeShardDescriptions(tensors);
      const uint64_t size = descriptions.size();
      const std::vector<float> values = PackedValues(tensors, params);
      RETURN_IF_ERROR(world.Send(&size, sizeof(size), 0, kDescriptionSizeTag));
      RETURN_IF_ERROR(world.Send(descriptions.data(), descriptions.size(), 0, kDescriptionTag));
      RETURN_IF_ERROR(world.Send(values.data(), values.size() * sizeof(float), 0, kGatherTag));
    }
    return std::map<std::string, FullTensor>();
  }
  std::map<std::string, FullTensor> full;
  std::map<std::string, std::vector<char>> written;  // which elements are filled
  for (int rank = 0; rank < grid.world_size(); ++rank) {
    if (grid.Coordinates(rank).dp != 0) continue;
    std::vector<ParamTensor> received_tensors;
    std::vector<float> received;
    const std::vector<ParamTensor>* shards = &tensors;
    const float* values = params;
    if (rank != 0) {
      uint64_t size = 0;
      RETURN_IF_ERROR(world.Recv(&size, sizeof(size), rank, kDescriptionSizeTag));
      std::string descriptions(size, '\0');
      RETURN_IF_ERROR(world.Recv(descriptions.data(), size, rank, kDescriptionTag));
      ASSIGN_OR_RETURN(received_tensors, ParseShardDescriptions(descriptions, rank));
      size_t count = 0;
      for (const ParamTensor& t : received_tensors) count += t.size;
      received.resize(count);
      RETURN_IF_ERROR(world.Recv(received.data(), count * sizeof(float), rank, kGatherTag));
      shards = &received_tensors;
      values = received.data();
    }
    for (const ParamTensor& t : *shards) {
      FullTensor& out = full[t.name];
      std::vector<char>& filled = written[t.name];
      if (out.values.empty()) {
        out.shape = t.global_shape;
        int64_t n = 1;
        for (int64_t d : t.global_shape) n *= d;
        out.values.assign(n, 0.0f);
        filled.assign(n, 0);
      } else if (out.shape != t.global_shape) {
        return absl::InternalError(
            absl::StrCat("ranks disagree on the global shape of ", t.name, " (rank ", rank, ")"));
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
  const size_t buffer_size = engine_->layout().buffer_size();
  const OptimizerSlice& slice = engine_->optimizer_slice();
  const TrainingEngine::HostState host = engine_->host_state();
  m->assign(buffer_size, 0.0f);
  v->assign(buffer_size, 0.0f);
  std::copy(host.first_moment, host.first_moment + slice.moment_size(), m->begin() + slice.begin);
  std::copy(host.second_moment, host.second_moment + slice.moment_size(), v->begin() + slice.begin);
  if (slice.shard_size == 0) return absl::OkStatus();
  // ZeRO-1: every replica holds 1/d of the moments; gather them like the parameters.
  for (std::vector<float>* moments : {m, v}) {
    std::vector<float> gathered(buffer_size);
    RETURN_IF_ERROR(groups_.data->AllGather(moments->data() + slice.shard_begin, gathered.data(),
                                            slice.shard_size));
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
  RETURN_IF_ERROR(engine_->SyncToHost());
  const std::vector<ParamTensor>& tensors = engine_->layout().tensors();
  const float* params = engine_->host_state().params;
  std::vector<float> m, v;
  RETURN_IF_ERROR(FullMoments(&m, &v));
  ASSIGN_OR_RETURN(const RankGrid grid, RankGrid::Create(par.tensor(), par.pipeline(), par.data()));
  Communicator& world = *groups_.world;
  // Data-parallel replicas are identical: replica 0 writes.
  std::string records;
  if (me.dp_rank() == 0) {
    ASSIGN_OR_RETURN(RankShardRecords mine,
                     WriteRankShards(dir, me.global_rank(), step_, ShardsOf(tensors), params,
                                     m.data(), v.data()));
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
  return FilesOverlapping(manifest, ShardsOf(engine_->layout().tensors()), /*with_moments=*/true);
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
  const std::vector<ParamTensor>& tensors = engine_->layout().tensors();
  const TrainingEngine::HostState host = engine_->host_state();
  float* const params = host.params;
  const bool parameters_only =
      !tensors.empty() && checkpoint.Find(FirstMomentName(tensors.front().name)) == nullptr;
  if (parameters_only) {
    // Initial weights: nothing random has been drawn yet, so the seed need not match.
    if (state.step() != 0) {
      return absl::DataLossError(absl::StrCat(
          dir, " has no optimizer moments but is at step ", state.step(),
          " [rule: only step-0 checkpoints (initial weights) may be parameters only]"));
    }
    // Fine-tuning a pretrained BERT: initial weights without the multiple-choice classifier
    // leave it at its seeded initialisation (every layout draws the same).
    std::vector<ParamTensor> present;
    for (const ParamTensor& tensor : tensors) {
      const bool fine_tuning_head =
          tensor.role == ParameterRole::kChoiceWeight || tensor.role == ParameterRole::kChoiceBias;
      if (fine_tuning_head && checkpoint.Find(tensor.name) == nullptr) continue;
      present.push_back(tensor);
    }
    RETURN_IF_ERROR(LoadRankTensors(checkpoint, ShardsOf(present), params, nullptr, nullptr));
    step_ = 0;
    return engine_->SyncFromHost();
  }
  ASSIGN_OR_RETURN(const uint64_t seed, GetRngSeed(state));
  if (seed != assignment_.spec().train().seed()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, " was trained with train.seed ", seed, " but the spec says ",
                     assignment_.spec().train().seed(), " [rule: a resumed run keeps its seed]"));
  }
  const size_t buffer_size = engine_->layout().buffer_size();
  std::vector<float> m(buffer_size), v(buffer_size);
  RETURN_IF_ERROR(LoadRankTensors(checkpoint, ShardsOf(tensors), params, m.data(), v.data()));
  const OptimizerSlice& slice = engine_->optimizer_slice();
  std::copy(m.begin() + slice.begin, m.begin() + slice.end, host.first_moment);
  std::copy(v.begin() + slice.begin, v.begin() + slice.end, host.second_moment);
  if (scaler_ != nullptr) RETURN_IF_ERROR(scaler_->RestoreFrom(state));
  step_ = state.step();
  return engine_->SyncFromHost();
}

absl::Status Trainer::LoadInitialParameters(
    const std::function<absl::Status(float* params)>& fill) {
  RETURN_IF_ERROR(fill(engine_->host_state().params));
  step_ = 0;
  return engine_->SyncFromHost();
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
