// A checkpoint's parameters as whole tensors, independent of any parallel layout: what an
// export reads (checkpoint -> HuggingFace) and what an import writes (HuggingFace -> the
// initial weights of a job). Built on the sharded checkpoint API (checkpoint.h); the
// on-disk format is docs/CHECKPOINT_FORMAT.md.
//
//   ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(dir));
//   ASSIGN_OR_RETURN(auto params, ReadFullParameters(checkpoint));   // "wte" -> [Vp, C] ...
//
//   ASSIGN_OR_RETURN(CheckpointManifest manifest,
//                    WriteParameterCheckpoint(dir, job_id, /*step=*/0, params, seed));
//
// Thread-compatible: the functions share no state; a Checkpoint must not be used by two
// threads at once (see checkpoint.h).
#ifndef MTRAIN_CHECKPOINT_CHECKPOINT_TENSORS_H_
#define MTRAIN_CHECKPOINT_CHECKPOINT_TENSORS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/full_tensor.h"
#include "proto/checkpoint.pb.h"

namespace mtrain {

// Names starting with this are optimizer state ("optimizer.m.<param>", ...), not
// parameters.
inline constexpr absl::string_view kOptimizerTensorPrefix = "optimizer.";

// Every tensor of `checkpoint` whose name does not start with "optimizer.", assembled in
// full at its stored global shape from however many shards and files hold it. wte keeps
// its stored (padded) rows.
// Errors are LoadRankTensors's: DATA_LOSS naming the file if a shard file is damaged,
// NOT_FOUND / INVALID_ARGUMENT naming the tensor for an inconsistent manifest.
absl::StatusOr<std::map<std::string, FullTensor>> ReadFullParameters(Checkpoint& checkpoint);

// Writes a parameters-only checkpoint (no optimizer moments) into `dir`, created if needed:
// one shard file "rank-00000.bin" holding every tensor whole, then the MANIFEST (layout
// (1, 1, 1), TrainingState with `step` and the RNG seed `seed`, every other field 0), which
// is returned. Loading it under any layout works as for any checkpoint; a job resuming
// from it must start its optimizer moments at zero.
// INVALID_ARGUMENT naming the tensor if `tensors` is empty, a name starts with
// "optimizer.", a dimension is not positive, or values.size() differs from the shape's
// volume; INTERNAL for I/O errors.
absl::StatusOr<CheckpointManifest> WriteParameterCheckpoint(
    const std::string& dir, absl::string_view job_id, int64_t step,
    const std::map<std::string, FullTensor>& tensors, uint64_t seed);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_CHECKPOINT_TENSORS_H_
