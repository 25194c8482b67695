#include "checkpoint/sharded_tensor.h"

namespace mtrain {

int64_t GlobalIndex(const ShardedTensor& tensor, int64_t local_index) {
  const size_t rank = tensor.local_shape.size();
  int64_t global = 0;
  int64_t stride = 1;
  // Walk dimensions from the innermost, peeling local coordinates off local_index.
  for (size_t k = rank; k-- > 0;) {
    const int64_t coordinate = local_index % tensor.local_shape[k];
    local_index /= tensor.local_shape[k];
    global += (coordinate + tensor.global_offset[k]) * stride;
    stride *= tensor.global_shape[k];
  }
  return global;
}

}  // namespace mtrain
