// libFuzzer target: job spec JSON as trainctl and the coordinator parse it
// (ParseJobSpecJson: syntax, defaults, validation). A text it accepts must also plan
// (every rank's Assignment, schedules checked) into Assignments under 1 MiB; anything
// else is a finding, reported by aborting. Refusals are the normal outcome.
//
// Build and run: tools/fuzz.sh. Under Bazel the same file builds with
// tests/fuzz/replay_main.cc into a test that replays the seeds and the corpus.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "plan/assignment_plan.h"
#include "spec/job_spec_validation.h"

namespace mtrain {

std::vector<std::string> FuzzSeeds() {
  return {
      "{}",
      R"({"name": "gpt", "model": {"num_layers": 8, "num_heads": 8, "hidden_size": 256,
          "seq_length": 128, "vocab_size": 256},
          "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "virtual_stages": 2,
          "micro_batch_size": 2, "global_batch_size": 16,
          "schedule": "SCHEDULE_INTERLEAVED_1F1B", "zero_stage": 1, "min_data": 1},
          "optimizer": {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 5, "decay_steps": 50,
          "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0},
          "precision": "PRECISION_FP32", "device": "DEVICE_CPU",
          "data": {"path": "corpus.txt", "format": "DATA_FORMAT_TEXT",
          "tokenizer": "TOKENIZER_BYTE"},
          "train": {"steps": 50, "seed": "7", "dropout": 0.0, "recompute": true,
          "checkpoint_every": 10, "max_restarts": 2, "init_from": "gpt2.safetensors"}})",
      R"({"parallel": {"pipeline": 4, "global_batch_size": 8192, "schedule": "SCHEDULE_GPIPE"},
          "model": {"num_layers": 8}})",
      R"({"parallel": {"global_batch_size": 2147483647}, "optimizer": {"lr": "Infinity"},
          "device": 99})",
  };
}

}  // namespace mtrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<mtrain::JobSpec> spec = mtrain::ParseJobSpecJson(text);
  if (!spec.ok()) {
    if (spec.status().code() != absl::StatusCode::kInvalidArgument) {
      std::fprintf(stderr, "refusal is not INVALID_ARGUMENT: %s\n",
                   spec.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  const mtrain::ParallelSpec& p = spec->parallel();
  // Planning lists every peer in every Assignment: keep the fuzzer fast on big worlds
  // (their schedules are bounded the same way; job_spec_property_test covers them).
  if (int64_t{p.tensor()} * p.pipeline() * p.data() > 64) return 0;
  absl::StatusOr<std::vector<mtrain::Assignment>> plan =
      mtrain::PlanAssignments(*spec, "job-1", 1, {});
  if (!plan.ok()) {
    std::fprintf(stderr, "accepted spec does not plan: %s\n", plan.status().ToString().c_str());
    std::abort();
  }
  for (const mtrain::Assignment& a : *plan) {
    if (a.ByteSizeLong() >= (size_t{1} << 20)) {
      std::fprintf(stderr, "accepted spec gives a %zu-byte Assignment\n", a.ByteSizeLong());
      std::abort();
    }
  }
  return 0;
}
