// BERT on the CUDA model (issue 35; tagged `gpu`, skipped visibly without one) against the
// CPU model in double on the same weights and microbatch: the masked-LM loss of every token
// (0 on unmasked rows), the sentence-order loss and both heads' correct counts, and every
// parameter's gradient, under Megatron's (pre) and the original (post) LayerNorm placement,
// with padded sequences, dropout (the CPU's masks), full and selective recomputation, in
// fp32 and within bf16's precision; the split backward of the zero-bubble schedules; the
// multiple-choice head; bad microbatches are refused by name.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/test_support.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/cuda/bert_testing.h"
#include "worker/engine/cuda/cuda_gpt_model.h"
#include "worker/engine/parameter_init.h"

namespace mtrain::cuda {
namespace {

using testing::DeviceArray;
using testing::RelativeError;

constexpr int kBatch = 2;

using testing::BertBatch;
using testing::SmallBert;

// The second sequence padded after 29 positions (a partial tile of the attention kernels);
// one sequence in order, one swapped.
BertBatch MakeBatch(const ModelShape& shape) {
  return testing::MakeBertBatch(shape, 17, {shape.seq_length, 29}, {0, 1}, 7);
}

struct Result {
  double mlm_sum = 0;
  BertHeadTotals totals;
  std::vector<double> grads;
};

Result CpuReference(const ParameterLayout& layout, const std::vector<float>& params,
                    const ModelOptions& options, const BertBatch& b, const MicrobatchId& id) {
  TransformerModel<double> model(layout, kBatch, options);
  std::copy(params.begin(), params.end(), model.params());
  model.ZeroGrads();
  auto acts = model.NewActivations();
  Result result;
  MicrobatchInput<double> input;
  input.id = id;
  input.tokens = b.tokens.data();
  input.targets = b.targets.data();
  input.token_types = b.types.data();
  input.lengths = b.lengths.data();
  input.sentence_order = b.order.data();
  input.d_loss_per_sequence = 1.0 / kBatch;
  input.bert_totals = &result.totals;
  absl::StatusOr<double> sum = model.Forward(input, acts.get());
  EXPECT_TRUE(sum.ok()) << sum.status();
  result.mlm_sum = sum.ok() ? *sum : NAN;
  EXPECT_TRUE(model.Backward(acts.get(), nullptr, 1.0 / b.masked).ok());
  result.grads.assign(model.grads(), model.grads() + layout.end_offset());
  return result;
}

template <typename T>
CudaMicrobatchInput<T> GpuInput(const BertBatch& b, const MicrobatchId& id,
                                BertHeadTotals* totals) {
  CudaMicrobatchInput<T> input;
  input.id = id;
  input.tokens = b.tokens.data();
  input.targets = b.targets.data();
  input.token_types = b.types.data();
  input.lengths = b.lengths.data();
  input.sentence_order = b.order.data();
  input.d_loss_per_sequence = 1.0f / kBatch;
  input.bert_totals = totals;
  return input;
}

template <typename T>
void CompareWithTheCpu(NormPlacement placement, const ModelOptions& options, double tolerance,
                       double grad_tolerance, bool split_backward = false) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const ModelShape shape = SmallBert(placement);
  const ParameterLayout layout(shape, WholeModel(shape));
  std::vector<float> params(layout.end_offset());
  InitializeParameters(layout, 7, params.data());
  for (float& p : params) p = testing::RoundTo<T>(p);
  const BertBatch batch = MakeBatch(shape);
  const MicrobatchId id{4, 2};
  const Result want = CpuReference(layout, params, options, batch, id);

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  const int N = kBatch * shape.seq_length;
  DeviceArray<T> device_params(params);
  DeviceArray<float> device_grads(std::vector<float>(layout.end_offset(), 0.0f));
  DeviceArray<float> losses(static_cast<size_t>(N));
  auto model = CudaGptModel<T>::Create(layout, kBatch, options, device_params.get(),
                                       device_grads.get(), blas->get(), stream);
  ASSERT_TRUE(model.ok()) << model.status();
  auto acts = (*model)->NewActivations();
  ASSERT_TRUE(acts.ok()) << acts.status();
  BertHeadTotals totals;
  const absl::Status forward =
      (*model)->Forward(GpuInput<T>(batch, id, &totals), acts->get(), losses.get());
  ASSERT_TRUE(forward.ok()) << forward;
  const float d_loss = 1.0f / batch.masked;
  const absl::Status backward = split_backward
                                    ? (*model)->BackwardInput(acts->get(), nullptr, d_loss)
                                    : (*model)->Backward(acts->get(), nullptr, d_loss);
  ASSERT_TRUE(backward.ok()) << backward;
  if (split_backward) {
    ASSERT_TRUE((*model)->BackwardWeight(acts->get()).ok());
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  // Per-token losses: 0 on every unmasked row, summing to the CPU's masked-LM sum.
  const std::vector<float> got_losses = losses.Download();
  double sum = 0;
  for (int i = 0; i < N; ++i) {
    if (batch.targets[i] < 0) {
      ASSERT_EQ(got_losses[i], 0.0f) << "unmasked row " << i;
    }
    sum += got_losses[i];
  }
  std::printf(
      "%s %s: %d masked rows; masked-LM sum %.7g (cpu %.7g), sentence order %.7g (cpu "
      "%.7g)\n",
      testing::TypeName<T>(), placement == NormPlacement::kPre ? "pre" : "post", batch.masked, sum,
      want.mlm_sum, totals.sentence_order_loss, want.totals.sentence_order_loss);
  EXPECT_NEAR(sum, want.mlm_sum, tolerance * std::abs(want.mlm_sum));
  EXPECT_NEAR(totals.sentence_order_loss, want.totals.sentence_order_loss,
              tolerance * std::abs(want.totals.sentence_order_loss) + 1e-6);
  if (std::is_same_v<T, float>) {
    EXPECT_EQ(totals.masked_correct, want.totals.masked_correct);
    EXPECT_EQ(totals.sentence_order_correct, want.totals.sentence_order_correct);
  }
  const std::vector<float> grads = device_grads.Download();
  for (const ParamTensor& t : layout.tensors()) {
    std::vector<float> got(grads.begin() + t.offset, grads.begin() + t.offset + t.size);
    std::vector<double> ref(want.grads.begin() + t.offset, want.grads.begin() + t.offset + t.size);
    const double error = RelativeError(got, ref);
    std::printf("  grad %-30s %.3g\n", t.name.c_str(), error);
    EXPECT_LT(error, grad_tolerance) << t.name;
  }
  cudaStreamDestroy(stream);
}

ModelOptions WithDropout() {
  ModelOptions options;
  options.dropout = 0.1f;
  options.seed = 11;
  return options;
}

TEST(CudaBertModelTest, PreNormFp32MatchesTheCpuModel) {
  CompareWithTheCpu<float>(NormPlacement::kPre, ModelOptions{}, 1e-5, 1e-4);
}

TEST(CudaBertModelTest, PostNormFp32MatchesTheCpuModel) {
  CompareWithTheCpu<float>(NormPlacement::kPost, ModelOptions{}, 1e-5, 1e-4);
}

TEST(CudaBertModelTest, Fp32WithDropoutDropsWhatTheCpuDrops) {
  CompareWithTheCpu<float>(NormPlacement::kPre, WithDropout(), 1e-5, 1e-4);
  CompareWithTheCpu<float>(NormPlacement::kPost, WithDropout(), 1e-5, 1e-4);
}

TEST(CudaBertModelTest, Fp32WithRecomputationMatchesTheCpuModel) {
  ModelOptions full = WithDropout();
  full.recompute = true;
  full.recompute_group = 2;
  CompareWithTheCpu<float>(NormPlacement::kPost, full, 1e-5, 1e-4);
  ModelOptions selective = WithDropout();
  selective.selective_recompute = true;
  CompareWithTheCpu<float>(NormPlacement::kPre, selective, 1e-5, 1e-4);
}

TEST(CudaBertModelTest, Fp32SplitBackwardMatchesTheCpuModel) {
  CompareWithTheCpu<float>(NormPlacement::kPost, WithDropout(), 1e-5, 1e-4,
                           /*split_backward=*/true);
}

TEST(CudaBertModelTest, Bf16StaysWithinBf16PrecisionOfTheCpuModel) {
  CompareWithTheCpu<__nv_bfloat16>(NormPlacement::kPre, ModelOptions{}, 1e-2, 5e-2);
  CompareWithTheCpu<__nv_bfloat16>(NormPlacement::kPost, ModelOptions{}, 1e-2, 5e-2);
}

// RACE fine-tuning's multiple-choice head (model.bert_head BERT_HEAD_MULTIPLE_CHOICE): two
// questions of four options, the second padding (-1: no loss, no gradient), with dropout on
// the pooler's output: the questions' loss, the correct count and every gradient.
TEST(CudaBertModelTest, MultipleChoiceHeadMatchesTheCpuModel) {
  MTRAIN_SKIP_WITHOUT_GPU();
  constexpr int kChoiceBatch = 8;
  ModelShape shape = SmallBert(NormPlacement::kPre);
  shape.bert_head = BertHeadKind::kMultipleChoice;
  const ParameterLayout layout(shape, WholeModel(shape));
  std::vector<float> params(layout.end_offset());
  InitializeParameters(layout, 9, params.data());
  const int S = shape.seq_length;
  const int N = kChoiceBatch * S;
  std::mt19937_64 rng(3);
  std::vector<int32_t> tokens(N), types(N), targets(N, -1), lengths(kChoiceBatch);
  for (int b = 0; b < kChoiceBatch; ++b) lengths[b] = S - 3 * b;
  for (int i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % shape.vocab);
    types[i] = (i % S) < S / 2 ? 0 : 1;
  }
  const std::vector<int32_t> answers = {2, -1};
  ModelOptions options = WithDropout();
  const MicrobatchId id{6, 0};

