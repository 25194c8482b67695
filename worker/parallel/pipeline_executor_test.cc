// The executor's contract with its PipelineStages, on one stage (no messages): actions run
// in schedule order, each chunk's last backward of the step is flagged as such (the
// gradient buckets' overlap hangs on it), losses are summed from the head, and schedules
// that do not fit the rank are refused with the action named; RunForward (validation) runs
// the forwards alone.
#include "worker/parallel/pipeline_executor.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

// Records every call; the loss of microbatch k is k + 1.
class RecordingStages : public PipelineStages {
 public:
  int num_chunks() const override { return 1; }
  ChunkEnds chunk_ends(int) const override { return ChunkEnds{}; }  // the whole model
  int seq_length() const override { return 4; }
  int hidden_size() const override { return 8; }
  absl::StatusOr<double> Forward(int chunk, int index, const Microbatch&, const float* hidden_in,
                                 float* hidden_out) override {
    calls.push_back("F" + std::to_string(index));
    EXPECT_EQ(chunk, 0);
    EXPECT_EQ(hidden_in, nullptr);   // the chunk holds the embeddings
    EXPECT_EQ(hidden_out, nullptr);  // and the head
    return index + 1.0;
  }
  absl::Status Backward(int chunk, int index, const float* d_hidden_out, float d_loss,
                        float* d_hidden_in, bool last_of_step) override {
    calls.push_back("B" + std::to_string(index) + (last_of_step ? "*" : ""));
    EXPECT_EQ(chunk, 0);
    EXPECT_EQ(d_hidden_out, nullptr);
    EXPECT_EQ(d_hidden_in, nullptr);
    EXPECT_FLOAT_EQ(d_loss, 0.25f);
    return absl::OkStatus();
  }

  std::vector<std::string> calls;
};

PipelineSchedule ScheduleOf(const std::vector<std::pair<PipelineAction::Kind, int>>& actions,
                            int microbatches) {
  PipelineSchedule schedule;
  schedule.set_num_microbatches(microbatches);
  for (const auto& [kind, microbatch] : actions) {
    PipelineAction* a = schedule.add_actions();
    a->set_kind(kind);
    a->set_microbatch(microbatch);
    a->set_chunk(0);
  }
  return schedule;
}

std::vector<Microbatch> Microbatches(int n) {
  std::vector<Microbatch> out(n);
  for (Microbatch& mb : out) {
    mb.tokens.assign(4, 1);
    mb.targets.assign(4, 2);
  }
  return out;
}

TEST(PipelineExecutorTest, RunsTheScheduleAndFlagsTheLastBackwardOfEachStep) {
  constexpr auto F = PipelineAction::FORWARD;
  constexpr auto B = PipelineAction::BACKWARD;
  // GPipe-like order on one stage: all forwards, then backwards in reverse.
  RecordingStages stages;
  PipelineExecutor executor(&stages,
                            ScheduleOf({{F, 0}, {F, 1}, {F, 2}, {B, 2}, {B, 1}, {B, 0}}, 3),
                            /*stage=*/0, /*pipeline=*/1, /*p2p=*/nullptr);
  for (int step = 0; step < 2; ++step) {
    stages.calls.clear();
    absl::StatusOr<double> loss = executor.RunStep(Microbatches(3), 0.25f);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_DOUBLE_EQ(*loss, 1.0 + 2.0 + 3.0);
    EXPECT_EQ(stages.calls, (std::vector<std::string>{"F0", "F1", "F2", "B2", "B1", "B0*"}));
  }
}

TEST(PipelineExecutorTest, RunForwardRunsOnlyTheForwardsAndKeepsTheStepsTimings) {
  constexpr auto F = PipelineAction::FORWARD;
  constexpr auto B = PipelineAction::BACKWARD;
  RecordingStages stages;
  PipelineExecutor executor(&stages,
                            ScheduleOf({{F, 0}, {F, 1}, {B, 1}, {F, 2}, {B, 0}, {B, 2}}, 3),
                            /*stage=*/0, /*pipeline=*/1, /*p2p=*/nullptr);
  ASSERT_TRUE(executor.RunStep(Microbatches(3), 0.25f).ok());
  const double compute = executor.last_timings().compute_seconds;
  stages.calls.clear();
  absl::StatusOr<double> loss = executor.RunForward(Microbatches(3));
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_DOUBLE_EQ(*loss, 1.0 + 2.0 + 3.0);
  EXPECT_EQ(stages.calls, (std::vector<std::string>{"F0", "F1", "F2"}));
  EXPECT_EQ(executor.last_timings().compute_seconds, compute);
}

TEST(PipelineExecutorTest, RefusesSchedulesThatDoNotFitTheRank) {
  constexpr auto F = PipelineAction::FORWARD;
  constexpr auto B = PipelineAction::BACKWARD;
  RecordingStages stages;
  PipelineExecutor backward_first(&stages, ScheduleOf({{B, 0}, {F, 0}}, 1), 0, 1, nullptr);
  absl::StatusOr<double> refused = backward_first.RunStep(Microbatches(1), 0.25f);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("BACKWARD(microbatch 0"), std::string::npos)
      << refused.status();
  EXPECT_TRUE(stages.calls.empty());

  PipelineExecutor unknown_microbatch(&stages, ScheduleOf({{F, 5}}, 1), 0, 1, nullptr);
  refused = unknown_microbatch.RunStep(Microbatches(1), 0.25f);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("microbatch 5"), std::string::npos) << refused.status();

  // A send with no point-to-point group says so instead of crashing.
  PipelineSchedule send = ScheduleOf({{F, 0}}, 1);
  PipelineAction* a = send.add_actions();
  a->set_kind(PipelineAction::RECV_FORWARD);
  a->set_microbatch(0);
  a->set_peer_rank(1);
  PipelineExecutor no_group(&stages, send, 0, 1, nullptr);
  refused = no_group.RunStep(Microbatches(1), 0.25f);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("no point-to-point group"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace mtrain
