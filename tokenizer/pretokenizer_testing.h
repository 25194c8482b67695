// Test helper for the hand-written pre-tokenizers (gpt2_pretokenizer.h,
// llama3_pretokenizer.h): the pieces a splitter cuts a UTF-8 text into, as UTF-8 strings,
// checking on the way that they cover the text exactly and in order.
#ifndef MTRAIN_TOKENIZER_PRETOKENIZER_TESTING_H_
#define MTRAIN_TOKENIZER_PRETOKENIZER_TESTING_H_

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/gpt2_pretokenizer.h"  // TextPiece
#include "tokenizer/unicode_text.h"

namespace mtrain {

using PretokenizerSplit = void (*)(const std::u32string& text, size_t begin, size_t end,
                                   std::vector<TextPiece>* pieces);

inline std::vector<std::string> PiecesOf(PretokenizerSplit split, const std::string& utf8) {
  const std::u32string text = DecodeUtf8Lossy(utf8);
  std::vector<TextPiece> pieces;
  split(text, 0, text.size(), &pieces);
  std::vector<std::string> out;
  size_t covered = 0;
  for (const TextPiece& p : pieces) {
    EXPECT_EQ(p.begin, covered) << "pieces must cover the text in order";
    covered = p.end;
    std::string s;
    for (size_t i = p.begin; i < p.end; ++i) AppendUtf8(text[i], &s);
    out.push_back(s);
  }
  EXPECT_EQ(covered, text.size());
  return out;
}

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_PRETOKENIZER_TESTING_H_
