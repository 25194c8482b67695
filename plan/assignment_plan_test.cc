#include "plan/assignment_plan.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "plan/pipeline_schedule.h"
#include "plan/rank_grid.h"
#include "spec/job_spec_arithmetic.h"
#include "spec/job_spec_validation.h"

namespace mtrain {
namespace {

JobSpec Spec(const std::string& json) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(AssignmentPlanTest, EveryRankGetsCoordinatesLayersAndSchedule) {
  const JobSpec spec = Spec(R"({"model": {"num_layers": 8},
      "parallel": {"tensor": 2, "pipeline": 2, "data": 2, "virtual_stages": 2,
                   "schedule": "SCHEDULE_INTERLEAVED_1F1B", "global_batch_size": 8}})");
  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(spec, "job-7", 3, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 8u);
  const Assignment& a = (*plan)[5];  // tp 1, dp 0, pp 1
  EXPECT_EQ(a.rank().global_rank(), 5);
  EXPECT_EQ(a.rank().tp_rank(), 1);
  EXPECT_EQ(a.rank().dp_rank(), 0);
  EXPECT_EQ(a.rank().pp_rank(), 1);
  ASSERT_EQ(a.layers_size(), 2);
  EXPECT_EQ(a.layers(0).first_layer(), 2);
  EXPECT_EQ(a.layers(1).first_layer(), 6);
  EXPECT_EQ(a.schedule().num_microbatches(), 4);  // 8 / (1 * 2)
  // Its pipeline peer is rank 1 (tp 1, dp 0, pp 0).
  for (const PipelineAction& action : a.schedule().actions()) {
    if (action.kind() == PipelineAction::RECV_FORWARD ||
        action.kind() == PipelineAction::SEND_BACKWARD) {
      EXPECT_EQ(action.peer_rank(), 1);
    }
  }
  EXPECT_EQ(a.self().global_rank(), 5);
  EXPECT_EQ(a.self().host(), "127.0.0.1");  // no peers given: static mode
  EXPECT_TRUE(a.hosts_by_rank_count().empty());
  EXPECT_EQ(a.rendezvous_prefix(), "job-7/gen-3/");
  EXPECT_EQ(a.generation(), 3);
}

TEST(AssignmentPlanTest, EachRanksScheduleIsItsGroupsOwn) {
  // The shared plan keeps one schedule per stage with stages where the peers go; each
  // rank's must equal the schedule built for its own pipeline group's ranks.
  for (const char* parallel :
       {R"({"tensor": 2, "pipeline": 2, "data": 3, "global_batch_size": 12})",
        R"({"pipeline": 4, "data": 2, "virtual_stages": 2, "global_batch_size": 16,
               "schedule": "SCHEDULE_INTERLEAVED_1F1B"})",
        R"({"tensor": 2, "pipeline": 4, "global_batch_size": 8,
               "schedule": "SCHEDULE_ZB_V", "virtual_stages": 2})",
        R"({"pipeline": 4, "data": 2, "global_batch_size": 16,
               "schedule": "SCHEDULE_ZB_H1"})"}) {
    SCOPED_TRACE(parallel);
    const JobSpec spec =
        Spec(absl::StrCat(R"({"model": {"num_layers": 8}, "parallel": )", parallel, "}"));
    absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(spec, "job-1", 2, {});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const ParallelSpec& p = spec.parallel();
    absl::StatusOr<RankGrid> grid = RankGrid::Create(p.tensor(), p.pipeline(), p.data());
    ASSERT_TRUE(grid.ok());
    ASSERT_EQ(plan->size(), static_cast<size_t>(grid->world_size()));
    ScheduleConfig config;
    config.schedule = p.schedule();
    config.pipeline = p.pipeline();
    config.virtual_stages = p.virtual_stages();
    config.microbatches = NumMicrobatches(p);
    int messages = 0;
    for (int rank = 0; rank < grid->world_size(); ++rank) {
      const Assignment& a = (*plan)[rank];
      EXPECT_EQ(a.rank().global_rank(), rank);
      EXPECT_EQ(a.rank().pp_rank(), grid->Coordinates(rank).pp);
      absl::StatusOr<PipelineSchedule> own = BuildPipelineSchedule(
          config, a.rank().pp_rank(), grid->GroupMembers(GroupKind::kPipeline, rank));
      ASSERT_TRUE(own.ok()) << own.status();
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(a.schedule(), *own))
          << "rank " << rank;
      for (const PipelineAction& action : a.schedule().actions()) {
        if (action.kind() >= PipelineAction::SEND_FORWARD &&
            action.kind() <= PipelineAction::RECV_BACKWARD) {
          ++messages;
        }
      }
    }
    EXPECT_GT(messages, 0);
  }
}

