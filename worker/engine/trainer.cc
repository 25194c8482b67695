#include "worker/engine/trainer.h"

#include <chrono>
#include <numeric>

#include "common/status_macros.h"
#include "worker/engine/data/data_source.h"
#include "worker/engine/flops.h"
#include "worker/engine/parameter_init.h"
#include "worker/engine/safetensors.h"
#include "worker/engine/single_rank_step.h"

namespace mtrain {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobSpec& spec) {
  if (spec.parallel().tensor() * spec.parallel().pipeline() * spec.parallel().data() != 1) {
    return absl::UnimplementedError(
        "this trainer runs one rank holding the whole model; parallel.tensor, .pipeline and "
        ".data must be 1");
  }
  std::unique_ptr<Trainer> t(new Trainer);
  t->spec_ = spec;
  t->shape_ = ShapeFromSpec(spec);
  ASSIGN_OR_RETURN(t->data_, OpenDataset(spec.data()));
  RETURN_IF_ERROR(CheckTokensFitVocab(*t->data_, spec.model().vocab_size()));
  ASSIGN_OR_RETURN(SequenceSampler sampler,
                   SequenceSampler::Create(t->data_->size(), t->shape_.seq_length,
                                           spec.train().seed()));
  t->sampler_ = std::make_unique<SequenceSampler>(sampler);
  t->layout_ = std::make_unique<ParameterLayout>(t->shape_, WholeModel(t->shape_));
  ModelOptions options;
  options.dropout = spec.train().dropout();
  options.recompute = spec.train().recompute();
  options.seed = spec.train().seed();
  t->model_ = std::make_unique<GptModel<float>>(*t->layout_, spec.parallel().micro_batch_size(),
                                                options);
  InitializeParameters(*t->layout_, spec.train().seed(), t->model_->params());
  t->optimizer_ = std::make_unique<AdamWOptimizer>(*t->layout_, spec.optimizer(), 0,
                                                   t->layout_->total_size());
  t->flops_per_step_ = ModelFlopsPerIteration(t->shape_, spec.parallel().global_batch_size());
  t->peak_flops_ = PeakFlopsPerDevice("cpu");
  return t;
}

absl::StatusOr<StepMetrics> Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const long long step = step_ + 1;
  const int micro_batch = spec_.parallel().micro_batch_size();
  const int microbatches = spec_.parallel().global_batch_size() / micro_batch;
  const int S = shape_.seq_length;
  std::vector<TokenBatch> batches(microbatches);
  for (int k = 0; k < microbatches; ++k) {
    std::vector<int64_t> indices(micro_batch);
    std::iota(indices.begin(), indices.end(), static_cast<int64_t>(k) * micro_batch);
    batches[k].inputs.resize(static_cast<size_t>(micro_batch) * S);
    batches[k].targets.resize(static_cast<size_t>(micro_batch) * S);
    RETURN_IF_ERROR(sampler_->Fill(*data_, step, indices, absl::MakeSpan(batches[k].inputs),
                                   absl::MakeSpan(batches[k].targets)));
  }
  ASSIGN_OR_RETURN(const StepStats stats,
                   SingleRankStep(*model_, *optimizer_, spec_.optimizer().grad_clip(), step,
                                  batches));
  step_ = step;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StepMetrics metrics;
  metrics.set_step(step);
  metrics.set_loss(stats.loss);
  metrics.set_lr(stats.lr);
  metrics.set_grad_norm(stats.grad_norm);
  metrics.set_step_seconds(seconds);
  metrics.set_tokens_per_second(spec_.parallel().global_batch_size() * static_cast<double>(S) /
                                seconds);
  metrics.set_model_tflops(flops_per_step_ / seconds / 1e12);
  metrics.set_mfu(flops_per_step_ / seconds / peak_flops_);
  metrics.set_loss_scale(1.0);
  return metrics;
}

absl::Status Trainer::SaveWeights(const std::string& path) const {
  SafetensorsFile file;
  for (const ParamTensor& tensor : layout_->tensors()) {
    file.tensors[tensor.name] =
        MakeF32Tensor(tensor.global_shape, model_->params() + tensor.offset);
  }
  file.metadata["step"] = std::to_string(step_);
  return WriteSafetensors(path, file);
}

}  // namespace mtrain
