#include "checkpoint/resharding_testing.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace mtrain::resharding_testing {

std::string LayoutName(const Layout& l) {
  return "t" + std::to_string(l.t) + "p" + std::to_string(l.p) + "v" + std::to_string(l.v);
}

Reference::Reference(RankShardsFn rank_shards) : rank_shards_(std::move(rank_shards)) {
  for (const ShardedTensor& t : rank_shards_(Layout{}, 0, 0)) {
    ids_.emplace(t.name, static_cast<int>(ids_.size()) + 1);
  }
}

float Reference::Value(int buffer, const std::string& name, int64_t global_index) const {
  const float base = static_cast<float>(ids_.at(name) * 100000 + global_index);
  if (buffer == 0) return base;
  if (buffer == 1) return -base - 0.5f;
  return 0.25f * base + 3.0f;
}

std::array<std::vector<float>, 3> Reference::Fill(absl::Span<const ShardedTensor> shards) const {
  std::array<std::vector<float>, 3> buffers;
  size_t size = 0;
  for (const ShardedTensor& t : shards) size = std::max(size, t.offset + t.size);
  for (int k = 0; k < 3; ++k) {
    buffers[k].assign(size, kUntouched);
    for (const ShardedTensor& t : shards) {
      for (size_t i = 0; i < t.size; ++i) {
        buffers[k][t.offset + i] = Value(k, t.name, GlobalIndex(t, static_cast<int64_t>(i)));
      }
    }
  }
  return buffers;
}

void Reference::ExpectLoadsExactly(const std::string& dir, const Layout& target,
                                   int64_t stored_padded_vocab) const {
  absl::StatusOr<Checkpoint> checkpoint = OpenCheckpoint(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int64_t checked = 0, zero_rows = 0;
  bool wider_vocabulary = false;
  for (int stage = 0; stage < target.p; ++stage) {
    for (int tp = 0; tp < target.t; ++tp) {
      const std::vector<ShardedTensor> tensors = rank_shards_(target, tp, stage);
      // FilesOverlapping names what a resuming rank downloads: the load needs no other.
      EXPECT_FALSE(
          FilesOverlapping(checkpoint->manifest(), tensors, /*with_moments=*/true).empty());
      // Two extra elements stand for ZeRO padding, which loading must not touch.
      std::array<std::vector<float>, 3> b;
      for (auto& buffer : b) buffer.assign(BufferSize(tensors) + 2, kUntouched);
      const absl::Status loaded =
          LoadRankTensors(*checkpoint, tensors, b[0].data(), b[1].data(), b[2].data());
      ASSERT_TRUE(loaded.ok()) << loaded;
      for (int k = 0; k < 3; ++k) {
        for (const ShardedTensor& t : tensors) {
          if (t.padded_vocabulary_rows && t.global_shape[0] > stored_padded_vocab)
            wider_vocabulary = true;
          for (size_t i = 0; i < t.size; ++i) {
            const int64_t g = GlobalIndex(t, static_cast<int64_t>(i));
            const bool beyond_stored =
                t.padded_vocabulary_rows && g / t.global_shape[1] >= stored_padded_vocab;
            const float expected = beyond_stored ? 0.0f : Value(k, t.name, g);
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
  if (wider_vocabulary) {
    EXPECT_GT(zero_rows, 0);
  }
}

}  // namespace mtrain::resharding_testing
