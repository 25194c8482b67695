// Properties of spec validation over thousands of random and mutated specs (fixed seeds,
// so a failure reproduces):
//   - validation never crashes (UBSan/ASan builds check overflow and memory too);
//   - every refusal is INVALID_ARGUMENT and each of its violations starts with the name
//     of a JobSpec field (or a documented group of fields);
//   - a spec it accepts plans: every rank gets an Assignment, schedules pass the checker,
//     each Assignment serializes under 1 MiB, the per-rank memory estimate is within the
//     cap, and resolving it again changes nothing;
//   - the JSON path agrees with the proto path, and damaged JSON text is refused cleanly.
// tests/job_spec_worker_sample_test.cc runs a sample of accepted specs on a real rank.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/utf8.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "plan/assignment_plan.h"
#include "plan/pipeline_schedule.h"
#include "plan/rank_memory_estimate.h"
#include "plan/schedule_checker.h"
#include "spec/job_spec_limits.h"
#include "spec/job_spec_mutator.h"
#include "spec/job_spec_validation.h"

namespace mtrain {
namespace {

// Planning every rank lists every peer in every Assignment (quadratic); bigger worlds are
// checked one pipeline group at a time, which is what grows with the batch.
constexpr int kLargestWorldPlannedWhole = 256;

struct Tally {
  int accepted = 0;
  int refused = 0;
  size_t largest_assignment = 0;
};

void ExpectRefusalNamesFields(const absl::Status& status, const std::string& what) {
  static const std::set<std::string> names = JobSpecFieldNames();
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what << status;
  for (absl::string_view violation : absl::StrSplit(status.message(), "; ")) {
    const size_t colon = violation.find(':');
    ASSERT_NE(colon, absl::string_view::npos) << what << violation;
    EXPECT_EQ(names.count(std::string(violation.substr(0, colon))), 1u)
        << "refusal does not start with a field name: " << violation << "\n"
        << what;
  }
}

void ExpectPlans(const JobSpec& spec, const std::string& what, Tally* tally) {
  // Validation is idempotent: a stored, resolved spec passes again unchanged.
  absl::StatusOr<JobSpec> again = ResolveJobSpec(spec);
  ASSERT_TRUE(again.ok()) << what << again.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*again, spec)) << what;
  EXPECT_LE(EstimateRankMemory(spec).total_bytes, kMaxRankMemoryBytes) << what;
  const ParallelSpec& p = spec.parallel();
  ASSERT_GE(NumMicrobatches(p), 1) << what;
  const int world = p.tensor() * p.pipeline() * p.data();
  if (world <= kLargestWorldPlannedWhole) {
    absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(spec, "job-1", 1, {});
    ASSERT_TRUE(plan.ok()) << what << plan.status();
    ASSERT_EQ(static_cast<int>(plan->size()), world) << what;
    for (const Assignment& a : *plan) {
      tally->largest_assignment = std::max(tally->largest_assignment, a.ByteSizeLong());
      EXPECT_LT(a.ByteSizeLong(), size_t{1} << 20) << what;
    }
    return;
  }
  ScheduleConfig config;
  config.schedule = p.schedule();
  config.pipeline = p.pipeline();
  config.virtual_stages = p.virtual_stages();
  config.microbatches = NumMicrobatches(p);
  std::vector<int> stage_ranks(p.pipeline());
  for (int s = 0; s < p.pipeline(); ++s) stage_ranks[s] = s;
  std::vector<PipelineSchedule> schedules;
  for (int s = 0; s < p.pipeline(); ++s) {
    absl::StatusOr<PipelineSchedule> schedule = BuildPipelineSchedule(config, s, stage_ranks);
    ASSERT_TRUE(schedule.ok()) << what << schedule.status();
    EXPECT_LT(schedule->ByteSizeLong(), size_t{1} << 20) << what;
    schedules.push_back(*std::move(schedule));
  }
  EXPECT_TRUE(CheckPipelineSchedules(config, schedules, stage_ranks).ok()) << what;
}

