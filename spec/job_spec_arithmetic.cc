#include "spec/job_spec_arithmetic.h"

#include <algorithm>

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

}  // namespace mtrain
