#include "spec/job_spec_arithmetic.h"

#include <algorithm>
#include <climits>
#include <string>

namespace mtrain {

int64_t PaddedVocabSize(int vocab_size, int tensor) {
  // At most 2^31 + 2^38 for int inputs: far inside 64 bits.
  const int64_t multiple = int64_t{kVocabPaddingPerTensorRank} * std::max(tensor, 1);
  return (std::max<int64_t>(vocab_size, 0) + multiple - 1) / multiple * multiple;
}

bool GlobalBatchSplitsEvenly(const ParallelSpec& parallel, int data) {
  const int64_t per_step = int64_t{parallel.micro_batch_size()} * data;
  return per_step > 0 && parallel.global_batch_size() > 0 &&
         parallel.global_batch_size() % per_step == 0;
}

int64_t MicrobatchesPerReplica(const ParallelSpec& parallel, int data) {
  const int64_t per_step = int64_t{parallel.micro_batch_size()} * data;
  if (per_step <= 0 || parallel.global_batch_size() <= 0) return 0;
  return parallel.global_batch_size() / per_step;
}

int NumMicrobatches(const ParallelSpec& parallel) {
  // At most global_batch_size, an int.
  return static_cast<int>(MicrobatchesPerReplica(parallel, parallel.data()));
}

RecomputeChoice RecomputeChoiceOf(const TrainSpec& train) {
  const std::string granularity = train.has_recompute_granularity()
                                      ? train.recompute_granularity()
                                      : (train.recompute() ? "full" : "none");
  RecomputeChoice choice;
  choice.full = granularity == "full";
  choice.selective = granularity == "selective";
  if (!choice.full) return choice;
  if (train.recompute_method() == "block") {
    choice.block = train.has_recompute_num_layers() ? train.recompute_num_layers() : INT_MAX;
  } else if (train.has_recompute_num_layers()) {
    choice.group = std::max(1, train.recompute_num_layers());
  }
  return choice;
}

}  // namespace mtrain