  TransformerModel<double> cpu(layout, kChoiceBatch, options);
  std::copy(params.begin(), params.end(), cpu.params());
  cpu.ZeroGrads();
  auto cpu_acts = cpu.NewActivations();
  MicrobatchInput<double> cpu_input;
  cpu_input.id = id;
  cpu_input.tokens = tokens.data();
  cpu_input.targets = targets.data();
  cpu_input.token_types = types.data();
  cpu_input.lengths = lengths.data();
  cpu_input.choice_answers = answers.data();
  BertHeadTotals cpu_totals;
  cpu_input.bert_totals = &cpu_totals;
  absl::StatusOr<double> cpu_loss = cpu.Forward(cpu_input, cpu_acts.get());
  ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
  ASSERT_TRUE(cpu.Backward(cpu_acts.get(), nullptr, 1.0).ok());

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  DeviceArray<float> device_params(params);
  DeviceArray<float> device_grads(std::vector<float>(layout.end_offset(), 0.0f));
  DeviceArray<float> losses(static_cast<size_t>(N));
  auto model = CudaGptModel<float>::Create(layout, kChoiceBatch, options, device_params.get(),
                                           device_grads.get(), blas->get(), stream);
  ASSERT_TRUE(model.ok()) << model.status();
  auto acts = (*model)->NewActivations();
  ASSERT_TRUE(acts.ok()) << acts.status();
  CudaMicrobatchInput<float> input;
  input.id = id;
  input.tokens = tokens.data();
  input.targets = targets.data();
  input.token_types = types.data();
  input.lengths = lengths.data();
  input.choice_answers = answers.data();
  BertHeadTotals totals;
  input.bert_totals = &totals;
  ASSERT_TRUE((*model)->Forward(input, acts->get(), losses.get()).ok());
  ASSERT_TRUE((*model)->Backward(acts->get(), nullptr, 1.0f).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  double loss = 0;
  for (float l : losses.Download()) loss += l;
  std::printf("multiple choice: loss %.7g (cpu %.7g), %lld of %lld right (cpu %lld of %lld)\n",
              loss, *cpu_loss, static_cast<long long>(totals.choice_correct),
              static_cast<long long>(totals.choice_questions),
              static_cast<long long>(cpu_totals.choice_correct),
              static_cast<long long>(cpu_totals.choice_questions));
  EXPECT_NEAR(loss, *cpu_loss, 1e-5 * std::abs(*cpu_loss));
  EXPECT_EQ(totals.choice_questions, 1);
  EXPECT_EQ(totals.choice_correct, cpu_totals.choice_correct);
  const std::vector<float> grads = device_grads.Download();
  for (const ParamTensor& t : layout.tensors()) {
    std::vector<float> got(grads.begin() + t.offset, grads.begin() + t.offset + t.size);
    std::vector<double> want(cpu.grads() + t.offset, cpu.grads() + t.offset + t.size);
    const double error = RelativeError(got, want);
    std::printf("  grad %-30s %.3g\n", t.name.c_str(), error);
    EXPECT_LT(error, 1e-4) << t.name;
  }
  cudaStreamDestroy(stream);
}

TEST(CudaBertModelTest, RefusesBadMicrobatches) {
  MTRAIN_SKIP_WITHOUT_GPU();
  const ModelShape shape = SmallBert(NormPlacement::kPre);
  const ParameterLayout layout(shape, WholeModel(shape));
  std::vector<float> params(layout.end_offset());
  InitializeParameters(layout, 7, params.data());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  absl::StatusOr<std::unique_ptr<CublasLt>> blas = CublasLt::Create();
  ASSERT_TRUE(blas.ok()) << blas.status();
  DeviceArray<float> device_params(params);
  DeviceArray<float> device_grads(std::vector<float>(layout.end_offset(), 0.0f));
  auto model = CudaGptModel<float>::Create(layout, kBatch, ModelOptions{}, device_params.get(),
                                           device_grads.get(), blas->get(), stream);
  ASSERT_TRUE(model.ok()) << model.status();
  auto acts = (*model)->NewActivations();
  ASSERT_TRUE(acts.ok());
  BertBatch bad = MakeBatch(shape);
  bad.lengths[1] = 0;
  absl::Status refused =
      (*model)->Forward(GpuInput<float>(bad, {1, 0}, nullptr), acts->get(), nullptr);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("length"), std::string::npos) << refused;
  bad = MakeBatch(shape);
  bad.types[3] = 2;
  refused = (*model)->Forward(GpuInput<float>(bad, {1, 0}, nullptr), acts->get(), nullptr);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("token type"), std::string::npos) << refused;
  bad = MakeBatch(shape);
  bad.order[0] = 3;
  refused = (*model)->Forward(GpuInput<float>(bad, {1, 0}, nullptr), acts->get(), nullptr);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("sentence-order"), std::string::npos) << refused;

  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace mtrain::cuda
