#include "checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/resharding_testing.h"
#include "checkpoint/sharded_tensor.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

constexpr int kLayers = 4;
constexpr int kVocab = 200;
constexpr int64_t kHidden = 16;
constexpr int64_t kSeq = 8;
using resharding_testing::BufferSize;
using resharding_testing::kUntouched;
using resharding_testing::Layout;
using resharding_testing::LayoutName;

// Vocabulary padded to a multiple of 128 * t, as the job spec defaults do.
int64_t PaddedVocab(int t) {
  const int multiple = 128 * t;
  return (kVocab + multiple - 1) / multiple * multiple;
}

constexpr int kReplicated = -1;

// The shards of one rank, laid out back to back in its flat buffer.
class RankShards {
 public:
  RankShards(int tensor_size, int tensor_rank) : t_(tensor_size), r_(tensor_rank) {}

  // Adds `name`, split evenly across the tensor-parallel ranks along `split_dim`, or
  // whole on every rank (kReplicated).
  void Add(std::string name, std::vector<int64_t> global_shape, int split_dim) {
    ShardedTensor s;
    s.name = std::move(name);
    s.padded_vocabulary_rows = s.name == "wte";
    s.global_shape = global_shape;
    s.local_shape = global_shape;
    s.global_offset.assign(global_shape.size(), 0);
    if (split_dim != kReplicated) {
      s.local_shape[split_dim] /= t_;
      s.global_offset[split_dim] = r_ * s.local_shape[split_dim];
    }
    s.offset = next_;
    s.size = 1;
    for (int64_t d : s.local_shape) s.size *= static_cast<size_t>(d);
    next_ += s.size;
    shards_.push_back(std::move(s));
  }

  std::vector<ShardedTensor> Take() { return std::move(shards_); }

 private:
  const int t_;
  const int64_t r_;
  size_t next_ = 0;
  std::vector<ShardedTensor> shards_;
};

// The tensors of rank (tp_rank, stage) of a small GPT under a Megatron layout, written by
// hand so that this library is tested without an engine: tensors replicated on every
// tensor rank (LayerNorm, biases of row-parallel layers), split on their rows (column
// parallel, the vocabulary), on their columns (row parallel) and on a middle dimension
// (Q/K/V blocks); the tied embedding held by the first and the last stage. Chunk c holds
// virtual stage c * p + stage (plan/layer_partition.h), chunks back to back. The engine's
// own layout is checked against this library in worker/engine/layout_resharding_test.cc.
std::vector<ShardedTensor> RankTensors(const Layout& l, int tp_rank, int stage,
                                       int64_t hidden = kHidden) {
  const int64_t C = hidden;
  const int per_chunk = kLayers / (l.p * l.v);
  RankShards rank(l.t, tp_rank);
  for (int c = 0; c < l.v; ++c) {
    const bool has_embedding = stage == 0 && c == 0;
    const bool has_head = stage == l.p - 1 && c == l.v - 1;
    if (has_embedding || has_head) rank.Add("wte", {PaddedVocab(l.t), C}, 0);
    if (has_embedding) rank.Add("wpe", {kSeq, C}, kReplicated);
    for (int i = 0; i < per_chunk; ++i) {
      const std::string p = "layers." + std::to_string((c * l.p + stage) * per_chunk + i) + ".";
      rank.Add(p + "ln1.weight", {C}, kReplicated);
      rank.Add(p + "attn.qkv.weight", {3, C, C}, 1);
      rank.Add(p + "attn.proj.weight", {C, C}, 1);
      rank.Add(p + "mlp.fc.weight", {4 * C, C}, 0);
      rank.Add(p + "mlp.fc.bias", {4 * C}, 0);
      rank.Add(p + "mlp.proj.weight", {C, 4 * C}, 1);
      rank.Add(p + "mlp.proj.bias", {C}, kReplicated);
    }
    if (has_head) {
      rank.Add("lnf.weight", {C}, kReplicated);
      rank.Add("lnf.bias", {C}, kReplicated);
    }
  }
  return rank.Take();
}

// Global rank with d = 1: tp + t * pp.
int GlobalRank(const Layout& l, int tp_rank, int stage) { return tp_rank + l.t * stage; }

