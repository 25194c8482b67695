#include "common/step_metrics_format.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_writer.h"

namespace mtrain {
namespace {

// 9 significant digits, as the contract's lines have always had (the /api documents
// have 10): a different precision would change bytes that users parse.
constexpr JsonNumberFormat kStepNumbers = JsonNumberFormat::Significant(9);

}  // namespace

std::string EvalTaskResultJson(const EvalTaskResult& e) {
  JsonObject item(kStepNumbers);
  item.String("task", e.task()).String("data", e.data()).Int("examples", e.examples());
  item.Number("loss", e.loss());
  if (e.task() == "perplexity") {
    item.Number("perplexity", e.perplexity())
        .Number("adjusted_perplexity", e.adjusted_perplexity());
  } else {
    item.Number("accuracy", e.accuracy());
    if (e.task() == "choice") item.Number("accuracy_norm", e.accuracy_norm());
  }
  return item.Close();
}

std::string GeneratedTextJson(const GeneratedText& g) {
  return JsonObject(kStepNumbers)
      .String("prompt", g.prompt())
      .Int("prompt_tokens", g.prompt_tokens())
      .String("text", g.text())
      .Raw("tokens", JsonArray(g.tokens(), [](int32_t id) { return absl::StrCat(id); }))
      .String("stopped", g.stopped())
      .Bool("kv_cache", g.kv_cache())
      .Number("prompt_seconds", g.prompt_seconds())
      .Number("tokens_per_second", g.tokens_per_second())
      .Number("decode_tokens_per_second", g.decode_tokens_per_second())
      .Close();
}

std::string StepMetricsJson(const StepMetrics& m) {
  JsonObject json(kStepNumbers);
  json.Int("step", m.step());
  // A diverged loss is written as null rather than breaking every parser downstream.
  if (m.has_loss()) json.Number("loss", m.loss());
  // BERT: the loss's two parts.
  if (m.has_mlm_loss()) json.Number("mlm_loss", m.mlm_loss()).Number("sop_loss", m.sop_loss());
  // BERT's multiple-choice head: the share of the step's questions answered right.
  if (m.has_choice_accuracy()) json.Number("choice_accuracy", m.choice_accuracy());
  json.Number("lr", m.lr())
      .Number("grad_norm", m.grad_norm())
      .Number("step_seconds", m.step_seconds())
      .Number("tokens_per_second", m.tokens_per_second())
      .Number("model_tflops", m.model_tflops())
      .Number("mfu", m.mfu())
      .Int("rank", m.global_rank());
  // Loss scaling (fp16) only: the scale after this step and the overflowed steps so far.
  if (m.loss_scale() > 1.0 || m.skipped_steps() > 0) {
    json.Number("loss_scale", m.loss_scale()).Int("skipped_steps", m.skipped_steps());
  }
  if (m.has_device_memory_peak_bytes()) {
    json.Int("device_memory_peak_bytes", m.device_memory_peak_bytes());
  }
  if (m.has_host_memory_peak_bytes()) {
    json.Int("host_memory_peak_bytes", m.host_memory_peak_bytes());
  }
  // Ranks that talk to others: what they sent on each kind of link this step.
  if (m.tensor_bytes_sent() + m.pipeline_bytes_sent() + m.data_bytes_sent() > 0) {
    json.Int("tensor_bytes_sent", m.tensor_bytes_sent())
        .Int("pipeline_bytes_sent", m.pipeline_bytes_sent())
        .Int("data_bytes_sent", m.data_bytes_sent());
  }
  if (m.has_activation_memory_peak_bytes()) {
    json.Int("activation_memory_peak_bytes", m.activation_memory_peak_bytes());
  }
  // Checkpoint steps of a job with train.eval_tasks: each task's result.
  if (m.evals_size() > 0) {
    json.Raw("evals", JsonArray(m.evals(), EvalTaskResultJson));
  }
  // Checkpoint steps of a job with train.generate: each prompt's text.
  if (m.generations_size() > 0) {
    json.Raw("generations", JsonArray(m.generations(), GeneratedTextJson));
  }
  // Steps with an evaluation (train.eval_interval) only.
  // BERT's: its parts and accuracies instead of a perplexity (exp of two losses' sum means
  // nothing).
  if (m.has_validation_mlm_loss()) {
    json.Number("validation_loss", m.validation_loss())
        .Number("validation_mlm_loss", m.validation_mlm_loss())
        .Number("validation_sop_loss", m.validation_sop_loss())
        .Number("validation_mlm_accuracy", m.validation_mlm_accuracy())
        .Number("validation_sop_accuracy", m.validation_sop_accuracy());
  } else if (m.has_validation_choice_accuracy()) {
    json.Number("validation_loss", m.validation_loss())
        .Number("validation_choice_accuracy", m.validation_choice_accuracy());
  } else if (m.has_validation_loss()) {
    json.Number("validation_loss", m.validation_loss())
        .Number("validation_perplexity", std::exp(m.validation_loss()));
  }
  return json.Close();
}

std::string StepProgressLine(const StepMetrics& m, long long total_steps) {
  std::string line =
      absl::StrFormat("step %lld/%lld", static_cast<long long>(m.step()), total_steps);
  if (m.has_loss()) absl::StrAppend(&line, absl::StrFormat(" | loss %.4f", m.loss()));
  if (m.has_mlm_loss()) {
    absl::StrAppend(&line, absl::StrFormat(" (masked-LM %.4f, sentence order %.4f)", m.mlm_loss(),
                                           m.sop_loss()));
  }
  if (m.has_choice_accuracy()) {
    absl::StrAppend(&line, absl::StrFormat(" (%.1f%% right)", 100.0 * m.choice_accuracy()));
  }
  absl::StrAppend(&line,
                  absl::StrFormat(" | lr %.2e | grad_norm %.3f | %.0f tok/s | mfu %.2f%%", m.lr(),
                                  m.grad_norm(), m.tokens_per_second(), 100.0 * m.mfu()));
  if (m.has_validation_mlm_loss()) {
    absl::StrAppend(
        &line, absl::StrFormat(" | validation loss %.4f (masked-LM %.4f, %.1f%% right; sentence "
                               "order %.4f, %.1f%% right)",
                               m.validation_loss(), m.validation_mlm_loss(),
                               100.0 * m.validation_mlm_accuracy(), m.validation_sop_loss(),
                               100.0 * m.validation_sop_accuracy()));
  } else if (m.has_validation_choice_accuracy()) {
    absl::StrAppend(&line,
                    absl::StrFormat(" | validation loss %.4f, %.1f%% of questions right",
                                    m.validation_loss(), 100.0 * m.validation_choice_accuracy()));
  } else if (m.has_validation_loss()) {
    absl::StrAppend(&line, absl::StrFormat(" | validation loss %.4f, perplexity %.2f",
                                           m.validation_loss(), std::exp(m.validation_loss())));
  }
  return line;
}

}  // namespace mtrain
