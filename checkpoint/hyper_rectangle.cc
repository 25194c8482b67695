#include "checkpoint/hyper_rectangle.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace mtrain {

int64_t Volume(absl::Span<const int64_t> shape) {
  int64_t volume = 1;
  for (int64_t d : shape) volume *= d;
  return volume;
}

absl::Status CheckShape(absl::Span<const int64_t> shape) {
  constexpr int64_t kMaxElements = int64_t{1} << 56;
  int64_t volume = 1;
  for (int64_t d : shape) {
    // Checking each factor against kMaxElements / volume keeps the product itself in range.
    if (d <= 0 || d > kMaxElements / volume) {
      return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ", "),
                                                     "] has an extent or a product outside "
                                                     "[1, 2^56]"));
    }
    volume *= d;
  }
  return absl::OkStatus();
}

std::string DebugString(const HyperRectangle& box) {
  std::vector<std::string> ranges;
  for (size_t k = 0; k < box.shape.size() && k < box.offset.size(); ++k) {
    ranges.push_back(absl::StrCat(box.offset[k], ":", box.offset[k] + box.shape[k]));
  }
  return absl::StrCat("[", absl::StrJoin(ranges, ", "), "]");
}

std::optional<HyperRectangle> Intersect(const HyperRectangle& a, const HyperRectangle& b) {
  const size_t rank = a.shape.size();
  if (b.shape.size() != rank || a.offset.size() != rank || b.offset.size() != rank) {
    return std::nullopt;
  }
  HyperRectangle common;
  common.offset.resize(rank);
  common.shape.resize(rank);
  for (size_t k = 0; k < rank; ++k) {
    const int64_t begin = std::max(a.offset[k], b.offset[k]);
    const int64_t end = std::min(a.offset[k] + a.shape[k], b.offset[k] + b.shape[k]);
    if (end <= begin) return std::nullopt;
    common.offset[k] = begin;
    common.shape[k] = end - begin;
  }
  return common;
}

absl::Status CheckTiling(absl::Span<const int64_t> global_shape,
                         absl::Span<const HyperRectangle> boxes) {
  RETURN_IF_ERROR(CheckShape(global_shape));
  const int64_t total = Volume(global_shape);
  int64_t covered = 0;
  for (const HyperRectangle& box : boxes) {
    if (box.shape.size() != global_shape.size() || box.offset.size() != global_shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", DebugString(box), " has rank ",
                                                     box.shape.size(), " but the tensor has rank ",
                                                     global_shape.size()));
    }
    for (size_t k = 0; k < global_shape.size(); ++k) {
      if (box.shape[k] <= 0 || box.offset[k] < 0 ||
          box.offset[k] > global_shape[k] - box.shape[k]) {
        return absl::InvalidArgumentError(absl::StrCat("shard ", DebugString(box),
                                                       " is empty or outside the global shape [",
                                                       absl::StrJoin(global_shape, ", "), "]"));
      }
    }
    covered += Volume(box.shape);
  }
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      if (Intersect(boxes[i], boxes[j]).has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("shards ", DebugString(boxes[i]), " and ",
                                                       DebugString(boxes[j]), " overlap"));
      }
    }
  }
  // Disjoint boxes inside the tensor cover it exactly when their volumes add up to it.
  if (covered != total) {
    return absl::InvalidArgumentError(absl::StrCat("shards cover ", covered, " of ", total,
                                                   " elements: the gap has no stored data"));
  }
  return absl::OkStatus();
}

void ForEachRun(const HyperRectangle& src, const HyperRectangle& dst, const HyperRectangle& region,
                const std::function<void(const HyperRectangleRun&)>& fn) {
  const int rank = static_cast<int>(region.shape.size());
  if (rank == 0) {
    fn({0, 0, 1});
    return;
  }
  // Dimensions [inner, rank) form one contiguous run in both buffers: the region spans
  // them fully in src and dst alike, so stepping to the next index of dimension inner - 1
  // continues right after the previous run's last element. Dimension inner - 1 (or the
  // last dimension if none merges) is partially spanned and closes the run.
  int inner = rank;
  while (inner > 0 && region.shape[inner - 1] == src.shape[inner - 1] &&
         region.shape[inner - 1] == dst.shape[inner - 1]) {
    --inner;
  }
  const int run_dim = std::max(inner - 1, 0);  // first dimension inside a run
  int64_t length = 1;
  for (int k = run_dim; k < rank; ++k) length *= region.shape[k];

  // Row-major strides of both buffers.
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (int k = rank - 2; k >= 0; --k) {
    src_stride[k] = src_stride[k + 1] * src.shape[k + 1];
    dst_stride[k] = dst_stride[k + 1] * dst.shape[k + 1];
  }
  // Odometer over the region's indices in the dimensions outside a run.
  std::vector<int64_t> index(region.offset.begin(), region.offset.begin() + run_dim);
  while (true) {
    HyperRectangleRun run;
    run.length = length;
    for (int k = 0; k < rank; ++k) {
      const int64_t global = k < run_dim ? index[k] : region.offset[k];
      run.src_offset += (global - src.offset[k]) * src_stride[k];
      run.dst_offset += (global - dst.offset[k]) * dst_stride[k];
    }
    fn(run);
    int k = run_dim - 1;
    for (; k >= 0; --k) {
      if (++index[k] < region.offset[k] + region.shape[k]) break;
      index[k] = region.offset[k];
    }
    if (k < 0) return;
  }
}

}  // namespace mtrain
