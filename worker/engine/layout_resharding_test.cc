// The engine's parameter layout meets the checkpoint library: shards the engine writes
// under one parallel layout load bit-exactly under another, and the engine's full
// tensors are what the HuggingFace conversion expects. The checkpoint library's own
// tests (checkpoint/) use hand-made shards; these use the engine's real ones, which is
// why they live here, where depending on both is right.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_tensors.h"
#include "checkpoint/full_tensor.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/resharding_testing.h"
#include "gtest/gtest.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {
namespace {

constexpr int kLayers = 4;
constexpr int kVocab = 200;
using resharding_testing::BufferSize;
using resharding_testing::Layout;
using resharding_testing::LayoutName;

// Vocabulary padded to a multiple of 128 * t, as the job spec defaults do.
ModelShape Shape(int t) {
  const int multiple = 128 * t;
  const ModelShape s = Gpt2Config(/*num_layers=*/kLayers, /*num_heads=*/4, /*hidden=*/16,
                                  /*seq_length=*/8, /*vocab=*/kVocab,
                                  /*padded_vocab=*/(kVocab + multiple - 1) / multiple * multiple);
  return s;
}

// The tensors of rank (tp_rank, stage), laid out as RankModel does: chunk c holds virtual
// stage c * p + stage (plan/layer_partition.h), chunks back to back.
std::vector<ParamTensor> RankTensors(const Layout& l, int tp_rank, int stage) {
  const ModelShape shape = Shape(l.t);
  const int per_chunk = kLayers / (l.p * l.v);
  std::vector<ParamTensor> tensors;
  size_t offset = 0;
  for (int c = 0; c < l.v; ++c) {
    ModelPlacement placement;
    placement.tensor_size = l.t;
    placement.tensor_rank = tp_rank;
    placement.first_layer = (c * l.p + stage) * per_chunk;
    placement.num_layers = per_chunk;
    placement.has_embedding = stage == 0 && c == 0;
    placement.has_head = stage == l.p - 1 && c == l.v - 1;
    ParameterLayout layout(shape, placement, offset);
    offset = layout.end_offset();
    tensors.insert(tensors.end(), layout.tensors().begin(), layout.tensors().end());
  }
  return tensors;
}

// The values every shard is written with and checked against (resharding_testing.h).
const resharding_testing::Reference& Ref() {
  static const auto* reference =
      new resharding_testing::Reference([](const Layout& l, int tp_rank, int stage) {
        return ShardsOf(RankTensors(l, tp_rank, stage));
      });
  return *reference;
}

std::string FreshDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/layout_resharding_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Every rank of `layout` writes its shards (parameters and both moments, filled from the
// reference) and one rank the manifest.
void WriteCheckpoint(const std::string& dir, const Layout& layout, int64_t step) {
  std::vector<RankShardRecords> records;
  for (int stage = 0; stage < layout.p; ++stage) {
    for (int tp = 0; tp < layout.t; ++tp) {
      const std::vector<ParamTensor> tensors = RankTensors(layout, tp, stage);
      const auto buffers = Ref().Fill(ShardsOf(tensors));
      absl::StatusOr<RankShardRecords> written =
          WriteRankShards(dir, tp + layout.t * stage, step, ShardsOf(tensors), buffers[0].data(),
                          buffers[1].data(), buffers[2].data());
      ASSERT_TRUE(written.ok()) << written.status();
      records.push_back(*std::move(written));
    }
  }
  TrainingState state;
  state.set_step(step);
  SetRngSeed(1234, &state);
  absl::StatusOr<CheckpointManifest> manifest =
      BuildManifest("job-7", {layout.t, layout.p, 1}, state, records);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_TRUE(WriteManifest(dir, *manifest).ok());
}

void ExpectLoadsExactly(const std::string& dir, const Layout& target, int stored_padded_vocab) {
  Ref().ExpectLoadsExactly(dir, target, stored_padded_vocab);
}

constexpr Layout kSource{2, 2, 1};

TEST(LayoutReshardingTest, ShardsOfCopiesEveryShardField) {
  const std::vector<ParamTensor> tensors = RankTensors(Layout{2, 2, 1}, 1, 0);
  const std::vector<ShardedTensor> shards = ShardsOf(tensors);
  ASSERT_EQ(shards.size(), tensors.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    EXPECT_EQ(shards[i].name, tensors[i].name);
    EXPECT_EQ(shards[i].offset, tensors[i].offset);
    EXPECT_EQ(shards[i].size, tensors[i].size);
    EXPECT_EQ(shards[i].global_shape, tensors[i].global_shape);
    EXPECT_EQ(shards[i].local_shape, tensors[i].local_shape);
    EXPECT_EQ(shards[i].global_offset, tensors[i].global_offset);
  }
}

class LayoutReshardingTest : public testing::TestWithParam<Layout> {};

// A checkpoint the engine wrote under t=2, p=2 loads bit-exactly into every other layout;
// where the padded vocabulary grows (t=4: 512 rows instead of 256) the new rows are zero.
TEST_P(LayoutReshardingTest, EveryElementEqualsTheSingleRankValue) {
  const std::string dir = FreshDir("reslice_" + LayoutName(GetParam()));
  WriteCheckpoint(dir, kSource, 100);
  ExpectLoadsExactly(dir, GetParam(), Shape(kSource.t).padded_vocab);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayoutReshardingTest,
                         testing::Values(Layout{1, 1, 1}, Layout{1, 4, 1}, Layout{2, 1, 1},
                                         Layout{2, 2, 1}, Layout{4, 2, 1}, Layout{4, 4, 1},
                                         Layout{2, 2, 2}, Layout{1, 2, 2}),
                         [](const testing::TestParamInfo<Layout>& info) {
                           return LayoutName(info.param);
                         });

// A larger stored vocabulary (t=4 pads 200 to 512) loads into t=1 (256 rows): the common
// rows are copied, the stored rows beyond are dropped.
TEST(LayoutReshardingTest, NarrowerPaddedVocabularyKeepsTheCommonRows) {
  const std::string dir = FreshDir("narrower_vocab");
  WriteCheckpoint(dir, Layout{4, 1, 1}, 5);
  ExpectLoadsExactly(dir, Layout{1, 1, 1}, Shape(4).padded_vocab);
  ExpectLoadsExactly(dir, Layout{2, 2, 2}, Shape(4).padded_vocab);
}

// An interleaved source (two chunks per rank) re-slices like any other.
TEST(LayoutReshardingTest, InterleavedSourceLoadsIntoOneRank) {
  const std::string dir = FreshDir("interleaved_source");
  WriteCheckpoint(dir, Layout{2, 2, 2}, 5);
  ExpectLoadsExactly(dir, Layout{1, 1, 1}, Shape(2).padded_vocab);
}

// Every tensor of the engine is one the HuggingFace GPT-2 conversion knows, with the
// shape it expects: a whole model read from a checkpoint exports, and imports back.
TEST(LayoutReshardingTest, EngineTensorsConvertToHuggingFaceAndBack) {
  const std::string dir = FreshDir("hf");
  WriteCheckpoint(dir, kSource, 3);
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  absl::StatusOr<std::map<std::string, FullTensor>> ours = ReadFullParameters(*checkpoint);
  ASSERT_TRUE(ours.ok()) << ours.status();
  const ModelShape shape = Shape(kSource.t);
  ModelSpec model;
  model.set_num_layers(shape.num_layers);
  model.set_num_heads(shape.num_heads);
  model.set_hidden_size(shape.hidden);
  model.set_seq_length(shape.seq_length);
  model.set_vocab_size(shape.vocab);
  absl::StatusOr<SafetensorsFile> hf = ToHuggingFace(*ours, model);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<std::map<std::string, FullTensor>> back = FromHuggingFace(*hf, model);
  ASSERT_TRUE(back.ok()) << back.status();
  const ParameterLayout whole(shape, WholeModel(shape));
  ASSERT_EQ(back->size(), whole.tensors().size());
  for (const ParamTensor& t : whole.tensors()) {
    ASSERT_EQ(back->count(t.name), 1u) << t.name;
    const FullTensor& imported = back->at(t.name);
    const FullTensor& exported = ours->at(t.name);
    if (t.name == "wte") {  // the import holds the real vocabulary's rows only
      EXPECT_EQ(imported.shape, (std::vector<int64_t>{shape.vocab, shape.hidden}));
      EXPECT_TRUE(
          std::equal(imported.values.begin(), imported.values.end(), exported.values.begin()));
    } else {
      EXPECT_EQ(imported.shape, t.global_shape) << t.name;
      EXPECT_EQ(imported.values, exported.values) << t.name;
    }
  }
}

}  // namespace
}  // namespace mtrain
