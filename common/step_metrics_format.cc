#include "common/step_metrics_format.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtrain {
namespace {

// JSON has no NaN or infinity; a diverged loss is written as null rather than breaking
// every parser downstream.
std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.9g", value);
}

}  // namespace

std::string StepMetricsJson(const StepMetrics& m) {
  std::string json = absl::StrCat("{\"step\":", m.step());
  if (m.has_loss()) absl::StrAppend(&json, ",\"loss\":", JsonNumber(m.loss()));
  absl::StrAppend(&json, ",\"lr\":", JsonNumber(m.lr()),
                  ",\"grad_norm\":", JsonNumber(m.grad_norm()),
                  ",\"step_seconds\":", JsonNumber(m.step_seconds()),
                  ",\"tokens_per_second\":", JsonNumber(m.tokens_per_second()),
                  ",\"model_tflops\":", JsonNumber(m.model_tflops()),
                  ",\"mfu\":", JsonNumber(m.mfu()), ",\"rank\":", m.global_rank());
  // Loss scaling (fp16) only: the scale after this step and the overflowed steps so far.
  if (m.loss_scale() > 1.0 || m.skipped_steps() > 0) {
    absl::StrAppend(&json, ",\"loss_scale\":", JsonNumber(m.loss_scale()),
                    ",\"skipped_steps\":", m.skipped_steps());
  }
  if (m.has_device_memory_peak_bytes()) {
    absl::StrAppend(&json, ",\"device_memory_peak_bytes\":", m.device_memory_peak_bytes());
  }
  absl::StrAppend(&json, "}");
  return json;
}

std::string StepProgressLine(const StepMetrics& m, long long total_steps) {
  std::string line =
      absl::StrFormat("step %lld/%lld", static_cast<long long>(m.step()), total_steps);
  if (m.has_loss()) absl::StrAppend(&line, absl::StrFormat(" | loss %.4f", m.loss()));
  absl::StrAppend(&line,
                  absl::StrFormat(" | lr %.2e | grad_norm %.3f | %.0f tok/s | mfu %.2f%%", m.lr(),
                                  m.grad_norm(), m.tokens_per_second(), 100.0 * m.mfu()));
  return line;
}

}  // namespace mtrain
