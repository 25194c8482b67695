#include "worker/engine/cpu/model_chunk_factory.h"

#include <memory>
#include <utility>

#include "worker/engine/cpu/transformer_model.h"

namespace mtrain {

template <typename T>
absl::StatusOr<std::unique_ptr<ModelChunk<T>>> NewModelChunk(const ParameterLayout& layout,
                                                             int micro_batch,
                                                             const ModelOptions& options,
                                                             TensorParallelGroup<T> tensor_group,
                                                             SharedParameterBuffers<T> shared) {
  // One transformer body for every family; layer_blocks.h and transformer_model_bert.cc
  // hold where they differ.
  return std::unique_ptr<ModelChunk<T>>(std::make_unique<TransformerModel<T>>(
      layout, micro_batch, options, std::move(tensor_group), shared));
}

template absl::StatusOr<std::unique_ptr<ModelChunk<float>>> NewModelChunk(
    const ParameterLayout&, int, const ModelOptions&, TensorParallelGroup<float>,
    SharedParameterBuffers<float>);
template absl::StatusOr<std::unique_ptr<ModelChunk<double>>> NewModelChunk(
    const ParameterLayout&, int, const ModelOptions&, TensorParallelGroup<double>,
    SharedParameterBuffers<double>);

}  // namespace mtrain
