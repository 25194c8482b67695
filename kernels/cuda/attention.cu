#include <cmath>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/dropout_mask.cuh"

namespace mtrain::cuda {
namespace {

// Query (or key) rows per block: one thread each.
constexpr int kRows = 64;

// kernels/dropout.cc's mask (dropout_mask.cuh) over the probabilities, at their global
// index in [B, total_heads, S, S].
struct DeviceDropout {
  uint64_t key = 0;
  uint32_t threshold = 0;  // 0: no dropout
  float scale = 1.0f;      // 1 / (1 - p)
  int head_offset = 0;
  int total_heads = 0;

  // The factor element (b, h, i, j) of the probabilities is multiplied by: 0 or 1/(1-p).
  __device__ __forceinline__ float Factor(int b, int h, int i, int j, int S) const {
    if (threshold == 0) return 1.0f;
    const uint64_t index =
        ((uint64_t(b) * total_heads + head_offset + h) * uint64_t(S) + i) * uint64_t(S) + j;
    return DropoutKeep(key, index, threshold) ? scale : 0.0f;
  }
};

DeviceDropout MakeDropout(const AttentionDropout& d, const AttentionShape& shape) {
  DeviceDropout out;
  if (d.p > 0) {
    out.key = d.key;
    out.threshold = DropoutThreshold(d.p);
    out.scale = 1.0f / (1.0f - d.p);
  }
  out.head_offset = d.head_offset;
  out.total_heads = d.total_heads > 0 ? d.total_heads : shape.heads;
  return out;
}

// Element offsets into qkv[B, S, 3, H, D] and out[B, S, H, D].
__device__ __forceinline__ size_t QkvRow(int b, int i, int part, int h, int S, int H, int D) {
  return ((size_t(b) * S + i) * 3 + part) * size_t(H) * D + size_t(h) * D;
}
__device__ __forceinline__ size_t OutRow(int b, int i, int h, int S, int H, int D) {
  return (size_t(b) * S + i) * size_t(H) * D + size_t(h) * D;
}

// Key/value rows staged per shared-memory tile: 32 KiB of floats for two tiles.
template <int D>
__host__ __device__ constexpr int TileRows() {
  return 4096 / D;
}

// The block stages keys and values [start, start + kTile) of head h in shared memory as
// floats (zeros past the sequence).
template <typename T, int D, int kTile>
__device__ __forceinline__ void LoadKeyValueTile(const T* qkv, int b, int h, int start, int S,
                                                 int H, float (*ks)[D], float (*vs)[D]) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int j = start + e / D, d = e % D;
    ks[e / D][d] = j < S ? ToFloat(qkv[QkvRow(b, j, 1, h, S, H, D) + d]) : 0.0f;
    vs[e / D][d] = j < S ? ToFloat(qkv[QkvRow(b, j, 2, h, S, H, D) + d]) : 0.0f;
  }
}

// grid (ceil(S / kRows), B * H), kRows threads: thread t owns query row blockIdx.x*kRows+t.
template <typename T, int D>
__global__ void ForwardKernel(const T* qkv, T* out, float* lse, int S, int H, DeviceDropout drop) {
  constexpr int kTile = TileRows<D>();
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int i = blockIdx.x * kRows + threadIdx.x;
  const bool active = i < S;
  const float scale = rsqrtf(float(D));
  float q[D], o[D];
  float m = -INFINITY, l = 0.0f;
  if (active) {
    const T* qr = qkv + QkvRow(b, i, 0, h, S, H, D);
    for (int d = 0; d < D; ++d) {
      q[d] = ToFloat(qr[d]) * scale;
      o[d] = 0.0f;
    }
  }
  const int last_key = min(S - 1, int(blockIdx.x * kRows + kRows - 1));
  for (int start = 0; start <= last_key; start += kTile) {
    __syncthreads();
    LoadKeyValueTile<T, D, kTile>(qkv, b, h, start, S, H, ks, vs);
    __syncthreads();
    if (!active) continue;
    const int end = min(kTile, i - start + 1);  // causal: keys j <= i
    for (int t = 0; t < end; ++t) {
      float s = 0.0f;
      for (int d = 0; d < D; ++d) s += q[d] * ks[t][d];
      const float m_new = fmaxf(m, s);
      const float correction = expf(m - m_new);
      const float p = expf(s - m_new);
      l = l * correction + p;
      const float p_kept = p * drop.Factor(b, h, i, start + t, S);
      for (int d = 0; d < D; ++d) o[d] = o[d] * correction + p_kept * vs[t][d];
      m = m_new;
    }
  }
  if (!active) return;
  T* orow = out + OutRow(b, i, h, S, H, D);
  const float inv_l = 1.0f / l;
  for (int d = 0; d < D; ++d) orow[d] = FromFloat<T>(o[d] * inv_l);
  lse[(size_t(b) * H + h) * S + i] = m + logf(l);
}

