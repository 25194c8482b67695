#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layernorm.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

// The backward pass (LayerNormBackwardRowsKernel). A row is covered by a group of
// threads, each of which owns the same columns in every row: at most kMaxChunksPerThread
// chunks of 16 bytes (or of one element, on the scalar path) and kMaxRowBytesPerThread
// bytes, held in registers. So the thread's share of the partial d_gamma / d_beta stays
// with it, in shared memory (or in the block's global partial row when that does not fit),
// and nothing is summed with atomics. Wider rows (over 8192 elements of 16 bits, 4096 of
// fp32, or 4096 on the scalar path) take the fallback (LayerNormBackwardKernel).
constexpr int kMaxGroupThreads = 512;  // threads covering one row
constexpr int kMaxBlockThreads = 512;  // launch bound: up to 128 registers a thread
constexpr int kMaxChunksPerThread = 8;
constexpr int kMaxRowBytesPerThread = 32;
// A block holds several groups, each on its own rows, up to this many threads: more warps
// to hide latency without more blocks (each block adds a row of partial sums to reduce).
// This, the thread target and the rows per iteration below were chosen by timing
// variants on an H200 (layernorm_bench): C = 768 in bf16 takes 2 groups of 96 threads in
// 256 blocks, C = 2048 one group of 256 in 256 blocks, each in one wave at 128 registers.
constexpr int kBlockThreadTarget = 256;
// Rows a group loads per iteration, times the chunks a thread holds: the loads in flight
// per thread, bounded by the registers that hold them (twice: the next iteration's rows
// are loaded while this one's are worked on).
constexpr int kRowChunksPerIteration = 2;
constexpr int RowsPerIteration(int chunks_per_thread) {
  return chunks_per_thread < kRowChunksPerIteration ? kRowChunksPerIteration / chunks_per_thread
                                                    : 1;
}
// The grid: about this many threads in all, a power of two of blocks within the bounds
// below (fewer when the rows run out). A function of rows and C alone (never of the
// device), so the order in which the parameter gradients are summed, and their bits, are
// the same on every GPU.
constexpr int kBackwardThreadTarget = 65536;
constexpr int kMinBackwardBlocks = 64;
constexpr int kMaxBackwardGrid = 2048;
// Shared memory a block may hold without opting in.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// Blocks of the fallback for very wide rows (LayerNormBackwardKernel): each owns a row of
// partial parameter gradients in global memory.
constexpr int kMaxBackwardBlocks = 256;

// One block per row; two passes over the row (mean, then variance about the mean: more
// accurate than E[x^2] - E[x]^2, as the CPU code does).
template <typename T>
__global__ void LayerNormForwardKernel(const T* x, const T* gamma, const T* beta, T* y,
                                       float* mean_out, float* rstd_out, int C, float eps) {
  __shared__ float scratch[32];
  const size_t row = blockIdx.x;
  const T* xr = x + row * C;
  float sum = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) sum += ToFloat(xr[c]);
  const float mean = BlockSum(sum, scratch) / C;
  float sq = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = ToFloat(xr[c]) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(BlockSum(sq, scratch) / C + eps);
  T* yr = y + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (ToFloat(xr[c]) - mean) * rstd;
    yr[c] = FromFloat<T>(xhat * ToFloat(gamma[c]) + ToFloat(beta[c]));
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// kVec consecutive elements, loaded and stored as one access (16 bytes when kVec * sizeof(T)
// is 16).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// The forward for the common widths: one warp per row, the row held in registers as
// kChunks 16-byte packs a lane (C = 32 * kChunks * kVec), so x is read once and y written
// once, with no barrier (the block-per-row kernel above reads x three times and syncs its
// block four times a row, about a quarter of the copy bandwidth at C = 768 on an H200).
// The same two-pass statistics; each row's bits depend on the row alone, never on the
// grid, as the sequence-parallel rows need.
constexpr int kForwardWarpsPerBlock = 4;

