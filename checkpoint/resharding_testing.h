// What the re-slicing tests share: the checkpoint library's own (checkpoint_test.cc, on
// hand-made shards) and the engine's (worker/engine/layout_resharding_test.cc, on the
// engine's real parameter layout). Each supplies its model as a function from (layout,
// tensor rank, stage) to that rank's shards; the reference values written, and the check
// that a checkpoint loads bit-exactly into another layout, are the same for both.
#ifndef MTRAIN_CHECKPOINT_RESHARDING_TESTING_H_
#define MTRAIN_CHECKPOINT_RESHARDING_TESTING_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "checkpoint/sharded_tensor.h"

namespace mtrain::resharding_testing {

// Marks elements no load wrote.
inline constexpr float kUntouched = -12345.0f;

// A parallel layout: tensor size, pipeline stages, model chunks per stage (interleaving).
struct Layout {
  int t = 1;
  int p = 1;
  int v = 1;
};

std::string LayoutName(const Layout& l);

// The shards of rank (tp_rank, stage) of `layout`, back to back in its flat buffer.
using RankShardsFn =
    std::function<std::vector<ShardedTensor>(const Layout& layout, int tp_rank, int stage)>;

// Elements of the flat buffer the shards occupy (ShardedTensor and what derives from it).
template <typename Shard>
size_t BufferSize(const std::vector<Shard>& shards) {
  size_t end = 0;
  for (const Shard& s : shards) end = std::max(end, s.offset + s.size);
  return end;
}

class Reference {
 public:
  // Tensor ids come from the shards of the single-rank layout, in order.
  explicit Reference(RankShardsFn rank_shards);

  // The value of element `global_index` of a tensor of the single-rank model: distinct per
  // tensor, element and buffer (0 params, 1 first moment, 2 second moment).
  float Value(int buffer, const std::string& name, int64_t global_index) const;

  // Params, first and second moments of one rank, filled from the reference (elements no
  // shard covers hold kUntouched).
  std::array<std::vector<float>, 3> Fill(absl::Span<const ShardedTensor> shards) const;

  // Loads the checkpoint in `dir` into every rank of `target` (reading only the files
  // FilesOverlapping names) and checks every element against the reference; wte rows at or
  // past `stored_padded_vocab` must be zero, and two elements past each buffer untouched.
  void ExpectLoadsExactly(const std::string& dir, const Layout& target,
                          int64_t stored_padded_vocab) const;

 private:
  RankShardsFn rank_shards_;
  std::map<std::string, int> ids_;
};

}  // namespace mtrain::resharding_testing

#endif  // MTRAIN_CHECKPOINT_RESHARDING_TESTING_H_
