#include "coordinator/plan/assignment_plan.h"

#include "coordinator/plan/job_spec_validation.h"
#include "gtest/gtest.h"

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
  EXPECT_EQ(a.peers_size(), 8);
  EXPECT_EQ(a.rendezvous_prefix(), "job-7/gen-3/");
  EXPECT_EQ(a.generation(), 3);
}

TEST(AssignmentPlanTest, PeersMustCoverTheWorld) {
  const JobSpec spec = Spec(R"({"parallel": {"data": 2, "global_batch_size": 2}})");
  EXPECT_EQ(PlanAssignments(spec, "j", 1, {Peer()}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
