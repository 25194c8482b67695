#include "coordinator/plan/job_spec_validation.h"

#include <string>

#include "coordinator/plan/job_spec_defaults.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Parses `json` and expects INVALID_ARGUMENT whose message contains every fragment.
void ExpectRejected(const std::string& json, const std::string& field, const std::string& rule) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(json);
  ASSERT_FALSE(spec.ok()) << json;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), AllOf(HasSubstr(field), HasSubstr(rule)))
      << json;
}

TEST(JobSpecValidationTest, EmptySpecTakesDocumentedDefaults) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson("{}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "job");
  EXPECT_EQ(spec->model().num_layers(), kDefaultNumLayers);
  EXPECT_EQ(spec->model().vocab_size(), 256);
  EXPECT_EQ(spec->parallel().tensor(), 1);
  EXPECT_EQ(spec->parallel().global_batch_size(), 1);
  EXPECT_EQ(spec->parallel().schedule(), SCHEDULE_1F1B);
  EXPECT_EQ(spec->parallel().min_data(), 1);
  EXPECT_FLOAT_EQ(spec->optimizer().lr(), kDefaultLr);
  EXPECT_FLOAT_EQ(spec->optimizer().min_lr(), kDefaultLr / 10);
  EXPECT_EQ(spec->optimizer().decay_steps(), kDefaultSteps);
  EXPECT_FLOAT_EQ(spec->train().dropout(), 0.1f);
  EXPECT_EQ(spec->precision(), PRECISION_FP32);
  EXPECT_EQ(spec->device(), DEVICE_AUTO);
  EXPECT_EQ(spec->data().format(), DATA_FORMAT_TEXT);
  EXPECT_FALSE(spec->data().has_path());
}

TEST(JobSpecValidationTest, ExplicitZeroIsKeptNotDefaulted) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"train": {"dropout": 0}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train().dropout(), 0.0f);
}

TEST(JobSpecValidationTest, DerivedDefaultsFollowExplicitValues) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"parallel": {"data": 2, "micro_batch_size": 3}, "train": {"steps": 40},
          "optimizer": {"lr": 1e-3}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->parallel().global_batch_size(), 6);
  EXPECT_EQ(spec->parallel().min_data(), 2);
  EXPECT_EQ(spec->optimizer().decay_steps(), 40);
  EXPECT_FLOAT_EQ(spec->optimizer().min_lr(), 1e-4f);
}

TEST(JobSpecValidationTest, ShortRunsKeepDecayAfterWarmup) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"train": {"steps": 3}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->optimizer().decay_steps(), kDefaultWarmupSteps);
}

TEST(JobSpecValidationTest, FullMegatronStyleSpecIsAccepted) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({
    "name": "gpt-demo",
    "model": {"num_layers": 8, "num_heads": 8, "hidden_size": 256, "seq_length": 128,
              "vocab_size": 256},
    "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "virtual_stages": 2,
                 "micro_batch_size": 2, "global_batch_size": 16,
                 "schedule": "SCHEDULE_INTERLEAVED_1F1B", "zero_stage": 1, "min_data": 1},
    "optimizer": {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 5, "decay_steps": 50,
                  "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                  "grad_clip": 1.0},
    "precision": "PRECISION_FP32", "device": "DEVICE_CPU",
    "data": {"format": "DATA_FORMAT_TEXT", "tokenizer": "TOKENIZER_BYTE"},
    "train": {"steps": 50, "seed": 7, "dropout": 0.0, "recompute": true,
              "checkpoint_every": 10, "max_restarts": 2}
  })");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(NumMicrobatches(spec->parallel()), 4);
}

TEST(JobSpecValidationTest, NonPositiveSizesNameTheField) {
  ExpectRejected(R"({"model": {"num_layers": 0}})", "model.num_layers", "must be > 0");
  ExpectRejected(R"({"model": {"hidden_size": -4}})", "model.hidden_size", "must be > 0");
  ExpectRejected(R"({"parallel": {"tensor": 0}})", "parallel.tensor", "must be > 0");
  ExpectRejected(R"({"parallel": {"micro_batch_size": 0}})", "parallel.micro_batch_size",
                 "must be > 0");
  ExpectRejected(R"({"train": {"steps": 0}})", "train.steps", "must be > 0");
}

TEST(JobSpecValidationTest, HeadsMustDivideByTensor) {
  ExpectRejected(R"({"model": {"num_heads": 6, "hidden_size": 192},
                     "parallel": {"tensor": 4}})",
                 "model.num_heads", "num_heads % tensor == 0");
}

TEST(JobSpecValidationTest, LayersMustDivideByPipelineTimesVirtualStages) {
  ExpectRejected(R"({"model": {"num_layers": 6}, "parallel": {"pipeline": 4}})", "model.num_layers",
                 "num_layers % (pipeline * virtual_stages) == 0");
  ExpectRejected(R"({"model": {"num_layers": 6},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "global_batch_size": 2,
                                  "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})",
                 "model.num_layers", "num_layers % (pipeline * virtual_stages) == 0");
}

TEST(JobSpecValidationTest, InterleavingNeedsMicrobatchesDivisibleByPipeline) {
  ExpectRejected(R"({"model": {"num_layers": 8},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "global_batch_size": 3,
                                  "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})",
                 "parallel.global_batch_size", "microbatches % pipeline == 0");
  // Without interleaving the same batch is fine.
  EXPECT_TRUE(ParseJobSpecJson(R"({"model": {"num_layers": 8},
                                   "parallel": {"pipeline": 2, "global_batch_size": 3}})")
                  .ok());
}

