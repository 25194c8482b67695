#include "plan/schedule_checker.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/pipeline_schedule.h"
#include "plan/schedule_testing.h"

namespace mtrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<int> Ranks(int p) { return TestStageRanks(p); }
std::vector<PipelineSchedule> BuildAll(const ScheduleConfig& config) {
  return BuildAllStages(config);
}

const char* ScheduleName(Schedule schedule) {
  switch (schedule) {
    case SCHEDULE_GPIPE:
      return "GPipe";
    case SCHEDULE_INTERLEAVED_1F1B:
      return "Interleaved";
    default:
      return "OneFOneB";
  }
}

// Every schedule kind at every small (p, m, v) the builder accepts.
std::vector<ScheduleConfig> GeneratedConfigs() {
  std::vector<ScheduleConfig> configs;
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 3, 4, 6, 8, 12}) {
      configs.push_back({SCHEDULE_GPIPE, p, 1, m});
      configs.push_back({SCHEDULE_1F1B, p, 1, m});
      if (p < 2 || m % p != 0) continue;
      for (int v : {1, 2, 3}) configs.push_back({SCHEDULE_INTERLEAVED_1F1B, p, v, m});
    }
  }
  return configs;
}

std::string ConfigName(const ::testing::TestParamInfo<ScheduleConfig>& info) {
  const ScheduleConfig& c = info.param;
  return absl::StrCat(ScheduleName(c.schedule), "_p", c.pipeline, "_m", c.microbatches, "_v",
                      c.virtual_stages);
}

class GeneratedScheduleTest : public ::testing::TestWithParam<ScheduleConfig> {};

TEST_P(GeneratedScheduleTest, PassesCheckerWithExpectedBubbleAndMemory) {
  const ScheduleConfig& config = GetParam();
  const int p = config.pipeline;
  const int v = config.virtual_stages;
  const int m = config.microbatches;
  absl::StatusOr<ScheduleReport> report =
      CheckPipelineSchedules(config, BuildAll(config), Ranks(p));
  ASSERT_TRUE(report.ok()) << report.status();

  // Under forward 1 / backward 2 per chunk all three schedules reach Megatron's analytic
  // bubble exactly, interleaving included: (p-1)/m, or (p-1)/(v m).
  EXPECT_NEAR(report->bubble_fraction, IdealBubbleFraction(config), 1e-9);
  EXPECT_NEAR(report->makespan, 3.0 * m * v + 3.0 * (p - 1), 1e-9);

  ASSERT_EQ(report->max_in_flight.size(), static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    int expected = 0;
    switch (config.schedule) {
      case SCHEDULE_GPIPE:
        expected = m;
        break;
      case SCHEDULE_1F1B:
        expected = std::min(p - s, m);
        EXPECT_LE(report->max_in_flight[s], p);
        break;
      default:  // Megatron's warm-up plus the first steady forward, in (microbatch, chunk)s.
        expected = m == p ? m * v : std::min(2 * (p - s - 1) + (v - 1) * p + 1, m * v);
        break;
    }
    EXPECT_EQ(report->max_in_flight[s], expected) << "stage " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, GeneratedScheduleTest,
                         ::testing::ValuesIn(GeneratedConfigs()), ConfigName);

std::vector<ScheduleConfig> InterleavedConfigs() {
  std::vector<ScheduleConfig> configs = GeneratedConfigs();
  configs.erase(std::remove_if(configs.begin(), configs.end(),
                               [](const ScheduleConfig& c) {
                                 return c.schedule != SCHEDULE_INTERLEAVED_1F1B;
                               }),
                configs.end());
  return configs;
}

class InterleavedScheduleTest : public ::testing::TestWithParam<ScheduleConfig> {};

TEST_P(InterleavedScheduleTest, NeverAddsBubbleOverOneFOneB) {
  const ScheduleConfig& config = GetParam();
  const ScheduleConfig plain{SCHEDULE_1F1B, config.pipeline, 1, config.microbatches};
  absl::StatusOr<ScheduleReport> interleaved =
      CheckPipelineSchedules(config, BuildAll(config), Ranks(config.pipeline));
  absl::StatusOr<ScheduleReport> one_f_one_b =
      CheckPipelineSchedules(plain, BuildAll(plain), Ranks(plain.pipeline));
  ASSERT_TRUE(interleaved.ok()) << interleaved.status();
  ASSERT_TRUE(one_f_one_b.ok()) << one_f_one_b.status();
  EXPECT_LE(interleaved->bubble_fraction, one_f_one_b->bubble_fraction + 1e-12);
  if (config.virtual_stages > 1) {
    EXPECT_LT(interleaved->bubble_fraction, one_f_one_b->bubble_fraction);
  }
}

INSTANTIATE_TEST_SUITE_P(Interleaved, InterleavedScheduleTest,
                         ::testing::ValuesIn(InterleavedConfigs()), ConfigName);

TEST(ScheduleCheckerTest, TimedSimulationOfTwoStageOneFOneB) {
  // Stage 0: F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9]; stage 1: F0 [1,2] B0 [2,4] F1 [4,5]
  // B1 [5,7]. Busy 6 per stage, so the bubble is 3/6.
  const ScheduleConfig config{SCHEDULE_1F1B, 2, 1, 2};
  absl::StatusOr<ScheduleReport> report =
      CheckPipelineSchedules(config, BuildAll(config), Ranks(2));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_DOUBLE_EQ(report->makespan, 9);
  EXPECT_DOUBLE_EQ(report->bubble_fraction, 0.5);
}

TEST(ScheduleCheckerTest, IdealBubbleFraction) {
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({SCHEDULE_1F1B, 4, 1, 8}), 3.0 / 8);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({SCHEDULE_GPIPE, 4, 1, 8}), 3.0 / 8);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({SCHEDULE_INTERLEAVED_1F1B, 4, 2, 8}), 3.0 / 16);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction({SCHEDULE_1F1B, 1, 1, 8}), 0);
}

