// Where one rank's parameters live, without the parameters themselves: its model chunks
// (one without interleaving, v with it) laid out one after another in one flat buffer,
// padded with zeros to a multiple of the ZeRO-1 shard count. Both engines keep their
// parameters, gradients and AdamW moments in buffers of this layout (the CPU engine's
// RankModel in host memory, the CUDA engine on the device), so checkpoints, weight gathers
// and the optimizer's slices are the same flat ranges whatever engine trains.
//
//   ASSIGN_OR_RETURN(RankLayout layout, RankLayout::Create(shape, placements, zero_shards));
//   for (const ParamTensor& t : layout.tensors()) ... t.offset ...
#ifndef MTRAIN_WORKER_ENGINE_RANK_LAYOUT_H_
#define MTRAIN_WORKER_ENGINE_RANK_LAYOUT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model_shape.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {

// The placements of a rank's chunks: chunk c holds `layers[c]` (first layer, count) of the
// model's `total_layers`; the chunk that starts at layer 0 holds the embeddings, the one
// that ends at the last layer the head (under ZB-V's V placement both sit on stage 0).
struct ChunkLayers {
  int first_layer = 0;
  int num_layers = 0;
};
std::vector<ModelPlacement> ChunkPlacements(const std::vector<ChunkLayers>& layers,
                                            int total_layers, int tensor_size, int tensor_rank);

class RankLayout {
 public:
  // The buffer is padded to a multiple of `pad_to_multiple` elements (the data-parallel
  // degree under ZeRO-1, so that the shards are equal). INVALID_ARGUMENT for no chunks. A
  // tied embedding two chunks hold (the embedding's and the head's) is laid out once and
  // shared by both (ParameterLayout).
  static absl::StatusOr<RankLayout> Create(const ModelShape& shape,
                                           const std::vector<ModelPlacement>& chunks,
                                           size_t pad_to_multiple);
  RankLayout(RankLayout&&) = default;
  RankLayout& operator=(RankLayout&&) = default;

  const ModelShape& shape() const { return shape_; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  // Stable addresses: a model may keep a reference for as long as the RankLayout lives,
  // moves included.
  const ParameterLayout& chunk(int c) const { return *chunks_[c]; }
  // Every tensor of every chunk, offsets into the flat buffers, in buffer order.
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // Null if this rank does not hold the tensor.
  const ParamTensor* Find(const std::string& name) const;
  // The tensor the first and the last pipeline stage each hold a copy of (the tied token
  // embedding), whose gradients the two stages sum; null if this rank holds none.
  const ParamTensor* FindCopyOnFirstAndLastStage() const;
  // Whether two chunks of this rank share that tensor (its whole gradient is summed here,
  // with nothing to exchange between stages).
  bool SharesTiedCopy() const;
  // Elements that hold parameters; the padded size of the flat buffers.
  size_t num_params() const { return num_params_; }
  size_t buffer_size() const { return buffer_size_; }

 private:
  RankLayout() = default;

  ModelShape shape_;
  std::vector<std::unique_ptr<ParameterLayout>> chunks_;
  std::vector<ParamTensor> tensors_;
  size_t num_params_ = 0;
  size_t buffer_size_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_RANK_LAYOUT_H_
