// The tensor-core attention kernels (FlashAttention-2 style) for bf16 and fp16 at head dims
// 64 and 128; the section below the primitives says how they work.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"

namespace mtrain::cuda::attention_internal {
namespace {

// ---------------------------------------------------------------------------------------------
// Hardware primitives: inline PTX (sm_80+ instructions, built for sm_90). Everything else in
// this file is plain CUDA C++.

// Shared memory of the tensor-core kernels (sized at launch; 16-byte aligned).
__device__ __forceinline__ unsigned char* DynamicSmem() {
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  return dynamic_smem;
}

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Asynchronous global -> shared copies of 16 (or 4) bytes; with !valid nothing is read and
// the destination is zero-filled (cp.async's src-size 0).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(smem)),
               "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SharedAddress(smem)),
               "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 bf16 matrices from shared memory: lanes 8m..8m+7 give the addresses of the rows
// of matrix m; r[m] of lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of matrix m (low
// half first). The .trans form delivers the transposed matrices.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(smem_row)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(smem_row)));
}

// d += A B for a warp: A 16x16 (row-major fragment a), B 16x8 (column fragment b0, b1),
// both bf16 or both fp16 (T), d 16x8 fp32. With g = lane/4 and c = 2(lane%4):
// a[0] = A[g][c, c+1], a[1] = A[g+8][c, c+1], a[2] = A[g][c+8, c+9], a[3] = A[g+8][c+8, c+9];
// b0 = B[c, c+1][g], b1 = B[c+8, c+9][g]; d[0..1] = D[g][c, c+1], d[2..3] = D[g+8][c, c+1].
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "tensor-core attention: bf16 or fp16");
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core path: T = __nv_bfloat16 or __half, head dims 64 and 128 (FlashAttention-2
// style).
//
// Warp-level mma.sync m16n8k16 (bf16 or fp16 in, fp32 accumulate) on tiles staged in shared memory
// by cp.async (double-buffered), with ldmatrix feeding the operands. A warp owns 16 rows
// (an m-tile) of every product; the score accumulators of one product are reused in
// registers as the 16-bit A operand of the next (the mma's C and A fragments match), so the
// scores never leave registers. 128 threads per block.
//   Forward: a block per 64 or 128 queries, streaming 64-key tiles up to the diagonal with
//     online softmax in fp32 (log2 domain), dropout on the probabilities, P (T) V.
//   Backward: delta_i = dO_i . O_i (warp per row), then two kernels that each own their
//     outputs, so no atomics are needed and every sum has a fixed order (deterministic):
//     - per 64-key block, over the query tiles at and below the diagonal: recompute
//       P^T = exp(K Q^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T mask - delta); accumulate
//       dV = (P mask)^T dO and dK = dS^T Q in registers;
//     - per 64-query block, over the key tiles up to the diagonal: recompute P and dP the
//       same way and accumulate dQ = dS K.
// Dropout uses DeviceDropout::Factor at (b, h, query, key): the scalar kernels' and the
// CPU's global index, so all paths drop the same elements.

// The 16-bit element types' pairs (two elements in one 32-bit register, low half first).
template <typename T>
struct Pair16;
template <>
struct Pair16<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  static __device__ __forceinline__ Type FromFloats(float lo, float hi) {
    return __floats2bfloat162_rn(lo, hi);
  }
};
template <>
struct Pair16<__half> {
  using Type = __half2;
  static __device__ __forceinline__ Type FromFloats(float lo, float hi) {
    return __floats2half2_rn(lo, hi);
  }
};

constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Tile shapes per head dim. Shared-memory rows hold D 16-bit elements plus 8 of padding (16 bytes),
// so that the eight rows of an ldmatrix phase start in different bank groups (no conflicts) and
// every row stays 16-byte aligned for cp.async.
template <int D>
struct TcConfig {
  static_assert(D == 64 || D == 128, "tensor-core attention: head dim 64 or 128");
  static constexpr int kStride = D + 8;
  // Forward: m-tiles per warp (two at D = 64 halve the shared-memory traffic per mma;
  // at D = 128 the registers allow one), queries and keys per tile.
  static constexpr int kFwdMt = D == 64 ? 2 : 1;
  static constexpr int kFwdRows = 16 * kTcWarps * kFwdMt;
  static constexpr int kFwdKeys = 64;
  static constexpr size_t kFwdSmem = size_t(kFwdRows + 4 * kFwdKeys) * kStride * sizeof(uint16_t);
  // Backward dK/dV: 64 keys per block (16 per warp), query tiles of kKvQueries.
  static constexpr int kKvKeys = 16 * kTcWarps;
  static constexpr int kKvQueries = D == 64 ? 64 : 32;
  static constexpr size_t kKvSmem =
      size_t(2 * kKvKeys + 4 * kKvQueries) * kStride * sizeof(uint16_t) +
      4 * kKvQueries * sizeof(float);
  // Backward dQ: 64 queries per block (16 per warp), key tiles of kDqKeys.
  static constexpr int kDqRows = 16 * kTcWarps;
  static constexpr int kDqKeys = D == 64 ? 64 : 32;
  static constexpr size_t kDqSmem = size_t(2 * kDqRows + 4 * kDqKeys) * kStride * sizeof(uint16_t);
};