bool StringsAreUtf8(const google::protobuf::Message& message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
        !IsValidUtf8(r->GetString(message, f))) {
      return false;
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && f->is_repeated()) {
      for (int k = 0; k < r->FieldSize(message, f); ++k) {
        if (!StringsAreUtf8(r->GetRepeatedMessage(message, f, k))) return false;
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
               !StringsAreUtf8(r->GetMessage(message, f))) {
      return false;
    }
  }
  return true;
}

void Check(const JobSpec& spec, Tally* tally) {
  const std::string what = "\nspec: " + spec.ShortDebugString();
  absl::StatusOr<JobSpec> resolved = ResolveJobSpec(spec);
  if (!resolved.ok()) {
    ++tally->refused;
    ExpectRefusalNamesFields(resolved.status(), what);
  } else {
    ++tally->accepted;
    ExpectPlans(*resolved, what, tally);
  }
  // The same spec as JSON (what trainctl sends) is judged the same way. Specs whose
  // strings are not UTF-8 cannot be written as JSON (protobuf drops the bad bytes).
  std::string json;
  if (StringsAreUtf8(spec) && google::protobuf::util::MessageToJsonString(spec, &json).ok()) {
    absl::StatusOr<JobSpec> parsed = ParseJobSpecJson(json);
    EXPECT_EQ(parsed.ok(), resolved.ok()) << what << "\njson: " << json << "\n" << parsed.status();
  }
}

TEST(JobSpecPropertyTest, MutatedSpecsAreRefusedByNameOrPlan) {
  JobSpecMutator mutator(/*seed=*/20261125);
  Tally tally;
  for (int i = 0; i < 4000 && !::testing::Test::HasFailure(); ++i) {
    Check(mutator.Mutate(mutator.SeedSpec()), &tally);
  }
  std::printf("mutated specs: %d accepted, %d refused; largest assignment %zu bytes\n",
              tally.accepted, tally.refused, tally.largest_assignment);
  // The generator must exercise both sides, or the properties say little.
  EXPECT_GT(tally.accepted, 500);
  EXPECT_GT(tally.refused, 500);
}

TEST(JobSpecPropertyTest, RandomSpecsAreRefusedByNameOrPlan) {
  JobSpecMutator mutator(/*seed=*/7);
  Tally tally;
  for (int i = 0; i < 1500 && !::testing::Test::HasFailure(); ++i) {
    Check(mutator.RandomSpec(), &tally);
  }
  std::printf("random specs: %d accepted, %d refused\n", tally.accepted, tally.refused);
  EXPECT_GT(tally.refused, 0);
}

TEST(JobSpecPropertyTest, DamagedJsonIsRefusedCleanlyOrPlans) {
  JobSpecMutator mutator(/*seed=*/99);
  Tally tally;
  for (int i = 0; i < 3000 && !::testing::Test::HasFailure(); ++i) {
    std::string json;
    ASSERT_TRUE(
        google::protobuf::util::MessageToJsonString(mutator.Mutate(mutator.SeedSpec(), 1), &json)
            .ok());
    const std::string text = mutator.MutateText(json);
    const std::string what = "\ntext: " + text;
    absl::StatusOr<JobSpec> parsed = ParseJobSpecJson(text);
    if (parsed.ok()) {
      ++tally.accepted;
      ExpectPlans(*parsed, what, &tally);
    } else {
      ++tally.refused;
      ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << what;
      // Syntax errors come from the parser ("job spec JSON: ..."); the rest name fields.
      if (!absl::StartsWith(parsed.status().message(), "job spec JSON")) {
        ExpectRefusalNamesFields(parsed.status(), what);
      }
    }
  }
  std::printf("damaged JSON: %d accepted, %d refused\n", tally.accepted, tally.refused);
  EXPECT_GT(tally.refused, 1000);
}

}  // namespace
}  // namespace mtrain
