#include "worker/engine/parameter_layout.h"

#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine/parameter_init.h"

namespace mtrain {
namespace {

ModelShape Shape() {
  const ModelShape shape = Gpt2Config(/*num_layers=*/4, /*num_heads=*/4, /*hidden=*/64,
                                      /*seq_length=*/32, /*vocab=*/256, /*padded_vocab=*/512);
  return shape;
}

TEST(ParameterLayoutTest, WholeModelCountsMatchGpt2Formula) {
  const ModelShape s = Shape();
  ParameterLayout layout(s, WholeModel(s));
  const size_t C = s.hidden;
  const size_t per_layer = 12 * C * C + 13 * C;
  EXPECT_EQ(layout.total_size(),
            s.padded_vocab * C + s.seq_length * C + s.num_layers * per_layer + 2 * C);
  // Tensors tile the buffer without gaps.
  size_t next = 0;
  for (const ParamTensor& t : layout.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;
    next += t.size;
  }
}

TEST(ParameterLayoutTest, WeightDecayOnlyOnMatricesAndEmbeddings) {
  const ModelShape s = Shape();
  ParameterLayout layout(s, WholeModel(s));
  for (const ParamTensor& t : layout.tensors()) {
    const bool is_bias = t.name.size() > 5 && t.name.substr(t.name.size() - 5) == ".bias";
    const bool is_layernorm = t.name.find("ln") != std::string::npos;
    EXPECT_EQ(t.weight_decay, !is_bias && !is_layernorm) << t.name;
  }
}

TEST(ParameterLayoutTest, InitialisationFollowsGpt2) {
  const ModelShape s = Shape();
  ParameterLayout layout(s, WholeModel(s));
  std::vector<float> params(layout.total_size());
  InitializeParameters(layout, 42, params.data());
  auto stddev = [&](const std::string& name) {
    const ParamTensor* t = layout.Find(name);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < t->size; ++i) {
      sum += params[t->offset + i];
      sq += params[t->offset + i] * params[t->offset + i];
    }
    const double mean = sum / t->size;
    EXPECT_NEAR(mean, 0.0, 0.003) << name;
    return std::sqrt(sq / t->size - mean * mean);
  };
  EXPECT_NEAR(stddev("wte"), 0.02, 0.001);
  EXPECT_NEAR(stddev("layers.1.attn.qkv.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("layers.1.mlp.proj.weight"), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_NEAR(stddev("layers.2.attn.proj.weight"), 0.02 / std::sqrt(8.0), 0.001);
  const ParamTensor* gain = layout.Find("layers.0.ln1.weight");
  const ParamTensor* bias = layout.Find("layers.0.mlp.fc.bias");
  for (size_t i = 0; i < gain->size; ++i) EXPECT_EQ(params[gain->offset + i], 1.0f);
  for (size_t i = 0; i < bias->size; ++i) EXPECT_EQ(params[bias->offset + i], 0.0f);
  // Same seed, same bits; another seed, other values.
  std::vector<float> again(layout.total_size()), other(layout.total_size());
  InitializeParameters(layout, 42, again.data());
  InitializeParameters(layout, 43, other.data());
  EXPECT_EQ(params, again);
  EXPECT_NE(params, other);
}

// A tensor-parallel shard initialises to exactly the slice of the single-rank tensor.
TEST(ParameterLayoutTest, ShardsInitialiseToTheirSliceOfTheWholeModel) {
  const ModelShape s = Shape();
  ParameterLayout whole(s, WholeModel(s));
  std::vector<float> full(whole.total_size());
  InitializeParameters(whole, 7, full.data());
  for (int rank = 0; rank < 2; ++rank) {
    ModelPlacement placement = WholeModel(s);
    placement.tensor_size = 2;
    placement.tensor_rank = rank;
    placement.first_layer = 2;
    placement.num_layers = 2;
    placement.has_embedding = false;
    ParameterLayout shard(s, placement);
    std::vector<float> part(shard.total_size());
    InitializeParameters(shard, 7, part.data());
    for (const ParamTensor& t : shard.tensors()) {
      const ParamTensor* w = whole.Find(t.name);
      ASSERT_NE(w, nullptr) << t.name;
      for (size_t i = 0; i < t.size; ++i) {
        ASSERT_EQ(part[t.offset + i], full[w->offset + GlobalIndex(t, i)])
            << t.name << " rank " << rank << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace mtrain