// delta[b, h, i] = sum_d d_out * out (= sum_j dropped-probabilities * their gradient).
template <typename T, int D>
__global__ void DeltaKernel(const T* d_out, const T* out, float* delta, int B, int S, int H) {
  const size_t row = blockIdx.x * size_t(blockDim.x) + threadIdx.x;  // over B*H*S
  if (row >= size_t(B) * H * S) return;
  const int i = row % S, h = (row / S) % H, b = row / (size_t(S) * H);
  const size_t at = OutRow(b, i, h, S, H, D);
  float sum = 0.0f;
  for (int d = 0; d < D; ++d) sum += ToFloat(d_out[at + d]) * ToFloat(out[at + d]);
  delta[row] = sum;
}

// Thread per query row i: d_q_i = scale * sum_{j<=i} ds_ij k_j.
template <typename T, int D>
__global__ void BackwardQueryKernel(const T* d_out, const T* qkv, const float* lse,
                                    const float* delta, T* d_qkv, int S, int H,
                                    DeviceDropout drop) {
  constexpr int kTile = TileRows<D>();
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int i = blockIdx.x * kRows + threadIdx.x;
  const bool active = i < S;
  const float scale = rsqrtf(float(D));
  float q[D], dout[D], dq[D];
  float row_lse = 0.0f, row_delta = 0.0f;
  if (active) {
    const T* qr = qkv + QkvRow(b, i, 0, h, S, H, D);
    const T* dor = d_out + OutRow(b, i, h, S, H, D);
    for (int d = 0; d < D; ++d) {
      q[d] = ToFloat(qr[d]) * scale;
      dout[d] = ToFloat(dor[d]);
      dq[d] = 0.0f;
    }
    row_lse = lse[(size_t(b) * H + h) * S + i];
    row_delta = delta[(size_t(b) * H + h) * S + i];
  }
  const int last_key = min(S - 1, int(blockIdx.x * kRows + kRows - 1));
  for (int start = 0; start <= last_key; start += kTile) {
    __syncthreads();
    LoadKeyValueTile<T, D, kTile>(qkv, b, h, start, S, H, ks, vs);
    __syncthreads();
    if (!active) continue;
    const int end = min(kTile, i - start + 1);
    for (int t = 0; t < end; ++t) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += q[d] * ks[t][d];
        dp += dout[d] * vs[t][d];
      }
      const float p = expf(s - row_lse);
      const float ds = p * (dp * drop.Factor(b, h, i, start + t, S) - row_delta);
      for (int d = 0; d < D; ++d) dq[d] += ds * ks[t][d];
    }
  }
  if (!active) return;
  T* dqr = d_qkv + QkvRow(b, i, 0, h, S, H, D);
  for (int d = 0; d < D; ++d) dqr[d] = FromFloat<T>(ToFloat(dqr[d]) + dq[d] * scale);
}

