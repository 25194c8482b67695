// Everything one rank holds of the model: its model chunks (one without interleaving, v
// with it), their parameters and gradients in ONE flat buffer each, so data-parallel
// buckets, gradient clipping, the optimizer (and its ZeRO-1 shards) and checkpoints work
// on flat ranges regardless of the parallel layout.
//
//   ASSIGN_OR_RETURN(auto model, RankModel::Create(shape, chunks, micro_batch, options, tp, d));
//   model->Initialize(seed);
//   model->chunk(c).Forward(...);
#ifndef MTRAIN_WORKER_ENGINE_RANK_MODEL_H_
#define MTRAIN_WORKER_ENGINE_RANK_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/gpt_model.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain {

// The placements of a rank's chunks: chunk c holds `layers[c]` (first layer, count); the
// first chunk of stage 0 holds the embeddings, the last chunk of the last stage the head.
struct ChunkLayers {
  int first_layer = 0;
  int num_layers = 0;
};
std::vector<ModelPlacement> ChunkPlacements(const std::vector<ChunkLayers>& layers, int stage,
                                            int pipeline, int tensor_size, int tensor_rank);

class RankModel {
 public:
  // The flat buffers are padded with zeros to a multiple of `pad_to_multiple` elements
  // (the data-parallel degree, so ZeRO-1 shards are equal). INVALID_ARGUMENT for no
  // chunks or a tied embedding held twice on one rank.
  static absl::StatusOr<std::unique_ptr<RankModel>> Create(
      const ModelShape& shape, const std::vector<ModelPlacement>& chunks, int micro_batch,
      const ModelOptions& options, const TensorParallelGroup<float>& tensor_group,
      size_t pad_to_multiple);

  int num_chunks() const { return static_cast<int>(models_.size()); }
  GptModel<float>& chunk(int c) { return *models_[c]; }
  const ParameterLayout& chunk_layout(int c) const { return *layouts_[c]; }

  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* params() const { return params_.data(); }
  const float* grads() const { return grads_.data(); }
  // Padded size of the flat buffers.
  size_t buffer_size() const { return params_.size(); }
  // Elements that hold parameters (the rest is padding).
  size_t num_params() const { return num_params_; }
  // Every tensor of every chunk, offsets into the flat buffers.
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor* Find(const std::string& name) const;
  const ModelShape& shape() const { return shape_; }

  // Layout-independent initialisation (parameter_init.h).
  void Initialize(uint64_t seed);
  void ZeroGrads();

 private:
  RankModel() = default;

  ModelShape shape_;
  std::vector<std::unique_ptr<ParameterLayout>> layouts_;
  std::vector<std::unique_ptr<GptModel<float>>> models_;
  std::vector<ParamTensor> tensors_;
  std::vector<float> params_, grads_;
  size_t num_params_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_RANK_MODEL_H_
