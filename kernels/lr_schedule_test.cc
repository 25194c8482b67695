#include "kernels/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mtrain::cpu {
namespace {

TEST(LrScheduleTest, LinearWarmup) {
  const LrSchedule schedule{/*max_lr=*/6e-4, /*min_lr=*/6e-5, /*warmup_steps=*/10,
                            /*decay_steps=*/100};
  for (long long step = 1; step <= 10; ++step) {
    EXPECT_DOUBLE_EQ(LearningRate(schedule, step), 6e-4 * step / 10.0) << step;
  }
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 10), 6e-4);
}

TEST(LrScheduleTest, CosineDecay) {
  const LrSchedule schedule{1.0, 0.1, 10, 110};
  // Midpoint of the decay: cos(pi / 2) = 0, half way between max and min.
  EXPECT_NEAR(LearningRate(schedule, 60), (1.0 + 0.1) / 2, 1e-15);
  // A quarter of the way: min + (max - min) (1 + cos(pi / 4)) / 2.
  EXPECT_NEAR(LearningRate(schedule, 35), 0.1 + 0.9 * 0.5 * (1 + std::sqrt(0.5)), 1e-15);
  // Just after warm-up it starts from (almost) max, and ends exactly at min.
  EXPECT_NEAR(LearningRate(schedule, 11), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 100)), 1e-15);
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 110), 0.1);
  // Monotonically non-increasing over the decay.
  for (long long step = 11; step < 110; ++step) {
    EXPECT_GE(LearningRate(schedule, step), LearningRate(schedule, step + 1)) << step;
  }
}

TEST(LrScheduleTest, FloorAfterDecay) {
  const LrSchedule schedule{1.0, 0.25, 5, 50};
  for (long long step : {51LL, 52LL, 1000LL, 1000000LL}) {
    EXPECT_EQ(LearningRate(schedule, step), 0.25) << step;
  }
}

TEST(LrScheduleTest, NoWarmup) {
  const LrSchedule schedule{2.0, 0.0, 0, 4};
  // r = step / 4: 1 -> cos(pi/4), 2 -> midpoint, 4 -> min.
  EXPECT_NEAR(LearningRate(schedule, 1), 1.0 + std::cos(M_PI / 4), 1e-15);
  EXPECT_NEAR(LearningRate(schedule, 2), 1.0, 1e-15);
  EXPECT_NEAR(LearningRate(schedule, 4), 0.0, 1e-15);
  EXPECT_EQ(LearningRate(schedule, 5), 0.0);
  for (long long step = 1; step <= 6; ++step)
    EXPECT_TRUE(std::isfinite(LearningRate(schedule, step)));
}

TEST(LrScheduleTest, DecayEqualToWarmupJumpsToTheFloor) {
  const LrSchedule schedule{1.0, 0.1, 8, 8};
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 4), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 8), 1.0);
  EXPECT_EQ(LearningRate(schedule, 9), 0.1);
}

TEST(LrScheduleTest, NoWarmupAndNoDecayIsTheFloor) {
  const LrSchedule schedule{1.0, 0.1, 0, 0};
  for (long long step = 1; step <= 3; ++step) {
    EXPECT_EQ(LearningRate(schedule, step), 0.1) << step;
  }
}

}  // namespace
}  // namespace mtrain::cpu