// Two floats as a T pair (lo in the low half, as the mma fragments want it).
template <typename T>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  const typename Pair16<T>::Type v = Pair16<T>::FromFloats(lo, hi);
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// The four score-accumulator tiles t = 2c, 2c+1 (16 columns) as the A fragment of the next
// product, whose k runs over those columns.
template <typename T, int kNt>
__device__ __forceinline__ void AccumulatorToA(const float (&acc)[kNt][4], int c,
                                               uint32_t (&a)[4]) {
  a[0] = Pack<T>(acc[2 * c][0], acc[2 * c][1]);
  a[1] = Pack<T>(acc[2 * c][2], acc[2 * c][3]);
  a[2] = Pack<T>(acc[2 * c + 1][0], acc[2 * c + 1][1]);
  a[3] = Pack<T>(acc[2 * c + 1][2], acc[2 * c + 1][3]);
}

// Fragment loads from a shared tile [rows][kStride] (lane = threadIdx.x % 32):
// A operand of rows [row0, row0 + 16) x columns [k0, k0 + 16) of a row-major matrix.
template <int kStride, typename T>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], const T* tile, int row0, int k0, int lane) {
  LdMatrixX4(a, tile + (row0 + lane % 16) * kStride + k0 + (lane / 16) * 8);
}
// B operands of two n-tiles when the tile holds B transposed (tile[n][k], e.g. K for Q K^T):
// b[0], b[1] for n in [n0, n0 + 8), b[2], b[3] for n in [n0 + 8, n0 + 16); k in [k0, k0 + 16).
template <int kStride, typename T>
__device__ __forceinline__ void LoadBFromNk(uint32_t (&b)[4], const T* tile, int n0, int k0,
                                            int lane) {
  LdMatrixX4(b, tile + (n0 + lane % 8 + (lane / 16) * 8) * kStride + k0 + ((lane / 8) % 2) * 8);
}
// The same when the tile holds B itself (tile[k][n], e.g. V for P V).
template <int kStride, typename T>
__device__ __forceinline__ void LoadBFromKn(uint32_t (&b)[4], const T* tile, int k0, int n0,
                                            int lane) {
  LdMatrixX4Trans(b, tile + (k0 + lane % 16) * kStride + n0 + (lane / 16) * 8);
}

// Starts copying rows [row0, row0 + kRows) (D elements each; row r at base + r * row_stride)
// into tile[kRows][D + 8]; rows at or past S become zeros.
template <int D, int kRows, typename T>
__device__ __forceinline__ void LoadRowsAsync(T* tile, const T* base, size_t row_stride, int row0,
                                              int S) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  static_assert(kRows * kChunks % kTcThreads == 0, "whole passes");
#pragma unroll
  for (int pass = 0; pass < kRows * kChunks / kTcThreads; ++pass) {
    const int e = pass * kTcThreads + threadIdx.x;
    const int r = e / kChunks, col = (e % kChunks) * 8;
    const bool valid = row0 + r < S;
    CpAsync16(tile + r * (D + 8) + col, base + size_t(valid ? row0 + r : 0) * row_stride + col,
              valid);
  }
}

// Starts copying floats [row0, row0 + n) of `src` into dst (zeros at or past S).
__device__ __forceinline__ void LoadFloatsAsync(float* dst, const float* src, int row0, int n,
                                                int S) {
  for (int r = threadIdx.x; r < n; r += kTcThreads) {
    const bool valid = row0 + r < S;
    CpAsync4(dst + r, src + (valid ? row0 + r : 0), valid);
  }
}

