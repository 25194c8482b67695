#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(Utf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii /data/corpus.txt"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é € 😀
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));                           // U+10FFFF
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));  // NUL is UTF-8; callers refuse it
}

TEST(Utf8Test, FindsTheFirstIllFormedByte) {
  EXPECT_EQ(FindInvalidUtf8("ab\xFF"), 2u);
  EXPECT_EQ(FindInvalidUtf8("\x80"), 0u);              // lone continuation byte
  EXPECT_EQ(FindInvalidUtf8("x\xC3"), 1u);             // truncated
  EXPECT_EQ(FindInvalidUtf8("\xC0\xAF"), 0u);          // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("\xE0\x80\xAF"), 0u);      // overlong, 3 bytes
  EXPECT_EQ(FindInvalidUtf8("\xED\xA0\x80"), 0u);      // surrogate U+D800
  EXPECT_EQ(FindInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("ok\xE2\x82"), 2u);        // truncated 3-byte sequence
}

}  // namespace
}  // namespace mtrain
