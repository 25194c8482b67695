// The executor's contract with its PipelineStages, on one stage (no messages): actions run
// in schedule order, each chunk's last backward of the step is flagged as such (the
// gradient buckets' overlap hangs on it), losses are summed from the head, and schedules
// that do not fit the rank are refused with the action named; RunForward (validation) runs
// the forwards alone; and on a last stage, that every message lives in the buffers the
// stages hand out (device memory for the CUDA engine) from receive to compute to send.
#include "worker/parallel/pipeline_executor.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "plan/pipeline_schedule.h"

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

// The last of two stages, whose messages are buffers it hands out and tracks (as the CUDA
// engine's device buffers): hidden_in must be one of them, and d_hidden_in must be written
// into one.
class LastStageWithOwnBuffers : public PipelineStages {
 public:
  int num_chunks() const override { return 1; }
  ChunkEnds chunk_ends(int) const override { return ChunkEnds{false, true}; }
  int seq_length() const override { return 4; }
  int hidden_size() const override { return 2; }
  bool messages_on_device() const override { return true; }
  absl::StatusOr<std::unique_ptr<MessageBuffer>> NewMessage(size_t elements) override {
    auto buffer = std::make_unique<HostMessageBuffer>(elements);
    handed_out.insert(buffer->data());
    return buffer;
  }
  absl::StatusOr<double> Forward(int, int, const Microbatch&, const float* hidden_in,
                                 float* hidden_out) override {
    EXPECT_TRUE(handed_out.count(hidden_in)) << "hidden_in is not a buffer of the stages";
    EXPECT_EQ(hidden_out, nullptr);
    received.assign(hidden_in, hidden_in + 8);
    return 1.0;
  }
  absl::Status Backward(int, int, const float* d_hidden_out, float, float* d_hidden_in,
                        bool) override {
    EXPECT_EQ(d_hidden_out, nullptr);
    EXPECT_TRUE(handed_out.count(d_hidden_in)) << "d_hidden_in is not a buffer of the stages";
    for (int i = 0; i < 8; ++i) d_hidden_in[i] = -received[i];
    return absl::OkStatus();
  }

  std::set<const float*> handed_out;
  std::vector<float> received;
};

// Rank 1 of a world of 2 with a peer that sent 0, 1, ..., 7: records what is sent and from
// where.
class ScriptedPeer : public Communicator {
 public:
  int rank() const override { return 1; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  absl::Status AllReduce(float*, size_t, ReduceOp) override { return Unexpected(); }
  absl::Status AllReduce(double*, size_t, ReduceOp) override { return Unexpected(); }
  absl::Status AllGather(const float*, float*, size_t) override { return Unexpected(); }
  absl::Status ReduceScatter(const float*, float*, size_t, ReduceOp) override {
    return Unexpected();
  }
  absl::Status Broadcast(float*, size_t, int) override { return Unexpected(); }
  absl::Status Barrier() override { return Unexpected(); }
  void Abort() override {}
  absl::Status Recv(void* data, size_t bytes, int peer, uint64_t tag) override {
    EXPECT_EQ(peer, 0);
    if (tag == ~uint64_t{0}) {  // the connecting exchange before the first messages
      EXPECT_EQ(bytes, sizeof(float));
      ++connects_received;
      return absl::OkStatus();
    }
    EXPECT_EQ(bytes, 8 * sizeof(float));
    received_into = static_cast<const float*>(data);
    for (int i = 0; i < 8; ++i) static_cast<float*>(data)[i] = i;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const void* data, size_t bytes, int peer,
                                                         uint64_t tag) override {
    struct Done : PendingSend {
      absl::Status Wait() override { return absl::OkStatus(); }
    };
    EXPECT_EQ(peer, 0);
    if (tag == ~uint64_t{0}) {
      ++connects_sent;
      return std::make_unique<Done>();
    }
    sent_from = static_cast<const float*>(data);
    sent.assign(sent_from, sent_from + bytes / sizeof(float));
    return std::make_unique<Done>();
  }

  int connects_sent = 0;
  int connects_received = 0;

  const float* received_into = nullptr;
  const float* sent_from = nullptr;
  std::vector<float> sent;

 private:
  absl::Status Unexpected() { return absl::InternalError("not part of this test"); }
  std::string name_ = "scripted world";
};

TEST(PipelineExecutorTest, MessagesStayInTheBuffersTheStagesHandOut) {
  PipelineSchedule schedule;
  schedule.set_num_microbatches(1);
  for (PipelineAction::Kind kind : {PipelineAction::RECV_FORWARD, PipelineAction::FORWARD,
                                    PipelineAction::BACKWARD, PipelineAction::SEND_BACKWARD}) {
    PipelineAction* a = schedule.add_actions();
    a->set_kind(kind);
    a->set_microbatch(0);
    a->set_chunk(0);
    a->set_peer_rank(0);
  }
  LastStageWithOwnBuffers stages;
  ScriptedPeer world;
  PipelineExecutor executor(&stages, schedule, /*stage=*/1, /*pipeline=*/2, &world);
  absl::StatusOr<double> loss = executor.RunStep(Microbatches(1), 0.25f);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_DOUBLE_EQ(*loss, 1.0);
  // Device messages connect to the neighbour once, both ways, before the first message.
  EXPECT_EQ(world.connects_sent, 1);
  EXPECT_EQ(world.connects_received, 1);
  ASSERT_TRUE(executor.RunStep(Microbatches(1), 0.25f).ok());
  EXPECT_EQ(world.connects_sent, 1);
  EXPECT_TRUE(stages.handed_out.count(world.received_into));
  EXPECT_TRUE(stages.handed_out.count(world.sent_from));
  EXPECT_EQ(stages.received, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(world.sent, (std::vector<float>{-0.f, -1, -2, -3, -4, -5, -6, -7}));
}

// NCCL's point to point has no tags: GPipe and 1F1B pass messages in an order it can
// match on every stage; an interleaved schedule (activations and gradients both ways
// between neighbours) does not, and the check says which action breaks it.
TEST(PipelineExecutorTest, OnlyNonInterleavedSchedulesKeepMessagesInOrder) {
  for (Schedule kind : {SCHEDULE_GPIPE, SCHEDULE_1F1B}) {
    for (int p : {2, 3, 4}) {
      for (int m : {1, 4, 8}) {
        std::vector<int> ranks;
        for (int s = 0; s < p; ++s) ranks.push_back(10 + s);
        for (int stage = 0; stage < p; ++stage) {
          absl::StatusOr<PipelineSchedule> schedule =
              BuildPipelineSchedule(ScheduleConfig{kind, p, 1, m}, stage, ranks);
          ASSERT_TRUE(schedule.ok()) << schedule.status();
          EXPECT_TRUE(CheckMessagesInOrder(*schedule).ok())
              << Schedule_Name(kind) << " p " << p << " m " << m << " stage " << stage << ": "
              << CheckMessagesInOrder(*schedule);
        }
      }
    }
  }
  absl::StatusOr<PipelineSchedule> interleaved =
      BuildPipelineSchedule(ScheduleConfig{SCHEDULE_INTERLEAVED_1F1B, 2, 2, 4}, 0, {10, 11});
  ASSERT_TRUE(interleaved.ok()) << interleaved.status();
  const absl::Status refused = CheckMessagesInOrder(*interleaved);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("peer 11"), std::string::npos) << refused;
}

}  // namespace
}  // namespace mtrain
