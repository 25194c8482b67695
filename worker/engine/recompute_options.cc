#include "worker/engine/recompute_options.h"

namespace mtrain {

void ApplyRecompute(const TrainSpec& train, ModelOptions* options) {
  const std::string granularity = train.has_recompute_granularity()
                                      ? train.recompute_granularity()
                                      : (train.recompute() ? "full" : "none");
  options->recompute = granularity == "full";
  options->selective_recompute = granularity == "selective";
  options->recompute_group = 1;
  options->recompute_block = -1;
  if (!options->recompute) return;
  if (train.recompute_method() == "block") {
    // Default: every layer (the largest chunk has at most num_layers).
    options->recompute_block =
        train.has_recompute_num_layers() ? train.recompute_num_layers() : (1 << 30);
  } else if (train.has_recompute_num_layers()) {
    options->recompute_group = train.recompute_num_layers();
  }
}

}  // namespace mtrain
