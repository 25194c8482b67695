// GPT-2's token + position embedding on the GPU, over this rank's vocabulary shard
// [vocab_start, vocab_start + local_vocab) of the token table (vocab-parallel: tokens other
// shards hold contribute zeros, so an all-reduce of the outputs gives the full lookup).
// Same semantics as kernels/embedding.h applied twice (tokens, then positions with
// accumulate), on device memory, enqueued on `stream`. T is float, __nv_bfloat16 or
// __half; arithmetic is float. Gradients are fp32 and deterministic: no atomics, every gradient
// element is summed by one thread in token order, as the CPU's sequential loop does, so
// fp32 results are bit-identical to the CPU's.
#ifndef MTRAIN_KERNELS_CUDA_EMBEDDING_H_
#define MTRAIN_KERNELS_CUDA_EMBEDDING_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace mtrain::cuda {

// out[i, :] = (tokens[i] in the shard ? wte[tokens[i] - vocab_start, :] : 0) + wpe[i % seq, :]
// for the batch * seq tokens (device, [batch, seq]); wte is the shard [local_vocab, C], wpe
// [>= seq, C] or null (no position term: under tensor parallelism one rank adds it before
// the all-reduce), out [batch * seq, C] (overwritten). Summed in float, rounded once to T.
// INVALID_ARGUMENT for negative sizes or C <= 0.
template <typename T>
absl::Status TokenPositionEmbeddingForward(const int32_t* tokens, const T* wte, const T* wpe,
                                           T* out, int batch, int seq, int C, int vocab_start,
                                           int local_vocab, cudaStream_t stream);

// Which token positions add into which table rows, built on the host from the host copy of
// the tokens (the step's batch is on the host anyway): the backward then needs neither
// atomics nor a device sort. rows: the distinct shard-local rows used, ascending;
// positions[starts[r], starts[r + 1]) are the token indices i, ascending, whose token is
// rows[r] + vocab_start; starts has rows.size() + 1 entries.
struct EmbeddingGradPlan {
  std::vector<int32_t> rows;
  std::vector<int32_t> starts;
  std::vector<int32_t> positions;
};

// The plan for the n tokens host_tokens[0, n) on the shard [vocab_start, vocab_start +
// local_vocab); tokens outside the shard are left out (another rank's gradient).
EmbeddingGradPlan PlanEmbeddingGrad(const int32_t* host_tokens, int n, int vocab_start,
                                    int local_vocab);

// d_wte[rows[r], c] += d_out[p, c] for the plan's positions p of row r, in the plan's order
// (rows, starts, positions: the plan's arrays copied to the device; num_rows = rows.size()).
// d_wte is the shard's fp32 gradient [local_vocab, C]; rows the plan leaves out are not
// touched. INVALID_ARGUMENT for num_rows < 0 or C <= 0.
template <typename T>
absl::Status TokenEmbeddingBackward(const T* d_out, const int32_t* rows, const int32_t* starts,
                                    const int32_t* positions, int num_rows, int C, float* d_wte,
                                    cudaStream_t stream);

// d_wpe[s, c] += d_out[b * seq + s, c] for b = 0, 1, ..., batch - 1 in that order (the fp32
// gradient of wpe; its rows from seq on are not touched). INVALID_ARGUMENT for negative
// sizes or C <= 0.
template <typename T>
absl::Status PositionEmbeddingBackward(const T* d_out, int batch, int seq, int C, float* d_wpe,
                                       cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_EMBEDDING_H_