template <typename T, int kChunks>
__global__ void __launch_bounds__(kForwardWarpsPerBlock * 32)
    LayerNormForwardWarpKernel(const T* x, const T* gamma, const T* beta, T* y, float* mean_out,
                               float* rstd_out, int rows, int C, float eps) {
  constexpr int kVec = 16 / sizeof(T);
  using P = Pack<T, kVec>;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kForwardWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const P* xr = reinterpret_cast<const P*>(x + static_cast<size_t>(row) * C);
  P v[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) v[i] = xr[lane + 32 * i];
  float sum = 0;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum += ToFloat(v[i].v[j]);
  }
  const float mean = WarpSum(sum) / C;
  float sq = 0;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float d = ToFloat(v[i].v[j]) - mean;
      sq += d * d;
    }
  }
  const float rstd = rsqrtf(WarpSum(sq) / C + eps);
  const P* g = reinterpret_cast<const P*>(gamma);
  const P* b = reinterpret_cast<const P*>(beta);
  P* yr = reinterpret_cast<P*>(y + static_cast<size_t>(row) * C);
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const P gp = g[lane + 32 * i], bp = b[lane + 32 * i];
    P out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float xhat = (ToFloat(v[i].v[j]) - mean) * rstd;
      out.v[j] = FromFloat<T>(xhat * ToFloat(gp.v[j]) + ToFloat(bp.v[j]));
    }
    yr[lane + 32 * i] = out;
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Launches the warp-per-row forward when C is 32 * kVec times one of the chunk counts it is
// built for and every pointer is 16-byte aligned; false otherwise (nothing launched).
template <typename T>
bool LaunchForwardWarpKernel(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                             float* rstd, int rows, int C, float eps, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (C % (32 * kVec) != 0 || !aligned(x) || !aligned(gamma) || !aligned(beta) || !aligned(y)) {
    return false;
  }
  const int blocks = (rows + kForwardWarpsPerBlock - 1) / kForwardWarpsPerBlock;
  const int threads = kForwardWarpsPerBlock * 32;
#define MTRAIN_LAYERNORM_FORWARD_CASE(CHUNKS)                                          \
  case CHUNKS:                                                                         \
    LayerNormForwardWarpKernel<T, CHUNKS>                                              \
        <<<blocks, threads, 0, stream>>>(x, gamma, beta, y, mean, rstd, rows, C, eps); \
    return true;
  switch (C / (32 * kVec)) {
    MTRAIN_LAYERNORM_FORWARD_CASE(1)
    MTRAIN_LAYERNORM_FORWARD_CASE(2)
    MTRAIN_LAYERNORM_FORWARD_CASE(3)
    MTRAIN_LAYERNORM_FORWARD_CASE(4)
    MTRAIN_LAYERNORM_FORWARD_CASE(6)
    MTRAIN_LAYERNORM_FORWARD_CASE(8)
    MTRAIN_LAYERNORM_FORWARD_CASE(12)
    MTRAIN_LAYERNORM_FORWARD_CASE(16)
    default:
      return false;
  }
#undef MTRAIN_LAYERNORM_FORWARD_CASE
}

// dst[i] += v[i]; dst is 16-byte aligned when kVec is a multiple of 4 (then float4s).
template <int kVec>
__device__ __forceinline__ void AddTo(float* dst, const float (&v)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      float4* p = reinterpret_cast<float4*>(dst + i);
      float4 a = *p;
      a.x += v[i];
      a.y += v[i + 1];
      a.z += v[i + 2];
      a.w += v[i + 3];
      *p = a;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) dst[i] += v[i];
  }
}

