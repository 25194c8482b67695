#include "common/step_metrics_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

StepMetrics Metrics() {
  StepMetrics m;
  m.set_step(3);
  m.set_loss(5.25);
  m.set_lr(1e-4);
  m.set_global_rank(1);
  return m;
}

TEST(StepMetricsFormatTest, JsonLineHasTheContractFieldsAndNoDeviceMemoryOnTheCpu) {
  const std::string json = StepMetricsJson(Metrics());
  EXPECT_THAT(json, ::testing::StartsWith("{\"step\":3,\"loss\":5.25,\"lr\":"));
  for (const char* field : {"grad_norm", "step_seconds", "tokens_per_second", "mfu", "rank"}) {
    EXPECT_THAT(json, HasSubstr(std::string("\"") + field + "\":")) << field;
  }
  EXPECT_THAT(json, Not(HasSubstr("device_memory_peak_bytes")));
  EXPECT_THAT(json, EndsWith("\"rank\":1}"));
}

TEST(StepMetricsFormatTest, LossScalingShowsItsScaleAndSkippedSteps) {
  StepMetrics m = Metrics();
  m.set_loss_scale(1.0);
  EXPECT_THAT(StepMetricsJson(m), Not(HasSubstr("loss_scale")));
  m.set_loss_scale(65536);
  m.set_skipped_steps(17);
  EXPECT_THAT(StepMetricsJson(m),
              EndsWith(",\"rank\":1,\"loss_scale\":65536,\"skipped_steps\":17}"));
}

TEST(StepMetricsFormatTest, CudaRanksReportTheirPeakDeviceMemory) {
  StepMetrics m = Metrics();
  m.set_device_memory_peak_bytes(int64_t{5} << 30);
  EXPECT_THAT(StepMetricsJson(m), EndsWith(",\"rank\":1,\"device_memory_peak_bytes\":5368709120}"));
}

TEST(StepMetricsFormatTest, CpuRanksReportTheirPeakHeap) {
  StepMetrics m = Metrics();
  m.set_host_memory_peak_bytes(int64_t{3} << 20);
  EXPECT_THAT(StepMetricsJson(m), EndsWith(",\"rank\":1,\"host_memory_peak_bytes\":3145728}"));
}

TEST(StepMetricsFormatTest, EvaluationStepsCarryTheValidationLossAndPerplexity) {
  StepMetrics m = Metrics();
  EXPECT_THAT(StepMetricsJson(m), Not(HasSubstr("validation")));
  EXPECT_THAT(StepProgressLine(m, 10), Not(HasSubstr("validation")));
  m.set_validation_loss(2.0);
  EXPECT_THAT(StepMetricsJson(m),
              EndsWith(",\"rank\":1,\"validation_loss\":2,\"validation_perplexity\":7.3890561}"));
  EXPECT_THAT(StepProgressLine(m, 10), EndsWith(" | validation loss 2.0000, perplexity 7.39"));
}

TEST(StepMetricsFormatTest, MultipleChoiceStepsCarryTheShareOfQuestionsRight) {
  StepMetrics m = Metrics();
  m.set_choice_accuracy(0.5);
  m.set_validation_loss(1.25);
  m.set_validation_choice_accuracy(0.75);
  const std::string json = StepMetricsJson(m);
  EXPECT_THAT(json, HasSubstr("\"choice_accuracy\":0.5"));
  EXPECT_THAT(json, HasSubstr("\"validation_loss\":1.25,\"validation_choice_accuracy\":0.75"));
  // exp of a cross-entropy over four options is no perplexity.
  EXPECT_THAT(json, Not(HasSubstr("perplexity")));
  const std::string line = StepProgressLine(m, 10);
  EXPECT_THAT(line, HasSubstr("loss 5.2500 (50.0% right)"));
  EXPECT_THAT(line, HasSubstr("validation loss 1.2500, 75.0% of questions right"));
}

}  // namespace
}  // namespace mtrain
