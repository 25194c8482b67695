#include "worker/engine/cpu/transformer_model.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "worker/engine/cpu/finite_differences_testing.h"
#include "worker/engine/parameter_init.h"

namespace mtrain {
namespace {

// A model small enough for finite differences over every parameter, with a vocabulary
// that needs padding (13 real tokens in 128 columns).
ModelShape TinyShape() {
  const ModelShape shape = Gpt2Config(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/8,
                                      /*seq_length=*/4, /*vocab=*/13, /*padded_vocab=*/128);
  return shape;
}

// Llama-style ones of the same scale: grouped-query attention (4 query heads reading 2
// key-value heads, head_dim 4 for rotary pairs), RMSNorm, SwiGLU, rotary positions, an
// untied output layer; and a variant with biases, multi-query heads and a tied output layer,
// the optional paths.
ModelShape TinyLlamaShape() {
  return LlamaConfig(/*num_layers=*/2, /*num_heads=*/4, /*num_kv_heads=*/2, /*hidden=*/16,
                     /*ffn_hidden=*/12, /*seq_length=*/4, /*vocab=*/13, /*padded_vocab=*/128);
}
ModelShape TinyLlamaWithBiasesShape() {
  ModelShape shape = LlamaConfig(2, 2, 1, 8, 10, 4, 13, 128);
  shape.biases = true;
  shape.tied_output = true;
  shape.rope_theta = 100;  // larger angles over the four positions
  shape.norm_epsilon = 1e-3;
  return shape;
}

constexpr int kBatch = 2;

std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  return tokens;
}

// Mean loss of one microbatch.
template <typename T>
double Loss(TransformerModel<T>& model, const std::vector<int32_t>& tokens,
            const std::vector<int32_t>& targets) {
  auto acts = model.NewActivations();
  MicrobatchInput<T> input;
  input.id = {3, 0};
  input.tokens = tokens.data();
  input.targets = targets.data();
  absl::StatusOr<double> sum = model.Forward(input, acts.get());
  EXPECT_TRUE(sum.ok()) << sum.status();
  return *sum / static_cast<double>(tokens.size());
}

template <typename T>
double LossAndGrad(TransformerModel<T>& model, const std::vector<int32_t>& tokens,
                   const std::vector<int32_t>& targets) {
  model.ZeroGrads();
  auto acts = model.NewActivations();
  MicrobatchInput<T> input;
  input.id = {3, 0};
  input.tokens = tokens.data();
  input.targets = targets.data();
  absl::StatusOr<double> sum = model.Forward(input, acts.get());
  EXPECT_TRUE(sum.ok()) << sum.status();
  EXPECT_TRUE(model.Backward(acts.get(), nullptr, T(1) / tokens.size()).ok());
  return *sum / static_cast<double>(tokens.size());
}

struct GradientCase {
  const char* name;
  ModelShape (*shape)();
  float dropout;
};

class GptModelGradientTest : public ::testing::TestWithParam<GradientCase> {};

// Every parameter's gradient against central finite differences in float64, with dropout
// (deterministic masks) at the given rate.
TEST_P(GptModelGradientTest, MatchesFiniteDifferencesForEveryParameter) {
  const ModelShape shape = GetParam().shape();
  ParameterLayout layout(shape, WholeModel(shape));
  ModelOptions options;
  options.dropout = GetParam().dropout;
  options.seed = 11;
  TransformerModel<double> model(layout, kBatch, options);
  InitializeParameters(layout, 5, model.params());
  // Larger weights than the 0.02 init make every path of the network matter.
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (size_t i = 0; i < model.num_params(); ++i) model.params()[i] += normal(rng);
  const int n = kBatch * shape.seq_length;
  const auto tokens = RandomTokens(n, shape.vocab, 2);
  const auto targets = RandomTokens(n, shape.vocab, 3);

  LossAndGrad(model, tokens, targets);
  const std::vector<double> analytic(model.grads(), model.grads() + model.num_params());
  const auto worst = WorstFiniteDifferenceErrors(layout, model.params(), analytic,
                                                 [&] { return Loss(model, tokens, targets); });
  ASSERT_EQ(worst.size(), layout.tensors().size());
  for (const auto& [name, error] : worst) EXPECT_LT(error, 1e-5) << name;
}

INSTANTIATE_TEST_SUITE_P(
    Families, GptModelGradientTest,
    ::testing::Values(GradientCase{"Gpt2", TinyShape, 0.0f},
                      GradientCase{"Gpt2Dropout", TinyShape, 0.25f},
                      GradientCase{"Llama", TinyLlamaShape, 0.0f},
                      GradientCase{"LlamaDropout", TinyLlamaShape, 0.25f},
                      GradientCase{"LlamaBiasesTiedMultiQuery", TinyLlamaWithBiasesShape, 0.1f}),
    [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

TEST(GptModelTest, PaddedVocabularyRowsGetNoGradient) {
  const ModelShape shape = TinyShape();
  ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<float> model(layout, kBatch, ModelOptions{});
  InitializeParameters(layout, 5, model.params());
  const int n = kBatch * shape.seq_length;
  LossAndGrad(model, RandomTokens(n, shape.vocab, 2), RandomTokens(n, shape.vocab, 3));
  const ParamTensor* wte = layout.Find("wte");
  ASSERT_NE(wte, nullptr);
  double real_rows = 0;
  for (int row = 0; row < shape.padded_vocab; ++row) {
    for (int c = 0; c < shape.hidden; ++c) {
      const float g = model.grads()[wte->offset + row * shape.hidden + c];
      if (row >= shape.vocab) {
        ASSERT_EQ(g, 0.0f) << "padded row " << row;
      } else {
        real_rows += std::abs(g);
      }
    }
  }
  EXPECT_GT(real_rows, 0);
}

TEST(GptModelTest, RecomputationIsBitIdentical) {
  const ModelShape shape = Gpt2Config(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/32,
                                      /*seq_length=*/16, /*vocab=*/256, /*padded_vocab=*/256);
  ParameterLayout layout(shape, WholeModel(shape));
  ModelOptions plain;
  plain.dropout = 0.1f;
  plain.seed = 9;
  ModelOptions recompute = plain;
  recompute.recompute = true;
  TransformerModel<float> a(layout, kBatch, plain);
  TransformerModel<float> b(layout, kBatch, recompute);
  InitializeParameters(layout, 5, a.params());
  InitializeParameters(layout, 5, b.params());
  const int n = kBatch * shape.seq_length;
  const auto tokens = RandomTokens(n, shape.vocab, 2);
  const auto targets = RandomTokens(n, shape.vocab, 3);
  const double loss_a = LossAndGrad(a, tokens, targets);
  const double loss_b = LossAndGrad(b, tokens, targets);
  EXPECT_EQ(loss_a, loss_b);
  for (size_t i = 0; i < a.num_params(); ++i) {
    ASSERT_EQ(a.grads()[i], b.grads()[i]) << "parameter element " << i;
  }
}

// Every granularity and method of recomputation gives the gradients of keeping everything,
// bit for bit, and keeps less: selective drops the attention core's output, full
// recomputation every activation set but the kept inputs (fewer with larger groups).
TEST(GptModelTest, RecomputeGranularitiesAreBitIdenticalAndKeepLess) {
  const ModelShape shape = Gpt2Config(/*num_layers=*/4, /*num_heads=*/2, /*hidden=*/32,
                                      /*seq_length=*/16, /*vocab=*/256, /*padded_vocab=*/256);
  ParameterLayout layout(shape, WholeModel(shape));
  const int n = kBatch * shape.seq_length;
  const auto tokens = RandomTokens(n, shape.vocab, 2);
  const auto targets = RandomTokens(n, shape.vocab, 3);
  struct Mode {
    const char* name;
    bool full, selective;
    int group, block;
  };
  std::vector<float> reference;
  int64_t previous_bytes = INT64_MAX;
  for (const Mode& mode :
       {Mode{"none", false, false, 1, -1}, Mode{"selective", false, true, 1, -1},
        Mode{"full block 2", true, false, 1, 2}, Mode{"full uniform 1", true, false, 1, -1},
        Mode{"full uniform 2", true, false, 2, -1}, Mode{"full uniform 3", true, false, 3, -1}}) {
    ModelOptions options;
    options.dropout = 0.1f;
    options.seed = 9;
    options.recompute = mode.full;
    options.selective_recompute = mode.selective;
    options.recompute_group = mode.group;
    options.recompute_block = mode.block;
    TransformerModel<float> model(layout, kBatch, options);
    InitializeParameters(layout, 5, model.params());
    LossAndGrad(model, tokens, targets);
    std::vector<float> grads(model.grads(), model.grads() + model.num_params());
    if (reference.empty()) reference = grads;
    EXPECT_EQ(grads, reference) << mode.name;
    const int64_t bytes = ActivationBytes(*model.NewActivations());
    std::printf("%-15s %8lld activation bytes\n", mode.name, static_cast<long long>(bytes));
    // "full uniform 3" over 4 layers keeps inputs 0 and 3: as many as groups of 2 (0, 2).
    if (std::string(mode.name) == "full uniform 3") {
      EXPECT_EQ(bytes, previous_bytes) << mode.name;
    } else {
      EXPECT_LT(bytes, previous_bytes) << mode.name;
    }
    previous_bytes = bytes;
  }
}

TEST(GptModelTest, LaterTokensDoNotChangeEarlierLogits) {
  const ModelShape shape = TinyShape();
  ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<float> model(layout, 1, ModelOptions{});
  InitializeParameters(layout, 5, model.params());
  auto tokens = RandomTokens(shape.seq_length, shape.vocab, 2);
  const auto targets = RandomTokens(shape.seq_length, shape.vocab, 3);
  auto run = [&](const std::vector<int32_t>& t) {
    auto acts = model.NewActivations();
    MicrobatchInput<float> input;
    input.tokens = t.data();
    input.targets = targets.data();
    EXPECT_TRUE(model.Forward(input, acts.get()).ok());
    const float* logits = model.logits(*acts);
    return std::vector<float>(logits, logits + shape.seq_length * shape.padded_vocab);
  };
  const std::vector<float> before = run(tokens);
  tokens.back() = (tokens.back() + 1) % shape.vocab;
  const std::vector<float> after = run(tokens);
  const size_t last_row = static_cast<size_t>(shape.seq_length - 1) * shape.padded_vocab;
  for (size_t i = 0; i < last_row; ++i) ASSERT_EQ(before[i], after[i]) << i;
  bool last_changed = false;
  for (size_t i = last_row; i < before.size(); ++i) last_changed |= before[i] != after[i];
  EXPECT_TRUE(last_changed);
}

// Decoding with the key-value cache (two positions at once, then one at a time) gives the
// logits of the whole-sequence forward at every position: rotary angles from the cache's
// length, grouped-query heads cached once per key-value head.
TEST(GptModelTest, KeyValueCacheDecodingMatchesTheFullForward) {
  for (ModelShape (*make_shape)() : {TinyShape, TinyLlamaShape, TinyLlamaWithBiasesShape}) {
    const ModelShape shape = make_shape();
    ParameterLayout layout(shape, WholeModel(shape));
    TransformerModel<double> model(layout, 1, ModelOptions{});
    InitializeParameters(layout, 5, model.params());
    std::mt19937_64 rng(4);
    std::normal_distribution<double> normal(0.0, 0.3);
    for (size_t i = 0; i < model.num_params(); ++i) model.params()[i] += normal(rng);
    const auto tokens = RandomTokens(shape.seq_length, shape.vocab, 2);
    const auto targets = RandomTokens(shape.seq_length, shape.vocab, 3);
    auto acts = model.NewActivations();
    MicrobatchInput<double> input;
    input.tokens = tokens.data();
    input.targets = targets.data();
    ASSERT_TRUE(model.Forward(input, acts.get()).ok());
    const double* full = model.logits(*acts);

    auto cache = model.NewKvCache(shape.seq_length);
    std::vector<double> logits(shape.padded_vocab);
    int position = 0;
    while (position < shape.seq_length) {
      const int count = position == 0 ? 2 : 1;
      ASSERT_TRUE(
          model.Decode(&cache, tokens.data() + position, nullptr, count, logits.data()).ok());
      position += count;
      const double* expected = full + static_cast<size_t>(position - 1) * shape.padded_vocab;
      for (int v = 0; v < shape.vocab; ++v) {
        ASSERT_NEAR(logits[v], expected[v], 1e-10) << "position " << position - 1 << " token " << v;
      }
    }
    EXPECT_EQ(model.Decode(&cache, tokens.data(), nullptr, 1, logits.data()).code(),
              absl::StatusCode::kOutOfRange);
  }
}

TEST(GptModelTest, InitialLossIsNearLogVocab) {
  const ModelShape shape = Gpt2Config(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/32,
                                      /*seq_length=*/4, /*vocab=*/256, /*padded_vocab=*/256);
  ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<float> model(layout, kBatch, ModelOptions{});
  InitializeParameters(layout, 5, model.params());
  const int n = kBatch * shape.seq_length;
  const double loss = Loss(model, RandomTokens(n, 256, 2), RandomTokens(n, 256, 3));
  EXPECT_NEAR(loss, std::log(256.0), 0.05);
}

}  // namespace
}  // namespace mtrain