// Sums each of kRows (a, b) pairs over the thread's group: the block's threads in groups
// of group_warps whole warps (all of them for one group; blockDim.x a multiple of 32, at
// most 1024), each group with its own values. A fixed order; every thread of a group gets
// its group's results. One pair of barriers for all.
template <int kRows>
__device__ __forceinline__ void GroupSumPairs(float2 (&v)[kRows], float2 (&scratch)[kRows][32],
                                              int group_warps) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kRows; ++r) v[r] = make_float2(WarpSum(v[r].x), WarpSum(v[r].y));
  __syncthreads();  // scratch may still be read by the previous iteration
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) scratch[r][warp] = v[r];
  }
  __syncthreads();
  const int first = warp - warp % group_warps;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float2 s = lane < group_warps ? scratch[r][first + lane] : make_float2(0, 0);
    v[r] = make_float2(WarpSum(s.x), WarpSum(s.y));
  }
}

// One iteration's rows of a thread's chunks, as loaded.
template <typename T, int kVec, int kChunks, int kRows>
struct BackwardRows {
  using P = Pack<T, kVec>;
  P dy[kRows][kChunks], xv[kRows][kChunks], res[kRows][kChunks];
  float mu[kRows], rs[kRows];

  __device__ __forceinline__ void Load(const T* d_y, const T* x, const T* residual,
                                       const float* mean, const float* rstd, int row0, int rows,
                                       int chunks, int t, int group_threads) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = row0 + r;
      mu[r] = 0;
      rs[r] = 0;
      if (row >= rows) continue;
      mu[r] = mean[row];
      rs[r] = rstd[row];
      const size_t base = size_t(row) * chunks;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int chunk = t + j * group_threads;
        if (chunk < chunks) {
          dy[r][j] = reinterpret_cast<const P*>(d_y)[base + chunk];
          xv[r][j] = reinterpret_cast<const P*>(x)[base + chunk];
          res[r][j] = reinterpret_cast<const P*>(residual)[base + chunk];
        }
      }
    }
  }
};

