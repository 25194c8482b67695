#include <algorithm>
#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/embedding.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

// Row of the shard holding `token`, or -1 when another rank's shard holds it. In 64 bits
// so that no token/vocab_start combination overflows (kernels/embedding.cc's LocalRow).
__host__ __device__ __forceinline__ int64_t LocalRow(int32_t token, int vocab_start,
                                                     int local_vocab) {
  const int64_t local = static_cast<int64_t>(token) - vocab_start;
  return (local >= 0 && local < local_vocab) ? local : -1;
}

// Thread per output element (consecutive threads, consecutive columns: coalesced rows).
template <typename T>
__global__ void ForwardKernel(const int32_t* tokens, const T* wte, const T* wpe, T* out, size_t n,
                              int seq, int C, int vocab_start, int local_vocab) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n * C;
       e += size_t(gridDim.x) * blockDim.x) {
    const size_t i = e / C, c = e % C;
    const int64_t local = LocalRow(tokens[i], vocab_start, local_vocab);
    // Other shards' tokens give 0 + wpe, not wpe: the CPU zero-fills then accumulates, and
    // 0 + -0 is +0.
    const float token_value = local >= 0 ? ToFloat(wte[size_t(local) * C + c]) : 0.0f;
    const float position_value = wpe != nullptr ? ToFloat(wpe[(i % seq) * C + c]) : 0.0f;
    out[e] = FromFloat<T>(token_value + position_value);
  }
}

// Thread per (plan row, column): the row's positions are added one at a time in ascending
// token order, the CPU's order, so nothing depends on scheduling.
template <typename T>
__global__ void TokenBackwardKernel(const T* d_out, const int32_t* rows, const int32_t* starts,
                                    const int32_t* positions, int num_rows, int C, float* d_wte) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < size_t(num_rows) * C;
       e += size_t(gridDim.x) * blockDim.x) {
    const size_t r = e / C, c = e % C;
    float* target = d_wte + size_t(rows[r]) * C + c;
    float acc = *target;
    for (int32_t k = starts[r]; k < starts[r + 1]; ++k) {
      acc += ToFloat(d_out[size_t(positions[k]) * C + c]);
    }
    *target = acc;
  }
}

// Thread per (position, column), summing over the batch in order.
template <typename T>
__global__ void PositionBackwardKernel(const T* d_out, int batch, int seq, int C, float* d_wpe) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < size_t(seq) * C;
       e += size_t(gridDim.x) * blockDim.x) {
    float acc = d_wpe[e];
    for (int b = 0; b < batch; ++b) acc += ToFloat(d_out[size_t(b) * seq * C + e]);
    d_wpe[e] = acc;
  }
}

}  // namespace

template <typename T>
absl::Status TokenPositionEmbeddingForward(const int32_t* tokens, const T* wte, const T* wpe,
                                           T* out, int batch, int seq, int C, int vocab_start,
                                           int local_vocab, cudaStream_t stream) {
  if (batch < 0 || seq < 0 || C <= 0 || vocab_start < 0 || local_vocab < 0) {
    return absl::InvalidArgumentError(
        "TokenPositionEmbeddingForward: need batch, seq, vocab_start, local_vocab >= 0 and "
        "C > 0");
  }
  const size_t n = size_t(batch) * seq;
  if (n == 0) return absl::OkStatus();
  ForwardKernel<T><<<GridFor(n * C, kThreads), kThreads, 0, stream>>>(tokens, wte, wpe, out, n, seq,
                                                                      C, vocab_start, local_vocab);
  return LastLaunchStatus("TokenPositionEmbeddingForward");
}