// The values every shard is written with and checked against (resharding_testing.h).
const resharding_testing::Reference& Ref() {
  static const auto* reference = new resharding_testing::Reference(
      [](const Layout& l, int tp_rank, int stage) { return RankTensors(l, tp_rank, stage); });
  return *reference;
}

float ReferenceValue(int buffer, const std::string& name, int64_t global_index) {
  return Ref().Value(buffer, name, global_index);
}

std::string FreshDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/checkpoint_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TrainingState State(int64_t step) {
  TrainingState state;
  state.set_step(step);
  state.set_data_position(step * 32);
  state.set_loss_scale(65536.0);
  state.set_loss_scale_good_steps(17);
  state.set_loss_scale_hysteresis_left(2);
  state.set_skipped_steps(3);
  SetRngSeed(1234, &state);
  return state;
}

// Every rank of `layout` writes its file; returns the records in rank order.
std::vector<RankShardRecords> WriteShards(const std::string& dir, const Layout& layout,
                                          int64_t step, bool with_moments = true) {
  std::vector<RankShardRecords> records(layout.t * layout.p);
  for (int stage = 0; stage < layout.p; ++stage) {
    for (int tp = 0; tp < layout.t; ++tp) {
      const std::vector<ShardedTensor> tensors = RankTensors(layout, tp, stage);
      const auto b = Ref().Fill(tensors);
      const int rank = GlobalRank(layout, tp, stage);
      absl::StatusOr<RankShardRecords> written = WriteRankShards(
          dir, rank, step, tensors, b[0].data(), with_moments ? b[1].data() : nullptr,
          with_moments ? b[2].data() : nullptr);
      EXPECT_TRUE(written.ok()) << written.status();
      if (written.ok()) records[rank] = *std::move(written);
    }
  }
  return records;
}

// A complete checkpoint of `layout` at `step` in `dir`.
CheckpointManifest WriteCheckpoint(const std::string& dir, const Layout& layout, int64_t step,
                                   bool with_moments = true) {
  const std::vector<RankShardRecords> records = WriteShards(dir, layout, step, with_moments);
  absl::StatusOr<CheckpointManifest> manifest =
      BuildManifest("job-7", {layout.t, layout.p, 1}, State(step), records);
  EXPECT_TRUE(manifest.ok()) << manifest.status();
  if (!manifest.ok()) return {};
  const absl::Status written = WriteManifest(dir, *manifest);
  EXPECT_TRUE(written.ok()) << written;
  return *manifest;
}

void ExpectLoadsExactly(const std::string& dir, const Layout& target, int stored_padded_vocab) {
  Ref().ExpectLoadsExactly(dir, target, stored_padded_vocab);
}

