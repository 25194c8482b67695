#include "worker/engine/trainer.h"

#include "coordinator/plan/job_spec_validation.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

JobSpec TinySpec(const std::string& extra_train) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"model": {"num_layers": 2, "num_heads": 2, "hidden_size": 32, "seq_length": 16},
          "parallel": {"micro_batch_size": 2, "global_batch_size": 4},
          "train": {"steps": 3, "seed": 5)" +
      extra_train + "}}");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::vector<double> Losses(const JobSpec& spec, std::vector<float>* final_params) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  std::vector<double> losses;
  for (int i = 0; i < spec.train().steps(); ++i) {
    absl::StatusOr<StepMetrics> metrics = (*trainer)->Step();
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_EQ(metrics->step(), i + 1);
    EXPECT_GT(metrics->tokens_per_second(), 0);
    EXPECT_GT(metrics->mfu(), 0);
    losses.push_back(metrics->loss());
  }
  const GptModel<float>& model = (*trainer)->model();
  final_params->assign(model.params(), model.params() + model.num_params());
  return losses;
}

TEST(TrainerTest, RunsAreReproducibleBitForBit) {
  const JobSpec spec = TinySpec(R"(, "dropout": 0.1)");
  std::vector<float> a_params, b_params;
  EXPECT_EQ(Losses(spec, &a_params), Losses(spec, &b_params));
  EXPECT_EQ(a_params, b_params);
}

TEST(TrainerTest, RecomputationDoesNotChangeTraining) {
  std::vector<float> plain_params, recompute_params;
  const std::vector<double> plain = Losses(TinySpec(R"(, "dropout": 0.1)"), &plain_params);
  const std::vector<double> recompute =
      Losses(TinySpec(R"(, "dropout": 0.1, "recompute": true)"), &recompute_params);
  EXPECT_EQ(plain, recompute);
  EXPECT_EQ(plain_params, recompute_params);
}

TEST(TrainerTest, DropoutAndSeedChangeTraining) {
  std::vector<float> params;
  const std::vector<double> no_dropout = Losses(TinySpec(R"(, "dropout": 0.0)"), &params);
  const std::vector<double> dropout = Losses(TinySpec(R"(, "dropout": 0.1)"), &params);
  EXPECT_NE(no_dropout, dropout);
  JobSpec other_seed = TinySpec(R"(, "dropout": 0.0)");
  other_seed.mutable_train()->set_seed(6);
  EXPECT_NE(Losses(other_seed, &params), no_dropout);
}

TEST(TrainerTest, ParallelSpecsAreRefusedClearly) {
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(R"({"parallel": {"tensor": 2}})");
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*spec);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(TrainerTest, MissingDataFileNamesThePath) {
  JobSpec spec = TinySpec("");
  spec.mutable_data()->set_path("/nonexistent/corpus.txt");
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(spec);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(trainer.status().message().find("/nonexistent/corpus.txt"), absl::string_view::npos);
}

}  // namespace
}  // namespace mtrain