// Thread per key row j: d_k_j = scale * sum_{i>=j} ds_ij q_i, d_v_j = sum_{i>=j} pk_ij do_i.
template <typename T, int D>
__global__ void BackwardKeyValueKernel(const T* d_out, const T* qkv, const float* lse,
                                       const float* delta, T* d_qkv, int S, int H,
                                       DeviceDropout drop) {
  constexpr int kTile = TileRows<D>();
  __shared__ float qs[kTile][D];
  __shared__ float dos[kTile][D];
  __shared__ float lses[kTile];
  __shared__ float deltas[kTile];
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int j = blockIdx.x * kRows + threadIdx.x;
  const bool active = j < S;
  const float scale = rsqrtf(float(D));
  float k[D], v[D], dk[D], dv[D];
  if (active) {
    const T* kr = qkv + QkvRow(b, j, 1, h, S, H, D);
    const T* vr = qkv + QkvRow(b, j, 2, h, S, H, D);
    for (int d = 0; d < D; ++d) {
      k[d] = ToFloat(kr[d]);
      v[d] = ToFloat(vr[d]);
      dk[d] = 0.0f;
      dv[d] = 0.0f;
    }
  }
  const int first_query = blockIdx.x * kRows;  // causal: queries i >= j
  const int first_tile = first_query / kTile * kTile;
  for (int start = first_tile; start < S; start += kTile) {
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int i = start + e / D, d = e % D;
      qs[e / D][d] = i < S ? ToFloat(qkv[QkvRow(b, i, 0, h, S, H, D) + d]) * scale : 0.0f;
      dos[e / D][d] = i < S ? ToFloat(d_out[OutRow(b, i, h, S, H, D) + d]) : 0.0f;
    }
    for (int t = threadIdx.x; t < kTile; t += blockDim.x) {
      const int i = start + t;
      lses[t] = i < S ? lse[(size_t(b) * H + h) * S + i] : 0.0f;
      deltas[t] = i < S ? delta[(size_t(b) * H + h) * S + i] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    for (int t = max(0, j - start); t < kTile && start + t < S; ++t) {
      const int i = start + t;
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        s += qs[t][d] * k[d];
        dp += dos[t][d] * v[d];
      }
      const float p = expf(s - lses[t]);
      const float factor = drop.Factor(b, h, i, j, S);
      const float ds = p * (dp * factor - deltas[t]);
      const float p_kept = p * factor;
      for (int d = 0; d < D; ++d) {
        dv[d] += p_kept * dos[t][d];
        dk[d] += ds * qs[t][d];  // qs already carries the 1/sqrt(D)
      }
    }
  }
  if (!active) return;
  T* dkr = d_qkv + QkvRow(b, j, 1, h, S, H, D);
  T* dvr = d_qkv + QkvRow(b, j, 2, h, S, H, D);
  for (int d = 0; d < D; ++d) {
    dkr[d] = FromFloat<T>(ToFloat(dkr[d]) + dk[d]);
    dvr[d] = FromFloat<T>(ToFloat(dvr[d]) + dv[d]);
  }
}

absl::Status CheckShape(const AttentionShape& s) {
  if (s.batch < 0 || s.seq < 0 || s.heads <= 0) {
    return absl::InvalidArgumentError("FlashAttention: need batch, seq >= 0 and heads > 0");
  }
  if (s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 128) {
    return absl::InvalidArgumentError("FlashAttention: head_dim " + std::to_string(s.head_dim) +
                                      " is not supported [rule: 32, 64 or 128]");
  }
  return absl::OkStatus();
}

template <typename T, int D>
absl::Status Forward(const T* qkv, T* out, float* lse, const AttentionShape& s,
                     const DeviceDropout& drop, cudaStream_t stream) {
  const dim3 grid((s.seq + kRows - 1) / kRows, s.batch * s.heads);
  ForwardKernel<T, D><<<grid, kRows, 0, stream>>>(qkv, out, lse, s.seq, s.heads, drop);
  return LastLaunchStatus("FlashAttentionForward");
}