PipelineAction Action(PipelineAction::Kind kind, int microbatch, int peer_rank = 0) {
  PipelineAction action;
  action.set_kind(kind);
  action.set_microbatch(microbatch);
  action.set_peer_rank(peer_rank);
  return action;
}

// Two-stage 1F1B with m = 2 (ranks 100, 107), indices as broken below:
//   stage 0: 0 F0  1 SF0  2 F1  3 SF1  4 RB0  5 B0   6 RB1  7 B1
//   stage 1: 0 RF0 1 F0   2 B0  3 SB0  4 RF1  5 F1   6 B1   7 SB1
class BrokenScheduleTest : public ::testing::Test {
 protected:
  ScheduleConfig config_{SCHEDULE_1F1B, 2, 1, 2};
  std::vector<PipelineSchedule> schedules_ = BuildAll(config_);

  void Erase(int stage, int index) {
    auto* actions = schedules_[stage].mutable_actions();
    actions->erase(actions->begin() + index);
  }
  void Insert(int stage, int index, const PipelineAction& action) {
    auto* actions = schedules_[stage].mutable_actions();
    actions->Add()->CopyFrom(action);
    std::rotate(actions->begin() + index, actions->end() - 1, actions->end());
  }
  void Move(int stage, int from, int to) {
    const PipelineAction action = schedules_[stage].actions(from);
    Erase(stage, from);
    Insert(stage, to, action);
  }
  // Expects FAILED_PRECONDITION whose message has every fragment.
  void ExpectRejected(const std::vector<std::string>& fragments) {
    absl::StatusOr<ScheduleReport> report = CheckPipelineSchedules(config_, schedules_, Ranks(2));
    ASSERT_FALSE(report.ok());
    EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
    for (const std::string& fragment : fragments) {
      EXPECT_THAT(std::string(report.status().message()), HasSubstr(fragment));
    }
  }
};

TEST_F(BrokenScheduleTest, UnbrokenPasses) {
  EXPECT_TRUE(CheckPipelineSchedules(config_, schedules_, Ranks(2)).ok());
}

TEST_F(BrokenScheduleTest, MissingRecvForward) {
  Erase(1, 0);
  ExpectRejected({"stage 1, action 0 FORWARD(microbatch 0, chunk 0)", "before its RECV_FORWARD"});
}

TEST_F(BrokenScheduleTest, MissingRecvBackward) {
  Erase(0, 4);
  ExpectRejected({"stage 0, action 4 BACKWARD(microbatch 0", "before its RECV_BACKWARD"});
}

TEST_F(BrokenScheduleTest, MissingSendForward) {
  Erase(0, 1);
  ExpectRejected({"stage 1, action 0 RECV_FORWARD(microbatch 0, chunk 0, from rank 100)",
                  "no matching send on stage 0"});
}

TEST_F(BrokenScheduleTest, BothStagesReceiveFirstDeadlock) {
  // m = 1: stage 0 waits for a gradient before it has sent the activation that stage 1,
  // itself waiting in a receive, needs to produce it.
  config_.microbatches = 1;
  schedules_.assign(2, PipelineSchedule());
  for (PipelineSchedule& schedule : schedules_) schedule.set_num_microbatches(1);
  for (const PipelineAction& a :
       {Action(PipelineAction::RECV_BACKWARD, 0, 107), Action(PipelineAction::FORWARD, 0),
        Action(PipelineAction::SEND_FORWARD, 0, 107), Action(PipelineAction::BACKWARD, 0)}) {
    *schedules_[0].add_actions() = a;
  }
  for (const PipelineAction& a :
       {Action(PipelineAction::RECV_FORWARD, 0, 100), Action(PipelineAction::FORWARD, 0),
        Action(PipelineAction::BACKWARD, 0), Action(PipelineAction::SEND_BACKWARD, 0, 100)}) {
    *schedules_[1].add_actions() = a;
  }
  ExpectRejected(
      {"deadlock",
       "stage 0 blocked at action 0 RECV_BACKWARD(microbatch 0, chunk 0, from rank 107)",
       "stage 1 blocked at action 0 RECV_FORWARD(microbatch 0, chunk 0, from rank 100)"});
}

