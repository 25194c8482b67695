#include "coordinator/cli/flag_checks.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::StartsWith;

TEST(FlagChecksTest, StepMayBeAbsentOrAnyStepFromZero) {
  EXPECT_TRUE(CheckStepFlag(std::nullopt).ok());
  EXPECT_TRUE(CheckStepFlag(0).ok());
  EXPECT_TRUE(CheckStepFlag(120).ok());
}

TEST(FlagChecksTest, NegativeStepIsRefusedEvenMinusOne) {
  // -1 used to mean "the newest" and was accepted silently.
  for (int64_t step : {int64_t{-1}, int64_t{-2}, INT64_MIN}) {
    const absl::Status status = CheckStepFlag(step);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << step;
    EXPECT_THAT(std::string(status.message()), StartsWith("--step: must be >= 0, got ")) << step;
  }
  EXPECT_EQ(CheckStepFlag(-1).message(),
            "--step: must be >= 0, got -1; leave it out for the newest checkpoint");
}

TEST(FlagChecksTest, TimeoutMustBeAtLeastOneSecond) {
  EXPECT_TRUE(CheckTimeoutSecondsFlag(1).ok());
  EXPECT_TRUE(CheckTimeoutSecondsFlag(3600).ok());
  EXPECT_EQ(CheckTimeoutSecondsFlag(0).message(), "--timeout_seconds: must be >= 1, got 0");
  EXPECT_EQ(CheckTimeoutSecondsFlag(-5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckTimeoutSecondsFlag(-5).message(), "--timeout_seconds: must be >= 1, got -5");
}

TEST(FlagChecksTest, LimitZeroMeansEveryJob) {
  EXPECT_TRUE(CheckLimitFlag(0).ok());
  EXPECT_TRUE(CheckLimitFlag(5).ok());
  const absl::Status negative = CheckLimitFlag(-1);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.message(), "--limit: must be >= 0 (0 lists every job), got -1");
}

TEST(FlagChecksTest, StatesAreCommaSeparatedInAnyCase) {
  absl::StatusOr<std::vector<JobState>> states =
      ParseStateFlag("running, FAILED,JOB_STATE_cancelled");
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(*states,
            (std::vector<JobState>{JOB_STATE_RUNNING, JOB_STATE_FAILED, JOB_STATE_CANCELLED}));
  EXPECT_TRUE(ParseStateFlag("")->empty());
}

TEST(FlagChecksTest, UnknownStateIsRefusedByName) {
  for (const char* bad : {"runing", "unspecified", "7"}) {
    absl::StatusOr<std::vector<JobState>> states = ParseStateFlag(absl::StrCat("running,", bad));
    ASSERT_FALSE(states.ok()) << bad;
    EXPECT_EQ(states.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(states.status().message().find(absl::StrCat("--state: '", bad, "'")), 0u)
        << states.status();
  }
}

}  // namespace
}  // namespace mtrain
