// BERT on the CPU model chunk (issue 35): every parameter's gradient against finite
// differences under both LayerNorm placements, with padded sequences and dropout; padded
// positions change nothing; recomputation is bit-identical; bad microbatches are refused
// with the field named.
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/cpu/finite_differences_testing.h"
#include "worker/engine/cpu/model_chunk_factory.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/parameter_init.h"

namespace mtrain {
namespace {

constexpr int kBatch = 2;

// Small enough for finite differences over every parameter; a padded vocabulary (17 real
// tokens in 32 columns) and two query heads of 4.
ModelShape TinyBert(NormPlacement placement) {
  ModelShape shape = BertConfig(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/8,
                                /*ffn_hidden=*/12, /*seq_length=*/6, /*vocab=*/17,
                                /*padded_vocab=*/32, placement);
  shape.norm_epsilon = 1e-5;  // finite differences need the normalisation's curvature tame
  return shape;
}

// One microbatch: the second sequence padded after 4 positions; masked-LM labels at some
// real positions (-1 elsewhere), one sequence in order and one swapped.
struct BertBatch {
  std::vector<int32_t> tokens, types, targets, lengths, order;
};

BertBatch MakeBatch(const ModelShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int S = shape.seq_length;
  BertBatch b;
  b.lengths = {S, 4};
  b.order = {0, 1};
  for (int s = 0; s < kBatch; ++s) {
    for (int i = 0; i < S; ++i) {
      b.tokens.push_back(static_cast<int32_t>(rng() % shape.vocab));
      b.types.push_back(i < S / 2 ? 0 : 1);
      const bool masked = i < b.lengths[s] && (i + s) % 2 == 1;
      b.targets.push_back(masked ? static_cast<int32_t>(rng() % shape.vocab) : -1);
    }
  }
  return b;
}

int Masked(const BertBatch& b) {
  int m = 0;
  for (int32_t t : b.targets) m += t >= 0 ? 1 : 0;
  return m;
}

template <typename T>
MicrobatchInput<T> InputOf(const BertBatch& b, BertHeadTotals* totals) {
  MicrobatchInput<T> input;
  input.id = {3, 0};
  input.tokens = b.tokens.data();
  input.targets = b.targets.data();
  input.token_types = b.types.data();
  input.lengths = b.lengths.data();
  input.sentence_order = b.order.data();
  input.d_loss_per_sequence = T(1) / kBatch;
  input.bert_totals = totals;
  return input;
}

// The step's loss as BertForPreTraining's: the masked rows' mean plus the sequences' mean.
template <typename T>
double Loss(ModelChunk<T>& model, const BertBatch& b, bool backward) {
  if (backward) model.ZeroGrads();
  auto acts = model.NewActivations();
  BertHeadTotals totals;
  absl::StatusOr<double> mlm_sum = model.Forward(InputOf<T>(b, &totals), acts.get());
  EXPECT_TRUE(mlm_sum.ok()) << mlm_sum.status();
  if (!mlm_sum.ok()) return NAN;
  if (backward) {
    const absl::Status status = model.Backward(acts.get(), nullptr, T(1) / Masked(b));
    EXPECT_TRUE(status.ok()) << status;
  }
  return *mlm_sum / Masked(b) + totals.sentence_order_loss / kBatch;
}

struct BertCase {
  const char* name;
  NormPlacement placement;
  float dropout;
};

class BertGradientTest : public ::testing::TestWithParam<BertCase> {};

TEST_P(BertGradientTest, MatchesFiniteDifferencesForEveryParameter) {
  const ModelShape shape = TinyBert(GetParam().placement);
  ParameterLayout layout(shape, WholeModel(shape));
  ModelOptions options;
  options.dropout = GetParam().dropout;
  options.seed = 7;
  TransformerModel<double> model(layout, kBatch, options);
  InitializeParameters(layout, 5, model.params());
  // Larger weights than the 0.02 init make every path matter.
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (size_t i = 0; i < model.num_params(); ++i) model.params()[i] += normal(rng);
  const BertBatch batch = MakeBatch(shape, 2);
  ExpectGradientsMatchFiniteDifferences(
      layout, model.params(), model.grads(), model.num_params(),
      [&](bool backward) { return Loss(model, batch, backward); });
}

INSTANTIATE_TEST_SUITE_P(Placements, BertGradientTest,
                         ::testing::Values(BertCase{"Pre", NormPlacement::kPre, 0.0f},
                                           BertCase{"PreDropout", NormPlacement::kPre, 0.2f},
                                           BertCase{"Post", NormPlacement::kPost, 0.0f},
                                           BertCase{"PostDropout", NormPlacement::kPost, 0.2f}),
                         [](const ::testing::TestParamInfo<BertCase>& info) {
                           return info.param.name;
                         });

// What sits after a sequence's length (tokens, types) cannot change the loss or any
// gradient: padded keys get no attention weight and padded rows carry no label.
TEST(BertModelTest, PaddedPositionsChangeNothing) {
  for (NormPlacement placement : {NormPlacement::kPre, NormPlacement::kPost}) {
    const ModelShape shape = TinyBert(placement);
    ParameterLayout layout(shape, WholeModel(shape));
    TransformerModel<double> model(layout, kBatch, ModelOptions{});
    InitializeParameters(layout, 5, model.params());
    const BertBatch batch = MakeBatch(shape, 4);
    const double loss = Loss(model, batch, true);
    const std::vector<double> grads(model.grads(), model.grads() + model.num_params());
    BertBatch changed = batch;
    for (int i = shape.seq_length + batch.lengths[1]; i < kBatch * shape.seq_length; ++i) {
      changed.tokens[i] = (changed.tokens[i] + 5) % shape.vocab;
      changed.types[i] = 1 - changed.types[i];
    }
    EXPECT_EQ(Loss(model, changed, true), loss);
    for (size_t k = 0; k < grads.size(); ++k) ASSERT_EQ(model.grads()[k], grads[k]) << k;
  }
}

// Full (grouped) and selective recomputation give the gradients of the run that keeps
// everything, bit for bit, under both placements and dropout.
TEST(BertModelTest, RecomputationIsBitIdentical) {
  for (NormPlacement placement : {NormPlacement::kPre, NormPlacement::kPost}) {
    const ModelShape shape = TinyBert(placement);
    ParameterLayout layout(shape, WholeModel(shape));
    const BertBatch batch = MakeBatch(shape, 6);
    std::vector<float> reference;
    double reference_loss = 0;
    for (int mode = 0; mode < 3; ++mode) {
      ModelOptions options;
      options.dropout = 0.1f;
      options.seed = 3;
      options.recompute = mode == 1;
      options.recompute_group = 2;
      options.selective_recompute = mode == 2;
      TransformerModel<float> model(layout, kBatch, options);
      InitializeParameters(layout, 9, model.params());
      const double loss = Loss(model, batch, true);
      std::vector<float> grads(model.grads(), model.grads() + model.num_params());
      if (mode == 0) {
        reference = grads;
        reference_loss = loss;
        continue;
      }
      EXPECT_EQ(loss, reference_loss) << "mode " << mode;
      EXPECT_EQ(grads, reference) << "mode " << mode;
    }
  }
}

TEST(BertModelTest, RefusesBadMicrobatchesNamingTheField) {
  const ModelShape shape = TinyBert(NormPlacement::kPre);
  ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<float> model(layout, kBatch, ModelOptions{});
  InitializeParameters(layout, 5, model.params());
  const BertBatch good = MakeBatch(shape, 8);
  auto forward = [&](const BertBatch& b) {
    auto acts = model.NewActivations();
    return model.Forward(InputOf<float>(b, nullptr), acts.get()).status();
  };
  ASSERT_TRUE(forward(good).ok());
  BertBatch bad = good;
  bad.lengths[1] = 0;
  EXPECT_NE(forward(bad).message().find("length"), std::string::npos) << forward(bad);
  bad = good;
  bad.lengths[0] = shape.seq_length + 1;
  EXPECT_EQ(forward(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = good;
  bad.types[3] = 2;
  EXPECT_NE(forward(bad).message().find("token type 2"), std::string::npos) << forward(bad);
  bad = good;
  bad.targets[1] = shape.vocab;
  EXPECT_NE(forward(bad).message().find("masked-LM label"), std::string::npos) << forward(bad);
  bad = good;
  bad.order[0] = 2;
  EXPECT_NE(forward(bad).message().find("sentence-order label"), std::string::npos) << forward(bad);
  // Inputs missing altogether.
  auto acts = model.NewActivations();
  MicrobatchInput<float> input = InputOf<float>(good, nullptr);
  input.lengths = nullptr;
  EXPECT_EQ(model.Forward(input, acts.get()).status().code(), absl::StatusCode::kInvalidArgument);
  // Generation needs a causal decoder.
  KvCache<float> cache = model.NewKvCache(4);
  std::vector<float> out(shape.padded_vocab);
  EXPECT_EQ(model.Decode(&cache, good.tokens.data(), nullptr, 1, out.data()).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mtrain
