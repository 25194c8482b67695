// The zero-bubble schedules (zero_bubble_schedule.h) proven and measured by the checker for
// every (p, m) a spec allows up to p = 16, m = 64: no deadlock, every message matched,
// ZB-H1 at 1F1B's activation memory with a third of its bubble, ZB-V at the same memory
// below interleaved 1F1B; the V placement's peers; and the checker refusing split backwards
// that break the rules.
#include "plan/zero_bubble_schedule.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/pipeline_placement.h"
#include "plan/pipeline_schedule.h"
#include "plan/schedule_checker.h"
#include "plan/schedule_testing.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

std::vector<int> Ranks(int p) { return TestStageRanks(p); }
std::vector<PipelineSchedule> BuildAll(const ScheduleConfig& config) {
  return BuildAllStages(config);
}

TEST(ZeroBubbleScheduleTest, EveryPipelineUpToSixteenStagesAndSixtyFourMicrobatchesIsProven) {
  int checked = 0;
  double worst_v = 0;
  for (int p = 1; p <= 16; ++p) {
    for (int m = 1; m <= 64; ++m) {
      // 1F1B: the memory and bubble to beat.
      const double one_f_one_b_bubble = (p - 1) / static_cast<double>(m);
      const int one_f_one_b_memory = std::min(p, m);  // its first stage's, in microbatches
      const ScheduleConfig h1{SCHEDULE_ZB_H1, p, 1, m};
      absl::StatusOr<ScheduleReport> report = CheckPipelineSchedules(h1, BuildAll(h1), Ranks(p));
      ASSERT_TRUE(report.ok()) << "ZB-H1 p=" << p << " m=" << m << ": " << report.status();
      for (int kept : report->max_in_flight) {
        ASSERT_LE(kept, one_f_one_b_memory) << "ZB-H1 p=" << p << " m=" << m;
      }
      ASSERT_LE(report->bubble_fraction, one_f_one_b_bubble + 1e-12) << "p=" << p << " m=" << m;
      if (m >= p) {
        // A third of 1F1B's: the paper's (p - 1)(F + B - W) with F = B = W.
        ASSERT_NEAR(report->bubble_fraction, IdealBubbleFraction(h1), 1e-12)
            << "ZB-H1 p=" << p << " m=" << m;
      }

      const ScheduleConfig v{SCHEDULE_ZB_V, p, 2, m};
      report = CheckPipelineSchedules(v, BuildAll(v), Ranks(p));
      ASSERT_TRUE(report.ok()) << "ZB-V p=" << p << " m=" << m << ": " << report.status();
      // Chunks of half a stage's layers: 2p of them are 1F1B's p microbatches.
      for (int kept : report->max_in_flight) {
        ASSERT_LE(kept, 2 * one_f_one_b_memory) << "ZB-V p=" << p << " m=" << m;
      }
      if (m >= p && p >= 2) {
        // Interleaved 1F1B at v = 2: (p - 1) / (2m), keeping more.
        ASSERT_LT(report->bubble_fraction, (p - 1) / (2.0 * m)) << "ZB-V p=" << p << " m=" << m;
        // And never more than ZB-H1's (p - 1) / (3m): list scheduling lands between
        // (p - 1) / (6m) and 1.8 times that over this grid.
        ASSERT_LE(report->bubble_fraction, (p - 1) / (3.0 * m) + 1e-12)
            << "ZB-V p=" << p << " m=" << m;
        worst_v = std::max(worst_v, report->bubble_fraction * 6.0 * m / (p - 1));
      }
      checked += 2;
    }
  }
  EXPECT_EQ(checked, 2 * 16 * 64);
  std::printf("ZB-V's bubble, at most %.2f x (p - 1) / (6m) for m >= p\n", worst_v);
}

// p = 4, m = 8: the figures docs/PERFORMANCE.md quotes beside the measured ones.
TEST(ZeroBubbleScheduleTest, FourStagesEightMicrobatches) {
  const std::vector<std::pair<ScheduleConfig, double>> cases = {
      {{SCHEDULE_1F1B, 4, 1, 8}, 3.0 / 8},
      {{SCHEDULE_INTERLEAVED_1F1B, 4, 2, 8}, 3.0 / 16},
      {{SCHEDULE_ZB_H1, 4, 1, 8}, 3.0 / 24},
      {{SCHEDULE_ZB_V, 4, 2, 8}, 3.0 / 48},
  };
  for (const auto& [config, bubble] : cases) {
    absl::StatusOr<ScheduleReport> report =
        CheckPipelineSchedules(config, BuildAll(config), Ranks(4));
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_NEAR(report->bubble_fraction, bubble, 1e-12) << Schedule_Name(config.schedule);
  }
}

