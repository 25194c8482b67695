#include "coordinator/cli/flag_checks.h"

#include <cstdint>
#include <string>

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

}  // namespace
}  // namespace mtrain
