#include "worker/engine/cpu/rank_model.h"

#include <algorithm>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "worker/engine/cpu/model_chunk_factory.h"
#include "worker/engine/parameter_init.h"

namespace mtrain {

absl::StatusOr<std::unique_ptr<RankModel>> RankModel::Create(
    const ModelShape& shape, const std::vector<ModelPlacement>& chunks, int micro_batch,
    const ModelOptions& options, const TensorParallelGroup<float>& tensor_group,
    size_t pad_to_multiple) {
  ASSIGN_OR_RETURN(RankLayout layout, RankLayout::Create(shape, chunks, pad_to_multiple));
  std::unique_ptr<RankModel> model(new RankModel(std::move(layout)));
  model->params_.assign(model->layout_.buffer_size(), 0.0f);
  model->grads_.assign(model->layout_.buffer_size(), 0.0f);
  for (int c = 0; c < model->layout_.num_chunks(); ++c) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<ModelChunk<float>> chunk,
        NewModelChunk<float>(
            model->layout_.chunk(c), micro_batch, options, tensor_group,
            SharedParameterBuffers<float>{model->params_.data(), model->grads_.data()}));
    model->models_.push_back(std::move(chunk));
  }
  return model;
}

void RankModel::Initialize(uint64_t seed) {
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    InitializeParameters(layout_.chunk(c), seed, params_.data());
  }
}

void RankModel::ZeroGrads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

}  // namespace mtrain