// How many of the 16-key chunks of a key tile starting at k0 hold a key <= last_row (the
// rest are masked for every row up to last_row).
template <int kKeys>
__device__ __forceinline__ int LiveChunks(int last_row, int k0) {
  return last_row < k0 ? 0 : min(kKeys / 16, (last_row - k0) / 16 + 1);
}

// grid (ceil(S / kFwdRows), B * H), kTcThreads threads, TcConfig<D>::kFwdSmem bytes.
// Warp w's m-tile t holds rows q0 + 64 t + 16 w + [0, 16): every warp gets a like share of
// the diagonal, where masked chunks are skipped.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    TcForwardKernel(const T* __restrict__ qkv, T* __restrict__ out, float* __restrict__ lse, int S,
                    int H, DeviceDropout drop) {
  using C = TcConfig<D>;
  constexpr int kMt = C::kFwdMt, kBr = C::kFwdRows, kBc = C::kFwdKeys, kStride = C::kStride;
  constexpr int kKSteps = D / 16;  // the mma's k over the head dim
  constexpr int kNt = kBc / 8;     // 8-key n-tiles of the scores
  constexpr int kDt = D / 8;       // 8-column n-tiles of the output
  T* qs = reinterpret_cast<T*>(DynamicSmem());
  T* ks = qs + kBr * kStride;      // two buffers of [kBc][kStride]
  T* vs = ks + 2 * kBc * kStride;  // two buffers of [kBc][kStride]

  const int qb = gridDim.x - 1 - blockIdx.x;  // the longest rows start first
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int q0 = qb * kBr;
  const size_t stride = size_t(3) * H * D;
  const T* q_base = qkv + QkvRow(b, 0, 0, h, S, H, D);
  const T* k_base = q_base + size_t(H) * D;
  const T* v_base = k_base + size_t(H) * D;
  const float scale_log2 = rsqrtf(float(D)) * kLog2e;
  const int n_tiles = min(S - 1, q0 + kBr - 1) / kBc + 1;

  LoadRowsAsync<D, kBr>(qs, q_base, stride, q0, S);
  LoadRowsAsync<D, kBc>(ks, k_base, stride, 0, S);
  LoadRowsAsync<D, kBc>(vs, v_base, stride, 0, S);
  CpAsyncCommit();

  int row0[kMt];  // first row of each m-tile (rows row0 + g and row0 + g + 8 are this lane's)
  uint32_t qf[kMt][kKSteps][4];
  float o[kMt][kDt][4];
  float m[kMt][2], l[kMt][2];  // running max (log2 domain) and this lane's share of the sum
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
    row0[mt] = q0 + 64 * mt + 16 * warp;
#pragma unroll
    for (int t = 0; t < kDt; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][t][e] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[mt][r] = -INFINITY;
      l[mt][r] = 0.0f;
    }
  }

  for (int n = 0; n < n_tiles; ++n) {
    const int buf = n & 1;
    if (n + 1 < n_tiles) {
      LoadRowsAsync<D, kBc>(ks + (buf ^ 1) * kBc * kStride, k_base, stride, (n + 1) * kBc, S);
      LoadRowsAsync<D, kBc>(vs + (buf ^ 1) * kBc * kStride, v_base, stride, (n + 1) * kBc, S);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if (n == 0) {
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          LoadA<kStride>(qf[mt][kk], qs, row0[mt] - q0, kk * 16, lane);
        }
      }
    }
    const T* kt = ks + buf * kBc * kStride;
    const T* vt = vs + buf * kBc * kStride;
    const int k0 = n * kBc;
    int chunks[kMt];
    int max_chunks = 0;
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      chunks[mt] = LiveChunks<kBc>(row0[mt] + 15, k0);
      max_chunks = max(max_chunks, chunks[mt]);
    }

    // Scores S = Q K^T of the live chunks.
    float s[kMt][kNt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][t][e] = 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int c = 0; c < kBc / 16; ++c) {
        if (c < max_chunks) {
          uint32_t kb[4];
          LoadBFromNk<kStride>(kb, kt, c * 16, kk * 16, lane);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            if (c < chunks[mt]) {
              Mma<T>(s[mt][2 * c], qf[mt][kk], kb[0], kb[1]);
              Mma<T>(s[mt][2 * c + 1], qf[mt][kk], kb[2], kb[3]);
            }
          }
        }
      }
    }

    // Online softmax per m-tile (rows g and g + 8 of it; a row's 4 lanes hold its columns).
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      if (chunks[mt] == 0) continue;
      const bool need_mask = k0 + kBc - 1 > row0[mt];
      float mx[2] = {m[mt][0], m[mt][1]};
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = k0 + 8 * t + 2 * tig + (e & 1);
          const int row = row0[mt] + g + 8 * (e / 2);
          float x = s[mt][t][e] * scale_log2;
          if (need_mask && col > row) x = -INFINITY;
          s[mt][t][e] = x;
          mx[e / 2] = fmaxf(mx[e / 2], x);
        }
      }
      float base[2], corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row with nothing visible yet
        corr[r] = exp2f(m[mt][r] - base[r]);
        m[mt][r] = mx[r];
      }
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = exp2f(s[mt][t][e] - base[e / 2]);
          sum[e / 2] += p;
          s[mt][t][e] = p;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) l[mt][r] = l[mt][r] * corr[r] + sum[r];
