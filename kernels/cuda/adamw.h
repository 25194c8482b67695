// AdamW on the GPU over fp32 master weights (mixed precision): the update of
// kernels/adamw.h computed in float on the fp32 master copy and moments, from gradients
// stored as G (float, __nv_bfloat16 or __half), optionally writing the updated weights into
// the model's copy P (float, __nv_bfloat16 or __half) that forward and backward use.
// grad_scale in the hyperparameters folds the clipping coefficient and the loss-scale
// unscaling into one multiply.
#ifndef MTRAIN_KERNELS_CUDA_ADAMW_H_
#define MTRAIN_KERNELS_CUDA_ADAMW_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/adamw.h"

namespace mtrain::cuda {

// For each i in [0, n): the update of cpu::AdamWUpdate on master[i], m[i], v[i] with
// gradient grad[i] * h.grad_scale; then model_copy[i] = master[i] rounded to P unless
// model_copy is null. Supported (G, P): (float, float), (float, bf16), (bf16, bf16),
// (float, fp16) (fp16 mixed precision: fp32 gradients, fp16 working copy), (fp16, fp16).
template <typename G, typename P>
absl::Status AdamWUpdate(float* master, const G* grad, float* m, float* v, P* model_copy, size_t n,
                         const cpu::AdamWHyperparameters& h, cudaStream_t stream);

// One block's share of a whole-model update: elements [begin, begin + count) of the
// master/gradient/copy buffers (moments at begin - moment_offset), with their tensors'
// weight decay. MakeAdamWChunks cuts a model's ranges into these.
struct AdamWChunk {
  size_t begin = 0;
  uint32_t count = 0;
  float weight_decay = 0.0f;
};
inline constexpr uint32_t kAdamWChunkElements = 1u << 16;

// Chunks of at most kAdamWChunkElements covering each [begin, end) range in order, with that
// range's weight decay.
struct AdamWRange {
  size_t begin = 0, end = 0;
  float weight_decay = 0.0f;
};
std::vector<AdamWChunk> MakeAdamWChunks(const std::vector<AdamWRange>& ranges);

// AdamWUpdate over every chunk (a device array) in one launch: the same arithmetic per
// element, so the same bits as one AdamWUpdate per range, without a launch (and a grid's
// tail) per tensor. h.weight_decay is ignored (each chunk carries its own).
template <typename G, typename P>
absl::Status AdamWUpdateChunks(float* master, const G* grad, float* m, float* v, P* model_copy,
                               size_t moment_offset, const AdamWChunk* chunks, int num_chunks,
                               const cpu::AdamWHyperparameters& h, cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_ADAMW_H_
