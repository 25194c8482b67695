// Training of one rank that holds the whole model: data, model, optimizer and metrics for
// a validated JobSpec. `train` and the worker daemon drive it step by step.
//
//   ASSIGN_OR_RETURN(auto trainer, Trainer::Create(spec));
//   while (trainer->completed_steps() < spec.train().steps()) {
//     ASSIGN_OR_RETURN(StepMetrics metrics, trainer->Step());
//   }
#ifndef MTRAIN_WORKER_ENGINE_TRAINER_H_
#define MTRAIN_WORKER_ENGINE_TRAINER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/job_spec.pb.h"
#include "worker/engine/data/sequence_sampler.h"
#include "worker/engine/data/token_dataset.h"
#include "worker/engine/gpt_model.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {

class Trainer {
 public:
  // `spec` must have its defaults applied and be valid (ResolveJobSpec). Opens the data,
  // initialises the model from train.seed.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const JobSpec& spec);

  // Runs the next optimizer step and returns its metrics.
  absl::StatusOr<StepMetrics> Step();

  long long completed_steps() const { return step_; }
  const GptModel<float>& model() const { return *model_; }
  const ParameterLayout& layout() const { return *layout_; }

  // Writes the model's weights under their global names (safetensors).
  absl::Status SaveWeights(const std::string& path) const;

 private:
  Trainer() = default;

  JobSpec spec_;
  ModelShape shape_;
  std::unique_ptr<ParameterLayout> layout_;
  std::unique_ptr<GptModel<float>> model_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::unique_ptr<TokenDataset> data_;
  std::unique_ptr<SequenceSampler> sampler_;
  double flops_per_step_ = 0;
  double peak_flops_ = 0;
  long long step_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_TRAINER_H_
