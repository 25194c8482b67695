// One rank's shard cut out of a whole tensor: what a rank keeps of an imported HuggingFace
// tensor (train.init_from), so a tensor-parallel rank never holds more than its own
// parameters plus the one whole tensor being read.
//
//   RETURN_IF_ERROR(CopyShardFromFull(full, shard, params));  // params[shard.offset...]
#ifndef MTRAIN_CHECKPOINT_SHARD_FROM_FULL_H_
#define MTRAIN_CHECKPOINT_SHARD_FROM_FULL_H_

#include "absl/status/status.h"
#include "checkpoint/full_tensor.h"
#include "checkpoint/sharded_tensor.h"

namespace mtrain {

// Copies the elements of `shard`'s hyper-rectangle (global_offset, local_shape) of `full`
// into params[shard.offset, shard.offset + shard.size). As LoadRankTensors (checkpoint.h)
// does for the padded vocabulary, a `full` with fewer leading rows than shard.global_shape
// (wte: the real vocabulary against the padded one) gives zeros for the rows past its own.
// INVALID_ARGUMENT naming the tensor when the shapes disagree otherwise or the shard does
// not fit its global shape.
absl::Status CopyShardFromFull(const FullTensor& full, const ShardedTensor& shard, float* params);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_SHARD_FROM_FULL_H_
