// The CPU layer code of a model's family: the one place that picks it (adding a family adds
// a case here and its ModelChunk implementation; nothing else in the rank changes).
#ifndef MTRAIN_WORKER_ENGINE_CPU_MODEL_CHUNK_FACTORY_H_
#define MTRAIN_WORKER_ENGINE_CPU_MODEL_CHUNK_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/cpu/model_chunk.h"
#include "worker/engine/model_options.h"
#include "worker/engine/parameter_layout.h"
#include "worker/parallel/tensor_parallel.h"

namespace mtrain {

// The chunk of `layout` (which must outlive it) for microbatches of `micro_batch`
// sequences; without `shared` buffers the chunk owns its parameters and gradients.
// An error is for a combination the CPU layers do not run, naming the fields; there is none
// today (every family runs in every layout; BERT's post placement under sequence
// parallelism since session 38).
template <typename T>
absl::StatusOr<std::unique_ptr<ModelChunk<T>>> NewModelChunk(
    const ParameterLayout& layout, int micro_batch, const ModelOptions& options,
    TensorParallelGroup<T> tensor_group = {}, SharedParameterBuffers<T> shared = {});

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_MODEL_CHUNK_FACTORY_H_
