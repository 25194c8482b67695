// Test helpers: two sets of full tensors are the same (names, shapes, every value
// exactly); a GPT's parameters with distinct values.
#ifndef MTRAIN_CHECKPOINT_FULL_TENSOR_TESTING_H_
#define MTRAIN_CHECKPOINT_FULL_TENSOR_TESTING_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

// Every parameter of our GPT with the names and global shapes of the engine's layout
// (worker/engine/parameter_layout.h): wte [wte_rows, C] (the padded vocabulary, or the
// real one), wpe [seq, C], `layers` blocks, the final LayerNorm. Values are distinct: the
// k-th tensor's i-th value is k + 0.001 (i + 1), so a misplaced element shows.
inline std::map<std::string, FullTensor> DistinctGptTensors(int layers, int64_t C, int64_t wte_rows,
                                                            int64_t seq) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"wte", {wte_rows, C}},
                                                                      {"wpe", {seq, C}}};
  for (int i = 0; i < layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    shapes.push_back({p + "ln1.weight", {C}});
    shapes.push_back({p + "ln1.bias", {C}});
    shapes.push_back({p + "attn.qkv.weight", {3, C, C}});
    shapes.push_back({p + "attn.qkv.bias", {3, C}});
    shapes.push_back({p + "attn.proj.weight", {C, C}});
    shapes.push_back({p + "attn.proj.bias", {C}});
    shapes.push_back({p + "ln2.weight", {C}});
    shapes.push_back({p + "ln2.bias", {C}});
    shapes.push_back({p + "mlp.fc.weight", {4 * C, C}});
    shapes.push_back({p + "mlp.fc.bias", {4 * C}});
    shapes.push_back({p + "mlp.proj.weight", {C, 4 * C}});
    shapes.push_back({p + "mlp.proj.bias", {C}});
  }
  shapes.push_back({"lnf.weight", {C}});
  shapes.push_back({"lnf.bias", {C}});
  std::map<std::string, FullTensor> tensors;
  int key = 1;
  for (const auto& [name, shape] : shapes) {
    FullTensor& full = tensors[name];
    full.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) {
      full.values.push_back(static_cast<float>(key) + 0.001f * static_cast<float>(i + 1));
    }
    ++key;
  }
  return tensors;
}

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_FULL_TENSOR_TESTING_H_