// d_x = residual + rstd * (d_xhat - mean(d_xhat) - xhat * mean(d_xhat * xhat)), with
// d_xhat = d_y * gamma, and the block's partial d_gamma (sum of d_y * xhat) and d_beta (sum
// of d_y). The block's threads form groups of group_threads (a multiple of 32); in each
// iteration group g of block b takes kRows rows, from (b * groups + g) * kRows on, the
// next iteration gridDim.x * groups * kRows rows further. Thread t of a group owns the
// chunks (kVec columns each) t, t + group_threads, ... (kChunks at most) of every row.
// The next iteration's d_y, x and residual chunks are loaded before this one's arithmetic
// and reduction (their latency overlaps that work); one reduction gives both row sums of
// every row of every group; then d_x is written. d_y, x and the residual are read once
// (gamma, small, is read from cache where it is used). The residual may alias d_x: each
// element is read and written by the same thread.
// Partial sums: each group accumulates its own 2C floats in shared memory (groups * 2C in
// all), summed over the groups in order at the end into partial_gamma /
// partial_beta[blockIdx.x]. Without accumulate_in_shared (one group, 2C floats too many)
// they accumulate in that partial row itself.
template <typename T, int kVec, int kChunks, int kRows>
__global__ void __launch_bounds__(kMaxBlockThreads)
    LayerNormBackwardRowsKernel(const T* d_y, const T* x, const T* gamma, const float* mean,
                                const float* rstd, const T* residual, T* d_x, float* partial_gamma,
                                float* partial_beta, int rows, int C, int group_threads,
                                bool accumulate_in_shared) {
  using P = Pack<T, kVec>;
  extern __shared__ float shared_sums[];
  __shared__ float2 scratch[kRows][32];
  const int groups = blockDim.x / group_threads;
  const int group = threadIdx.x / group_threads;
  const int t = threadIdx.x % group_threads;
  float* acc_gamma = accumulate_in_shared ? shared_sums + size_t(2) * C * group
                                          : partial_gamma + size_t(blockIdx.x) * C;
  float* acc_beta = accumulate_in_shared ? acc_gamma + C : partial_beta + size_t(blockIdx.x) * C;
  const int chunks = C / kVec;
  const P* g = reinterpret_cast<const P*>(gamma) + t;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int chunk = t + j * group_threads;
    if (chunk < chunks) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        acc_gamma[chunk * kVec + i] = 0;
        acc_beta[chunk * kVec + i] = 0;
      }
    }
  }
  // All groups of a block take the same number of iterations (the reduction's barriers
  // need every thread); a group past the last row does no work in its last ones.
  const int block_rows = groups * kRows;
  const int stride = gridDim.x * block_rows;
  const int first_row = blockIdx.x * block_rows + group * kRows;
  BackwardRows<T, kVec, kChunks, kRows> cur;
  cur.Load(d_y, x, residual, mean, rstd, first_row, rows, chunks, t, group_threads);
  for (int base = blockIdx.x * block_rows; base < rows; base += stride) {
    const int row0 = base + group * kRows;
    BackwardRows<T, kVec, kChunks, kRows> next;
    if (base + stride < rows) {
      next.Load(d_y, x, residual, mean, rstd, row0 + stride, rows, chunks, t, group_threads);
    }
    const auto& dy = cur.dy;
    const auto& xv = cur.xv;
    const auto& res = cur.res;
    const auto& mu = cur.mu;
    const auto& rs = cur.rs;
    float2 sums[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      sums[r] = make_float2(0, 0);
      if (row0 + r >= rows) continue;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        if (t + j * group_threads >= chunks) continue;
        const P gj = g[j * group_threads];
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float xhat = (ToFloat(xv[r][j].v[i]) - mu[r]) * rs[r];
          const float dxhat = ToFloat(dy[r][j].v[i]) * ToFloat(gj.v[i]);
          sums[r].x += dxhat;
          sums[r].y += dxhat * xhat;
        }
      }
    }
    GroupSumPairs<kRows>(sums, scratch, group_threads >> 5);
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int chunk = t + j * group_threads;
      if (chunk >= chunks) continue;
      const P gj = g[j * group_threads];
      float row_gamma[kVec] = {}, row_beta[kVec] = {};
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int row = row0 + r;
        if (row >= rows) continue;
        const float mean_dxhat = sums[r].x / C, mean_dxhat_xhat = sums[r].y / C;
        P out;
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float xhat = (ToFloat(xv[r][j].v[i]) - mu[r]) * rs[r];
          const float d = ToFloat(dy[r][j].v[i]);
          const float dxhat = d * ToFloat(gj.v[i]);
          const float dx = rs[r] * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
          out.v[i] = FromFloat<T>(ToFloat(res[r][j].v[i]) + dx);
          row_gamma[i] += d * xhat;
          row_beta[i] += d;
        }
        reinterpret_cast<P*>(d_x)[size_t(row) * chunks + chunk] = out;
      }
      // One update of the group's sums per iteration (rows summed in registers first).
      AddTo<kVec>(acc_gamma + chunk * kVec, row_gamma);
      AddTo<kVec>(acc_beta + chunk * kVec, row_beta);
    }
    cur = next;
  }
  if (accumulate_in_shared) {
    __syncthreads();
    float* my_gamma = partial_gamma + size_t(blockIdx.x) * C;
    float* my_beta = partial_beta + size_t(blockIdx.x) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float sum_gamma = 0, sum_beta = 0;
      for (int k = 0; k < groups; ++k) {
        sum_gamma += shared_sums[size_t(2) * C * k + c];
        sum_beta += shared_sums[size_t(2) * C * k + C + c];
      }
      my_gamma[c] = sum_gamma;
      my_beta[c] = sum_beta;
    }
  }
}

