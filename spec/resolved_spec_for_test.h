// Tests' shorthand for a spec from JSON with its defaults applied and validated; a spec
// that does not parse or validate fails the running test (and an empty spec is returned).
#ifndef MTRAIN_SPEC_RESOLVED_SPEC_FOR_TEST_H_
#define MTRAIN_SPEC_RESOLVED_SPEC_FOR_TEST_H_

#include <string>

#include "gtest/gtest.h"
#include "spec/job_spec_validation.h"

namespace mtrain {

inline JobSpec ResolvedSpecForTest(const std::string& json) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(JobSpec());
}

}  // namespace mtrain

#endif  // MTRAIN_SPEC_RESOLVED_SPEC_FOR_TEST_H_