template <typename T, int D>
absl::Status Backward(const T* d_out, const T* qkv, const T* out, const float* lse, T* d_qkv,
                      const AttentionShape& s, const DeviceDropout& drop, cudaStream_t stream) {
  const size_t rows = size_t(s.batch) * s.heads * s.seq;
  float* delta = nullptr;
  if (absl::Status st = CudaStatus(
          cudaMallocAsync(reinterpret_cast<void**>(&delta), rows * sizeof(float), stream),
          "FlashAttentionBackward scratch");
      !st.ok()) {
    return st;
  }
  DeltaKernel<T, D>
      <<<(rows + 255) / 256, 256, 0, stream>>>(d_out, out, delta, s.batch, s.seq, s.heads);
  absl::Status launched = LastLaunchStatus("FlashAttentionBackward (delta)");
  const dim3 grid((s.seq + kRows - 1) / kRows, s.batch * s.heads);
  if (launched.ok()) {
    BackwardQueryKernel<T, D>
        <<<grid, kRows, 0, stream>>>(d_out, qkv, lse, delta, d_qkv, s.seq, s.heads, drop);
    launched.Update(LastLaunchStatus("FlashAttentionBackward (queries)"));
  }
  if (launched.ok()) {
    BackwardKeyValueKernel<T, D>
        <<<grid, kRows, 0, stream>>>(d_out, qkv, lse, delta, d_qkv, s.seq, s.heads, drop);
    launched.Update(LastLaunchStatus("FlashAttentionBackward (keys, values)"));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(delta, stream), "FlashAttentionBackward scratch");
  return launched.ok() ? freed : launched;
}

}  // namespace

template <typename T>
absl::Status FlashAttentionForward(const T* qkv, T* out, float* lse, const AttentionShape& shape,
                                   const AttentionDropout& dropout, cudaStream_t stream) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  const DeviceDropout drop = MakeDropout(dropout, shape);
  switch (shape.head_dim) {
    case 32:
      return Forward<T, 32>(qkv, out, lse, shape, drop, stream);
    case 64:
      return Forward<T, 64>(qkv, out, lse, shape, drop, stream);
    default:
      return Forward<T, 128>(qkv, out, lse, shape, drop, stream);
  }
}

template <typename T>
absl::Status FlashAttentionBackward(const T* d_out, const T* qkv, const T* out, const float* lse,
                                    T* d_qkv, const AttentionShape& shape,
                                    const AttentionDropout& dropout, cudaStream_t stream) {
  if (absl::Status s = CheckShape(shape); !s.ok()) return s;
  if (shape.batch == 0 || shape.seq == 0) return absl::OkStatus();
  const DeviceDropout drop = MakeDropout(dropout, shape);
  switch (shape.head_dim) {
    case 32:
      return Backward<T, 32>(d_out, qkv, out, lse, d_qkv, shape, drop, stream);
    case 64:
      return Backward<T, 64>(d_out, qkv, out, lse, d_qkv, shape, drop, stream);
    default:
      return Backward<T, 128>(d_out, qkv, out, lse, d_qkv, shape, drop, stream);
  }
}

template absl::Status FlashAttentionForward<float>(const float*, float*, float*,
                                                   const AttentionShape&, const AttentionDropout&,
                                                   cudaStream_t);
template absl::Status FlashAttentionForward<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*,
                                                           float*, const AttentionShape&,
                                                           const AttentionDropout&, cudaStream_t);
template absl::Status FlashAttentionBackward<float>(const float*, const float*, const float*,
                                                    const float*, float*, const AttentionShape&,
                                                    const AttentionDropout&, cudaStream_t);
template absl::Status FlashAttentionBackward<__nv_bfloat16>(const __nv_bfloat16*,
                                                            const __nv_bfloat16*,
                                                            const __nv_bfloat16*, const float*,
                                                            __nv_bfloat16*, const AttentionShape&,
                                                            const AttentionDropout&, cudaStream_t);

}  // namespace mtrain::cuda