absl::Status FirstLoadError(const std::string& dir, const Layout& target,
                            ChecksumVerification verification) {
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir, verification);
  if (!checkpoint.ok()) return checkpoint.status();
  for (int stage = 0; stage < target.p; ++stage) {
    for (int tp = 0; tp < target.t; ++tp) {
      const std::vector<ShardedTensor> tensors = RankTensors(target, tp, stage);
      std::vector<float> p(BufferSize(tensors)), m(p.size()), v(p.size());
      absl::Status s = LoadRankTensors(*checkpoint, tensors, p.data(), m.data(), v.data());
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

void FlipBit(const std::string& path, std::streamoff at) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(at);
  char byte = 0;
  file.read(&byte, 1);
  byte ^= 0x04;
  file.seekp(at);
  file.write(&byte, 1);
}

bool Mentions(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

constexpr Layout kSource{2, 2, 1};

// ---------------------------------------------------------------- re-slicing

class CheckpointReslicingTest : public testing::TestWithParam<Layout> {};

// A checkpoint written under t=2, p=2 loads bit-exactly into every other layout; where the
// padded vocabulary grows (t=4: 512 rows instead of 256) the new rows are zero.
TEST_P(CheckpointReslicingTest, EveryElementEqualsTheSingleRankValue) {
  const std::string dir = FreshDir("reslice_" + LayoutName(GetParam()));
  WriteCheckpoint(dir, kSource, 100);
  ExpectLoadsExactly(dir, GetParam(), PaddedVocab(kSource.t));
}

INSTANTIATE_TEST_SUITE_P(Layouts, CheckpointReslicingTest,
                         testing::Values(Layout{1, 1, 1}, Layout{1, 4, 1}, Layout{2, 1, 1},
                                         Layout{2, 2, 1}, Layout{4, 2, 1}, Layout{4, 4, 1},
                                         Layout{2, 2, 2}, Layout{1, 2, 2}),
                         [](const testing::TestParamInfo<Layout>& info) {
                           return LayoutName(info.param);
                         });

// A larger stored vocabulary (t=4 pads 200 to 512) loads into t=1 (256 rows): the common
// rows are copied, the stored rows beyond are dropped.
TEST(CheckpointTest, NarrowerPaddedVocabularyKeepsTheCommonRows) {
  const std::string dir = FreshDir("narrower_vocab");
  WriteCheckpoint(dir, Layout{4, 1, 1}, 5);
  ExpectLoadsExactly(dir, Layout{1, 1, 1}, PaddedVocab(4));
  ExpectLoadsExactly(dir, Layout{2, 2, 2}, PaddedVocab(4));
}

// An interleaved source (two chunks per rank) re-slices like any other.
TEST(CheckpointTest, InterleavedSourceLoadsIntoOneRank) {
  const std::string dir = FreshDir("interleaved_source");
  WriteCheckpoint(dir, Layout{2, 2, 2}, 5);
  ExpectLoadsExactly(dir, Layout{1, 1, 1}, PaddedVocab(2));
}

ShardedTensor BigShard(int64_t rows, int64_t cols, int64_t row_offset, int64_t col_offset) {
  ShardedTensor t;
  t.name = "big";
  t.global_shape = {4096, 1024};
  t.local_shape = {rows, cols};
  t.global_offset = {row_offset, col_offset};
  t.size = static_cast<size_t>(rows * cols);
  return t;
}

// Shards larger than the loader's 4 MiB read window: column shards re-sliced into row
// shards are read as many short runs through a moving window, row shards into a whole
// tensor as runs long enough to be read directly.
TEST(CheckpointTest, LargeShardsLoadThroughWindowsAndDirectReads) {
  struct Case {
    std::vector<ShardedTensor> stored, wanted;
  };
  const std::vector<Case> cases = {
      {{BigShard(4096, 512, 0, 0), BigShard(4096, 512, 0, 512)},
       {BigShard(2048, 1024, 0, 0), BigShard(2048, 1024, 2048, 0), BigShard(4096, 1024, 0, 0)}},
      {{BigShard(2048, 1024, 0, 0), BigShard(2048, 1024, 2048, 0)}, {BigShard(4096, 1024, 0, 0)}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::string dir = FreshDir("large_" + std::to_string(c));
    std::vector<RankShardRecords> records;
    for (size_t r = 0; r < cases[c].stored.size(); ++r) {
      const ShardedTensor& t = cases[c].stored[r];
      std::vector<float> data(t.size);
      for (size_t i = 0; i < t.size; ++i) data[i] = static_cast<float>(GlobalIndex(t, i));
      absl::StatusOr<RankShardRecords> written =
          WriteRankShards(dir, static_cast<int>(r), 1, {t}, data.data(), nullptr, nullptr);
      ASSERT_TRUE(written.ok()) << written.status();
      records.push_back(*std::move(written));
    }
    absl::StatusOr<CheckpointManifest> manifest = BuildManifest("job", {}, State(1), records);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    ASSERT_TRUE(WriteManifest(dir, *manifest).ok());
    absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    for (const ShardedTensor& t : cases[c].wanted) {
      std::vector<float> data(t.size, kUntouched);
      ASSERT_TRUE(LoadRankTensors(*checkpoint, {t}, data.data(), nullptr, nullptr).ok());
      for (size_t i = 0; i < t.size; ++i) {
        ASSERT_EQ(data[i], static_cast<float>(GlobalIndex(t, i))) << "case " << c << " at " << i;
      }
    }
  }
}

// ---------------------------------------------------------------- the manifest

TEST(CheckpointTest, ManifestKeepsOneShardPerDistinctHyperRectangle) {
  const std::string dir = FreshDir("dedupe");
  const CheckpointManifest manifest = WriteCheckpoint(dir, kSource, 100);
  EXPECT_EQ(manifest.files_size(), 4);
  std::map<std::string, int> shards;
  for (const TensorEntry& entry : manifest.tensors()) shards[entry.name()] = entry.shards_size();
  // LayerNorm is replicated on both tensor ranks: stored once.
  EXPECT_EQ(shards["layers.0.ln1.weight"], 1);
  EXPECT_EQ(shards["optimizer.v.lnf.bias"], 1);
  // Split tensors keep one shard per tensor rank.
  EXPECT_EQ(shards["layers.3.attn.qkv.weight"], 2);
  EXPECT_EQ(shards["optimizer.m.layers.1.mlp.proj.weight"], 2);
  // The tied embedding is written by both stages and both tensor ranks: two distinct shards.
  EXPECT_EQ(shards["wte"], 2);
  EXPECT_EQ(shards["optimizer.m.wte"], 2);
  // Every parameter and both of its moments.
  EXPECT_EQ(manifest.tensors_size(), 3 * static_cast<int>(RankTensors({}, 0, 0).size()));
}

TEST(CheckpointTest, ManifestRecordsLayoutAndTrainingState) {
  const std::string dir = FreshDir("state");
  WriteCheckpoint(dir, kSource, 100);
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const CheckpointManifest& m = checkpoint->manifest();
  EXPECT_EQ(m.format_version(), kCheckpointFormatVersion);
  EXPECT_EQ(m.job_id(), "job-7");
  EXPECT_EQ(m.step(), 100);
  EXPECT_EQ(m.tensor(), 2);
  EXPECT_EQ(m.pipeline(), 2);
  EXPECT_EQ(m.data(), 1);
  EXPECT_GT(m.created_unix_seconds(), 0);
  EXPECT_EQ(m.state().data_position(), 3200);
  EXPECT_EQ(m.state().loss_scale(), 65536.0);
  EXPECT_EQ(m.state().loss_scale_good_steps(), 17);
  EXPECT_EQ(m.state().loss_scale_hysteresis_left(), 2);
  EXPECT_EQ(m.state().skipped_steps(), 3);
  absl::StatusOr<uint64_t> seed = GetRngSeed(m.state());
  ASSERT_TRUE(seed.ok()) << seed.status();
  EXPECT_EQ(*seed, 1234u);
  EXPECT_EQ(GetRngSeed(TrainingState()).status().code(), absl::StatusCode::kNotFound);
  const TensorEntry* wte = checkpoint->Find("wte");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->dtype(), "f32");
  EXPECT_EQ(std::vector<int64_t>(wte->global_shape().begin(), wte->global_shape().end()),
            (std::vector<int64_t>{256, 16}));
  EXPECT_EQ(checkpoint->Find("wte.nope"), nullptr);
  EXPECT_EQ(CheckpointDirName(100), "step-00000100");
  EXPECT_EQ(ShardFileName(5), "rank-00005.bin");
}

TEST(CheckpointTest, RankRecordsSurviveSerialization) {
  const std::string dir = FreshDir("records");
  const std::vector<RankShardRecords> records = WriteShards(dir, kSource, 1);
  absl::StatusOr<RankShardRecords> parsed =
      ParseRankShardRecords(SerializeRankShardRecords(records[3]));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->tensors.size(), records[3].tensors.size());
  ASSERT_EQ(parsed->files.size(), 1u);
  EXPECT_EQ(parsed->files[0].SerializeAsString(), records[3].files[0].SerializeAsString());
  EXPECT_EQ(parsed->tensors[7].SerializeAsString(), records[3].tensors[7].SerializeAsString());
  EXPECT_EQ(ParseRankShardRecords("\xff\xff garbage").status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointTest, BuildingRejectsShardsThatLeaveAGap) {
  const std::string dir = FreshDir("gap");
  std::vector<RankShardRecords> records = WriteShards(dir, kSource, 1);
  records.erase(records.begin() + 1);  // tensor rank 1 of stage 0: half of layers 0-1
  absl::StatusOr<CheckpointManifest> manifest = BuildManifest("job", {2, 2, 1}, State(1), records);
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(manifest.status(), "layers.0.")) << manifest.status();
  EXPECT_TRUE(Mentions(manifest.status(), "gap")) << manifest.status();
}

TEST(CheckpointTest, BuildingRejectsOverlappingShards) {
  const std::string dir = FreshDir("overlap");
  std::vector<RankShardRecords> records = WriteShards(dir, kSource, 1);
  // Shift tensor rank 1's qkv shard of layer 0 by one row onto tensor rank 0's.
  for (TensorEntry& entry : records[1].tensors) {
    if (entry.name() == "layers.0.attn.qkv.weight") {
      entry.mutable_shards(0)->set_global_offset(1, entry.shards(0).global_offset(1) - 1);
    }
  }
  absl::StatusOr<CheckpointManifest> manifest = BuildManifest("job", {2, 2, 1}, State(1), records);
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(manifest.status(), "layers.0.attn.qkv.weight")) << manifest.status();
  EXPECT_TRUE(Mentions(manifest.status(), "overlap")) << manifest.status();
}

