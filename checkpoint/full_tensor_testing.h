// Test helper: two sets of full tensors are the same (names, shapes, every value exactly).
#ifndef MTRAIN_CHECKPOINT_FULL_TENSOR_TESTING_H_
#define MTRAIN_CHECKPOINT_FULL_TENSOR_TESTING_H_

#include <map>
#include <string>

#include "checkpoint/full_tensor.h"
#include "gtest/gtest.h"

namespace mtrain {

inline void ExpectSameTensors(const std::map<std::string, FullTensor>& got,
                              const std::map<std::string, FullTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, tensor] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_EQ(it->second.shape, tensor.shape) << name;
    EXPECT_EQ(it->second.values, tensor.values) << name;
  }
}

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_FULL_TENSOR_TESTING_H_
