// Axis-aligned hyper-rectangles of an n-dimensional tensor: the shape of every shard in a
// layout-independent checkpoint. A rank's shard of a tensor is the box
// [offset[k], offset[k] + shape[k]) along each dimension k of the global tensor, stored in
// row-major order of its own shape. Re-slicing a checkpoint for another parallel layout is
// intersecting boxes and copying the intersection between two row-major buffers.
//
//   HyperRectangle stored{{0, 8}, {16, 8}}, wanted{{4, 0}, {8, 16}};
//   if (std::optional<HyperRectangle> common = Intersect(stored, wanted)) {
//     ForEachRun(stored, wanted, *common, [&](const HyperRectangleRun& run) {
//       std::copy_n(src + run.src_offset, run.length, dst + run.dst_offset);
//     });
//   }
#ifndef MTRAIN_CHECKPOINT_HYPER_RECTANGLE_H_
#define MTRAIN_CHECKPOINT_HYPER_RECTANGLE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace mtrain {

struct HyperRectangle {
  std::vector<int64_t> offset;  // first index along each dimension
  std::vector<int64_t> shape;   // extent along each dimension (> 0)

  friend bool operator==(const HyperRectangle& a, const HyperRectangle& b) {
    return a.offset == b.offset && a.shape == b.shape;
  }
};

// Product of the extents (1 for a scalar). Callers bound the extents first (see
// CheckTiling), so the product does not overflow.
int64_t Volume(absl::Span<const int64_t> shape);

// OK if every extent is in [1, 2^56] and so is their product: the bounds under which
// element counts, and byte counts (4x), fit in int64. INVALID_ARGUMENT otherwise.
absl::Status CheckShape(absl::Span<const int64_t> shape);

// "[0:4, 8:16]", for messages.
std::string DebugString(const HyperRectangle& box);

// The common part of `a` and `b`, or nullopt if they do not overlap (or differ in rank).
std::optional<HyperRectangle> Intersect(const HyperRectangle& a, const HyperRectangle& b);

// OK if `boxes` tile [0, global_shape) exactly: every box lies inside the tensor, no two
// overlap, and together they cover every element. Otherwise INVALID_ARGUMENT saying which
// rule fails (rank mismatch, empty or out-of-bounds box, which two boxes overlap, or how
// many elements are left uncovered). Identical duplicates count as an overlap: dedupe them
// first. O(boxes^2), meant for the few shards (at most the tensor-parallel size) of one
// tensor.
absl::Status CheckTiling(absl::Span<const int64_t> global_shape,
                         absl::Span<const HyperRectangle> boxes);

// A contiguous run of elements that appears contiguously in two row-major buffers.
struct HyperRectangleRun {
  int64_t src_offset = 0;  // elements from the start of the source box's buffer
  int64_t dst_offset = 0;  // elements from the start of the destination box's buffer
  int64_t length = 0;      // elements
};

// Calls `fn` for the runs that together hold `region` (which must lie inside both `src`
// and `dst`), in increasing src_offset order. Runs are as long as the layouts allow:
// the innermost dimensions that `region`, `src` and `dst` all span fully merge into one run
// (a whole box is one run when src == dst == region).
void ForEachRun(const HyperRectangle& src, const HyperRectangle& dst, const HyperRectangle& region,
                const std::function<void(const HyperRectangleRun&)>& fn);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_HYPER_RECTANGLE_H_
