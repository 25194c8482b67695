#include "data/sentence_splitter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mtrain {
namespace {

std::vector<std::string> Split(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view s : SplitSentences(text)) out.emplace_back(s);
  return out;
}

TEST(SentenceSplitterTest, EndsSentencesAtTerminalPunctuationBeforeANewSentence) {
  EXPECT_EQ(Split("The cat sat. The dog ran! Did it? Yes."),
            (std::vector<std::string>{"The cat sat.", "The dog ran!", "Did it?", "Yes."}));
  // Closing quotes and brackets stay with their sentence; runs of marks are one end.
  EXPECT_EQ(
      Split("He said \"stop.\" Then (quietly.) Really?!  Fine."),
      (std::vector<std::string>{"He said \"stop.\"", "Then (quietly.)", "Really?!", "Fine."}));
  EXPECT_EQ(Split("She wrote \xE2\x80\x9CGo.\xE2\x80\x9D It worked."),
            (std::vector<std::string>{"She wrote \xE2\x80\x9CGo.\xE2\x80\x9D", "It worked."}));
}

TEST(SentenceSplitterTest, KeepsAbbreviationsInitialsNumbersAndLowerCaseContinuations) {
  EXPECT_EQ(Split("Dr. Smith met Mr. J. R. Jones at 3.30 p.m. on St. Mark's day. They ate."),
            (std::vector<std::string>{
                "Dr. Smith met Mr. J. R. Jones at 3.30 p.m. on St. Mark's day.", "They ate."}));
  EXPECT_EQ(Split("Fruit, e.g. Apples, etc. Are good. vs. Bad."),
            (std::vector<std::string>{"Fruit, e.g. Apples, etc. Are good. vs. Bad."}));
  EXPECT_EQ(Split("It costs 3.5 dollars. ok then."),
            (std::vector<std::string>{"It costs 3.5 dollars. ok then."}));
}

TEST(SentenceSplitterTest, BlankLinesEndSentencesAndEmptyOnesAreDropped) {
  EXPECT_EQ(Split("A heading\n\nFirst line\nstill first. Second.\n \n\n  "),
            (std::vector<std::string>{"A heading", "First line\nstill first.", "Second."}));
  EXPECT_TRUE(Split("").empty());
  EXPECT_TRUE(Split(" \n\n \t").empty());
  EXPECT_EQ(Split("No end mark"), (std::vector<std::string>{"No end mark"}));
}

}  // namespace
}  // namespace mtrain
