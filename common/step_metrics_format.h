// The two renderings of a step's metrics: the JSON line of the contract
// (`train --metrics_jsonl`, `trainctl watch --json`) and the human progress line.
//
//   {"step":1,"loss":5.54,"lr":6e-05,"grad_norm":1.2,"tokens_per_second":8123,"mfu":0.013}
//   step 1/200 | loss 5.5400 | lr 6.00e-05 | grad_norm 1.200 | 8123 tok/s | mfu 1.3%
#ifndef MTRAIN_COMMON_STEP_METRICS_FORMAT_H_
#define MTRAIN_COMMON_STEP_METRICS_FORMAT_H_

#include <string>

#include "proto/coordinator.pb.h"

namespace mtrain {

// One line, no trailing newline. Keys in a fixed order; "loss" only when present,
// "validation_loss" and "validation_perplexity" only on steps with an evaluation, "evals"
// only on checkpoint steps of a job with train.eval_tasks, "generations" only on those of
// a job with train.generate.
std::string StepMetricsJson(const StepMetrics& metrics);

std::string StepProgressLine(const StepMetrics& metrics, long long total_steps);

// One evaluation task's result as a JSON object: task, data, examples, loss, then
// perplexity and adjusted_perplexity, or accuracy (and accuracy_norm for choice). The
// JSON line's "evals" items and the coordinator's "evaluation" events.
std::string EvalTaskResultJson(const EvalTaskResult& result);

// One train.generate prompt's continuation as a JSON object: prompt, prompt_tokens, text,
// tokens, stopped, kv_cache, prompt_seconds, tokens_per_second, decode_tokens_per_second.
// The JSON line's "generations" items, `train --generate`'s output and the coordinator's
// "generation" events.
std::string GeneratedTextJson(const GeneratedText& text);

}  // namespace mtrain

#endif  // MTRAIN_COMMON_STEP_METRICS_FORMAT_H_
