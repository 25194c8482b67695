// Validation of a JobSpec, shared by the coordinator (SubmitJob) and trainctl (before
// sending), so both reject the same specs with the same words.
//
// Every violated rule is reported, each naming the field and the rule, joined by "; ":
//   INVALID_ARGUMENT: model.num_heads: 12 is not divisible by parallel.tensor (5)
//   [rule: num_heads % tensor == 0]
//
//   absl::StatusOr<JobSpec> spec = ParseJobSpecJson(text);  // defaults + validation
#ifndef MTRAIN_COORDINATOR_PLAN_JOB_SPEC_VALIDATION_H_
#define MTRAIN_COORDINATOR_PLAN_JOB_SPEC_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// Checks a spec whose defaults have been applied (ApplyJobSpecDefaults). Returns
// INVALID_ARGUMENT listing every violated rule.
absl::Status ValidateJobSpec(const JobSpec& spec);

// Applies defaults to `spec` and validates the result.
absl::StatusOr<JobSpec> ResolveJobSpec(JobSpec spec);

// Parses protobuf JSON strictly (unknown fields and malformed JSON are errors), then
// resolves it. Errors are INVALID_ARGUMENT.
absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json);

// Reads and parses a spec file. NOT_FOUND if the file cannot be read.
absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path);

// The vocabulary after padding to a multiple of 128 * tensor, so every tensor-parallel
// rank holds an equal slice whose width is a multiple of 128 (GEMM-friendly).
int PaddedVocabSize(int vocab_size, int tensor);

// Microbatches per optimizer step on each data-parallel replica:
// global_batch_size / (micro_batch_size * data).
int NumMicrobatches(const ParallelSpec& parallel);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_PLAN_JOB_SPEC_VALIDATION_H_
