#include "worker/engine/rank_layout.h"

#include <algorithm>

#include "absl/status/status.h"

namespace mtrain {

std::vector<ModelPlacement> ChunkPlacements(const std::vector<ChunkLayers>& layers,
                                            int total_layers, int tensor_size, int tensor_rank) {
  std::vector<ModelPlacement> placements;
  for (const ChunkLayers& chunk : layers) {
    ModelPlacement p;
    p.tensor_size = tensor_size;
    p.tensor_rank = tensor_rank;
    p.first_layer = chunk.first_layer;
    p.num_layers = chunk.num_layers;
    p.has_embedding = chunk.first_layer == 0;
    p.has_head = chunk.first_layer + chunk.num_layers == total_layers;
    placements.push_back(p);
  }
  return placements;
}

absl::StatusOr<RankLayout> RankLayout::Create(const ModelShape& shape,
                                              const std::vector<ModelPlacement>& chunks,
                                              size_t pad_to_multiple) {
  if (chunks.empty()) return absl::InvalidArgumentError("a rank needs at least one chunk");
  RankLayout layout;
  layout.shape_ = shape;
  size_t offset = 0;
  const ParameterLayout* tied_holder = nullptr;  // the chunk holding the tied embedding
  for (const ModelPlacement& p : chunks) {
    layout.chunks_.push_back(std::make_unique<ParameterLayout>(shape, p, offset, tied_holder));
    const ParameterLayout& chunk = *layout.chunks_.back();
    offset = chunk.end_offset();
    for (const ParamTensor& t : chunk.tensors()) {
      // A tensor two chunks share is one tensor of the rank (checkpoints, optimizer).
      if (!t.shared_with_earlier_chunk) layout.tensors_.push_back(t);
      if (t.copy_on_first_and_last_stage && tied_holder == nullptr) tied_holder = &chunk;
    }
  }
  layout.num_params_ = offset;
  const size_t multiple = std::max<size_t>(1, pad_to_multiple);
  layout.buffer_size_ = (offset + multiple - 1) / multiple * multiple;
  return layout;
}

bool RankLayout::SharesTiedCopy() const {
  for (const auto& chunk : chunks_) {
    for (const ParamTensor& t : chunk->tensors()) {
      if (t.shared_with_earlier_chunk) return true;
    }
  }
  return false;
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
