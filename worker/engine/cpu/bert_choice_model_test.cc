// BERT's multiple-choice head on the CPU model chunk (RACE fine-tuning): every parameter's
// gradient against finite differences under both LayerNorm placements, with dropout on the
// pooler's output; the loss is the softmax cross-entropy over each question's options,
// computed here from the scores the model reports; padding questions add nothing; bad
// answers are refused by name.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/family_defaults.h"
#include "worker/engine/cpu/finite_differences_testing.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/parameter_init.h"

namespace mtrain {
namespace {

constexpr int kQuestions = 2;
constexpr int kBatch = kQuestions * kRaceChoices;

ModelShape TinyChoiceBert(NormPlacement placement) {
  ModelShape shape = BertConfig(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/8,
                                /*ffn_hidden=*/12, /*seq_length=*/6, /*vocab=*/17,
                                /*padded_vocab=*/32, placement);
  shape.bert_head = BertHeadKind::kMultipleChoice;
  shape.norm_epsilon = 1e-5;  // finite differences need the normalisation's curvature tame
  return shape;
}

struct ChoiceBatch {
  std::vector<int32_t> tokens, types, targets, lengths, answers;
};

// Two questions of four options each, sequences of varied lengths.
ChoiceBatch MakeBatch(const ModelShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int S = shape.seq_length;
  ChoiceBatch b;
  b.answers = {2, 0};
  for (int s = 0; s < kBatch; ++s) {
    b.lengths.push_back(3 + s % (S - 2));
    for (int i = 0; i < S; ++i) {
      b.tokens.push_back(static_cast<int32_t>(rng() % shape.vocab));
      b.types.push_back(i < 2 ? 0 : 1);
      b.targets.push_back(-1);
    }
  }
  return b;
}

template <typename T>
MicrobatchInput<T> InputOf(const ChoiceBatch& b, BertHeadTotals* totals) {
  MicrobatchInput<T> input;
  input.id = {3, 0};
  input.tokens = b.tokens.data();
  input.targets = b.targets.data();
  input.token_types = b.types.data();
  input.lengths = b.lengths.data();
  input.choice_answers = b.answers.data();
  input.bert_totals = totals;
  return input;
}

// The mean over the questions, as BertForMultipleChoice's loss.
template <typename T>
double Loss(ModelChunk<T>& model, const ChoiceBatch& b, bool backward,
            BertHeadTotals* totals = nullptr) {
  if (backward) model.ZeroGrads();
  auto acts = model.NewActivations();
  absl::StatusOr<double> sum = model.Forward(InputOf<T>(b, totals), acts.get());
  EXPECT_TRUE(sum.ok()) << sum.status();
  if (!sum.ok()) return NAN;
  if (backward) {
    const absl::Status status = model.Backward(acts.get(), nullptr, T(1) / kQuestions);
    EXPECT_TRUE(status.ok()) << status;
  }
  return *sum / kQuestions;
}

struct ChoiceCase {
  const char* name;
  NormPlacement placement;
  float dropout;
};

class ChoiceGradientTest : public ::testing::TestWithParam<ChoiceCase> {};

TEST_P(ChoiceGradientTest, MatchesFiniteDifferencesForEveryParameter) {
  const ModelShape shape = TinyChoiceBert(GetParam().placement);
  ParameterLayout layout(shape, WholeModel(shape));
  ModelOptions options;
  options.dropout = GetParam().dropout;
  options.seed = 7;
  TransformerModel<double> model(layout, kBatch, options);
  InitializeParameters(layout, 5, model.params());
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (size_t i = 0; i < model.num_params(); ++i) model.params()[i] += normal(rng);
  const ChoiceBatch batch = MakeBatch(shape, 2);
  // choice.bias is one scalar added to every option's score, which a softmax over the
  // options ignores: its gradient, sum over options of (p - y), is zero in exact arithmetic
  // and came out exactly 0.0 in one build (the attention core's rounding moved).
  ExpectGradientsMatchFiniteDifferences(layout, model.params(), model.grads(), model.num_params(),
                                        [&](bool backward) { return Loss(model, batch, backward); },
                                        1e-5, {"choice.bias"});
}

INSTANTIATE_TEST_SUITE_P(Placements, ChoiceGradientTest,
                         ::testing::Values(ChoiceCase{"Pre", NormPlacement::kPre, 0.0f},
                                           ChoiceCase{"PreDropout", NormPlacement::kPre, 0.3f},
                                           ChoiceCase{"Post", NormPlacement::kPost, 0.0f},
                                           ChoiceCase{"PostDropout", NormPlacement::kPost, 0.3f}),
                         [](const ::testing::TestParamInfo<ChoiceCase>& info) {
                           return info.param.name;
                         });

// A question whose answer is -1 (the padding of a last, partial batch) adds no loss, no
// gradient and no count; the other question's are unchanged.
TEST(BertChoiceModelTest, PaddingQuestionsAddNothing) {
  const ModelShape shape = TinyChoiceBert(NormPlacement::kPre);
  ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<double> model(layout, kBatch, ModelOptions{});
  InitializeParameters(layout, 5, model.params());
  for (size_t i = 0; i < model.num_params(); ++i) model.params()[i] *= 20;  // scores that differ
  ChoiceBatch batch = MakeBatch(shape, 4);
  BertHeadTotals both;
  const double loss_both = Loss(model, batch, false, &both) * kQuestions;
  EXPECT_EQ(both.choice_questions, 2);
  ChoiceBatch first_only = batch;
  first_only.answers[1] = -1;
  BertHeadTotals first;
  const double loss_first = Loss(model, first_only, true, &first) * kQuestions;
  EXPECT_EQ(first.choice_questions, 1);
  const std::vector<double> grads(model.grads(), model.grads() + model.num_params());
  // The second question's options changed: nothing moves.
  ChoiceBatch changed = first_only;
  for (int i = kRaceChoices * shape.seq_length; i < kBatch * shape.seq_length; ++i) {
    changed.tokens[i] = (changed.tokens[i] + 3) % shape.vocab;
  }
  EXPECT_EQ(Loss(model, changed, true) * kQuestions, loss_first);
  for (size_t k = 0; k < grads.size(); ++k) ASSERT_EQ(model.grads()[k], grads[k]) << k;
  EXPECT_GT(loss_both, loss_first);
  EXPECT_LE(first.choice_correct, 1);
}

// The loss is -log softmax(scores)[answer] per question and "correct" is the answer's score
// being the largest: checked against the pooler and classifier computed here from the
// weights (pre placement, dropout off, so the head's input is the final LayerNorm's).
TEST(BertChoiceModelTest, LossAndAccuracyFollowTheSoftmaxOverEachQuestionsOptions) {
  const ModelShape shape = TinyChoiceBert(NormPlacement::kPre);
  ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<double> model(layout, kBatch, ModelOptions{});
  InitializeParameters(layout, 11, model.params());
  for (size_t i = 0; i < model.num_params(); ++i) model.params()[i] *= 30;
  const ChoiceBatch batch = MakeBatch(shape, 6);
  // Shifting the classifier's bias shifts every score alike: the loss is unchanged.
  BertHeadTotals totals;
  const double loss = Loss(model, batch, false, &totals);
  double* bias = nullptr;
  for (const ParamTensor& tensor : layout.tensors()) {
    if (tensor.role == ParameterRole::kChoiceBias) bias = model.params() + tensor.offset;
  }
  ASSERT_NE(bias, nullptr);
  *bias += 5;
  BertHeadTotals shifted;
  EXPECT_NEAR(Loss(model, batch, false, &shifted), loss, 1e-12);
  EXPECT_EQ(shifted.choice_correct, totals.choice_correct);
  // With every option identical each question's loss is log 4 and every answer ties for the
  // largest score (counted right).
  ChoiceBatch same = batch;
  for (int q = 0; q < kQuestions; ++q) {
    for (int j = 1; j < kRaceChoices; ++j) {
      const int to = q * kRaceChoices + j, from = q * kRaceChoices;
      same.lengths[to] = same.lengths[from];
      for (int i = 0; i < shape.seq_length; ++i) {
        same.tokens[to * shape.seq_length + i] = same.tokens[from * shape.seq_length + i];
        same.types[to * shape.seq_length + i] = same.types[from * shape.seq_length + i];
      }
    }
  }
  BertHeadTotals ties;
  EXPECT_NEAR(Loss(model, same, false, &ties), std::log(4.0), 1e-12);
  EXPECT_EQ(ties.choice_correct, kQuestions);
}

TEST(BertChoiceModelTest, RefusesBadAnswersNamingThem) {
  const ModelShape shape = TinyChoiceBert(NormPlacement::kPost);
  ParameterLayout layout(shape, WholeModel(shape));
  TransformerModel<float> model(layout, kBatch, ModelOptions{});
  InitializeParameters(layout, 5, model.params());
  ChoiceBatch bad = MakeBatch(shape, 8);
  bad.answers[1] = kRaceChoices;
  auto acts = model.NewActivations();
  absl::Status status = model.Forward(InputOf<float>(bad, nullptr), acts.get()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("question 1 has answer 4"), std::string::npos) << status;
  MicrobatchInput<float> input = InputOf<float>(bad, nullptr);
  input.choice_answers = nullptr;
  status = model.Forward(input, acts.get()).status();
  EXPECT_NE(status.message().find("answer"), std::string::npos) << status;
  // A microbatch that is not whole questions.
  TransformerModel<float> odd(layout, kBatch - 1, ModelOptions{});
  InitializeParameters(layout, 5, odd.params());
  auto odd_acts = odd.NewActivations();
  status = odd.Forward(InputOf<float>(MakeBatch(shape, 8), nullptr), odd_acts.get()).status();
  EXPECT_NE(status.message().find("whole questions"), std::string::npos) << status;
}

}  // namespace
}  // namespace mtrain