// The fallback for rows too wide for LayerNormBackwardRowsKernel's registers: block b
// handles rows b, b + gridDim.x, ... and adds each row's terms of d_gamma / d_beta to its
// own partial row in global memory (no other block touches it: no atomics). Reads each
// row twice (the second time mostly from cache).
template <typename T>
__global__ void LayerNormBackwardKernel(const T* d_y, const T* x, const T* gamma, const float* mean,
                                        const float* rstd, const T* residual, T* d_x,
                                        float* partial_gamma, float* partial_beta, int rows,
                                        int C) {
  __shared__ float2 scratch[1][32];
  float* my_gamma = partial_gamma + size_t(blockIdx.x) * C;
  float* my_beta = partial_beta + size_t(blockIdx.x) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    my_gamma[c] = 0;
    my_beta[c] = 0;
  }
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + size_t(row) * C;
    const T* dyr = d_y + size_t(row) * C;
    const float mu = mean[row], rs = rstd[row];
    float2 sums[1] = {make_float2(0, 0)};
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = (ToFloat(xr[c]) - mu) * rs;
      const float dy = ToFloat(dyr[c]);
      const float dxhat = dy * ToFloat(gamma[c]);
      sums[0].x += dxhat;
      sums[0].y += dxhat * xhat;
      my_gamma[c] += dy * xhat;
      my_beta[c] += dy;
    }
    GroupSumPairs<1>(sums, scratch, blockDim.x >> 5);
    const float mean_dxhat = sums[0].x / C, mean_dxhat_xhat = sums[0].y / C;
    const T* resr = residual + size_t(row) * C;
    T* dxr = d_x + size_t(row) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = (ToFloat(xr[c]) - mu) * rs;
      const float dxhat = ToFloat(dyr[c]) * ToFloat(gamma[c]);
      const float dx = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      dxr[c] = FromFloat<T>(ToFloat(resr[c]) + dx);
    }
  }
}

// d_gamma[c] += sum over blocks of partial[b][c], d_beta likewise, in a fixed order: the
// kSumColumns x kSumRows threads of a block take kSumColumns columns; thread (tx, ty) sums
// the blocks ty, ty + kSumRows, ... of column tx in order, then a fixed tree adds the
// kSumRows sums of each column. Narrow tiles spread even a few columns over many SMs.
constexpr int kSumColumns = 8;
constexpr int kSumRows = 128;
__global__ void __launch_bounds__(kSumColumns* kSumRows)
    SumPartialsKernel(const float* partial_gamma, const float* partial_beta, int blocks, int C,
                      float* d_gamma, float* d_beta) {
  __shared__ float2 sums[kSumRows][kSumColumns];
  const int c = blockIdx.x * kSumColumns + threadIdx.x;
  float g = 0, b = 0;
  if (c < C) {
#pragma unroll 4
    for (int k = threadIdx.y; k < blocks; k += kSumRows) {
      g += partial_gamma[size_t(k) * C + c];
      b += partial_beta[size_t(k) * C + c];
    }
  }
  sums[threadIdx.y][threadIdx.x] = make_float2(g, b);
  for (int half = kSumRows / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.y < half) {
      const float2 other = sums[threadIdx.y + half][threadIdx.x];
      sums[threadIdx.y][threadIdx.x].x += other.x;
      sums[threadIdx.y][threadIdx.x].y += other.y;
    }
  }
  if (threadIdx.y == 0 && c < C) {
    d_gamma[c] += sums[0][threadIdx.x].x;
    d_beta[c] += sums[0][threadIdx.x].y;
  }
}