#pragma unroll
      for (int t = 0; t < kDt; ++t) {
        o[mt][t][0] *= corr[0];
        o[mt][t][1] *= corr[0];
        o[mt][t][2] *= corr[1];
        o[mt][t][3] *= corr[1];
      }
      if (drop.threshold != 0) {
#pragma unroll
        for (int t = 0; t < kNt; ++t) {
          if (t / 2 >= chunks[mt]) continue;  // masked: already 0
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mt][t][e] *=
                drop.Factor(b, h, row0[mt] + g + 8 * (e / 2), k0 + 8 * t + 2 * tig + (e & 1), S);
          }
        }
      }
    }

    // O += P V: the probabilities (T) are the A operand straight from the accumulators.
#pragma unroll
    for (int c = 0; c < kBc / 16; ++c) {
      if (c < max_chunks) {
        uint32_t pa[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) AccumulatorToA<T, kNt>(s[mt], c, pa[mt]);
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          uint32_t vb[4];
          LoadBFromKn<kStride>(vb, vt, c * 16, dt * 16, lane);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            if (c < chunks[mt]) {
              Mma<T>(o[mt][2 * dt], pa[mt], vb[0], vb[1]);
              Mma<T>(o[mt][2 * dt + 1], pa[mt], vb[2], vb[3]);
            }
          }
        }
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this buffer
  }

  // out = O / l (T), lse = ln(sum) in natural units.
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = l[mt][r];
      total += __shfl_xor_sync(0xffffffffu, total, 1);
      total += __shfl_xor_sync(0xffffffffu, total, 2);
      const int i = row0[mt] + g + 8 * r;
      if (i >= S) continue;
      const float inv = 1.0f / total;
      T* orow = out + OutRow(b, i, h, S, H, D);
#pragma unroll
      for (int t = 0; t < kDt; ++t) {
        *reinterpret_cast<typename Pair16<T>::Type*>(orow + 8 * t + 2 * tig) =
            Pair16<T>::FromFloats(o[mt][t][2 * r] * inv, o[mt][t][2 * r + 1] * inv);
      }
      if (tig == 0) lse[(size_t(b) * H + h) * S + i] = (m[mt][r] + log2f(total)) * kLn2;
    }
  }
}

// delta[b, h, i] = sum_d d_out * out: a warp per row, 256 threads per block.
template <typename T, int D>
__global__ void TcDeltaKernel(const T* __restrict__ d_out, const T* __restrict__ out,
                              float* __restrict__ delta, int B, int S, int H) {
  const size_t row = blockIdx.x * size_t(blockDim.x / 32) + threadIdx.x / 32;  // over B*H*S
  const int lane = threadIdx.x % 32;
  if (row >= size_t(B) * H * S) return;
  const int i = row % S, h = (row / S) % H, b = row / (size_t(S) * H);
  const size_t at = OutRow(b, i, h, S, H, D);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < D / 64; ++k) {
    const int d = 2 * lane + 64 * k;
    using Pair = typename Pair16<T>::Type;
    const Pair x = *reinterpret_cast<const Pair*>(d_out + at + d);
    const Pair y = *reinterpret_cast<const Pair*>(out + at + d);
    sum += __low2float(x) * __low2float(y) + __high2float(x) * __high2float(y);
  }
  sum = WarpSum(sum);
  if (lane == 0) delta[row] = sum;
}