TEST(CheckpointTest, BuildingRejectsWritersThatDisagreeOnAGlobalShape) {
  const std::string dir = FreshDir("disagree");
  std::vector<RankShardRecords> records = WriteShards(dir, kSource, 1);
  records[2].tensors[0].set_global_shape(0, 512);  // stage 1's wte
  absl::StatusOr<CheckpointManifest> manifest = BuildManifest("job", {2, 2, 1}, State(1), records);
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(manifest.status(), "wte")) << manifest.status();
}

TEST(CheckpointTest, BuildingRejectsAFileListedTwice) {
  const std::string dir = FreshDir("file_twice");
  std::vector<RankShardRecords> records = WriteShards(dir, kSource, 1);
  records.push_back(records[0]);
  EXPECT_EQ(BuildManifest("job", {2, 2, 1}, State(1), records).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- damage

TEST(CheckpointTest, DirectoryWithoutManifestIsNotFound) {
  const std::string dir = FreshDir("no_manifest");
  WriteShards(dir, kSource, 1);  // every shard, but the manifest never written
  EXPECT_EQ(OpenCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenCheckpoint(FreshDir("absent")).status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, TruncatedShardFileIsDataLossNamingTheFile) {
  const std::string dir = FreshDir("truncated");
  WriteCheckpoint(dir, kSource, 1);
  const std::string path = dir + "/rank-00001.bin";
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  for (ChecksumVerification mode :
       {ChecksumVerification::kAllFilesOnOpen, ChecksumVerification::kOnFirstUse}) {
    const absl::Status status = OpenCheckpoint(dir, mode).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(Mentions(status, "rank-00001.bin")) << status;
  }
}

// Files that are not regular are refused before a byte is read: a FIFO used to block the
// reader forever, and a huge MANIFEST would be read whole.
TEST(CheckpointTest, SpecialFilesAndHugeManifestsAreDataLossWithoutBlocking) {
  const std::string dir = FreshDir("special");
  WriteCheckpoint(dir, kSource, 1);
  const std::string manifest = dir + "/MANIFEST";
  const std::string saved = dir + "/MANIFEST.saved";
  std::filesystem::rename(manifest, saved);

  ASSERT_EQ(::mkfifo(manifest.c_str(), 0600), 0);
  absl::Status status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(Mentions(status, manifest + " is not a regular file (a FIFO)")) << status;
  std::filesystem::remove(manifest);

  std::filesystem::create_directory(manifest);
  status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(Mentions(status, "a directory")) << status;
  std::filesystem::remove(manifest);

  {  // Sparse: 2 GiB of apparent size costs no disk.
    std::ofstream(manifest).close();
    std::filesystem::resize_file(manifest, uint64_t{2} << 30);
  }
  status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(Mentions(status, "more than any manifest")) << status;
  std::filesystem::remove(manifest);
  std::filesystem::rename(saved, manifest);

  // A shard file replaced by a FIFO: found at open, or (a rank's downloaded subset) when
  // first read.
  const std::string shard = dir + "/rank-00001.bin";
  std::filesystem::remove(shard);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  for (ChecksumVerification mode :
       {ChecksumVerification::kOnFirstUse, ChecksumVerification::kOnFirstUseSubset}) {
    status = FirstLoadError(dir, kSource, mode);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_TRUE(Mentions(status, "rank-00001.bin")) << status;
  }
}

TEST(CheckpointTest, MissingShardFileIsDataLossNamingTheFile) {
  const std::string dir = FreshDir("missing");
  WriteCheckpoint(dir, kSource, 1);
  std::filesystem::remove(dir + "/rank-00003.bin");
  const absl::Status status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Mentions(status, "rank-00003.bin")) << status;
}

TEST(CheckpointTest, FlippedBitIsDataLossNamingTheFile) {
  const std::string dir = FreshDir("flipped");
  WriteCheckpoint(dir, kSource, 1);
  FlipBit(dir + "/rank-00002.bin", 1000);
  const absl::Status on_open = OpenCheckpoint(dir).status();
  EXPECT_EQ(on_open.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Mentions(on_open, "rank-00002.bin")) << on_open;
  EXPECT_TRUE(Mentions(on_open, "CRC-32C")) << on_open;

  // Verified lazily, the damage surfaces before the file's data is used.
  const absl::Status on_use =
      FirstLoadError(dir, Layout{1, 1, 1}, ChecksumVerification::kOnFirstUse);
  EXPECT_EQ(on_use.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Mentions(on_use, "rank-00002.bin")) << on_use;
}

// A flipped bit in the header is caught like one in the data.
TEST(CheckpointTest, FlippedHeaderBitIsDataLoss) {
  const std::string dir = FreshDir("flipped_header");
  WriteCheckpoint(dir, kSource, 1);
  FlipBit(dir + "/rank-00000.bin", 16);  // the step
  EXPECT_EQ(OpenCheckpoint(dir).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointTest, DamagedManifestIsDataLoss) {
  const std::string dir = FreshDir("damaged_manifest");
  WriteCheckpoint(dir, kSource, 1);
  const std::string path = dir + "/MANIFEST";
  FlipBit(path, 100);
  absl::Status status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Mentions(status, "MANIFEST")) << status;
  FlipBit(path, 100);
  ASSERT_TRUE(OpenCheckpoint(dir).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Mentions(status, "MANIFEST")) << status;
}

TEST(CheckpointTest, UnknownFormatVersionIsRefused) {
  const std::string dir = FreshDir("version");
  CheckpointManifest manifest = WriteCheckpoint(dir, kSource, 1);
  manifest.set_format_version(2);
  ASSERT_TRUE(WriteManifest(dir, manifest).ok());
  const absl::Status status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(status, "version 2")) << status;
}

// A manifest that names a shard file of another step (left over in the directory) is
// caught by the file header even though its checksum was recorded.
TEST(CheckpointTest, ShardFileOfAnotherStepIsDataLoss) {
  const std::string dir = FreshDir("other_step");
  CheckpointManifest manifest = WriteCheckpoint(dir, kSource, 1);
  manifest.set_step(2);
  manifest.mutable_state()->set_step(2);
  ASSERT_TRUE(WriteManifest(dir, manifest).ok());
  const absl::Status status = OpenCheckpoint(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Mentions(status, "step")) << status;
}

// ---------------------------------------------------------------- loading rules

TEST(CheckpointTest, MissingTensorIsNotFoundNamingIt) {
  const std::string dir = FreshDir("missing_tensor");
  WriteCheckpoint(dir, kSource, 1, /*with_moments=*/false);
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::vector<ShardedTensor> tensors = RankTensors({}, 0, 0);
  std::vector<float> p(BufferSize(tensors)), m(p.size()), v(p.size());
  // Parameters alone load; their moments were never stored.
  EXPECT_TRUE(LoadRankTensors(*checkpoint, tensors, p.data(), nullptr, nullptr).ok());
  absl::Status status = LoadRankTensors(*checkpoint, tensors, p.data(), m.data(), v.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(status, "optimizer.m.wte")) << status;

  tensors.back().name = "layers.9.ln1.weight";
  status = LoadRankTensors(*checkpoint, tensors, p.data(), nullptr, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(status, "layers.9.ln1.weight")) << status;
}

TEST(CheckpointTest, AnotherGlobalShapeIsInvalidArgument) {
  const std::string dir = FreshDir("shape_mismatch");
  WriteCheckpoint(dir, kSource, 1);
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const std::vector<ShardedTensor> wider = RankTensors({}, 0, 0, /*hidden=*/32);
  std::vector<float> p(BufferSize(wider));
  absl::Status status = LoadRankTensors(*checkpoint, wider, p.data(), nullptr, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  // wte differs in its second dimension too: not a padded-vocabulary change.
  EXPECT_TRUE(Mentions(status, "'wte'")) << status;

  // Only wte may differ in its first dimension.
  std::vector<ShardedTensor> tensors = RankTensors({}, 0, 0);
  for (ShardedTensor& t : tensors) {
    if (t.name == "wpe") {
      t.global_shape[0] = 16;
      t.local_shape[0] = 16;
      t.size = 16 * 16;
    }
  }
  std::vector<float> q(BufferSize(tensors) + 256);
  status = LoadRankTensors(*checkpoint, tensors, q.data(), nullptr, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(status, "'wpe'")) << status;
}

TEST(CheckpointTest, WritingRejectsInconsistentTensors) {
  std::vector<ShardedTensor> tensors = RankTensors({}, 0, 0);
  std::vector<float> p(BufferSize(tensors)), m(p.size());
  tensors[3].size += 1;
  absl::Status status =
      WriteRankShards(FreshDir("bad_tensor"), 0, 1, tensors, p.data(), nullptr, nullptr).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(status, tensors[3].name)) << status;
  tensors[3].size -= 1;
  // One moment without the other.
  EXPECT_EQ(WriteRankShards(FreshDir("one_moment"), 0, 1, tensors, p.data(), m.data(), nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A resuming rank fetches only the files its shards overlap and opens that subset.
TEST(CheckpointTest, RankLoadsFromOnlyTheFilesItsShardsOverlap) {
  const std::string dir = FreshDir("subset");
  const CheckpointManifest manifest = WriteCheckpoint(dir, Layout{2, 2, 1}, 30);
  // Stage 1 of a (1, 2) layout holds the second half of the layers and the tied
  // embedding: the files of stage 1 (ranks 2, 3) and, for wte, of stage 0 (ranks 0, 1)
  // or stage 1 (both hold it; the manifest keeps the first writer's copy).
  const std::vector<ShardedTensor> last_stage = RankTensors(Layout{1, 2, 1}, 0, 1);
  const std::vector<std::string> files = FilesOverlapping(manifest, last_stage, true);
  EXPECT_EQ(files, (std::vector<std::string>{"rank-00000.bin", "rank-00001.bin", "rank-00002.bin",
                                             "rank-00003.bin"}));
  // Without the embedding, stage 1's own layers come only from ranks 2 and 3.
  std::vector<ShardedTensor> layers_only;
  for (const ShardedTensor& t : last_stage) {
    if (t.name.rfind("layers.", 0) == 0) layers_only.push_back(t);
  }
  const std::vector<std::string> layer_files = FilesOverlapping(manifest, layers_only, true);
  EXPECT_EQ(layer_files, (std::vector<std::string>{"rank-00002.bin", "rank-00003.bin"}));
  // Delete the files the layers do not need: the subset opens and loads exactly.
  std::filesystem::remove(dir + "/rank-00000.bin");
  std::filesystem::remove(dir + "/rank-00001.bin");
  EXPECT_EQ(OpenCheckpoint(dir, ChecksumVerification::kOnFirstUse).status().code(),
            absl::StatusCode::kDataLoss);
  absl::StatusOr<Checkpoint> subset = OpenCheckpoint(dir, ChecksumVerification::kOnFirstUseSubset);
  ASSERT_TRUE(subset.ok()) << subset.status();
  std::array<std::vector<float>, 3> b;
  for (auto& buffer : b) buffer.assign(BufferSize(layers_only) + 8, kUntouched);
  ASSERT_TRUE(LoadRankTensors(*subset, layers_only, b[0].data(), b[1].data(), b[2].data()).ok());
  for (const ShardedTensor& t : layers_only) {
    ASSERT_EQ(b[2][t.offset + t.size - 1], ReferenceValue(2, t.name, GlobalIndex(t, t.size - 1)))
        << t.name;
  }
  // A tensor whose file is absent is DATA_LOSS naming the file when first needed.
  std::vector<float> params(BufferSize(last_stage) + 8);
  const absl::Status missing =
      LoadRankTensors(*subset, last_stage, params.data(), nullptr, nullptr);
  EXPECT_EQ(missing.code(), absl::StatusCode::kDataLoss) << missing;
  EXPECT_NE(missing.message().find("rank-0000"), std::string::npos) << missing;
}

}  // namespace
}  // namespace mtrain
