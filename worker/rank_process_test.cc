#include "worker/rank_process.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(ProcessStateOfTest, ReadsTheLetterAfterTheCommandName) {
  EXPECT_EQ(ProcessStateOf("1234 (train) S 1 1234 1234 0 -1"), 'S');
  EXPECT_EQ(ProcessStateOf("1234 (train) T 1 1234 1234 0 -1"), 'T');
  // A command name with spaces and parentheses of its own.
  EXPECT_EQ(ProcessStateOf("77 (a) b (c)) t 1 2 3"), 't');
  EXPECT_EQ(ProcessStateOf(""), '?');
  EXPECT_EQ(ProcessStateOf("1234 (train)"), '?');
}

TEST(RankProcessTest, NoRankIsNeverStopped) {
  RankProcess ranks(RankProcessOptions{});
  EXPECT_EQ(ranks.StoppedFor(absl::Now()), absl::ZeroDuration());
}

}  // namespace
}  // namespace mtrain