// Adds scale * acc (rows g, g + 8 of an m-tile: acc[t][2r], acc[t][2r + 1] at columns
// 8t + 2 tig, +1) to the T row `dst` of row r.
template <typename T, int D>
__device__ __forceinline__ void AddRow(T* dst, const float (&acc)[D / 8][4], int r, int tig,
                                       float scale) {
#pragma unroll
  for (int t = 0; t < D / 8; ++t) {
    using Pair = typename Pair16<T>::Type;
    Pair* at = reinterpret_cast<Pair*>(dst + 8 * t + 2 * tig);
    const Pair old = *at;
    *at = Pair16<T>::FromFloats(__low2float(old) + acc[t][2 * r] * scale,
                                __high2float(old) + acc[t][2 * r + 1] * scale);
  }
}

// dK and dV of 64 keys. grid (ceil(S / kKvKeys), B * H), kTcThreads threads, kKvSmem bytes.
// Warp w owns keys j0 + 16 w + [0, 16): the rows of its S^T = K Q^T tiles.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    TcBackwardKeyValueKernel(const T* __restrict__ d_out, const T* __restrict__ qkv,
                             const float* __restrict__ lse, const float* __restrict__ delta,
                             T* __restrict__ d_qkv, int S, int H, DeviceDropout drop) {
  using C = TcConfig<D>;
  constexpr int kBc = C::kKvKeys, kBr = C::kKvQueries, kStride = C::kStride;
  constexpr int kKSteps = D / 16;
  constexpr int kNt = kBr / 8;  // 8-query n-tiles of S^T
  constexpr int kDt = D / 8;
  // Shared memory: K and V of this block's keys, then two buffers each of the query tile's
  // Q and dO ([kBr][kStride]) and of its lse and delta (kBr floats).
  T* ks = reinterpret_cast<T*>(DynamicSmem());
  T* vs = ks + kBc * kStride;
  T* qs = vs + kBc * kStride;
  T* dos = qs + 2 * kBr * kStride;
  float* lses = reinterpret_cast<float*>(dos + 2 * kBr * kStride);
  float* deltas = lses + 2 * kBr;

  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int j0 = blockIdx.x * kBc;  // the first blocks have the most queries: they start first
  const int key0 = j0 + 16 * warp;  // this warp's first key
  const size_t stride = size_t(3) * H * D;
  const size_t out_stride = size_t(H) * D;
  const T* q_base = qkv + QkvRow(b, 0, 0, h, S, H, D);
  const T* do_base = d_out + OutRow(b, 0, h, S, H, D);
  const float* lse_row = lse + (size_t(b) * H + h) * S;
  const float* delta_row = delta + (size_t(b) * H + h) * S;
  const float scale = rsqrtf(float(D));
  const float scale_log2 = scale * kLog2e;
  const int first_tile = j0 / kBr;  // causal: queries i >= j0
  const int n_tiles = (S + kBr - 1) / kBr;

  LoadRowsAsync<D, kBc>(ks, q_base + out_stride, stride, j0, S);
  LoadRowsAsync<D, kBc>(vs, q_base + 2 * out_stride, stride, j0, S);
  LoadRowsAsync<D, kBr>(qs, q_base, stride, first_tile * kBr, S);
  LoadRowsAsync<D, kBr>(dos, do_base, out_stride, first_tile * kBr, S);
  LoadFloatsAsync(lses, lse_row, first_tile * kBr, kBr, S);
  LoadFloatsAsync(deltas, delta_row, first_tile * kBr, kBr, S);
  CpAsyncCommit();

  float dk[kDt][4], dv[kDt][4];
#pragma unroll
  for (int t = 0; t < kDt; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[t][e] = dv[t][e] = 0.0f;
  }

  for (int n = first_tile; n < n_tiles; ++n) {
    const int buf = (n - first_tile) & 1;
    if (n + 1 < n_tiles) {
      const int next = (n + 1) * kBr;
      LoadRowsAsync<D, kBr>(qs + (buf ^ 1) * kBr * kStride, q_base, stride, next, S);
      LoadRowsAsync<D, kBr>(dos + (buf ^ 1) * kBr * kStride, do_base, out_stride, next, S);
      LoadFloatsAsync(lses + (buf ^ 1) * kBr, lse_row, next, kBr, S);
      LoadFloatsAsync(deltas + (buf ^ 1) * kBr, delta_row, next, kBr, S);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const T* qt = qs + buf * kBr * kStride;
    const T* dot = dos + buf * kBr * kStride;
    const float* lset = lses + buf * kBr;
    const float* deltat = deltas + buf * kBr;
    const int i0 = n * kBr;
    // Live 16-query chunks: some query >= this warp's first key, and some query < S.
    const int c_begin = max(0, (key0 - i0) / 16);
    const int c_end = min(kBr / 16, (S - i0 + 15) / 16);
    if (c_begin < c_end) {
      const bool need_mask = i0 < key0 + 15 || i0 + kBr > S;
      float st[kNt][4], dpt[kNt][4];  // S^T and dP^T: rows keys, columns queries
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) st[t][e] = dpt[t][e] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t ka[4], va[4];
        LoadA<kStride>(ka, ks, 16 * warp, kk * 16, lane);
        LoadA<kStride>(va, vs, 16 * warp, kk * 16, lane);
#pragma unroll
        for (int c = 0; c < kBr / 16; ++c) {
          if (c < c_begin || c >= c_end) continue;
          uint32_t qb[4], dob[4];
          LoadBFromNk<kStride>(qb, qt, c * 16, kk * 16, lane);
          Mma<T>(st[2 * c], ka, qb[0], qb[1]);
          Mma<T>(st[2 * c + 1], ka, qb[2], qb[3]);
          LoadBFromNk<kStride>(dob, dot, c * 16, kk * 16, lane);
          Mma<T>(dpt[2 * c], va, dob[0], dob[1]);
          Mma<T>(dpt[2 * c + 1], va, dob[2], dob[3]);
        }
      }
      // st <- P^T with dropout applied (for dV), dpt <- dS^T / sqrt(D) (for dK); dead chunks
      // unused. The softmax scale goes in before dS is rounded to T for the mma: under fp16
      // loss scaling dS itself may pass fp16's range where dK = dS^T Q / sqrt(D) does not.
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
        if (t / 2 < c_begin || t / 2 >= c_end) continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = 8 * t + 2 * tig + (e & 1);
          const int i = i0 + col;
          const int j = key0 + g + 8 * (e / 2);
          float p = exp2f(st[t][e] * scale_log2 - lset[col] * kLog2e);
          if (need_mask && (i < j || i >= S)) p = 0.0f;
          const float f = drop.Factor(b, h, i, j, S);
          dpt[t][e] = p * (dpt[t][e] * f - deltat[col]) * scale;
          st[t][e] = p * f;
        }
      }
