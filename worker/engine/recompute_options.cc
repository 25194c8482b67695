#include "worker/engine/recompute_options.h"

#include "spec/job_spec_arithmetic.h"

namespace mtrain {

void ApplyRecompute(const TrainSpec& train, ModelOptions* options) {
  const RecomputeChoice choice = RecomputeChoiceOf(train);
  options->recompute = choice.full;
  options->selective_recompute = choice.selective;
  options->recompute_group = choice.group;
  options->recompute_block = choice.block;
}

}  // namespace mtrain
