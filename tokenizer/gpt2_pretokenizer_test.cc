#include "tokenizer/gpt2_pretokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/pretokenizer_testing.h"

namespace mtrain {
namespace {

// The pieces as UTF-8 strings. Expected values are what Python's
// regex.findall(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
// text) returns.
std::vector<std::string> Split(const std::string& utf8) { return PiecesOf(SplitLikeGpt2, utf8); }

using Pieces = std::vector<std::string>;

TEST(Gpt2PretokenizerTest, WordsTakeTheSpaceBeforeThem) {
  EXPECT_EQ(Split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split("abc123 456!?"), (Pieces{"abc", "123", " 456", "!?"}));
}

TEST(Gpt2PretokenizerTest, Contractions) {
  EXPECT_EQ(Split("I'm don't we'll they've she'd you're it's"),
            (Pieces{"I", "'m", " don", "'t", " we", "'ll", " they", "'ve", " she", "'d", " you",
                    "'re", " it", "'s"}));
  // Only lower case; "'S" is punctuation then a letter run.
  EXPECT_EQ(Split("IT'S"), (Pieces{"IT", "'", "S"}));
  // A space before an apostrophe joins the punctuation run.
  EXPECT_EQ(Split("a 'sup"), (Pieces{"a", " '", "sup"}));
  EXPECT_EQ(Split("!'s"), (Pieces{"!'", "s"}));
}

TEST(Gpt2PretokenizerTest, WhiteSpaceRunsGiveTheirLastSpaceToTheNextWord) {
  EXPECT_EQ(Split("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(Split("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Split("a \n b"), (Pieces{"a", " \n", " b"}));
  EXPECT_EQ(Split("a\tb"), (Pieces{"a", "\t", "b"}));
  EXPECT_EQ(Split("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(Split("  "), (Pieces{"  "}));
  EXPECT_EQ(Split(" "), (Pieces{" "}));
}

TEST(Gpt2PretokenizerTest, OtherScriptsEmojiAndNumbers) {
  EXPECT_EQ(Split("日本語 テキスト"), (Pieces{"日本語", " テキスト"}));
  EXPECT_EQ(Split("café au lait"), (Pieces{"café", " au", " lait"}));
  EXPECT_EQ(Split("I ❤️ 🍕!"), (Pieces{"I", " ❤️", " 🍕!"}));
  EXPECT_EQ(Split("½ Ⅳ ٣"), (Pieces{"½", " Ⅳ", " ٣"}));
  // A no-break space is white space but not the optional ASCII space.
  EXPECT_EQ(Split("a\xc2\xa0"
                  "b"),
            (Pieces{"a", "\xc2\xa0", "b"}));
}

}  // namespace
}  // namespace mtrain
