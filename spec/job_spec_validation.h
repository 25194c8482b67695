// Validation of a JobSpec, shared by the coordinator (SubmitJob) and trainctl (before
// sending), so both reject the same specs with the same words.
//
// Every violated rule is reported, each naming the field, the value and the rule, joined
// by "; ":
//   INVALID_ARGUMENT: model.num_heads: 12 is not divisible by parallel.tensor (5)
//   [rule: num_heads % tensor == 0]
//
// Beyond the documented divisibility rules: every numeric field has an upper bound
// (job_spec_limits.h), every float must be finite, enum numbers must be known values,
// paths are bounded, UTF-8 and free of control characters, and the per-rank memory
// estimate (rank_memory_estimate.h) must stay under kMaxRankMemoryBytes. No input makes
// validation overflow, allocate in proportion to a field's value, or crash; a spec it
// accepts can be planned (assignment_plan.h) into Assignments of a bounded size.
//
//   absl::StatusOr<JobSpec> spec = ParseJobSpecJson(text);  // defaults + validation
#ifndef MTRAIN_SPEC_JOB_SPEC_VALIDATION_H_
#define MTRAIN_SPEC_JOB_SPEC_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_spec.pb.h"
// PaddedVocabSize and NumMicrobatches were declared here before they moved to
// job_spec_arithmetic.h; kept so that code written against this header still builds.
#include "spec/job_spec_arithmetic.h"  // IWYU pragma: export

namespace mtrain {

// Whether the spec's architecture must be one the engines train (every spec that is to
// run), or may be any the spec can describe (`trainctl plan` pricing a model for other
// hardware: the planner reads model/'s tables for every family).
enum class ArchitectureCheck { kTrainable, kAny };

// Checks a spec whose defaults have been applied (ApplyJobSpecDefaults). Returns
// INVALID_ARGUMENT listing every violated rule.
absl::Status ValidateJobSpec(const JobSpec& spec,
                             ArchitectureCheck architecture = ArchitectureCheck::kTrainable);

// Applies defaults to `spec` and validates the result.
absl::StatusOr<JobSpec> ResolveJobSpec(
    JobSpec spec, ArchitectureCheck architecture = ArchitectureCheck::kTrainable);

// Parses protobuf JSON strictly (unknown fields, text that is not RFC 8259 JSON even where
// protobuf's parser would take it, and texts over kMaxJobSpecJsonBytes are errors), then
// resolves it. Errors are INVALID_ARGUMENT.
absl::StatusOr<JobSpec> ParseJobSpecJson(
    absl::string_view json, ArchitectureCheck architecture = ArchitectureCheck::kTrainable);

// Reads and parses a spec file. NOT_FOUND if the file cannot be read.
absl::StatusOr<JobSpec> LoadJobSpecFile(
    const std::string& path, ArchitectureCheck architecture = ArchitectureCheck::kTrainable);

}  // namespace mtrain

#endif  // MTRAIN_SPEC_JOB_SPEC_VALIDATION_H_
