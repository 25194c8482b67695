// Random and mutated JobSpecs for property tests and fuzzing, from a fixed seed. Values
// are drawn toward the edges where bugs live: 0, -1, 1, powers of two, each bound and one
// past it, 2^31 - 1, NaN and +-Infinity, unknown enum numbers, long, empty, non-UTF-8 and
// control-character strings. Fields are found by protobuf reflection, so a field added to
// job_spec.proto is mutated without touching this file.
//
//   JobSpecMutator mutator(/*seed=*/42);
//   for (int i = 0; i < 1000; ++i) {
//     const JobSpec spec = mutator.Mutate(mutator.SeedSpec());
//     absl::StatusOr<JobSpec> resolved = ResolveJobSpec(spec);  // never crashes
//   }
#ifndef MTRAIN_SPEC_JOB_SPEC_MUTATOR_H_
#define MTRAIN_SPEC_JOB_SPEC_MUTATOR_H_

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "proto/job_spec.pb.h"

namespace mtrain {

class JobSpecMutator {
 public:
  explicit JobSpecMutator(uint64_t seed) : rng_(seed) {}

  // One of a handful of valid specs (as users write them: some fields omitted) covering
  // every schedule, tensor/pipeline/data parallelism, ZeRO-1 and recompute.
  JobSpec SeedSpec();
  // `spec` with 1 to `max_changes` fields set to edge values or cleared.
  JobSpec Mutate(const JobSpec& spec, int max_changes = 3);
  // Every field present, each an edge value or a plain one.
  JobSpec RandomSpec();
  // Byte-level damage to a text (flip, delete, insert, duplicate, swap quotes...).
  std::string MutateText(const std::string& text);

  std::mt19937_64& rng() { return rng_; }

 private:
  int64_t EdgeInt();
  float EdgeFloat();
  int EdgeEnum();
  std::string EdgeString();
  size_t Below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  std::mt19937_64 rng_;
};

// Every field path of JobSpec ("model.num_layers", "parallel", ...) that a refusal may
// name, plus the groups rules spanning several fields use ("parallel", "model and
// parallel", "job spec JSON").
std::set<std::string> JobSpecFieldNames();

}  // namespace mtrain

#endif  // MTRAIN_SPEC_JOB_SPEC_MUTATOR_H_
