// The split backward of the zero-bubble schedules on the CPU model chunk: BackwardInput and
// then BackwardWeight give Backward's gradients and input gradient bit for bit, whatever the
// decoder family, recomputation and dropout, with several microbatches in flight whose weight
// halves run later and in order; the gradient-ready hook sees every tensor exactly once, the
// layers' linear weights only after BackwardWeight.
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/parameter_init.h"

namespace mtrain {
namespace {

constexpr int kBatch = 2;
constexpr int kMicrobatches = 3;

struct SplitCase {
  const char* name;
  ModelShape shape;
  bool recompute;
  bool selective;
};

std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  return tokens;
}

class SplitBackwardTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitBackwardTest, GivesTheWholeBackwardsGradientsBitForBit) {
  const ModelShape& shape = GetParam().shape;
  // Two stages' halves: the second without the embedding (it returns d_hidden_in).
  ModelPlacement placement = WholeModel(shape);
  placement.first_layer = 1;
  placement.num_layers = shape.num_layers - 1;
  placement.has_embedding = false;
  ParameterLayout layout(shape, placement);
  ModelOptions options;
  options.dropout = 0.1f;
  options.seed = 4;
  options.recompute = GetParam().recompute;
  options.selective_recompute = GetParam().selective;
  TransformerModel<float> whole(layout, kBatch, options), split(layout, kBatch, options);
  InitializeParameters(layout, 6, whole.params());
  InitializeParameters(layout, 6, split.params());
  const int N = kBatch * shape.seq_length;
  const size_t NC = static_cast<size_t>(N) * shape.hidden;
  std::vector<std::vector<float>> hidden(kMicrobatches), d_out(kMicrobatches);
  std::vector<std::vector<int32_t>> targets(kMicrobatches);
  std::mt19937_64 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int k = 0; k < kMicrobatches; ++k) {
    hidden[k].resize(NC);
    for (float& x : hidden[k]) x = normal(rng);
    targets[k] = RandomTokens(N, shape.vocab, 10 + k);
  }
  std::map<std::string, int> whole_reports, split_reports;
  std::vector<std::string> split_order;
  const GradReadyHook whole_hook = [&](const ParamTensor& t) { ++whole_reports[t.name]; };
  const GradReadyHook split_hook = [&](const ParamTensor& t) {
    ++split_reports[t.name];
    split_order.push_back(t.name);
  };
  auto input = [&](int k) {
    MicrobatchInput<float> in;
    in.id = {2, static_cast<int64_t>(k) * kBatch};
    in.hidden_in = hidden[k].data();
    in.targets = targets[k].data();
    return in;
  };
  // Whole: forward and backward per microbatch (1F1B-like); the last reports.
  std::vector<std::vector<float>> whole_d_in(kMicrobatches, std::vector<float>(NC));
  for (int k = 0; k < kMicrobatches; ++k) {
    auto acts = whole.NewActivations();
    ASSERT_TRUE(whole.Forward(input(k), acts.get()).ok());
    ASSERT_TRUE(whole
                    .Backward(acts.get(), nullptr, 0.25f, whole_d_in[k].data(),
                              k == kMicrobatches - 1 ? &whole_hook : nullptr)
                    .ok());
  }
  // Split: every forward, every BackwardInput, then the weights' halves in order (the
  // activation sets live until then); the last of each kind reports.
  std::vector<std::unique_ptr<Activations<float>>> acts(kMicrobatches);
  std::vector<std::vector<float>> split_d_in(kMicrobatches, std::vector<float>(NC));
  for (int k = 0; k < kMicrobatches; ++k) {
    acts[k] = split.NewActivations();
    ASSERT_TRUE(split.Forward(input(k), acts[k].get()).ok());
  }
  for (int k = 0; k < kMicrobatches; ++k) {
    ASSERT_TRUE(split
                    .BackwardInput(acts[k].get(), nullptr, 0.25f, split_d_in[k].data(),
                                   k == kMicrobatches - 1 ? &split_hook : nullptr)
                    .ok());
    EXPECT_FALSE(acts[k]->deferred.empty());
    EXPECT_EQ(split_d_in[k], whole_d_in[k]) << "microbatch " << k;
    // Inputs the set keeps are read in place; a recomputed layer's are copied: full
    // recomputation keeps none of the four (pre-LN), selective all but the recomputed
    // attention output.
    size_t held = 0;
    for (const DeferredWeightGradient<float>& job : acts[k]->deferred) {
      held += job.in_held != nullptr ? 1 : 0;
      EXPECT_EQ(job.in_held != nullptr, job.in.empty());
    }
    const size_t jobs = acts[k]->deferred.size();
    if (GetParam().recompute) {
      EXPECT_EQ(held, 0u);
    } else if (GetParam().selective) {
      EXPECT_EQ(held, jobs * 3 / 4);
    } else {
      EXPECT_EQ(held, jobs);
    }
  }
  const size_t before_weights = split_reports.size();
  for (int k = 0; k < kMicrobatches; ++k) {
    ASSERT_TRUE(
        split.BackwardWeight(acts[k].get(), k == kMicrobatches - 1 ? &split_hook : nullptr).ok());
    EXPECT_TRUE(acts[k]->deferred.empty());
  }
  for (size_t i = 0; i < whole.num_params(); ++i) {
    ASSERT_EQ(split.grads()[i], whole.grads()[i]) << "parameter element " << i;
  }
  EXPECT_EQ(split_reports, whole_reports);
  for (const auto& [name, count] : split_reports) EXPECT_EQ(count, 1) << name;
  // The linear weights came after BackwardInput's reports.
  EXPECT_LT(before_weights, split_reports.size());
  for (size_t i = before_weights; i < split_order.size(); ++i) {
    const std::string& name = split_order[i];
    EXPECT_TRUE(name.find(".mlp.") != std::string::npos || name.find(".attn.") != std::string::npos)
        << name;
  }
}

ModelShape Gpt2() { return Gpt2Config(3, 2, 16, 8, 50, 128); }
ModelShape Llama() { return LlamaConfig(3, 4, 2, 16, 24, 8, 50, 128); }

INSTANTIATE_TEST_SUITE_P(Families, SplitBackwardTest,
                         ::testing::Values(SplitCase{"Gpt2", Gpt2(), false, false},
                                           SplitCase{"Gpt2FullRecompute", Gpt2(), true, false},
                                           SplitCase{"Gpt2Selective", Gpt2(), false, true},
                                           SplitCase{"Llama", Llama(), false, false}),
                         [](const ::testing::TestParamInfo<SplitCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace mtrain
