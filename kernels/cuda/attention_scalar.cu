// The scalar attention kernels: float arithmetic whatever T, a thread per query row
// (forward, dQ) or key row (dK, dV) with keys and values (or queries and dO) staged through
// shared memory as floats. They follow the CPU closely (the fp32 tests hold them to 1e-5);
// fp32 always runs here, bf16 and fp16 at head dim 32 and with grouped-query heads
// (attention.cu chooses). Grouped-query attention: query head h reads key-value head
// h / (H / Hkv); the dK/dV kernel runs per key-value head and sums its group's query heads
// in order (no atomics, deterministic). kBidirectional (BERT, issue 35): query i of sequence
// b attends to every key j < lengths[b]; padded queries (i >= lengths[b]) write zero outputs
// and log-sum-exp and take no gradient, padded keys get no weight and no gradient
// (kernels/bidirectional_attention.h's semantics). The causal instantiations compile to the
// code they were before.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"

namespace mtrain::cuda::attention_internal {
namespace {

// Query (or key) rows per block: one thread each.
constexpr int kRows = 64;

// Key/value rows staged per shared-memory tile: 32 KiB of floats for two tiles.
template <int D>
__host__ __device__ constexpr int TileRows() {
  return 4096 / D;
}

// The block stages keys and values [start, start + kTile) of key-value head g in shared
// memory as floats (zeros past the sequence).
template <typename T, int D, int kTile>
__device__ __forceinline__ void LoadKeyValueTile(const T* qkv, int b, int g, int start, int S,
                                                 int H, int Hkv, float (*ks)[D], float (*vs)[D]) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int j = start + e / D, d = e % D;
    ks[e / D][d] = j < S ? ToFloat(qkv[QkvRow(b, j, 1, g, S, H, Hkv, D) + d]) : 0.0f;
    vs[e / D][d] = j < S ? ToFloat(qkv[QkvRow(b, j, 2, g, S, H, Hkv, D) + d]) : 0.0f;
  }
}

// The keys query i reads: j <= i (causal), or j < len (bidirectional: the sequence's real
// positions; the caller skips padded queries).
template <bool kBidirectional>
__device__ __forceinline__ int KeyEnd(int i, int len) {
  if constexpr (kBidirectional) {
    return len;
  } else {
    return i + 1;
  }
}

