// What one rank of a job will allocate on the host, as the engine that runs it lays out
// its memory. Not the planner's model (plan/rank_memory_estimate.h, which the
// coordinator checks a spec against before placing it, from the spec alone): this one
// reads the rank's own assignment (its schedule's in-flight microbatches, its engine) and
// counts engine details the planner leaves out (checkpoint staging, scratch, token buffers).
//
// What it counts, computed from its assignment alone
// (in floating point, so absurd sizes cannot overflow), before anything is allocated:
// parameters and gradients (one flat buffer each), AdamW moments, the staging copies a
// checkpoint save or load makes, the activations of every microbatch the schedule keeps
// in flight, the engine's backward scratch, and the microbatches' token buffers. The
// Trainer checks it against the machine (memory_limits.h) so that a spec that passes
// validation but cannot fit fails with RESOURCE_EXHAUSTED naming the need, not with
// std::bad_alloc.
//
// It also enforces the engine's int32 dimensions (kernels take row and column counts as
// int): tokens per microbatch, the fused query/key/value width and the padded vocabulary
// below 2^31 (the MLP width is an int32 field).
//
//   ASSIGN_OR_RETURN(const RankAllocationEstimate need, EstimateRankAllocation(assignment, true));
//   RETURN_IF_ERROR(CheckMemoryFits("rank 3", need.total(), need.Describe(), limits));
#ifndef MTRAIN_WORKER_ENGINE_RANK_ALLOCATION_ESTIMATE_H_
#define MTRAIN_WORKER_ENGINE_RANK_ALLOCATION_ESTIMATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/assignment.pb.h"

namespace mtrain {

// Bytes, by purpose.
struct RankAllocationEstimate {
  double parameters = 0;   // the flat parameter buffer
  double gradients = 0;    // the flat gradient buffer
  double optimizer = 0;    // AdamW's two moments (this rank's ZeRO-1 slice)
  double staging = 0;      // full-size moment copies for checkpoints, ZeRO gathers
  double activations = 0;  // microbatches in flight, scratch, token buffers (CPU engine)

  double total() const { return parameters + gradients + optimizer + staging + activations; }
  // "parameters 1.2 GiB, gradients 1.2 GiB, optimizer 2.4 GiB, ..."
  std::string Describe() const;
};

// `host_activations`: whether activations live in host memory (the CPU engine; the CUDA
// engine keeps them on the device). INVALID_ARGUMENT naming the spec fields when a
// dimension exceeds the engine's int32 range or the assignment is inconsistent (no
// layers, a non-positive size).
absl::StatusOr<RankAllocationEstimate> EstimateRankAllocation(const Assignment& assignment,
                                                              bool host_activations);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_RANK_ALLOCATION_ESTIMATE_H_
