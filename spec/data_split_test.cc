#include "spec/data_split.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

Ranges AllRanges(absl::string_view text, int64_t count) {
  const absl::StatusOr<DataSplit> split = ParseDataSplit(text);
  EXPECT_TRUE(split.ok()) << split.status();
  Ranges out;
  for (SplitKind kind : {SplitKind::kTrain, SplitKind::kValidation, SplitKind::kTest}) {
    const SplitRange r = SplitBoundaries(*split, count, kind);
    out.emplace_back(r.begin, r.end);
  }
  return out;
}

// Expected values from Megatron-Core 0.16.1's formula (parse_and_normalize_split,
// convert_split_vector_to_split_matrix, then int(round(book_end * float(n)))), run in Python.
TEST(DataSplitTest, BoundariesMatchMegatronCore) {
  EXPECT_EQ(AllRanges("969,30,1", 1000), (Ranges{{0, 969}, {969, 999}, {999, 1000}}));
  EXPECT_EQ(AllRanges("969, 30, 1", 10163), (Ranges{{0, 9848}, {9848, 10153}, {10153, 10163}}));
  EXPECT_EQ(AllRanges("98/2", 7), (Ranges{{0, 7}, {7, 7}, {7, 7}}));
  EXPECT_EQ(AllRanges("1,1,1", 10), (Ranges{{0, 3}, {3, 7}, {7, 10}}));
  EXPECT_EQ(AllRanges("1,1,1", 5), (Ranges{{0, 2}, {2, 3}, {3, 5}}));
  EXPECT_EQ(AllRanges(kDefaultDataSplit, 12345),
            (Ranges{{0, 12345}, {12345, 12345}, {12345, 12345}}));
}

TEST(DataSplitTest, RangesTileTheWholeCount) {
  for (const char* text : {"969,30,1", "1,2,3", "0,1", "5", "0.1,0.2,0.7"}) {
    for (int64_t count : {0, 1, 2, 3, 17, 1000, 123457}) {
      const Ranges r = AllRanges(text, count);
      EXPECT_EQ(r[0].first, 0) << text << " " << count;
      EXPECT_EQ(r[0].second, r[1].first);
      EXPECT_EQ(r[1].second, r[2].first);
      EXPECT_EQ(r[2].second, count) << text << " " << count;
    }
  }
}

TEST(DataSplitTest, SharesAreNormalisedAndMissingOnesAreZero) {
  const absl::StatusOr<DataSplit> split = ParseDataSplit("3,1");
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_DOUBLE_EQ(split->share(SplitKind::kTrain), 0.75);
  EXPECT_DOUBLE_EQ(split->share(SplitKind::kValidation), 0.25);
  EXPECT_DOUBLE_EQ(split->share(SplitKind::kTest), 0.0);
}

TEST(DataSplitTest, BadTextIsRefusedNamingTheFieldAndTheShare) {
  for (const auto& [text, expected] :
       std::vector<std::pair<const char*, const char*>>{{"", "share 1"},
                                                        {"a,1", "share 1 (\"a\") is not a number"},
                                                        {"1,-2", "share 2 (-2) is negative"},
                                                        {"1,2,3,4", "has 4 shares"},
                                                        {"0,0,0", "sums to 0"},
                                                        {"1,,2", "share 2"},
                                                        {"inf", "share 1"},
                                                        {"nan,1", "share 1"}}) {
    const absl::StatusOr<DataSplit> split = ParseDataSplit(text);
    ASSERT_FALSE(split.ok()) << text;
    EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(split.status().message().rfind("data.split: ", 0), 0u) << split.status();
    EXPECT_NE(split.status().message().find(expected), absl::string_view::npos)
        << text << ": " << split.status();
  }
}

}  // namespace
}  // namespace mtrain
