#include "tokenizer/llama3_pretokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/pretokenizer_testing.h"

namespace mtrain {
namespace {

// The pieces as UTF-8 strings. Expected values are what `tokenizers` 0.23's
// pre_tokenizers.Split(Regex(kLlama3SplitPattern), "isolated") and Python's
// regex.findall with the same pattern return.
std::vector<std::string> Split(const std::string& utf8) { return PiecesOf(SplitLikeLlama3, utf8); }

using Pieces = std::vector<std::string>;

TEST(Llama3PretokenizerTest, WordsTakeOneCharacterBeforeThem) {
  EXPECT_EQ(Split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split("(hello) ...world"), (Pieces{"(hello", ")", " ...", "world"}));
  EXPECT_EQ(Split("tab\tword\r\nline"), (Pieces{"tab", "\tword", "\r\n", "line"}));
  EXPECT_EQ(Split("'quoted' and 'x"), (Pieces{"'quoted", "'", " and", " '", "x"}));
}

TEST(Llama3PretokenizerTest, DigitsGoAtMostThreeTogether) {
  EXPECT_EQ(Split("abc12345 678!?"), (Pieces{"abc", "123", "45", " ", "678", "!?"}));
  EXPECT_EQ(Split("1,234,567.89"), (Pieces{"1", ",", "234", ",", "567", ".", "89"}));
}

TEST(Llama3PretokenizerTest, ContractionsIgnoreAsciiCaseOnly) {
  EXPECT_EQ(Split("I'M DON'T we'LL they've"),
            (Pieces{"I", "'M", " DON", "'T", " we", "'LL", " they", "'ve"}));
  EXPECT_EQ(Split("\u017f's '\u017f"), (Pieces{"\u017f", "'s", " '", "\u017f"}));
}

TEST(Llama3PretokenizerTest, WhiteSpaceRunsAndLineBreaks) {
  EXPECT_EQ(Split("a  \n\n  b"), (Pieces{"a", "  \n\n", " ", " b"}));
  EXPECT_EQ(Split("x \t\ty"), (Pieces{"x", " \t", "\ty"}));
  EXPECT_EQ(Split("end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
  EXPECT_EQ(Split("  trailing  "), (Pieces{" ", " trailing", "  "}));
}

}  // namespace
}  // namespace mtrain