#pragma unroll
      for (int c = 0; c < kBr / 16; ++c) {
        if (c < c_begin || c >= c_end) continue;
        uint32_t pa[4], dsa[4];
        AccumulatorToA<T, kNt>(st, c, pa);
        AccumulatorToA<T, kNt>(dpt, c, dsa);
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          uint32_t dob[4], qb[4];
          LoadBFromKn<kStride>(dob, dot, c * 16, dt * 16, lane);
          Mma<T>(dv[2 * dt], pa, dob[0], dob[1]);
          Mma<T>(dv[2 * dt + 1], pa, dob[2], dob[3]);
          LoadBFromKn<kStride>(qb, qt, c * 16, dt * 16, lane);
          Mma<T>(dk[2 * dt], dsa, qb[0], qb[1]);
          Mma<T>(dk[2 * dt + 1], dsa, qb[2], qb[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this buffer
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key0 + g + 8 * r;
    if (j >= S) continue;
    AddRow<T, D>(d_qkv + QkvRow(b, j, 1, h, S, H, D), dk, r, tig, 1.0f);
    AddRow<T, D>(d_qkv + QkvRow(b, j, 2, h, S, H, D), dv, r, tig, 1.0f);
  }
}

// dQ of 64 queries. grid (ceil(S / kDqRows), B * H), kTcThreads threads, kDqSmem bytes.
// Warp w owns queries q0 + 16 w + [0, 16).
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    TcBackwardQueryKernel(const T* __restrict__ d_out, const T* __restrict__ qkv,
                          const float* __restrict__ lse, const float* __restrict__ delta,
                          T* __restrict__ d_qkv, int S, int H, DeviceDropout drop) {
  using C = TcConfig<D>;
  constexpr int kBr = C::kDqRows, kBc = C::kDqKeys, kStride = C::kStride;
  constexpr int kKSteps = D / 16;
  constexpr int kNt = kBc / 8;
  constexpr int kDt = D / 8;
  T* qs = reinterpret_cast<T*>(DynamicSmem());
  T* dos = qs + kBr * kStride;
  T* ks = dos + kBr * kStride;     // two buffers of [kBc][kStride]
  T* vs = ks + 2 * kBc * kStride;  // two buffers of [kBc][kStride]

  const int qb = gridDim.x - 1 - blockIdx.x;  // the longest rows start first
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int q0 = qb * kBr;
  const int row0 = q0 + 16 * warp;
  const size_t stride = size_t(3) * H * D;
  const size_t out_stride = size_t(H) * D;
  const T* q_base = qkv + QkvRow(b, 0, 0, h, S, H, D);
  const T* k_base = q_base + out_stride;
  const T* v_base = k_base + out_stride;
  const float scale = rsqrtf(float(D));
  const float scale_log2 = scale * kLog2e;
  const int n_tiles = min(S - 1, q0 + kBr - 1) / kBc + 1;

  LoadRowsAsync<D, kBr>(qs, q_base, stride, q0, S);
  LoadRowsAsync<D, kBr>(dos, d_out + OutRow(b, 0, h, S, H, D), out_stride, q0, S);
  LoadRowsAsync<D, kBc>(ks, k_base, stride, 0, S);
  LoadRowsAsync<D, kBc>(vs, v_base, stride, 0, S);
  CpAsyncCommit();

  float row_lse[2], row_delta[2];  // log2 domain lse; zeros for rows at or past S
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + g + 8 * r;
    const size_t at = (size_t(b) * H + h) * S + i;
    row_lse[r] = i < S ? lse[at] * kLog2e : 0.0f;
    row_delta[r] = i < S ? delta[at] : 0.0f;
  }
  uint32_t qf[kKSteps][4], dof[kKSteps][4];
  float dq[kDt][4];
#pragma unroll
  for (int t = 0; t < kDt; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[t][e] = 0.0f;
  }

  for (int n = 0; n < n_tiles; ++n) {
    const int buf = n & 1;
    if (n + 1 < n_tiles) {
      LoadRowsAsync<D, kBc>(ks + (buf ^ 1) * kBc * kStride, k_base, stride, (n + 1) * kBc, S);
      LoadRowsAsync<D, kBc>(vs + (buf ^ 1) * kBc * kStride, v_base, stride, (n + 1) * kBc, S);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if (n == 0) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        LoadA<kStride>(qf[kk], qs, 16 * warp, kk * 16, lane);
        LoadA<kStride>(dof[kk], dos, 16 * warp, kk * 16, lane);
      }
    }
    const T* kt = ks + buf * kBc * kStride;
    const T* vt = vs + buf * kBc * kStride;
    const int k0 = n * kBc;
    const int chunks = LiveChunks<kBc>(row0 + 15, k0);
    if (chunks > 0) {
      const bool need_mask = k0 + kBc - 1 > row0;
      float s[kNt][4], dp[kNt][4];
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[t][e] = dp[t][e] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
        for (int c = 0; c < kBc / 16; ++c) {
          if (c >= chunks) continue;
          uint32_t kb[4], vb[4];
          LoadBFromNk<kStride>(kb, kt, c * 16, kk * 16, lane);
          Mma<T>(s[2 * c], qf[kk], kb[0], kb[1]);
          Mma<T>(s[2 * c + 1], qf[kk], kb[2], kb[3]);
          LoadBFromNk<kStride>(vb, vt, c * 16, kk * 16, lane);
          Mma<T>(dp[2 * c], dof[kk], vb[0], vb[1]);
          Mma<T>(dp[2 * c + 1], dof[kk], vb[2], vb[3]);
        }
      }
      // dp <- dS / sqrt(D) = P (dP mask - delta) / sqrt(D), scaled before the rounding to T
      // as in the dK/dV kernel; dead chunks unused.
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
        if (t / 2 >= chunks) continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = row0 + g + 8 * (e / 2);
          const int j = k0 + 8 * t + 2 * tig + (e & 1);
          float p = exp2f(s[t][e] * scale_log2 - row_lse[e / 2]);
          if (need_mask && j > i) p = 0.0f;
          const float f = drop.Factor(b, h, i, j, S);
          dp[t][e] = p * (dp[t][e] * f - row_delta[e / 2]) * scale;
        }
      }
      // dQ += dS K.
