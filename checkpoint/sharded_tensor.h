// ShardedTensor: what the checkpoint library knows of a rank's tensor, and all it needs
// to know: its name, where this rank's shard sits in the rank's flat buffer, and where
// that shard sits in the global tensor (a hyper-rectangle). Modelled on Megatron-Core's
// dist_checkpointing.ShardedTensor, which lets checkpoints live below the models: the
// engine fills these from its own parameter layout (worker/engine/parameter_layout.h),
// an importer from whole tensors, a test by hand; the checkpoint code never sees a model.
//
//   // Rank 1 of 2 holding the right half of the columns of a [4, 6] tensor:
//   ShardedTensor t;
//   t.name = "layers.0.mlp.proj.weight";
//   t.offset = 0;  // first element in the flat buffer
//   t.size = 12;   // elements held: the volume of local_shape
//   t.global_shape = {4, 6};
//   t.local_shape = {4, 3};
//   t.global_offset = {0, 3};
//
// The shard's elements lie in the flat buffer at [offset, offset + size) in row-major
// order of local_shape. A plain value type; checkpoint.h states the rules a writer or
// loader checks (positive shapes, the shard inside the global shape, size = volume).
#ifndef MTRAIN_CHECKPOINT_SHARDED_TENSOR_H_
#define MTRAIN_CHECKPOINT_SHARDED_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mtrain {

struct ShardedTensor {
  std::string name;   // canonical, e.g. "layers.3.attn.qkv.weight"
  size_t offset = 0;  // elements from the start of the buffer
  size_t size = 0;    // elements held by this rank
  std::vector<int64_t> global_shape;
  std::vector<int64_t> local_shape;
  std::vector<int64_t> global_offset;  // index of the shard's first element per dimension
  // The first dimension is the padded vocabulary (the token embedding, an output layer):
  // its padding, and so its length, may differ between layouts (LoadRankTensors).
  bool padded_vocabulary_rows = false;
};

// Global row-major index of the element at local row-major index `local_index` of
// `tensor`'s shard.
int64_t GlobalIndex(const ShardedTensor& tensor, int64_t local_index);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_SHARDED_TENSOR_H_
