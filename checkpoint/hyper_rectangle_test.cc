#include "checkpoint/hyper_rectangle.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(HyperRectangleTest, IntersectsPerDimension) {
  const HyperRectangle a{{0, 4}, {8, 8}};
  const HyperRectangle b{{6, 0}, {4, 6}};
  const std::optional<HyperRectangle> common = Intersect(a, b);
  ASSERT_TRUE(common.has_value());
  EXPECT_EQ(*common, (HyperRectangle{{6, 4}, {2, 2}}));
  // Touching is not overlapping.
  EXPECT_FALSE(Intersect(a, HyperRectangle{{8, 0}, {2, 16}}).has_value());
  EXPECT_FALSE(Intersect(a, HyperRectangle{{0}, {8}}).has_value());  // other rank
}

TEST(HyperRectangleTest, AcceptsAnExactTiling) {
  const std::vector<int64_t> shape = {3, 8, 4};
  EXPECT_TRUE(CheckTiling(shape, {{{0, 0, 0}, {3, 4, 4}}, {{0, 4, 0}, {3, 4, 4}}}).ok());
  EXPECT_TRUE(CheckTiling({}, {{{}, {}}}).ok());  // a scalar is one element
}

TEST(HyperRectangleTest, RejectsGapOverlapDuplicateAndOutOfBounds) {
  const std::vector<int64_t> shape = {8, 4};
  const HyperRectangle top{{0, 0}, {4, 4}};
  const HyperRectangle bottom{{4, 0}, {4, 4}};
  absl::Status gap = CheckTiling(shape, {top});
  EXPECT_EQ(gap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gap.message().find("gap"), std::string::npos) << gap;
  absl::Status overlap = CheckTiling(shape, {top, bottom, {{3, 0}, {1, 4}}});
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.message().find("overlap"), std::string::npos) << overlap;
  EXPECT_FALSE(CheckTiling(shape, {top, bottom, bottom}).ok());  // dedupe first
  EXPECT_FALSE(CheckTiling(shape, {top, {{5, 0}, {4, 4}}}).ok());
  EXPECT_FALSE(CheckTiling(shape, {top, {{4, 0}, {4}}}).ok());
  EXPECT_FALSE(CheckTiling({8, 0}, {}).ok());
}

TEST(HyperRectangleTest, ShapesBeyondTwoToThe56AreRejected) {
  EXPECT_TRUE(CheckShape({int64_t{1} << 28, int64_t{1} << 28}).ok());
  EXPECT_FALSE(CheckShape({int64_t{1} << 40, int64_t{1} << 40}).ok());
  EXPECT_FALSE(CheckShape({-1}).ok());
}

TEST(HyperRectangleTest, WholeBoxIsOneRun) {
  const HyperRectangle box{{2, 0, 0}, {3, 4, 5}};
  std::vector<HyperRectangleRun> runs;
  ForEachRun(box, box, box, [&](const HyperRectangleRun& r) { runs.push_back(r); });
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].length, 60);
}

TEST(HyperRectangleTest, ColumnSliceRunsAreRows) {
  const HyperRectangle src{{0, 0}, {4, 8}};
  const HyperRectangle dst{{0, 4}, {4, 4}};
  std::vector<HyperRectangleRun> runs;
  ForEachRun(src, dst, dst, [&](const HyperRectangleRun& r) { runs.push_back(r); });
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[1].src_offset, 12);
  EXPECT_EQ(runs[1].dst_offset, 4);
  EXPECT_EQ(runs[1].length, 4);
}

// Copying through ForEachRun equals copying element by element, for random boxes.
TEST(HyperRectangleTest, RunsCopyExactlyTheIntersection) {
  std::mt19937 random(7);
  const std::vector<int64_t> global = {5, 6, 7};
  auto random_box = [&]() {
    HyperRectangle box;
    for (int64_t extent : global) {
      const int64_t begin = std::uniform_int_distribution<int64_t>(0, extent - 1)(random);
      const int64_t end = std::uniform_int_distribution<int64_t>(begin + 1, extent)(random);
      box.offset.push_back(begin);
      box.shape.push_back(end - begin);
    }
    return box;
  };
  auto global_index = [&](const HyperRectangle& box, int64_t local) {
    int64_t index = 0, stride = 1;
    for (int k = 2; k >= 0; --k) {
      index += (local % box.shape[k] + box.offset[k]) * stride;
      local /= box.shape[k];
      stride *= global[k];
    }
    return index;
  };
  int intersecting = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const HyperRectangle src = random_box(), dst = random_box();
    const std::optional<HyperRectangle> common = Intersect(src, dst);
    if (!common) continue;
    ++intersecting;
    std::vector<int64_t> src_data(Volume(src.shape));
    for (size_t i = 0; i < src_data.size(); ++i) src_data[i] = global_index(src, i);
    std::vector<int64_t> dst_data(Volume(dst.shape), -1);
    ForEachRun(src, dst, *common, [&](const HyperRectangleRun& r) {
      for (int64_t i = 0; i < r.length; ++i)
        dst_data[r.dst_offset + i] = src_data[r.src_offset + i];
    });
    int64_t copied = 0;
    for (size_t i = 0; i < dst_data.size(); ++i) {
      if (dst_data[i] == -1) continue;
      ++copied;
      ASSERT_EQ(dst_data[i], global_index(dst, i)) << "trial " << trial;
    }
    ASSERT_EQ(copied, Volume(common->shape)) << "trial " << trial;
  }
  EXPECT_GT(intersecting, 100);
}

}  // namespace
}  // namespace mtrain
