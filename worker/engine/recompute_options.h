// train.recompute, train.recompute_granularity, recompute_method and recompute_num_layers
// (a validated spec) as the model's options (gpt_model.h's ModelOptions): "full" with
// "uniform" recomputes every layer in groups of recompute_num_layers (default 1), with
// "block" the first recompute_num_layers (default all) of each chunk; "selective" the
// attention core; train.recompute true alone is "full", uniform, groups of 1.
#ifndef MTRAIN_WORKER_ENGINE_RECOMPUTE_OPTIONS_H_
#define MTRAIN_WORKER_ENGINE_RECOMPUTE_OPTIONS_H_

#include "proto/job_spec.pb.h"
#include "worker/engine/gpt_model.h"

namespace mtrain {

void ApplyRecompute(const TrainSpec& train, ModelOptions* options);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_RECOMPUTE_OPTIONS_H_