TEST(JobSpecValidationTest, InterleavingNeedsTwoStages) {
  ExpectRejected(R"({"model": {"num_layers": 4},
                     "parallel": {"pipeline": 1, "virtual_stages": 2,
                                  "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})",
                 "parallel.pipeline", "interleaving needs pipeline >= 2");
}

TEST(JobSpecValidationTest, VirtualStagesNeedInterleavedSchedule) {
  ExpectRejected(R"({"model": {"num_layers": 8},
                     "parallel": {"pipeline": 2, "virtual_stages": 2,
                                  "global_batch_size": 2}})",
                 "parallel.virtual_stages", "SCHEDULE_INTERLEAVED_1F1B");
}

TEST(JobSpecValidationTest, GlobalBatchMustDivideByMicroBatchTimesData) {
  ExpectRejected(R"({"parallel": {"data": 2, "micro_batch_size": 2,
                                  "global_batch_size": 6}})",
                 "parallel.global_batch_size",
                 "global_batch_size % (micro_batch_size * data) == 0");
}

TEST(JobSpecValidationTest, MinDataMustBeWithinDataAndKeepTheBatch) {
  ExpectRejected(R"({"parallel": {"data": 2, "min_data": 3}})", "parallel.min_data",
                 "must be in [1, parallel.data = 2]");
  ExpectRejected(R"({"parallel": {"data": 4, "min_data": 3, "global_batch_size": 4}})",
                 "parallel.min_data", "survive shrinking");
}

TEST(JobSpecValidationTest, HiddenMustDivideByHeads) {
  ExpectRejected(R"({"model": {"num_heads": 3, "hidden_size": 128}})", "model.hidden_size",
                 "hidden_size % num_heads == 0");
}

TEST(JobSpecValidationTest, OptimizerRanges) {
  ExpectRejected(R"({"optimizer": {"lr": 0}})", "optimizer.lr", "must be > 0");
  ExpectRejected(R"({"optimizer": {"lr": 1e-3, "min_lr": 1e-2}})", "optimizer.min_lr",
                 "must be in [0, optimizer.lr");
  ExpectRejected(R"({"optimizer": {"beta2": 1.0}})", "optimizer.beta2", "[0, 1)");
  ExpectRejected(R"({"optimizer": {"warmup_steps": 20, "decay_steps": 10}})",
                 "optimizer.decay_steps", "decay_steps >= warmup_steps");
}

TEST(JobSpecValidationTest, LowPrecisionNeedsAGpu) {
  ExpectRejected(R"({"precision": "PRECISION_BF16", "device": "DEVICE_CPU"})", "precision",
                 "PRECISION_FP32");
}

TEST(JobSpecValidationTest, ByteTokenizerNeedsVocabOf256) {
  ExpectRejected(R"({"model": {"vocab_size": 100}})", "model.vocab_size", "vocab_size >= 256");
}

TEST(JobSpecValidationTest, NameCharactersAreRestricted) {
  ExpectRejected(R"({"name": "my job"})", "name", "only A-Z a-z 0-9");
  ExpectRejected(R"({"name": ""})", "name", "must have 1 to 128 characters");
}

TEST(JobSpecValidationTest, EveryViolationIsReported) {
  absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson(R"({"model": {"num_layers": 0}, "train": {"steps": -1}})");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              AllOf(HasSubstr("model.num_layers"), HasSubstr("train.steps")));
}

TEST(JobSpecValidationTest, UnknownFieldsAreRejected) {
  ExpectRejected(R"({"model": {"num_layer": 4}})", "job spec JSON", "num_layer");
  ExpectRejected(R"({"bogus": 1})", "job spec JSON", "bogus");
}

TEST(JobSpecValidationTest, MalformedJsonIsRejected) {
  ExpectRejected(R"({"model": {"num_layers": 4})", "job spec JSON", "");
  ExpectRejected(R"({"model": {"num_layers": "four"}})", "job spec JSON", "");
  ExpectRejected(R"({"parallel": {"schedule": "SCHEDULE_ZIGZAG"}})", "job spec JSON", "");
}

TEST(JobSpecValidationTest, MissingFileIsNotFound) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile("/nonexistent/job.json");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
}

TEST(JobSpecValidationTest, VocabIsPaddedToMultipleOf128TimesTensor) {
  EXPECT_EQ(PaddedVocabSize(256, 1), 256);
  EXPECT_EQ(PaddedVocabSize(257, 1), 384);
  EXPECT_EQ(PaddedVocabSize(256, 4), 512);
  EXPECT_EQ(PaddedVocabSize(50257, 1), 50304);
  EXPECT_EQ(PaddedVocabSize(50257, 8), 51200);
}

TEST(JobSpecValidationTest, SyntaxErrorsSayWhereTheyAre) {
  const absl::StatusOr<JobSpec> spec =
      ParseJobSpecJson("{\n  \"model\": {\"num_layers\": 2}\n  \"parallel\": {}\n}\n");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "job spec JSON: line 3, column 3: Expected , or } after key:value pair.");
  // Not a syntax error: protobuf's message, which names the field.
  const absl::StatusOr<JobSpec> typed = ParseJobSpecJson(R"({"model": {"num_layers": "x"}})");
  ASSERT_EQ(typed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(typed.status().message().find("model.num_layers"), std::string::npos) << typed.status();
}

TEST(JobSpecValidationTest, ABadMicroBatchIsNotReportedTwice) {
  const absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"parallel": {"micro_batch_size": 0}})");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), "parallel.micro_batch_size: must be > 0 (got 0)");
}

}  // namespace
}  // namespace mtrain
