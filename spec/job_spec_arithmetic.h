// Quantities every part of the system derives from a job spec the same way: the padded
// vocabulary and the microbatch counts. The spec validation, the plan (schedules, memory
// estimate), the coordinator (shrinking the data degree) and the engine all call these, so
// that no two of them can round differently.
//
//   const int64_t vocab = PaddedVocabSize(spec.model().vocab_size(), spec.parallel().tensor());
//   const int m = NumMicrobatches(spec.parallel());  // per replica and optimizer step
//
// Pure functions on any input (64-bit, no overflow for int32 fields); thread-safe.
#ifndef MTRAIN_SPEC_JOB_SPEC_ARITHMETIC_H_
#define MTRAIN_SPEC_JOB_SPEC_ARITHMETIC_H_

#include <cstdint>

#include "proto/job_spec.pb.h"

namespace mtrain {

// The vocabulary is padded so that every tensor-parallel rank holds an equal slice whose
// width is a multiple of this (GEMM-friendly), as Megatron-LM pads it.
inline constexpr int kVocabPaddingPerTensorRank = 128;

// vocab_size rounded up to a multiple of 128 * tensor. Exact: a vocab_size below 0 counts
// as 0 and a tensor below 1 as 1; for a validated spec the result fits an int.
int64_t PaddedVocabSize(int vocab_size, int tensor);

// Whether the global batch splits into whole microbatches on `data` replicas:
// global_batch_size % (micro_batch_size * data) == 0, with every size positive.
bool GlobalBatchSplitsEvenly(const ParallelSpec& parallel, int data);

// Microbatches per optimizer step on each of `data` replicas:
// global_batch_size / (micro_batch_size * data), rounded down; 0 when a size is not
// positive. A job shrunk to fewer replicas keeps its global batch and runs more of them.
int64_t MicrobatchesPerReplica(const ParallelSpec& parallel, int data);

// MicrobatchesPerReplica at the spec's own data degree. At most kMaxScheduledMicrobatches
// for a validated spec.
int NumMicrobatches(const ParallelSpec& parallel);

// What the backward recomputes, from train.recompute and train.recompute_granularity /
// method / num_layers (a validated spec): full recomputation in uniform groups of `group`
// layers, or (block >= 0) of each chunk's first `block` layers only; or selective (the
// attention core). One reading for the engines, the memory estimates and the cost model.
struct RecomputeChoice {
  bool full = false;
  bool selective = false;
  int group = 1;   // full, uniform
  int block = -1;  // full, block: recomputed layers per chunk (every layer when unset)
};
RecomputeChoice RecomputeChoiceOf(const TrainSpec& train);

}  // namespace mtrain

#endif  // MTRAIN_SPEC_JOB_SPEC_ARITHMETIC_H_
