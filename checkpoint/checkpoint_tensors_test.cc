#include "checkpoint/checkpoint_tensors.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/full_tensor_testing.h"
#include "checkpoint/sharded_tensor.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/checkpoint_tensors_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Distinct values per tensor and element, so a misplaced element shows.
FullTensor Tensor(std::vector<int64_t> shape, float tag) {
  FullTensor t;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  for (int64_t i = 0; i < n; ++i) t.values.push_back(tag + 0.001f * static_cast<float>(i));
  return t;
}

std::map<std::string, FullTensor> SmallModel() {
  return {
      {"wte", Tensor({6, 4}, 1)},
      {"wpe", Tensor({3, 4}, 2)},
      {"layers.0.attn.qkv.weight", Tensor({3, 4, 4}, 3)},
      {"lnf.bias", Tensor({4}, 4)},
  };
}

TEST(CheckpointTensorsTest, RoundTripsParametersWithStepAndSeed) {
  const std::string dir = FreshDir("round_trip");
  const std::map<std::string, FullTensor> model = SmallModel();
  absl::StatusOr<CheckpointManifest> written =
      WriteParameterCheckpoint(dir, "import-job", 0, model, 4321);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->job_id(), "import-job");
  EXPECT_EQ(written->tensors_size(), 4);

  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->manifest().state().step(), 0);
  EXPECT_EQ(checkpoint->manifest().tensor(), 1);
  EXPECT_EQ(checkpoint->manifest().pipeline(), 1);
  EXPECT_EQ(checkpoint->manifest().data(), 1);
  absl::StatusOr<uint64_t> seed = GetRngSeed(checkpoint->manifest().state());
  ASSERT_TRUE(seed.ok()) << seed.status();
  EXPECT_EQ(*seed, 4321u);
  EXPECT_EQ(checkpoint->Find(FirstMomentName("wte")), nullptr);

  absl::StatusOr<std::map<std::string, FullTensor>> read = ReadFullParameters(*checkpoint);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameTensors(*read, model);
}

TEST(CheckpointTensorsTest, LoaderPadsWteRowsOfAParameterCheckpoint) {
  // An import stores wte with the real vocabulary's rows; a job loads it at its padded
  // vocabulary, the extra rows zero.
  const std::string dir = FreshDir("pad_wte");
  std::map<std::string, FullTensor> model = SmallModel();
  ASSERT_TRUE(WriteParameterCheckpoint(dir, "job", 0, model, 1).ok());
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ShardedTensor wanted;
  wanted.name = "wte";
  wanted.padded_vocabulary_rows = true;
  wanted.global_shape = {8, 4};
  wanted.local_shape = {8, 4};
  wanted.global_offset = {0, 0};
  wanted.size = 32;
  std::vector<float> buffer(32, -1.0f);
  ASSERT_TRUE(LoadRankTensors(*checkpoint, {wanted}, buffer.data(), nullptr, nullptr).ok());
  const std::vector<float>& stored = model.at("wte").values;
  EXPECT_TRUE(std::equal(stored.begin(), stored.end(), buffer.begin()));
  for (int i = 24; i < 32; ++i) EXPECT_EQ(buffer[i], 0.0f) << i;
}

// Two tensor-parallel ranks, each holding a column slice of every tensor (last dimension
// split in half), with optimizer moments.
TEST(CheckpointTensorsTest, AssemblesColumnShardsOfTwoRanks) {
  const std::string dir = FreshDir("two_ranks");
  const std::map<std::string, FullTensor> model = SmallModel();
  std::vector<RankShardRecords> records;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<ShardedTensor> layout;
    std::vector<float> params;
    for (const auto& [name, full] : model) {
      ShardedTensor t;
      t.name = name;
      t.offset = params.size();
      t.global_shape = full.shape;
      t.local_shape = full.shape;
      t.global_offset.assign(full.shape.size(), 0);
      const int64_t columns = full.shape.back() / 2;
      t.local_shape.back() = columns;
      t.global_offset.back() = rank * columns;
      t.size = full.values.size() / 2;
      for (size_t i = 0; i < t.size; ++i) {
        params.push_back(full.values[GlobalIndex(t, static_cast<int64_t>(i))]);
      }
      layout.push_back(std::move(t));
    }
    const std::vector<float> moments(params.size(), 0.5f);
    absl::StatusOr<RankShardRecords> mine =
        WriteRankShards(dir, rank, 7, layout, params.data(), moments.data(), moments.data());
    ASSERT_TRUE(mine.ok()) << mine.status();
    records.push_back(*std::move(mine));
  }
  TrainingState state;
  state.set_step(7);
  SetRngSeed(99, &state);
  absl::StatusOr<CheckpointManifest> manifest = BuildManifest("job", {2, 1, 1}, state, records);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(WriteManifest(dir, *manifest).ok());

  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_NE(checkpoint->Find(SecondMomentName("wte")), nullptr);
  absl::StatusOr<std::map<std::string, FullTensor>> read = ReadFullParameters(*checkpoint);
  ASSERT_TRUE(read.ok()) << read.status();
  // The moments are skipped: only the parameters come back, whole.
  ExpectSameTensors(*read, model);
}

TEST(CheckpointTensorsTest, RejectsInconsistentTensorsNamingThem) {
  std::map<std::string, FullTensor> model = SmallModel();
  model["wpe"].values.pop_back();
  absl::StatusOr<CheckpointManifest> written =
      WriteParameterCheckpoint(FreshDir("bad_size"), "job", 0, model, 1);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(written.status().message().find("'wpe' has 11 values; its shape [3, 4] holds 12"),
            std::string::npos)
      << written.status();

  model = SmallModel();
  model["optimizer.m.wte"] = Tensor({6, 4}, 0);
  written = WriteParameterCheckpoint(FreshDir("optimizer"), "job", 0, model, 1);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(written.status().message().find("'optimizer.m.wte' is optimizer state"),
            std::string::npos)
      << written.status();

  model = SmallModel();
  model["lnf.bias"].shape = {0};
  model["lnf.bias"].values.clear();
  written = WriteParameterCheckpoint(FreshDir("zero_dim"), "job", 0, model, 1);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(written.status().message().find("'lnf.bias' has shape [0]"), std::string::npos)
      << written.status();

  written = WriteParameterCheckpoint(FreshDir("empty"), "job", 0, {}, 1);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mtrain
