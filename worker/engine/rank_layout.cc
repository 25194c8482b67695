#include "worker/engine/rank_layout.h"

#include <algorithm>

#include "absl/status/status.h"

namespace mtrain {

std::vector<ModelPlacement> ChunkPlacements(const std::vector<ChunkLayers>& layers, int stage,
                                            int pipeline, int tensor_size, int tensor_rank) {
  std::vector<ModelPlacement> placements;
  const int chunks = static_cast<int>(layers.size());
  for (int c = 0; c < chunks; ++c) {
    ModelPlacement p;
    p.tensor_size = tensor_size;
    p.tensor_rank = tensor_rank;
    p.first_layer = layers[c].first_layer;
    p.num_layers = layers[c].num_layers;
    p.has_embedding = stage == 0 && c == 0;
    p.has_head = stage == pipeline - 1 && c == chunks - 1;
    placements.push_back(p);
  }
  return placements;
}

absl::StatusOr<RankLayout> RankLayout::Create(const ModelShape& shape,
                                              const std::vector<ModelPlacement>& chunks,
                                              size_t pad_to_multiple) {
  if (chunks.empty()) return absl::InvalidArgumentError("a rank needs at least one chunk");
  int tied_copies = 0;
  for (const ModelPlacement& p : chunks) tied_copies += (p.has_embedding || p.has_head) ? 1 : 0;
  if (tied_copies > 1) {
    // Two chunks of one rank would each hold the tied embedding and update it separately.
    return absl::InvalidArgumentError(
        "the embedding and output layer are tied: one rank cannot hold them in two chunks "
        "(interleaving needs pipeline >= 2)");
  }
  RankLayout layout;
  layout.shape_ = shape;
  size_t offset = 0;
  for (const ModelPlacement& p : chunks) {
    layout.chunks_.push_back(std::make_unique<ParameterLayout>(shape, p, offset));
    offset = layout.chunks_.back()->end_offset();
    for (const ParamTensor& t : layout.chunks_.back()->tensors()) layout.tensors_.push_back(t);
  }
  layout.num_params_ = offset;
  const size_t multiple = std::max<size_t>(1, pad_to_multiple);
  layout.buffer_size_ = (offset + multiple - 1) / multiple * multiple;
  return layout;
}

const ParamTensor* RankLayout::Find(const std::string& name) const {
  for (const ParamTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const ParamTensor* RankLayout::FindCopyOnFirstAndLastStage() const {
  for (const ParamTensor& t : tensors_) {
    if (t.copy_on_first_and_last_stage) return &t;
  }
  return nullptr;
}

}  // namespace mtrain
