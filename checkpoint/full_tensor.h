// A whole tensor under its global name: what a gathered model, an export and an import
// exchange, independent of any parallel layout.
#ifndef MTRAIN_CHECKPOINT_FULL_TENSOR_H_
#define MTRAIN_CHECKPOINT_FULL_TENSOR_H_

#include <cstdint>
#include <vector>

namespace mtrain {

struct FullTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major
};

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_FULL_TENSOR_H_
