// Rotary position embedding (Su et al. 2021, RoFormer), in the half-split form Llama's
// HuggingFace implementation uses ("rotate_half"): element i of a head's first half and
// element i of its second half form one pair, rotated by the angle
//   position * theta^(-2 i / D),   i in [0, D/2),
//   (a, b) -> (a cos - b sin, b cos + a sin).
// Conventions: see matmul.h.
#ifndef MTRAIN_KERNELS_ROTARY_H_
#define MTRAIN_KERNELS_ROTARY_H_

#include <vector>

namespace mtrain::cpu {

// cos and sin of every (position, pair) angle for positions [0, positions), each
// [positions, head_dim / 2]; computed in double and rounded once. `head_dim` is even.
struct RotaryTable {
  int positions = 0;
  int half = 0;  // head_dim / 2
  std::vector<float> cos, sin;
};
RotaryTable MakeRotaryTable(int positions, int head_dim, double theta);

// Rotates, in place, `heads` heads of head_dim = 2 * table.half elements in each of `rows`
// rows; row r's heads start at x + r * row_stride and follow each other, and its position
// is first_position + r % seq_length (rows are [batch, seq] flattened). `inverse` rotates
// by the opposite angle: the backward pass (rotations are orthogonal: the gradient of the
// input is the output's gradient rotated back).
template <typename T>
void ApplyRotary(T* x, int rows, int row_stride, int heads, int seq_length, int first_position,
                 const RotaryTable& table, bool inverse);

}  // namespace mtrain::cpu

#endif  // MTRAIN_KERNELS_ROTARY_H_