absl::Status CheckShape(int rows, int C) {
  if (rows < 0 || C <= 0) {
    return absl::InvalidArgumentError("LayerNorm: rows must be >= 0 and C > 0");
  }
  return absl::OkStatus();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// How LayerNormBackwardRowsKernel covers the rows: chunks of `vec` elements, each thread
// holding `chunks_per_thread` of them for `rows_per_iteration` rows, `group_threads`
// threads to a row, `groups` groups to a block; group_threads == 0 when a row is too wide
// for it (then the fallback runs).
struct BackwardPlan {
  int vec = 1;
  int chunks_per_thread = 1;
  int rows_per_iteration = 1;
  int group_threads = 0;
  int groups = 1;
  int blocks = 0;
  bool in_shared = false;  // the partial sums in shared memory (groups * 2C floats)
  size_t shared_bytes = 0;
};

BackwardPlan PlanBackward(int rows, int C, int vec, int element_bytes) {
  BackwardPlan plan;
  plan.vec = vec;
  const int chunks = C / vec;
  const int max_chunks =
      std::min<int>(kMaxChunksPerThread, kMaxRowBytesPerThread / (vec * element_bytes));
  int per_thread = 1;
  while (per_thread < max_chunks && chunks > per_thread * kMaxGroupThreads) per_thread *= 2;
  if (chunks > per_thread * kMaxGroupThreads) return plan;  // group_threads == 0: too wide
  plan.chunks_per_thread = per_thread;
  plan.rows_per_iteration = RowsPerIteration(per_thread);
  plan.group_threads = ((chunks + per_thread - 1) / per_thread + 31) / 32 * 32;
  // Groups to a block: up to kBlockThreadTarget threads, as many as shared memory holds
  // (besides the reduction's scratch, float2[rows_per_iteration][32]).
  const size_t group_bytes = size_t(2) * C * sizeof(float);
  const size_t available = kDefaultSharedBytes - sizeof(float2) * 32 * plan.rows_per_iteration;
  plan.groups = std::max(1, kBlockThreadTarget / plan.group_threads);
  plan.groups = std::min<size_t>(plan.groups, std::max<size_t>(1, available / group_bytes));
  plan.in_shared = plan.groups * group_bytes <= available;
  plan.shared_bytes = plan.in_shared ? plan.groups * group_bytes : 0;
  const int block_threads = plan.groups * plan.group_threads;
  int blocks = kMinBackwardBlocks;
  while (blocks * 2 <= kMaxBackwardGrid && blocks * 2 * block_threads <= kBackwardThreadTarget) {
    blocks *= 2;
  }
  const int block_rows = plan.groups * plan.rows_per_iteration;
  const int needed = (rows + block_rows - 1) / block_rows;
  plan.blocks = std::min(needed, blocks);
  return plan;
}

template <typename T, int kVec, int kChunks, int kRows>
void LaunchRows(const BackwardPlan& plan, const T* d_y, const T* x, const T* gamma,
                const float* mean, const float* rstd, const T* residual, T* d_x,
                float* partial_gamma, float* partial_beta, int rows, int C, cudaStream_t stream) {
  LayerNormBackwardRowsKernel<T, kVec, kChunks, kRows>
      <<<plan.blocks, plan.groups * plan.group_threads, plan.shared_bytes, stream>>>(
          d_y, x, gamma, mean, rstd, residual, d_x, partial_gamma, partial_beta, rows, C,
          plan.group_threads, plan.in_shared);
}

// The instantiation for `plan`.
template <typename T, int kVec>
void LaunchPlanned(const BackwardPlan& plan, const T* d_y, const T* x, const T* gamma,
                   const float* mean, const float* rstd, const T* residual, T* d_x,
                   float* partial_gamma, float* partial_beta, int rows, int C,
                   cudaStream_t stream) {
  switch (plan.chunks_per_thread) {
#define MTRAIN_LAYERNORM_CASE(chunks)                                                        \
  case chunks:                                                                               \
    if constexpr (chunks <= kMaxChunksPerThread &&                                           \
                  chunks * kVec * sizeof(T) <= kMaxRowBytesPerThread) {                      \
      LaunchRows<T, kVec, chunks, RowsPerIteration(chunks)>(plan, d_y, x, gamma, mean, rstd, \
                                                            residual, d_x, partial_gamma,    \
                                                            partial_beta, rows, C, stream);  \
    }                                                                                        \
    break;
    MTRAIN_LAYERNORM_CASE(1)
    MTRAIN_LAYERNORM_CASE(2)
    MTRAIN_LAYERNORM_CASE(4)
    MTRAIN_LAYERNORM_CASE(8)
#undef MTRAIN_LAYERNORM_CASE
  }
}

}  // namespace

