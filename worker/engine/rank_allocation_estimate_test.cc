#include "worker/engine/rank_allocation_estimate.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "plan/assignment_plan.h"
#include "plan/rank_memory_estimate.h"
#include "spec/job_spec_validation.h"
#include "worker/engine/cpu/rank_model.h"

namespace mtrain {
namespace {

std::vector<Assignment> Plan(const std::string& json) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::vector<Assignment>> plan = PlanAssignments(*spec, "job", 1, {});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// The parameter count of the real RankModel of `a` (allocated: keep the model small).
double RealParameterBytes(const Assignment& a) {
  const ModelShape shape = ShapeFromSpec(a.spec());
  std::vector<ChunkLayers> layers;
  for (const LayerRange& r : a.layers()) layers.push_back({r.first_layer(), r.num_layers()});
  const ParallelSpec& par = a.spec().parallel();
  TensorParallelGroup<float> tp;
  tp.size = par.tensor();
  tp.rank = a.rank().tp_rank();
  const bool zero = par.zero_stage() == 1 && par.data() > 1;
  absl::StatusOr<std::unique_ptr<RankModel>> model = RankModel::Create(
      shape,
      ChunkPlacements(layers, a.spec().model().num_layers(), par.tensor(), a.rank().tp_rank()),
      par.micro_batch_size(), ModelOptions{}, tp, zero ? par.data() : 1);
  EXPECT_TRUE(model.ok()) << model.status();
  return static_cast<double>((*model)->buffer_size()) * 4;
}

// The planner prices a layout's memory from the spec alone (plan/rank_memory_estimate.h);
// this estimate reads a rank's own schedule. They count the same tensors, so on the first
// and last pipeline stage (what the planner reports) they must agree, staging aside
// (checkpoint copies the planner leaves to the worker's own check).
TEST(RankAllocationEstimateTest, AgreesWithThePlannersMemoryModel) {
  for (const std::string parallel : {
           R"("tensor": 1, "global_batch_size": 2)",
           R"("tensor": 2, "micro_batch_size": 2, "global_batch_size": 4)",
           R"("pipeline": 2, "global_batch_size": 8)",
           R"("pipeline": 4, "global_batch_size": 8, "schedule": "SCHEDULE_GPIPE")",
           R"("tensor": 2, "pipeline": 2, "data": 2, "zero_stage": 1, "global_batch_size": 8)",
           R"("pipeline": 2, "virtual_stages": 2, "global_batch_size": 8,
               "schedule": "SCHEDULE_INTERLEAVED_1F1B")",
       }) {
    for (const bool recompute : {false, true}) {
      SCOPED_TRACE(absl::StrCat(parallel, recompute ? " recompute" : ""));
      const std::string json = absl::StrCat(
          R"({"model": {"num_layers": 8, "num_heads": 4, "hidden_size": 64, "seq_length": 32,
                        "vocab_size": 300}, "train": {"recompute": )",
          recompute ? "true" : "false", R"(}, "parallel": {)", parallel, "}}");
      const std::vector<Assignment> plan = Plan(json);
      for (const Assignment& a : plan) {
        const int stage = a.rank().pp_rank();
        const int stages = a.spec().parallel().pipeline();
        if (stage != 0 && stage != stages - 1) continue;
        absl::StatusOr<RankAllocationEstimate> worker = EstimateRankAllocation(a, true);
        ASSERT_TRUE(worker.ok()) << worker.status();
        const RankMemoryEstimate planner = EstimateStageMemory(a.spec(), stage);
        const double worker_bytes = worker->total() - worker->staging;
        EXPECT_NEAR(planner.total_bytes / worker_bytes, 1.0, 0.01)
            << "stage " << stage << ": planner " << planner.ToString() << "; worker "
            << worker->Describe();
      }
    }
  }
}

TEST(RankAllocationEstimateTest, ParametersMatchTheRealModelOnEveryRank) {
  for (
      const std::string parallel :
      {R"("tensor": 2, "pipeline": 2, "data": 2, "zero_stage": 1, "global_batch_size": 8)",
       R"("pipeline": 2, "virtual_stages": 2, "global_batch_size": 4, "schedule": "SCHEDULE_INTERLEAVED_1F1B")",
       R"("tensor": 1)"}) {
    SCOPED_TRACE(parallel);
    const std::vector<Assignment> plan =
        Plan(absl::StrCat(R"({"model": {"num_layers": 4, "num_heads": 4, "hidden_size": 32,
                           "seq_length": 16, "vocab_size": 300}, "parallel": {)",
                          parallel, "}}"));
    for (const Assignment& a : plan) {
      absl::StatusOr<RankAllocationEstimate> estimate = EstimateRankAllocation(a, true);
      ASSERT_TRUE(estimate.ok()) << estimate.status();
      EXPECT_EQ(estimate->parameters, RealParameterBytes(a)) << "rank " << a.rank().global_rank();
      EXPECT_EQ(estimate->gradients, estimate->parameters);
      EXPECT_GT(estimate->activations, 0);
      EXPECT_GT(estimate->total(), 4 * estimate->parameters);
    }
  }
}

