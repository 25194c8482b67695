#include "coordinator/page_token.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

TEST(PageTokenTest, RoundTrips) {
  for (int64_t after :
       {int64_t{0}, int64_t{1}, int64_t{10000}, std::numeric_limits<int64_t>::max()}) {
    absl::StatusOr<int64_t> decoded = DecodePageToken(EncodePageToken(after), "page_token");
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, after);
  }
}

TEST(PageTokenTest, EmptyTokenIsTheStart) {
  absl::StatusOr<int64_t> decoded = DecodePageToken("", "page_token");
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, 0);
}

TEST(PageTokenTest, ForeignTokensAreRefusedNamingTheField) {
  for (const std::string& bad : {std::string("12"), std::string("djE6"), EncodePageToken(5) + "x",
                                 std::string("djE6LTE"),  // "v1:-1"
                                 std::string(100, 'A'), std::string("v1:12")}) {
    absl::StatusOr<int64_t> decoded = DecodePageToken(bad, "page_token");
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(decoded.status().message(), HasSubstr("page_token: '"));
    EXPECT_THAT(decoded.status().message(), HasSubstr("not a page token"));
  }
}

}  // namespace
}  // namespace mtrain
