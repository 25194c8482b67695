// Tests' helpers for pipeline schedules: the ranks of a pipeline group and every stage's
// list built, shared by the schedule checker's and the zero-bubble schedules' tests.
#ifndef MTRAIN_PLAN_SCHEDULE_TESTING_H_
#define MTRAIN_PLAN_SCHEDULE_TESTING_H_

#include <vector>

#include "gtest/gtest.h"
#include "plan/pipeline_schedule.h"

namespace mtrain {

// Ranks that differ from stage indices, so a peer filled with a stage is caught.
inline std::vector<int> TestStageRanks(int p) {
  std::vector<int> ranks;
  for (int s = 0; s < p; ++s) ranks.push_back(100 + 7 * s);
  return ranks;
}

// Every stage's list of `config` over TestStageRanks (an empty list, and a test failure,
// for a stage the builder refuses).
inline std::vector<PipelineSchedule> BuildAllStages(const ScheduleConfig& config) {
  std::vector<PipelineSchedule> schedules;
  for (int s = 0; s < config.pipeline; ++s) {
    absl::StatusOr<PipelineSchedule> schedule =
        BuildPipelineSchedule(config, s, TestStageRanks(config.pipeline));
    EXPECT_TRUE(schedule.ok()) << schedule.status();
    schedules.push_back(schedule.ok() ? *schedule : PipelineSchedule());
  }
  return schedules;
}

}  // namespace mtrain

#endif  // MTRAIN_PLAN_SCHEDULE_TESTING_H_