TEST(AssignmentPlanTest, TheSharedPlanDoesNotGrowWithTheWorld) {
  // 4096 ranks: the plan keeps one schedule and one layer list per stage, and a rank's
  // Assignment comes out of it on demand with its own coordinates and peer.
  const JobSpec spec = Spec(R"({"parallel": {"data": 4096, "global_batch_size": 4096}})");
  std::vector<Peer> peers(4096);
  for (int r = 0; r < 4096; ++r) {
    peers[r].set_worker_id(absl::StrCat("w-", r));
    peers[r].set_host(absl::StrCat("host-", r / 8));
  }
  absl::StatusOr<std::unique_ptr<GenerationPlan>> plan =
      GenerationPlan::Create(spec, "job-9", 4, peers);
  ASSERT_TRUE(plan.ok()) << plan.status();
  (*plan)->set_resume_step(40);
  (*plan)->set_collective_timeout_ms(5000);
  EXPECT_EQ((*plan)->world_size(), 4096);
  EXPECT_EQ((*plan)->rendezvous_prefix(), "job-9/gen-4/");
  const Assignment a = (*plan)->AssignmentFor(4095);
  EXPECT_EQ(a.rank().global_rank(), 4095);
  EXPECT_EQ(a.rank().dp_rank(), 4095);
  EXPECT_EQ(a.self().worker_id(), "w-4095");
  EXPECT_EQ(a.self().host(), "host-511");
  EXPECT_EQ(a.hosts_by_rank_count().at(8), 512);
  EXPECT_EQ(a.resume_step(), 40);
  EXPECT_EQ(a.collective_timeout_ms(), 5000);
  EXPECT_EQ((*plan)->Coordinates(17).dp_rank(), 17);
}

TEST(AssignmentPlanTest, PeersMustCoverTheWorld) {
  const JobSpec spec = Spec(R"({"parallel": {"data": 2, "global_batch_size": 2}})");
  EXPECT_EQ(PlanAssignments(spec, "j", 1, {Peer()}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Peers as the coordinator fills them: worker ids "HOST-PID" of realistic length.
std::vector<Peer> Peers(int world) {
  std::vector<Peer> peers(world);
  for (int r = 0; r < world; ++r) {
    peers[r].set_host(absl::StrCat("gpu-node-", 1000 + r / 8, ".cluster.example.org"));
    peers[r].set_worker_id(absl::StrCat(peers[r].host(), "-", 100000 + r));
  }
  return peers;
}

size_t LargestAssignmentBytes(const std::vector<Assignment>& plan) {
  size_t largest = 0;
  for (const Assignment& a : plan) largest = std::max(largest, a.ByteSizeLong());
  return largest;
}

// The coordinator once aborted building a schedule for 2^31 microbatches, and a 10^6
// microbatch Assignment (16 MB) could not be delivered over gRPC (4 MB). The validation
// bounds keep the largest accepted Assignment well under that, whatever the batch.
TEST(AssignmentPlanTest, TheLargestAcceptedScheduleKeepsAssignmentsSmall) {
  // The most scheduled microbatches per rank (m * v = 8192), interleaved over 8 stages so
  // that every compute has its receive and send (four actions each).
  const JobSpec spec = Spec(R"({"model": {"num_layers": 64},
      "parallel": {"pipeline": 8, "virtual_stages": 8, "global_batch_size": 1024,
                   "schedule": "SCHEDULE_INTERLEAVED_1F1B"}})");
  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(spec, "job-1", 1, Peers(8));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const size_t largest = LargestAssignmentBytes(*plan);
  std::printf("largest assignment, m * v = 8192 on 8 stages: %zu bytes\n", largest);
  EXPECT_LT(largest, size_t{1} << 20);
}

TEST(AssignmentPlanTest, ManyRanksKeepAssignmentsSmall) {
  // 1024 ranks at the plan-wide bound (1024 x 256 microbatches): each assignment names its
  // own peer and how many hosts run how many ranks (128 hosts of 8), never every peer or
  // host.
  const JobSpec spec = Spec(R"({"parallel": {"data": 1024, "global_batch_size": 262144}})");
  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(spec, "job-1", 1, Peers(1024));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const size_t largest = LargestAssignmentBytes(*plan);
  std::printf("largest assignment, 1024 ranks x 256 microbatches: %zu bytes\n", largest);
  EXPECT_LT(largest, size_t{8} << 10);
  const Assignment& a = (*plan)[517];
  EXPECT_EQ(a.self().global_rank(), 517);
  EXPECT_EQ(a.self().worker_id(), Peers(1024)[517].worker_id());
  ASSERT_EQ(a.hosts_by_rank_count().size(), 1u);
  EXPECT_EQ(a.hosts_by_rank_count().at(8), 128);
}

TEST(AssignmentPlanTest, SpecsBeyondTheScheduleBoundsAreRefusedNotBuilt) {
  // Unvalidated specs (a stored job from before the bounds): an error, never a 2^31-entry
  // schedule, an overflow or a division by zero.
  JobSpec spec = Spec("{}");
  spec.mutable_parallel()->set_global_batch_size(2147483647);
  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(spec, "j", 1, {});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("microbatches * virtual_stages <= 8192"),
            std::string::npos)
      << plan.status();
  spec = Spec("{}");
  spec.mutable_parallel()->set_micro_batch_size(0);
  EXPECT_EQ(PlanAssignments(spec, "j", 1, {}).status().code(), absl::StatusCode::kInvalidArgument);
  spec = Spec("{}");
  spec.mutable_parallel()->set_tensor(65536);
  spec.mutable_parallel()->set_data(65536);
  EXPECT_EQ(PlanAssignments(spec, "j", 1, {}).status().code(), absl::StatusCode::kInvalidArgument);
  spec = Spec("{}");
  spec.mutable_parallel()->set_virtual_stages(2147483647);
  EXPECT_EQ(PlanAssignments(spec, "j", 1, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