EmbeddingGradPlan PlanEmbeddingGrad(const int32_t* host_tokens, int n, int vocab_start,
                                    int local_vocab) {
  // (row, token index) pairs: sorting them orders rows ascending and, within a row, token
  // indices ascending, which is the CPU's accumulation order.
  std::vector<std::pair<int32_t, int32_t>> used;
  used.reserve(std::max(n, 0));
  for (int i = 0; i < n; ++i) {
    const int64_t local = LocalRow(host_tokens[i], vocab_start, local_vocab);
    if (local >= 0) used.emplace_back(static_cast<int32_t>(local), i);
  }
  std::sort(used.begin(), used.end());
  EmbeddingGradPlan plan;
  plan.positions.reserve(used.size());
  for (size_t k = 0; k < used.size(); ++k) {
    if (k == 0 || used[k].first != used[k - 1].first) {
      plan.rows.push_back(used[k].first);
      plan.starts.push_back(static_cast<int32_t>(k));
    }
    plan.positions.push_back(used[k].second);
  }
  plan.starts.push_back(static_cast<int32_t>(used.size()));
  return plan;
}

template <typename T>
absl::Status TokenEmbeddingBackward(const T* d_out, const int32_t* rows, const int32_t* starts,
                                    const int32_t* positions, int num_rows, int C, float* d_wte,
                                    cudaStream_t stream) {
  if (num_rows < 0 || C <= 0) {
    return absl::InvalidArgumentError("TokenEmbeddingBackward: need num_rows >= 0 and C > 0");
  }
  if (num_rows == 0) return absl::OkStatus();
  const size_t n = size_t(num_rows) * C;
  TokenBackwardKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(
      d_out, rows, starts, positions, num_rows, C, d_wte);
  return LastLaunchStatus("TokenEmbeddingBackward");
}

template <typename T>
absl::Status PositionEmbeddingBackward(const T* d_out, int batch, int seq, int C, float* d_wpe,
                                       cudaStream_t stream) {
  if (batch < 0 || seq < 0 || C <= 0) {
    return absl::InvalidArgumentError("PositionEmbeddingBackward: need batch, seq >= 0 and C > 0");
  }
  if (batch == 0 || seq == 0) return absl::OkStatus();
  const size_t n = size_t(seq) * C;
  PositionBackwardKernel<T>
      <<<GridFor(n, kThreads), kThreads, 0, stream>>>(d_out, batch, seq, C, d_wpe);
  return LastLaunchStatus("PositionEmbeddingBackward");
}

template absl::Status TokenPositionEmbeddingForward<float>(const int32_t*, const float*,
                                                           const float*, float*, int, int, int, int,
                                                           int, cudaStream_t);
template absl::Status TokenPositionEmbeddingForward<__nv_bfloat16>(const int32_t*,
                                                                   const __nv_bfloat16*,
                                                                   const __nv_bfloat16*,
                                                                   __nv_bfloat16*, int, int, int,
                                                                   int, int, cudaStream_t);
template absl::Status TokenPositionEmbeddingForward<__half>(const int32_t*, const __half*,
                                                            const __half*, __half*, int, int, int,
                                                            int, int, cudaStream_t);
template absl::Status TokenEmbeddingBackward<float>(const float*, const int32_t*, const int32_t*,
                                                    const int32_t*, int, int, float*, cudaStream_t);
template absl::Status TokenEmbeddingBackward<__nv_bfloat16>(const __nv_bfloat16*, const int32_t*,
                                                            const int32_t*, const int32_t*, int,
                                                            int, float*, cudaStream_t);
template absl::Status TokenEmbeddingBackward<__half>(const __half*, const int32_t*, const int32_t*,
                                                     const int32_t*, int, int, float*,
                                                     cudaStream_t);
template absl::Status PositionEmbeddingBackward<float>(const float*, int, int, int, float*,
                                                       cudaStream_t);
template absl::Status PositionEmbeddingBackward<__nv_bfloat16>(const __nv_bfloat16*, int, int, int,
                                                               float*, cudaStream_t);
template absl::Status PositionEmbeddingBackward<__half>(const __half*, int, int, int, float*,
                                                        cudaStream_t);

}  // namespace mtrain::cuda
