// Rotary position embedding on the GPU (kernels/rotary.h's semantics: HuggingFace Llama's
// half-split "rotate_half" form). The angles' cos and sin come from the CPU's table
// (cpu::MakeRotaryTable, computed in double and rounded once) copied to the device, so the
// two engines rotate by the same floats. T is float, __nv_bfloat16 or __half; arithmetic
// is float.
#ifndef MTRAIN_KERNELS_CUDA_ROTARY_H_
#define MTRAIN_KERNELS_CUDA_ROTARY_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace mtrain::cuda {

// The table on the device: cos and sin, each [positions, half] floats.
struct RotaryDeviceTable {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int positions = 0;
  int half = 0;  // head_dim / 2
};

// Rotates, in place, `heads` heads of 2 * table.half elements in each of `rows` rows: row r's
// heads start at x + r * row_stride and follow each other; its position is
// first_position + r % seq_length. `inverse` rotates by the opposite angle (the backward).
// INVALID_ARGUMENT for a position past the table or a head that overruns the row stride.
template <typename T>
absl::Status ApplyRotary(T* x, int rows, int row_stride, int heads, int seq_length,
                         int first_position, const RotaryDeviceTable& table, bool inverse,
                         cudaStream_t stream);

}  // namespace mtrain::cuda

#endif  // MTRAIN_KERNELS_CUDA_ROTARY_H_
