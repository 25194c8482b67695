// Llama 3's pre-tokenizer (tiktoken's cl100k-style pattern, as Meta's tokenizer.json gives
// it to HuggingFace `tokenizers` in a Split pre-tokenizer, behaviour Isolated):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// The text is cut into the pieces it matches, left to right, the first alternative that
// matches winning as in a backtracking engine. Written out by hand, as GPT-2's
// (gpt2_pretokenizer.h): one pass over the code points. What differs from GPT-2's: the
// contractions ignore case; a letter run may take one leading character of any kind but a
// line break, a letter or a digit; digits go at most three together; a punctuation run
// keeps the line breaks after it; a white-space run ending in line breaks is one piece.
#ifndef MTRAIN_TOKENIZER_LLAMA3_PRETOKENIZER_H_
#define MTRAIN_TOKENIZER_LLAMA3_PRETOKENIZER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "tokenizer/gpt2_pretokenizer.h"  // TextPiece

namespace mtrain {

// The pattern as tokenizer.json spells it (what BpeTokenizer recognises).
extern const char kLlama3SplitPattern[];

// Appends the pieces of text[begin, end) to `pieces`; they cover it exactly, in order.
void SplitLikeLlama3(const std::u32string& text, size_t begin, size_t end,
                     std::vector<TextPiece>* pieces);

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_LLAMA3_PRETOKENIZER_H_
