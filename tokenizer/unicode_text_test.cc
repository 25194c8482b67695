#include "tokenizer/unicode_text.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(UnicodeTextTest, DecodesValidUtf8AndEncodesItBack) {
  const std::string text = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";  // a é € 😀
  const std::u32string chars = DecodeUtf8Lossy(text);
  EXPECT_EQ(chars, (std::u32string{U'a', 0xE9, 0x20AC, 0x1F600}));
  std::string back;
  for (char32_t c : chars) AppendUtf8(c, &back);
  EXPECT_EQ(back, text);
}

// Python: bytes.decode("utf-8", "replace"), one U+FFFD per maximal subpart.
TEST(UnicodeTextTest, ReplacesIllFormedSequencesAsPythonDoes) {
  const char32_t r = kReplacementCharacter;
  // A lone continuation byte; an impossible lead.
  EXPECT_EQ(DecodeUtf8Lossy("\x80x\xff"), (std::u32string{r, U'x', r}));
  // A truncated 3-byte sequence is one U+FFFD: b"\xe2\x82x".decode(errors="replace").
  EXPECT_EQ(DecodeUtf8Lossy("\xe2\x82x"), (std::u32string{r, U'x'}));
  // Overlong and surrogate forms: each byte alone ("\xe0\x80\x80" -> 3, "\xed\xa0\x80" -> 3).
  EXPECT_EQ(DecodeUtf8Lossy("\xe0\x80\x80"), (std::u32string{r, r, r}));
  EXPECT_EQ(DecodeUtf8Lossy("\xed\xa0\x80"), (std::u32string{r, r, r}));
  // Above U+10FFFF: "\xf4\x90\x80\x80" -> 4.
  EXPECT_EQ(DecodeUtf8Lossy("\xf4\x90\x80\x80"), (std::u32string{r, r, r, r}));
  // Truncated at the end of the input.
  EXPECT_EQ(DecodeUtf8Lossy("ab\xf0\x9f\x98"), (std::u32string{U'a', U'b', r}));
}

TEST(UnicodeTextTest, ClassifiesLettersNumbersAndWhiteSpace) {
  EXPECT_TRUE(IsUnicodeLetter(U'a'));
  EXPECT_TRUE(IsUnicodeLetter(0x4E2D));  // 中
  EXPECT_TRUE(IsUnicodeLetter(0x05D0));  // א
  EXPECT_FALSE(IsUnicodeLetter(U'1'));
  EXPECT_FALSE(IsUnicodeLetter(0x1F600));  // 😀 is a symbol
  EXPECT_TRUE(IsUnicodeNumber(U'7'));
  EXPECT_TRUE(IsUnicodeNumber(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(IsUnicodeNumber(0x00BD));  // ½ (No)
  EXPECT_TRUE(IsUnicodeNumber(0x2163));  // Ⅳ (Nl)
  EXPECT_FALSE(IsUnicodeNumber(U'x'));
  for (char32_t c : {U' ', U'\t', U'\n', U'\v', U'\f', U'\r', char32_t{0x85}, char32_t{0xA0},
                     char32_t{0x2003}, char32_t{0x3000}, char32_t{0x2028}}) {
    EXPECT_TRUE(IsUnicodeWhiteSpace(c)) << static_cast<uint32_t>(c);
  }
  // Python's str.isspace() says yes to these separators, Unicode's White_Space does not.
  EXPECT_FALSE(IsUnicodeWhiteSpace(0x1C));
  EXPECT_FALSE(IsUnicodeWhiteSpace(0x200B));  // zero width space
}

}  // namespace
}  // namespace mtrain
