// GPT-2's pre-tokenizer: the text cut into the pieces its regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches, left to right, as OpenAI's encoder and HuggingFace's ByteLevel pre-tokenizer
// (use_regex) cut it. Written out by hand instead of run through a regex engine: one pass,
// no backtracking beyond the one character the look-ahead gives back. BPE then runs within
// each piece.
//
//   for (const TextPiece& piece : SplitLikeGpt2(text)) Bpe(text.substr(piece.begin, ...));
#ifndef MTRAIN_TOKENIZER_GPT2_PRETOKENIZER_H_
#define MTRAIN_TOKENIZER_GPT2_PRETOKENIZER_H_

#include <cstddef>
#include <string>
#include <vector>

namespace mtrain {

struct TextPiece {
  size_t begin = 0;  // in code points
  size_t end = 0;
};

// The pattern as a tokenizer.json Split pre-tokenizer spells it.
extern const char kGpt2SplitPattern[];

// Appends the pieces of text[begin, end) to `pieces`; they cover it exactly, in order.
void SplitLikeGpt2(const std::u32string& text, size_t begin, size_t end,
                   std::vector<TextPiece>* pieces);

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_GPT2_PRETOKENIZER_H_