#pragma unroll
      for (int c = 0; c < kBc / 16; ++c) {
        if (c >= chunks) continue;
        uint32_t dsa[4];
        AccumulatorToA<T, kNt>(dp, c, dsa);
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          uint32_t kb[4];
          LoadBFromKn<kStride>(kb, kt, c * 16, dt * 16, lane);
          Mma<T>(dq[2 * dt], dsa, kb[0], kb[1]);
          Mma<T>(dq[2 * dt + 1], dsa, kb[2], kb[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this buffer
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + g + 8 * r;
    if (i < S) AddRow<T, D>(d_qkv + QkvRow(b, i, 0, h, S, H, D), dq, r, tig, 1.0f);
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

template <typename T, int D>
absl::Status TcForward(const T* qkv, T* out, float* lse, const AttentionShape& s,
                       const DeviceDropout& drop, cudaStream_t stream) {
  using C = TcConfig<D>;
  const dim3 grid((s.seq + C::kFwdRows - 1) / C::kFwdRows, s.batch * s.heads);
  return Launch(TcForwardKernel<T, D>, grid, kTcThreads, C::kFwdSmem, stream,
                "FlashAttentionForward (tensor cores)", qkv, out, lse, s.seq, s.heads, drop);
}

template <typename T, int D>
absl::Status TcBackward(const T* d_out, const T* qkv, const T* out, const float* lse, T* d_qkv,
                        const AttentionShape& s, const DeviceDropout& drop, cudaStream_t stream) {
  using C = TcConfig<D>;
  const size_t rows = size_t(s.batch) * s.heads * s.seq;
  float* delta = nullptr;
  if (absl::Status st = CudaStatus(
          cudaMallocAsync(reinterpret_cast<void**>(&delta), rows * sizeof(float), stream),
          "FlashAttentionBackward scratch");
      !st.ok()) {
    return st;
  }
  absl::Status launched =
      Launch(TcDeltaKernel<T, D>, dim3(unsigned((rows + 7) / 8)), 256, 0, stream,
             "FlashAttentionBackward (delta)", d_out, out, delta, s.batch, s.seq, s.heads);
  if (launched.ok()) {
    const dim3 grid((s.seq + C::kKvKeys - 1) / C::kKvKeys, s.batch * s.heads);
    launched.Update(Launch(TcBackwardKeyValueKernel<T, D>, grid, kTcThreads, C::kKvSmem, stream,
                           "FlashAttentionBackward (keys, values; tensor cores)", d_out, qkv, lse,
                           delta, d_qkv, s.seq, s.heads, drop));
  }
  if (launched.ok()) {
    const dim3 grid((s.seq + C::kDqRows - 1) / C::kDqRows, s.batch * s.heads);
    launched.Update(Launch(TcBackwardQueryKernel<T, D>, grid, kTcThreads, C::kDqSmem, stream,
                           "FlashAttentionBackward (queries; tensor cores)", d_out, qkv, lse, delta,
                           d_qkv, s.seq, s.heads, drop));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(delta, stream), "FlashAttentionBackward scratch");
  return launched.ok() ? freed : launched;
}

}  // namespace

template <typename T>
absl::Status TensorCoreAttentionForward(const T* qkv, T* out, float* lse,
                                        const AttentionShape& shape, const DeviceDropout& drop,
                                        cudaStream_t stream) {
  if (shape.head_dim == 64) return TcForward<T, 64>(qkv, out, lse, shape, drop, stream);
  return TcForward<T, 128>(qkv, out, lse, shape, drop, stream);
}

template <typename T>
absl::Status TensorCoreAttentionBackward(const T* d_out, const T* qkv, const T* out,
                                         const float* lse, T* d_qkv, const AttentionShape& shape,
                                         const DeviceDropout& drop, cudaStream_t stream) {
  if (shape.head_dim == 64) {
    return TcBackward<T, 64>(d_out, qkv, out, lse, d_qkv, shape, drop, stream);
  }
  return TcBackward<T, 128>(d_out, qkv, out, lse, d_qkv, shape, drop, stream);
}

#define MTRAIN_INSTANTIATE_TENSOR_CORE_ATTENTION(T)                                                \
  template absl::Status TensorCoreAttentionForward<T>(const T*, T*, float*, const AttentionShape&, \
                                                      const DeviceDropout&, cudaStream_t);         \
  template absl::Status TensorCoreAttentionBackward<T>(const T*, const T*, const T*, const float*, \
                                                       T*, const AttentionShape&,                  \
                                                       const DeviceDropout&, cudaStream_t);
MTRAIN_INSTANTIATE_TENSOR_CORE_ATTENTION(__nv_bfloat16)
MTRAIN_INSTANTIATE_TENSOR_CORE_ATTENTION(__half)
#undef MTRAIN_INSTANTIATE_TENSOR_CORE_ATTENTION

}  // namespace mtrain::cuda::attention_internal