TEST(RankAllocationEstimateTest, ActivationsFollowBatchAndRecomputeAndEngine) {
  const auto activations = [](const std::string& extra, bool host) {
    const std::vector<Assignment> plan =
        Plan(absl::StrCat(R"({"model": {"num_layers": 4, "num_heads": 4, "hidden_size": 64,
                           "seq_length": 64}, )",
                          extra, "}"));
    return EstimateRankAllocation(plan[0], host)->activations;
  };
  const double base = activations(R"("parallel": {"micro_batch_size": 1})", true);
  EXPECT_GT(activations(R"("parallel": {"micro_batch_size": 8})", true), 4 * base);
  EXPECT_LT(
      activations(R"("parallel": {"micro_batch_size": 1}, "train": {"recompute": true})", true),
      base);
  EXPECT_EQ(activations(R"("parallel": {"micro_batch_size": 1})", false), 0);
}

TEST(RankAllocationEstimateTest, AbsurdSizesAreComputedWithoutOverflow) {
  // 2^31 - 1 layers of hidden 65536: about 2^67 bytes, a finite double.
  std::vector<Assignment> plan = Plan(R"({"model": {"num_layers": 1, "num_heads": 1,
                                          "hidden_size": 8, "seq_length": 8}})");
  Assignment& a = plan[0];
  a.mutable_spec()->mutable_model()->set_num_layers(2147483647);
  a.mutable_spec()->mutable_model()->set_hidden_size(65536);
  a.mutable_layers(0)->set_num_layers(2147483647);
  absl::StatusOr<RankAllocationEstimate> estimate = EstimateRankAllocation(a, true);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_GT(estimate->total(), 1e20);
  EXPECT_TRUE(std::isfinite(estimate->total()));
}

TEST(RankAllocationEstimateTest, DimensionsBeyondInt32AreRefusedByField) {
  std::vector<Assignment> plan = Plan(R"({"model": {"num_layers": 1, "num_heads": 1,
                                          "hidden_size": 8, "seq_length": 8}})");
  struct Case {
    void (*mutate)(JobSpec*);
    std::string field;
  };
  const Case cases[] = {
      {[](JobSpec* s) { s->mutable_model()->set_vocab_size(2147483647); }, "model.vocab_size"},
      {[](JobSpec* s) { s->mutable_model()->set_hidden_size(1 << 30); }, "model.hidden_size"},
      {[](JobSpec* s) {
         s->mutable_model()->set_seq_length(1 << 20);
         s->mutable_parallel()->set_micro_batch_size(1 << 12);
       },
       "parallel.micro_batch_size"},
      {[](JobSpec* s) { s->mutable_model()->set_num_heads(0); }, "model.num_heads"},
  };
  for (const Case& c : cases) {
    Assignment a = plan[0];
    c.mutate(a.mutable_spec());
    absl::StatusOr<RankAllocationEstimate> estimate = EstimateRankAllocation(a, true);
    EXPECT_EQ(estimate.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(estimate.status().message().find(c.field), absl::string_view::npos)
        << estimate.status();
  }
}

TEST(RankAllocationEstimateTest, InFlightMicrobatchesFollowTheSchedule) {
  const auto activations = [](const std::string& schedule, bool drop_actions) {
    std::vector<Assignment> plan = Plan(absl::StrCat(
        R"({"model": {"num_layers": 4, "num_heads": 4, "hidden_size": 64, "seq_length": 64},
            "parallel": {"pipeline": 2, "micro_batch_size": 1, "global_batch_size": 16,
                         "schedule": ")",
        schedule, R"("}})"));
    Assignment a = plan[0];  // stage 0 holds the most microbatches in flight
    if (drop_actions) a.mutable_schedule()->clear_actions();
    return EstimateRankAllocation(a, true)->activations;
  };
  const double gpipe = activations("SCHEDULE_GPIPE", false);
  const double one_f_one_b = activations("SCHEDULE_1F1B", false);
  EXPECT_GT(gpipe, 4 * one_f_one_b);  // 16 microbatches in flight against 2
  // Without the actions, each schedule's bound gives the same numbers here.
  EXPECT_EQ(activations("SCHEDULE_GPIPE", true), gpipe);
  EXPECT_EQ(activations("SCHEDULE_1F1B", true), one_f_one_b);
}

}  // namespace
}  // namespace mtrain
