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
#include "checkpoint/hf_gpt2.h"
#include "gtest/gtest.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {
namespace {

constexpr int kLayers = 4;
constexpr int kVocab = 200;
// Marks elements no load wrote.
constexpr float kUntouched = -12345.0f;

// A parallel layout: tensor size, pipeline stages, model chunks per stage (interleaving).
struct Layout {
  int t = 1;
  int p = 1;
  int v = 1;
};

std::string LayoutName(const Layout& l) {
  return "t" + std::to_string(l.t) + "p" + std::to_string(l.p) + "v" + std::to_string(l.v);
}

// Vocabulary padded to a multiple of 128 * t, as the job spec defaults do.
ModelShape Shape(int t) {
  ModelShape s;
  s.num_layers = kLayers;
  s.num_heads = 4;
  s.hidden = 16;
  s.seq_length = 8;
  s.vocab = kVocab;
  const int multiple = 128 * t;
  s.padded_vocab = (kVocab + multiple - 1) / multiple * multiple;
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

size_t BufferSize(const std::vector<ParamTensor>& tensors) {
  size_t end = 0;
  for (const ParamTensor& t : tensors) end = std::max(end, t.offset + t.size);
  return end;
}

// The value of element `global_index` of a tensor of the single-rank model: distinct per
// tensor, element and buffer (0 params, 1 first moment, 2 second moment).
float ReferenceValue(int buffer, const std::string& name, int64_t global_index) {
  static const std::map<std::string, int>* ids = [] {
    auto* map = new std::map<std::string, int>;
    for (const ParamTensor& t : RankTensors({}, 0, 0)) map->emplace(t.name, map->size() + 1);
    return map;
  }();
  const float base = static_cast<float>(ids->at(name) * 100000 + global_index);
  if (buffer == 0) return base;
  if (buffer == 1) return -base - 0.5f;
  return 0.25f * base + 3.0f;
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
      std::vector<float> buffers[3];
      for (int k = 0; k < 3; ++k) {
        buffers[k].assign(BufferSize(tensors), kUntouched);
        for (const ParamTensor& t : tensors) {
          for (size_t i = 0; i < t.size; ++i) {
            buffers[k][t.offset + i] = ReferenceValue(k, t.name, GlobalIndex(t, i));
          }
        }
      }
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

// Loads the checkpoint in `dir` into every rank of `target` and checks every element
// against the reference; wte rows at or past `stored_padded_vocab` must be zero.
void ExpectLoadsExactly(const std::string& dir, const Layout& target, int stored_padded_vocab) {
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int64_t checked = 0, zero_rows = 0;
  for (int stage = 0; stage < target.p; ++stage) {
    for (int tp = 0; tp < target.t; ++tp) {
      const std::vector<ParamTensor> tensors = RankTensors(target, tp, stage);
      // Two extra elements stand for ZeRO padding, which loading must not touch.
      std::vector<float> b[3];
      for (auto& buffer : b) buffer.assign(BufferSize(tensors) + 2, kUntouched);
      // FilesOverlapping names what a resuming rank downloads: the load needs no other.
      const std::vector<std::string> files =
          FilesOverlapping(checkpoint->manifest(), ShardsOf(tensors), /*with_moments=*/true);
      EXPECT_FALSE(files.empty());
      const absl::Status loaded =
          LoadRankTensors(*checkpoint, ShardsOf(tensors), b[0].data(), b[1].data(), b[2].data());
      ASSERT_TRUE(loaded.ok()) << loaded;
      for (int k = 0; k < 3; ++k) {
        for (const ParamTensor& t : tensors) {
          for (size_t i = 0; i < t.size; ++i) {
            const int64_t g = GlobalIndex(t, i);
            const bool beyond_stored =
                t.name == "wte" && g / t.global_shape[1] >= stored_padded_vocab;
            const float expected = beyond_stored ? 0.0f : ReferenceValue(k, t.name, g);
            ASSERT_EQ(b[k][t.offset + i], expected)
                << LayoutName(target) << " tp " << tp << " stage " << stage << " buffer " << k
                << " " << t.name << " element " << g;
            ++checked;
            zero_rows += beyond_stored ? 1 : 0;
          }
        }
        EXPECT_EQ(b[k][BufferSize(tensors)], kUntouched);
        EXPECT_EQ(b[k][BufferSize(tensors) + 1], kUntouched);
      }
    }
  }
  EXPECT_GT(checked, 0);
  if (Shape(target.t).padded_vocab > stored_padded_vocab) {
    EXPECT_GT(zero_rows, 0);
  }
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
  absl::StatusOr<SafetensorsFile> hf = ToHuggingFaceGpt2(*ours, model);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<std::map<std::string, FullTensor>> back = FromHuggingFaceGpt2(*hf, model);
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
