#include "worker/engine/loss_scaler.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(DynamicLossScalerTest, MegatronDefaults) {
  DynamicLossScaler scaler;
  EXPECT_EQ(scaler.scale(), 4294967296.0);
  EXPECT_EQ(scaler.hysteresis_left(), 2);
  EXPECT_TRUE(DynamicLossScaler::Validate(LossScalerOptions()).ok());
}

TEST(DynamicLossScalerTest, GrowsAfterGrowthIntervalCleanSteps) {
  DynamicLossScaler scaler;
  for (int i = 0; i < 999; ++i) ASSERT_TRUE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 32));
  EXPECT_EQ(scaler.clean_steps(), 999);
  EXPECT_TRUE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 33));
  EXPECT_EQ(scaler.clean_steps(), 0);
}

TEST(DynamicLossScalerTest, BacksOffOnlyAfterHysteresisOverflows) {
  DynamicLossScaler scaler;
  // First overflow: skipped, tolerated (hysteresis 2).
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 32));
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // Clean steps in between do not restore the tolerance; only a growth does.
  EXPECT_TRUE(scaler.Update(false));
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 31));
  // Every further overflow backs off again.
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 30));
  EXPECT_EQ(scaler.skipped_steps(), 3);
  // A growth restores the hysteresis.
  for (int i = 0; i < 1000; ++i) scaler.Update(false);
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 31));
  EXPECT_EQ(scaler.hysteresis_left(), 2);
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 31));
}

TEST(DynamicLossScalerTest, NeverBelowTheMinimum) {
  LossScalerOptions options;
  options.initial_scale = 4;
  options.hysteresis = 1;
  DynamicLossScaler scaler(options);
  const std::vector<double> expected = {2, 1, 1, 1};
  for (double e : expected) {
    EXPECT_FALSE(scaler.Update(true));
    EXPECT_EQ(scaler.scale(), e);
  }
}

TEST(DynamicLossScalerTest, StateRoundTripsThroughTheCheckpoint) {
  DynamicLossScaler a;
  for (int i = 0; i < 17; ++i) a.Update(false);
  a.Update(true);
  for (int i = 0; i < 5; ++i) a.Update(false);
  TrainingState state;
  a.SaveTo(&state);
  DynamicLossScaler b;
  ASSERT_TRUE(b.RestoreFrom(state).ok());
  // The same future, step for step.
  for (int i = 0; i < 3000; ++i) {
    const bool overflow = i % 997 == 3 || i % 1409 == 5;
    EXPECT_EQ(a.Update(overflow), b.Update(overflow)) << i;
    ASSERT_EQ(a.scale(), b.scale()) << i;
    ASSERT_EQ(a.hysteresis_left(), b.hysteresis_left()) << i;
    ASSERT_EQ(a.clean_steps(), b.clean_steps()) << i;
  }
  EXPECT_EQ(a.skipped_steps(), b.skipped_steps());
}

TEST(DynamicLossScalerTest, RefusesImpossibleStatesAndOptions) {
  DynamicLossScaler scaler;
  TrainingState state;
  state.set_loss_scale(0.5);  // below the minimum of 1
  absl::Status s = scaler.RestoreFrom(state);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("loss_scale"), std::string::npos) << s;
  state.set_loss_scale(1024);
  state.set_loss_scale_good_steps(1000);
  EXPECT_NE(scaler.RestoreFrom(state).message().find("loss_scale_good_steps"), std::string::npos);
  state.set_loss_scale_good_steps(3);
  state.set_loss_scale_hysteresis_left(7);
  EXPECT_NE(scaler.RestoreFrom(state).message().find("hysteresis"), std::string::npos);
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0, 32));  // unchanged by refused restores

  LossScalerOptions bad;
  bad.backoff_factor = 1.5;
  EXPECT_NE(DynamicLossScaler::Validate(bad).message().find("backoff_factor"), std::string::npos);
  bad = LossScalerOptions();
  bad.hysteresis = 0;
  EXPECT_NE(DynamicLossScaler::Validate(bad).message().find("hysteresis"), std::string::npos);
}

}  // namespace
}  // namespace mtrain
