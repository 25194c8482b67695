#include "checkpoint/shard_from_full.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtrain {
namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::Status CopyShardFromFull(const FullTensor& full, const ShardedTensor& shard, float* params) {
  const std::vector<int64_t>& global = shard.global_shape;
  const size_t rank = global.size();
  const bool shapes_agree = rank > 0 && full.shape.size() == rank && full.shape[0] <= global[0] &&
                            std::equal(global.begin() + 1, global.end(), full.shape.begin() + 1) &&
                            shard.local_shape.size() == rank && shard.global_offset.size() == rank;
  if (!shapes_agree) {
    return absl::InvalidArgumentError(absl::StrCat(shard.name, ": shape ", Shape(full.shape),
                                                   " does not fit the layout's ", Shape(global)));
  }
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (shard.global_offset[d] < 0 || shard.local_shape[d] < 0 ||
        shard.global_offset[d] + shard.local_shape[d] > global[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat(shard.name, ": shard at ", Shape(shard.global_offset), " of ",
                       Shape(shard.local_shape), " is outside ", Shape(global)));
    }
    elements *= shard.local_shape[d];
  }
  int64_t full_elements = 1;
  for (const int64_t e : full.shape) full_elements *= e;
  if (static_cast<size_t>(elements) != shard.size ||
      full.values.size() != static_cast<size_t>(full_elements)) {
    return absl::InvalidArgumentError(
        absl::StrCat(shard.name, ": ", full.values.size(), " values for shape ", Shape(full.shape),
                     ", shard of ", shard.size, " elements for ", Shape(shard.local_shape)));
  }
  if (elements == 0) return absl::OkStatus();
  // Row by row of the innermost dimension: each is one contiguous run in both.
  const int64_t run = shard.local_shape[rank - 1];
  std::vector<int64_t> index(rank, 0);  // local index of the run's first element
  float* out = params + shard.offset;
  for (int64_t done = 0; done < elements; done += run, out += run) {
    int64_t flat = 0;  // in `full`
    for (size_t d = 0; d < rank; ++d) {
      flat = flat * full.shape[d] + shard.global_offset[d] + index[d];
    }
    const int64_t row = shard.global_offset[0] + index[0];
    if (row < full.shape[0]) {
      std::copy_n(full.values.begin() + flat, run, out);
    } else {
      std::fill_n(out, run, 0.0f);  // a padding row of the vocabulary
    }
    // The next run: carry through the outer dimensions.
    for (int d = static_cast<int>(rank) - 2; d >= 0; --d) {
      if (++index[d] < shard.local_shape[d]) break;
      index[d] = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace mtrain
