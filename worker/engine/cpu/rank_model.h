// Everything one rank holds of the model: its model chunks (one without interleaving, v
// with it), their parameters and gradients in ONE flat buffer each, so data-parallel
// buckets, gradient clipping, the optimizer (and its ZeRO-1 shards) and checkpoints work
// on flat ranges regardless of the parallel layout.
//
//   ASSIGN_OR_RETURN(auto model, RankModel::Create(shape, chunks, micro_batch, options, tp, d));
//   model->Initialize(seed);
//   model->chunk(c).Forward(...);
#ifndef MTRAIN_WORKER_ENGINE_CPU_RANK_MODEL_H_
#define MTRAIN_WORKER_ENGINE_CPU_RANK_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/cpu/model_chunk.h"
#include "worker/engine/model_options.h"
#include "worker/engine/parameter_layout.h"
#include "worker/engine/rank_layout.h"
#include "worker/parallel/tensor_parallel.h"

namespace mtrain {

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
  ModelChunk<float>& chunk(int c) { return *models_[c]; }
  const ParameterLayout& chunk_layout(int c) const { return layout_.chunk(c); }
  const RankLayout& layout() const { return layout_; }

  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* params() const { return params_.data(); }
  const float* grads() const { return grads_.data(); }
  // Padded size of the flat buffers.
  size_t buffer_size() const { return params_.size(); }
  // Elements that hold parameters (the rest is padding).
  size_t num_params() const { return layout_.num_params(); }
  // Every tensor of every chunk, offsets into the flat buffers.
  const std::vector<ParamTensor>& tensors() const { return layout_.tensors(); }
  const ParamTensor* Find(const std::string& name) const { return layout_.Find(name); }
  const ParamTensor* FindCopyOnFirstAndLastStage() const {
    return layout_.FindCopyOnFirstAndLastStage();
  }
  const ModelShape& shape() const { return layout_.shape(); }

  // Layout-independent initialisation (parameter_init.h).
  void Initialize(uint64_t seed);
  void ZeroGrads();

 private:
  explicit RankModel(RankLayout layout) : layout_(std::move(layout)) {}

  RankLayout layout_;
  std::vector<std::unique_ptr<ModelChunk<float>>> models_;
  std::vector<float> params_, grads_;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_RANK_MODEL_H_
