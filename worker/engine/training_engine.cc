#include "worker/engine/training_engine.h"

#include <algorithm>

namespace mtrain {

OptimizerSlice OptimizerSliceOf(const RankLayout& layout, int shards, int shard_rank) {
  OptimizerSlice slice;
  slice.end = layout.num_params();
  if (shards <= 1) return slice;
  slice.shard_size = layout.buffer_size() / static_cast<size_t>(shards);
  slice.shard_begin = slice.shard_size * static_cast<size_t>(shard_rank);
  slice.begin = std::min(slice.shard_begin, slice.end);
  slice.end = std::min(slice.shard_begin + slice.shard_size, slice.end);
  return slice;
}

}  // namespace mtrain