// grid (ceil(S / kRows), B * H), kRows threads: thread t owns query row blockIdx.x*kRows+t.
template <typename T, int D, bool kBidirectional>
__global__ void ForwardKernel(const T* qkv, const int32_t* lengths, T* out, float* lse, int S,
                              int H, int Hkv, DeviceDropout drop) {
  constexpr int kTile = TileRows<D>();
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const int b = blockIdx.y / H, h = blockIdx.y % H, g = h / (H / Hkv);
  const int i = blockIdx.x * kRows + threadIdx.x;
  const int len = kBidirectional ? lengths[b] : S;
  const bool active = i < S && i < len;
  const float scale = rsqrtf(float(D));
  float q[D], o[D];
  float m = -INFINITY, l = 0.0f;
  if (active) {
    const T* qr = qkv + QkvRow(b, i, 0, h, S, H, Hkv, D);
    for (int d = 0; d < D; ++d) {
      q[d] = ToFloat(qr[d]) * scale;
      o[d] = 0.0f;
    }
  }
  const int last_key = kBidirectional ? len - 1 : min(S - 1, int(blockIdx.x * kRows + kRows - 1));
  for (int start = 0; start <= last_key; start += kTile) {
    __syncthreads();
    LoadKeyValueTile<T, D, kTile>(qkv, b, g, start, S, H, Hkv, ks, vs);
    __syncthreads();
    if (!active) continue;
    const int end = min(kTile, KeyEnd<kBidirectional>(i, len) - start);
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
  if (i >= S) return;
  if (!active) {  // a padded query (bidirectional): zeros
    T* orow = out + OutRow(b, i, h, S, H, D);
    for (int d = 0; d < D; ++d) orow[d] = FromFloat<T>(0.0f);
    lse[(size_t(b) * H + h) * S + i] = 0.0f;
    return;
  }
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

// Thread per query row i: d_q_i = scale * sum_{j<=i} ds_ij k_j (bidirectional: j < len;
// a padded query's d_q is left as it is).
template <typename T, int D, bool kBidirectional>
__global__ void BackwardQueryKernel(const T* d_out, const T* qkv, const int32_t* lengths,
                                    const float* lse, const float* delta, T* d_qkv, int S, int H,
                                    int Hkv, DeviceDropout drop) {
  constexpr int kTile = TileRows<D>();
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const int b = blockIdx.y / H, h = blockIdx.y % H, g = h / (H / Hkv);
  const int i = blockIdx.x * kRows + threadIdx.x;
  const int len = kBidirectional ? lengths[b] : S;
  const bool active = i < S && i < len;
  const float scale = rsqrtf(float(D));
  float q[D], dout[D], dq[D];
  float row_lse = 0.0f, row_delta = 0.0f;
  if (active) {
    const T* qr = qkv + QkvRow(b, i, 0, h, S, H, Hkv, D);
    const T* dor = d_out + OutRow(b, i, h, S, H, D);
    for (int d = 0; d < D; ++d) {
      q[d] = ToFloat(qr[d]) * scale;
      dout[d] = ToFloat(dor[d]);
      dq[d] = 0.0f;
    }
    row_lse = lse[(size_t(b) * H + h) * S + i];
    row_delta = delta[(size_t(b) * H + h) * S + i];
  }
  const int last_key = kBidirectional ? len - 1 : min(S - 1, int(blockIdx.x * kRows + kRows - 1));
  for (int start = 0; start <= last_key; start += kTile) {
    __syncthreads();
    LoadKeyValueTile<T, D, kTile>(qkv, b, g, start, S, H, Hkv, ks, vs);
    __syncthreads();
    if (!active) continue;
    const int end = min(kTile, KeyEnd<kBidirectional>(i, len) - start);
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
  T* dqr = d_qkv + QkvRow(b, i, 0, h, S, H, Hkv, D);
  for (int d = 0; d < D; ++d) dqr[d] = FromFloat<T>(ToFloat(dqr[d]) + dq[d] * scale);
}

// Thread per key row j of key-value head g: d_k_j = scale * sum_h sum_{i>=j} ds_hij q_hi,
// d_v_j = sum_h sum_{i>=j} pk_hij do_hi, over the group's query heads h in order
// (bidirectional: over the real queries i < len, for the real keys j < len only).
template <typename T, int D, bool kBidirectional>
__global__ void BackwardKeyValueKernel(const T* d_out, const T* qkv, const int32_t* lengths,
                                       const float* lse, const float* delta, T* d_qkv, int S, int H,
                                       int Hkv, DeviceDropout drop) {
  constexpr int kTile = TileRows<D>();
  __shared__ float qs[kTile][D];
  __shared__ float dos[kTile][D];
  __shared__ float lses[kTile];
  __shared__ float deltas[kTile];
  const int b = blockIdx.y / Hkv, g = blockIdx.y % Hkv;
  const int group = H / Hkv;
  const int j = blockIdx.x * kRows + threadIdx.x;
  const int len = kBidirectional ? lengths[b] : S;
  const bool active = j < S && j < len;
  const float scale = rsqrtf(float(D));
  float k[D], v[D], dk[D], dv[D];
  if (active) {
    const T* kr = qkv + QkvRow(b, j, 1, g, S, H, Hkv, D);
    const T* vr = qkv + QkvRow(b, j, 2, g, S, H, Hkv, D);
    for (int d = 0; d < D; ++d) {
      k[d] = ToFloat(kr[d]);
      v[d] = ToFloat(vr[d]);
      dk[d] = 0.0f;
      dv[d] = 0.0f;
    }
  }
  // Causal: queries i >= j; bidirectional: every real query.
  const int first_query = kBidirectional ? 0 : int(blockIdx.x * kRows);
  const int first_tile = first_query / kTile * kTile;
  const int query_end = kBidirectional ? len : S;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int start = first_tile; start < query_end; start += kTile) {
      __syncthreads();
      for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
        const int i = start + e / D, d = e % D;
        qs[e / D][d] = i < S ? ToFloat(qkv[QkvRow(b, i, 0, h, S, H, Hkv, D) + d]) * scale : 0.0f;
        dos[e / D][d] = i < S ? ToFloat(d_out[OutRow(b, i, h, S, H, D) + d]) : 0.0f;
      }
      for (int t = threadIdx.x; t < kTile; t += blockDim.x) {
        const int i = start + t;
        lses[t] = i < S ? lse[(size_t(b) * H + h) * S + i] : 0.0f;
        deltas[t] = i < S ? delta[(size_t(b) * H + h) * S + i] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      for (int t = kBidirectional ? 0 : max(0, j - start); t < kTile && start + t < query_end;
           ++t) {
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
  }
  if (!active) return;
  T* dkr = d_qkv + QkvRow(b, j, 1, g, S, H, Hkv, D);
  T* dvr = d_qkv + QkvRow(b, j, 2, g, S, H, Hkv, D);
  for (int d = 0; d < D; ++d) {
    dkr[d] = FromFloat<T>(ToFloat(dkr[d]) + dk[d]);
    dvr[d] = FromFloat<T>(ToFloat(dvr[d]) + dv[d]);
  }
}

// `lengths` (device [B]) null: causal; else bidirectional over each sequence's length.
template <typename T, int D, bool kBidirectional>
absl::Status Forward(const T* qkv, const int32_t* lengths, T* out, float* lse,
                     const AttentionShape& s, const DeviceDropout& drop, cudaStream_t stream) {
  const dim3 grid((s.seq + kRows - 1) / kRows, s.batch * s.heads);
  return Launch(ForwardKernel<T, D, kBidirectional>, grid, kRows, 0, stream,
                "FlashAttentionForward", qkv, lengths, out, lse, s.seq, s.heads, s.kv_head_count(),
                drop);
}

template <typename T, int D, bool kBidirectional>
absl::Status Backward(const T* d_out, const T* qkv, const int32_t* lengths, const T* out,
                      const float* lse, T* d_qkv, const AttentionShape& s,
                      const DeviceDropout& drop, cudaStream_t stream) {
  const size_t rows = size_t(s.batch) * s.heads * s.seq;
  float* delta = nullptr;
  if (absl::Status st = CudaStatus(
          cudaMallocAsync(reinterpret_cast<void**>(&delta), rows * sizeof(float), stream),
          "FlashAttentionBackward scratch");
      !st.ok()) {
    return st;
  }
  absl::Status launched =
      Launch(DeltaKernel<T, D>, dim3(unsigned((rows + 255) / 256)), 256, 0, stream,
             "FlashAttentionBackward (delta)", d_out, out, delta, s.batch, s.seq, s.heads);
  const dim3 grid((s.seq + kRows - 1) / kRows, s.batch * s.heads);
  if (launched.ok()) {
    launched.Update(Launch(BackwardQueryKernel<T, D, kBidirectional>, grid, kRows, 0, stream,
                           "FlashAttentionBackward (queries)", d_out, qkv, lengths, lse, delta,
                           d_qkv, s.seq, s.heads, s.kv_head_count(), drop));
  }
  if (launched.ok()) {
    const dim3 kv_grid((s.seq + kRows - 1) / kRows, s.batch * s.kv_head_count());
    launched.Update(Launch(BackwardKeyValueKernel<T, D, kBidirectional>, kv_grid, kRows, 0, stream,
                           "FlashAttentionBackward (keys, values)", d_out, qkv, lengths, lse, delta,
                           d_qkv, s.seq, s.heads, s.kv_head_count(), drop));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(delta, stream), "FlashAttentionBackward scratch");
  return launched.ok() ? freed : launched;
}

// Head dim dispatch: `lengths` null runs the causal kernels, else the bidirectional ones.
template <typename T, bool kBidirectional>
absl::Status ForwardFor(const T* qkv, const int32_t* lengths, T* out, float* lse,
                        const AttentionShape& shape, const DeviceDropout& drop,
                        cudaStream_t stream) {
  switch (shape.head_dim) {
    case 32:
      return Forward<T, 32, kBidirectional>(qkv, lengths, out, lse, shape, drop, stream);
    case 64:
      return Forward<T, 64, kBidirectional>(qkv, lengths, out, lse, shape, drop, stream);
    default:
      return Forward<T, 128, kBidirectional>(qkv, lengths, out, lse, shape, drop, stream);
  }
}

template <typename T, bool kBidirectional>
absl::Status BackwardFor(const T* d_out, const T* qkv, const int32_t* lengths, const T* out,
                         const float* lse, T* d_qkv, const AttentionShape& shape,
                         const DeviceDropout& drop, cudaStream_t stream) {
  switch (shape.head_dim) {
    case 32:
      return Backward<T, 32, kBidirectional>(d_out, qkv, lengths, out, lse, d_qkv, shape, drop,
                                             stream);
    case 64:
      return Backward<T, 64, kBidirectional>(d_out, qkv, lengths, out, lse, d_qkv, shape, drop,
                                             stream);
    default:
      return Backward<T, 128, kBidirectional>(d_out, qkv, lengths, out, lse, d_qkv, shape, drop,
                                              stream);
  }
}

}  // namespace

template <typename T>
absl::Status ScalarAttentionForward(const T* qkv, T* out, float* lse, const AttentionShape& shape,
                                    const DeviceDropout& drop, cudaStream_t stream) {
  return ForwardFor<T, false>(qkv, nullptr, out, lse, shape, drop, stream);
}

template <typename T>
absl::Status ScalarAttentionBackward(const T* d_out, const T* qkv, const T* out, const float* lse,
                                     T* d_qkv, const AttentionShape& shape,
                                     const DeviceDropout& drop, cudaStream_t stream) {
  return BackwardFor<T, false>(d_out, qkv, nullptr, out, lse, d_qkv, shape, drop, stream);
}

template <typename T>
absl::Status ScalarBidirectionalForward(const T* qkv, const int32_t* lengths, T* out, float* lse,
                                        const AttentionShape& shape, const DeviceDropout& drop,
                                        cudaStream_t stream) {
  return ForwardFor<T, true>(qkv, lengths, out, lse, shape, drop, stream);
}

template <typename T>
absl::Status ScalarBidirectionalBackward(const T* d_out, const T* qkv, const int32_t* lengths,
                                         const T* out, const float* lse, T* d_qkv,
                                         const AttentionShape& shape, const DeviceDropout& drop,
                                         cudaStream_t stream) {
  return BackwardFor<T, true>(d_out, qkv, lengths, out, lse, d_qkv, shape, drop, stream);
}

#define MTRAIN_INSTANTIATE_SCALAR_ATTENTION(T)                                                     \
  template absl::Status ScalarAttentionForward<T>(const T*, T*, float*, const AttentionShape&,     \
                                                  const DeviceDropout&, cudaStream_t);             \
  template absl::Status ScalarAttentionBackward<T>(const T*, const T*, const T*, const float*, T*, \
                                                   const AttentionShape&, const DeviceDropout&,    \
                                                   cudaStream_t);                                  \
  template absl::Status ScalarBidirectionalForward<T>(const T*, const int32_t*, T*, float*,        \
                                                      const AttentionShape&, const DeviceDropout&, \
                                                      cudaStream_t);                               \
  template absl::Status ScalarBidirectionalBackward<T>(                                            \
      const T*, const T*, const int32_t*, const T*, const float*, T*, const AttentionShape&,       \
      const DeviceDropout&, cudaStream_t);
MTRAIN_INSTANTIATE_SCALAR_ATTENTION(float)
MTRAIN_INSTANTIATE_SCALAR_ATTENTION(__nv_bfloat16)
MTRAIN_INSTANTIATE_SCALAR_ATTENTION(__half)
#undef MTRAIN_INSTANTIATE_SCALAR_ATTENTION

}  // namespace mtrain::cuda::attention_internal
