#include "worker/engine/rank_model.h"

#include <algorithm>

#include "absl/status/status.h"
#include "worker/engine/parameter_init.h"

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

absl::StatusOr<std::unique_ptr<RankModel>> RankModel::Create(
    const ModelShape& shape, const std::vector<ModelPlacement>& chunks, int micro_batch,
    const ModelOptions& options, const TensorParallelGroup<float>& tensor_group,
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
  std::unique_ptr<RankModel> model(new RankModel);
  model->shape_ = shape;
  size_t offset = 0;
  for (const ModelPlacement& p : chunks) {
    model->layouts_.push_back(std::make_unique<ParameterLayout>(shape, p, offset));
    offset = model->layouts_.back()->end_offset();
    for (const ParamTensor& t : model->layouts_.back()->tensors()) model->tensors_.push_back(t);
  }
  model->num_params_ = offset;
  const size_t multiple = std::max<size_t>(1, pad_to_multiple);
  const size_t padded = (offset + multiple - 1) / multiple * multiple;
  model->params_.assign(padded, 0.0f);
  model->grads_.assign(padded, 0.0f);
  for (const auto& layout : model->layouts_) {
    model->models_.push_back(std::make_unique<GptModel<float>>(
        *layout, micro_batch, options, tensor_group,
        SharedParameterBuffers<float>{model->params_.data(), model->grads_.data()}));
  }
  return model;
}

const ParamTensor* RankModel::Find(const std::string& name) const {
  for (const ParamTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void RankModel::Initialize(uint64_t seed) {
  for (const auto& layout : layouts_) InitializeParameters(*layout, seed, params_.data());
}

void RankModel::ZeroGrads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

}  // namespace mtrain