TEST_F(BrokenScheduleTest, SendPostedAfterBlockingRecvDeadlocks) {
  // Stage 0 delays SF0 past RB0, which can only arrive after SF0: every rule but liveness
  // holds.
  Move(0, 1, 4);  // F0 F1 SF1 RB0 SF0 B0 RB1 B1
  ExpectRejected({"deadlock", "stage 0 blocked at action 3 RECV_BACKWARD(microbatch 0",
                  "stage 1 blocked at action 0 RECV_FORWARD(microbatch 0"});
}

TEST_F(BrokenScheduleTest, BackwardBeforeForward) {
  Move(1, 2, 1);  // RF0 B0 F0 SB0 ...
  ExpectRejected({"stage 1, action 1 BACKWARD(microbatch 0, chunk 0)", "before its FORWARD"});
}

TEST_F(BrokenScheduleTest, SendBeforeCompute) {
  Move(0, 1, 0);  // SF0 F0 ...
  ExpectRejected({"stage 0, action 0 SEND_FORWARD", "before the FORWARD that computes it"});
}

TEST_F(BrokenScheduleTest, WrongPeer) {
  schedules_[0].mutable_actions(3)->set_peer_rank(100);
  ExpectRejected({"stage 0, action 3 SEND_FORWARD(microbatch 1, chunk 0, to rank 100)",
                  "wrong peer", "rank 107"});
}

TEST_F(BrokenScheduleTest, DuplicatedForward) {
  Insert(0, 1, Action(PipelineAction::FORWARD, 0));
  ExpectRejected({"stage 0, action 1 FORWARD(microbatch 0, chunk 0)", "appears twice"});
}

TEST_F(BrokenScheduleTest, MissingBackward) {
  Erase(0, 7);
  ExpectRejected({"stage 0: microbatch 1, chunk 0 never runs BACKWARD"});
}

TEST_F(BrokenScheduleTest, FirstVirtualStageReceivesNoActivation) {
  Insert(0, 0, Action(PipelineAction::RECV_FORWARD, 0, 107));
  ExpectRejected({"stage 0, action 0 RECV_FORWARD", "first virtual stage"});
}

TEST_F(BrokenScheduleTest, MicrobatchOutOfRange) {
  schedules_[1].mutable_actions(4)->set_microbatch(2);
  ExpectRejected({"stage 1, action 4", "microbatch outside [0, 2)"});
}

TEST_F(BrokenScheduleTest, WrongMicrobatchCount) {
  schedules_[1].set_num_microbatches(3);
  ExpectRejected({"stage 1: num_microbatches is 3"});
}

TEST_F(BrokenScheduleTest, MismatchedArgumentsAreInvalid) {
  schedules_.pop_back();
  absl::StatusOr<ScheduleReport> report = CheckPipelineSchedules(config_, schedules_, Ranks(2));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPipelineSchedules(config_, BuildAll(config_), {5, 5}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The interleaved wrap-around (stage p-1 chunk 0 feeds stage 0 chunk 1): hoisting stage
// 0's receive for chunk 1 to the front blocks it before it has sent chunk 0's output.
TEST(ScheduleCheckerTest, EarlyWrapAroundReceiveDeadlocks) {
  const ScheduleConfig config{SCHEDULE_INTERLEAVED_1F1B, 2, 2, 2};
  std::vector<PipelineSchedule> schedules = BuildAll(config);
  auto* actions = schedules[0].mutable_actions();
  auto recv = std::find_if(actions->begin(), actions->end(), [](const PipelineAction& a) {
    return a.kind() == PipelineAction::RECV_FORWARD && a.chunk() == 1;
  });
  ASSERT_NE(recv, actions->end());
  std::rotate(actions->begin(), recv, recv + 1);
  absl::StatusOr<ScheduleReport> report = CheckPipelineSchedules(config, schedules, Ranks(2));
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(std::string(report.status().message()),
              AllOf(HasSubstr("deadlock"),
                    HasSubstr("stage 0 blocked at action 0 RECV_FORWARD(microbatch 0, chunk 1"),
                    HasSubstr("stage 1 blocked at action 0 RECV_FORWARD(microbatch 0, chunk 0")));
}

}  // namespace
}  // namespace mtrain