template <typename T>
absl::Status LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                              float* rstd, int rows, int C, float eps, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, C); !s.ok() || rows == 0) return s;
  if (!LaunchForwardWarpKernel<T>(x, gamma, beta, y, mean, rstd, rows, C, eps, stream)) {
    LayerNormForwardKernel<T><<<rows, kThreads, 0, stream>>>(x, gamma, beta, y, mean, rstd, C, eps);
  }
  return LastLaunchStatus("LayerNormForward");
}

template <typename T>
absl::Status LayerNormBackward(const T* d_y, const T* x, const T* gamma, const float* mean,
                               const float* rstd, const T* d_residual, T* d_x, float* d_gamma,
                               float* d_beta, int rows, int C, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, C); !s.ok() || rows == 0) return s;
  const T* residual = d_residual != nullptr ? d_residual : d_x;
  // 16-byte chunks where every row starts on a 16-byte boundary; single elements otherwise.
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized = C % kVec == 0 && Aligned16(d_y) && Aligned16(x) && Aligned16(gamma) &&
                          Aligned16(residual) && Aligned16(d_x);
  const BackwardPlan plan = PlanBackward(rows, C, vectorized ? kVec : 1, sizeof(T));
  const int blocks = plan.group_threads > 0 ? plan.blocks : std::min(rows, kMaxBackwardBlocks);
  float* partial = nullptr;
  const size_t bytes = size_t(2) * blocks * C * sizeof(float);
  if (absl::Status s =
          CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&partial), bytes, stream),
                     "LayerNormBackward scratch");
      !s.ok()) {
    return s;
  }
  float* partial_beta = partial + size_t(blocks) * C;
  if (plan.group_threads == 0) {
    LayerNormBackwardKernel<T><<<blocks, kThreads, 0, stream>>>(
        d_y, x, gamma, mean, rstd, residual, d_x, partial, partial_beta, rows, C);
  } else if (vectorized) {
    LaunchPlanned<T, kVec>(plan, d_y, x, gamma, mean, rstd, residual, d_x, partial, partial_beta,
                           rows, C, stream);
  } else {
    LaunchPlanned<T, 1>(plan, d_y, x, gamma, mean, rstd, residual, d_x, partial, partial_beta, rows,
                        C, stream);
  }
  absl::Status launched = LastLaunchStatus("LayerNormBackward");
  if (launched.ok()) {
    const unsigned int tiles = static_cast<unsigned int>((C + kSumColumns - 1) / kSumColumns);
    SumPartialsKernel<<<tiles, dim3(kSumColumns, kSumRows), 0, stream>>>(
        partial, partial_beta, blocks, C, d_gamma, d_beta);
    launched.Update(LastLaunchStatus("LayerNormBackward (parameter sums)"));
  }
  absl::Status freed = CudaStatus(cudaFreeAsync(partial, stream), "LayerNormBackward scratch");
  return launched.ok() ? freed : launched;
}

template absl::Status LayerNormForward<float>(const float*, const float*, const float*, float*,
                                              float*, float*, int, int, float, cudaStream_t);
template absl::Status LayerNormForward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                      const __nv_bfloat16*, __nv_bfloat16*, float*,
                                                      float*, int, int, float, cudaStream_t);
template absl::Status LayerNormForward<__half>(const __half*, const __half*, const __half*, __half*,
                                               float*, float*, int, int, float, cudaStream_t);
template absl::Status LayerNormBackward<float>(const float*, const float*, const float*,
                                               const float*, const float*, const float*, float*,
                                               float*, float*, int, int, cudaStream_t);
template absl::Status LayerNormBackward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                       const __nv_bfloat16*, const float*,
                                                       const float*, const __nv_bfloat16*,
                                                       __nv_bfloat16*, float*, float*, int, int,
                                                       cudaStream_t);
template absl::Status LayerNormBackward<__half>(const __half*, const __half*, const __half*,
                                                const float*, const float*, const __half*, __half*,
                                                float*, float*, int, int, cudaStream_t);

}  // namespace mtrain::cuda