TEST(ZeroBubbleScheduleTest, TheVPlacementTurnsAtTheLastStageAndEndsOnTheFirst) {
  EXPECT_EQ(VirtualStageOf(3, 0, 4, true), 3);
  EXPECT_EQ(VirtualStageOf(3, 1, 4, true), 4);
  EXPECT_EQ(VirtualStageOf(0, 1, 4, true), 7);
  EXPECT_EQ(VirtualStageOf(0, 1, 4, false), 4);
  for (int k = 0; k < 8; ++k) {
    const StageChunk at = StageChunkOf(k, 4, true);
    EXPECT_EQ(VirtualStageOf(at.stage, at.chunk, 4, true), k);
  }
  const ScheduleConfig config{SCHEDULE_ZB_V, 4, 2, 4};
  const std::vector<PipelineSchedule> schedules = BuildAll(config);
  for (int s = 0; s < 4; ++s) EXPECT_TRUE(schedules[s].v_shape());
  // Stage 3 passes chunk 0's output to its own chunk 1, and the gradient back likewise.
  bool to_itself = false;
  for (const PipelineAction& a : schedules[3].actions()) {
    if (a.kind() == PipelineAction::SEND_FORWARD && a.chunk() == 0) {
      EXPECT_EQ(a.peer_rank(), Ranks(4)[3]);
      to_itself = true;
    }
    if (a.kind() == PipelineAction::SEND_BACKWARD && a.chunk() == 1) {
      EXPECT_EQ(a.peer_rank(), Ranks(4)[3]);
    }
  }
  EXPECT_TRUE(to_itself);
  // Stage 0 holds the first virtual stage (no RECV_FORWARD for chunk 0) and the last (no
  // RECV_BACKWARD for chunk 1: the loss is there).
  for (const PipelineAction& a : schedules[0].actions()) {
    EXPECT_FALSE(a.kind() == PipelineAction::RECV_FORWARD && a.chunk() == 0);
    EXPECT_FALSE(a.kind() == PipelineAction::RECV_BACKWARD && a.chunk() == 1);
  }
}

TEST(ZeroBubbleScheduleTest, TheBuilderRefusesChunkCountsTheSchedulesDoNotPlace) {
  EXPECT_THAT(BuildPipelineSchedule({SCHEDULE_ZB_V, 4, 3, 8}, 0, Ranks(4)).status().message(),
              HasSubstr("exactly 2 chunks"));
  EXPECT_THAT(BuildPipelineSchedule({SCHEDULE_ZB_H1, 4, 2, 8}, 0, Ranks(4)).status().message(),
              HasSubstr("virtual_stages > 1 needs the interleaved or the ZB-V schedule"));
}

// Split backwards that break the rules are refused with the action named.
TEST(ZeroBubbleScheduleTest, TheCheckerRefusesBrokenSplitBackwards) {
  const ScheduleConfig config{SCHEDULE_ZB_H1, 2, 1, 2};
  const auto expect_refused = [&](const std::vector<PipelineSchedule>& schedules,
                                  const std::string& what) {
    absl::StatusOr<ScheduleReport> report = CheckPipelineSchedules(config, schedules, Ranks(2));
    ASSERT_FALSE(report.ok()) << what;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(report.status().message(), HasSubstr(what));
  };
  const std::vector<PipelineSchedule> good = BuildAll(config);
  ASSERT_TRUE(CheckPipelineSchedules(config, good, Ranks(2)).ok());
  const auto index_of = [](const PipelineSchedule& s, PipelineAction::Kind kind, int mb) {
    for (int i = 0; i < s.actions_size(); ++i) {
      if (s.actions(i).kind() == kind && s.actions(i).microbatch() == mb) return i;
    }
    return -1;
  };
  // A W moved before its B.
  std::vector<PipelineSchedule> broken = good;
  PipelineSchedule& last = broken[1];
  const int b = index_of(last, PipelineAction::BACKWARD_INPUT, 0);
  const int w = index_of(last, PipelineAction::BACKWARD_WEIGHT, 0);
  ASSERT_GE(b, 0);
  ASSERT_GT(w, b);
  last.mutable_actions()->SwapElements(b, w);
  expect_refused(broken, "BACKWARD_WEIGHT without its BACKWARD_INPUT before it");
  // A W left out.
  broken = good;
  broken[1].mutable_actions()->DeleteSubrange(
      index_of(broken[1], PipelineAction::BACKWARD_WEIGHT, 1), 1);
  expect_refused(broken, "never runs BACKWARD_WEIGHT");
  // A combined BACKWARD beside the split one.
  broken = good;
  PipelineAction* extra = broken[1].add_actions();
  extra->set_kind(PipelineAction::BACKWARD);
  extra->set_microbatch(0);
  expect_refused(broken, "appears twice");
  // A list that claims the other placement.
  broken = good;
  broken[0].set_v_shape(true);
  expect_refused(broken, "v_shape is true");
}

}  // namespace
}  // namespace mtrain
