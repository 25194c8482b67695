#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/rotary.h"

namespace mtrain::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (row, head, pair) (grid-stride): pair i of a head is its elements i and
// i + half, (a, b) -> (a cos - b sin, b cos + a sin), sin negated for the inverse.
template <typename T>
__global__ void RotaryKernel(T* x, size_t n, int row_stride, int heads, int half, int seq_length,
                             int first_position, const float* cos_table, const float* sin_table,
                             float sign) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int pair = static_cast<int>(i % half);
    const size_t head_row = i / half;
    const int head = static_cast<int>(head_row % heads);
    const size_t row = head_row / heads;
    const int position = first_position + static_cast<int>(row % seq_length);
    const float c = cos_table[size_t(position) * half + pair];
    const float s = sign * sin_table[size_t(position) * half + pair];
    T* h = x + row * row_stride + size_t(head) * 2 * half;
    const float a = ToFloat(h[pair]);
    const float b = ToFloat(h[pair + half]);
    h[pair] = FromFloat<T>(a * c - b * s);
    h[pair + half] = FromFloat<T>(b * c + a * s);
  }
}

}  // namespace

template <typename T>
absl::Status ApplyRotary(T* x, int rows, int row_stride, int heads, int seq_length,
                         int first_position, const RotaryDeviceTable& table, bool inverse,
                         cudaStream_t stream) {
  if (rows < 0 || heads <= 0 || seq_length <= 0 || table.half <= 0 || first_position < 0) {
    return absl::InvalidArgumentError(
        "ApplyRotary: rows must be >= 0; heads, seq_length and the table's half head size > 0; "
        "first_position >= 0");
  }
  if (heads * 2 * table.half > row_stride) {
    return absl::InvalidArgumentError(
        absl::StrCat("ApplyRotary: ", heads, " heads of ", 2 * table.half,
                     " elements overrun a row stride of ", row_stride));
  }
  if (rows == 0) return absl::OkStatus();
  const int last_position = first_position + (rows < seq_length ? rows : seq_length) - 1;
  if (last_position >= table.positions) {
    return absl::InvalidArgumentError(absl::StrCat("ApplyRotary: position ", last_position,
                                                   " is past the table's ", table.positions));
  }
  const size_t n = size_t(rows) * heads * table.half;
  RotaryKernel<T><<<GridFor(n, kThreads), kThreads, 0, stream>>>(
      x, n, row_stride, heads, table.half, seq_length, first_position, table.cos, table.sin,
      inverse ? -1.0f : 1.0f);
  return LastLaunchStatus("ApplyRotary");
}

#define MTRAIN_INSTANTIATE_ROTARY(T)                                                          \
  template absl::Status ApplyRotary<T>(T*, int, int, int, int, int, const RotaryDeviceTable&, \
                                       bool, cudaStream_t);
MTRAIN_INSTANTIATE_ROTARY(float)
MTRAIN_INSTANTIATE_ROTARY(__nv_bfloat16)
MTRAIN_INSTANTIATE_ROTARY(__half)

}  // namespace mtrain::cuda
