#include "worker/engine/cpu/model_chunk_factory.h"

#include <memory>
#include <utility>

#include "worker/engine/cpu/decoder_model.h"

namespace mtrain {

template <typename T>
absl::StatusOr<std::unique_ptr<ModelChunk<T>>> NewModelChunk(const ParameterLayout& layout,
                                                             int micro_batch,
                                                             const ModelOptions& options,
                                                             TensorParallelGroup<T> tensor_group,
                                                             SharedParameterBuffers<T> shared) {
  switch (layout.shape().family) {
    case ArchitectureFamily::kGpt2:
    case ArchitectureFamily::kLlama:
      // One causal decoder body; layer_blocks.h holds where the two families differ.
      return std::unique_ptr<ModelChunk<T>>(std::make_unique<DecoderModel<T>>(
          layout, micro_batch, options, std::move(tensor_group), shared));
    case ArchitectureFamily::kBert:
      break;
  }
  return absl::UnimplementedError(
      "model.family BERT: the CPU engine's BERT layers are not written yet (issue 35)");
}

template absl::StatusOr<std::unique_ptr<ModelChunk<float>>> NewModelChunk(
    const ParameterLayout&, int, const ModelOptions&, TensorParallelGroup<float>,
    SharedParameterBuffers<float>);
template absl::StatusOr<std::unique_ptr<ModelChunk<double>>> NewModelChunk(
    const ParameterLayout&, int, const ModelOptions&, TensorParallelGroup<double>,
    SharedParameterBuffers<double>);

}  // namespace mtrain
