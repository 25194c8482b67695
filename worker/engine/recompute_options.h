// The spec's recomputation (spec/job_spec_arithmetic.h's RecomputeChoiceOf) as the model's
// options (model_options.h).
#ifndef MTRAIN_WORKER_ENGINE_RECOMPUTE_OPTIONS_H_
#define MTRAIN_WORKER_ENGINE_RECOMPUTE_OPTIONS_H_

#include "proto/job_spec.pb.h"
#include "worker/engine/model_options.h"

namespace mtrain {

void ApplyRecompute(const TrainSpec& train, ModelOptions* options);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_RECOMPUTE_OPTIONS_H_
