// A HuggingFace tokenizer.json for tests: the 256 byte symbols as ids 0-255 (in byte
// order), then `merges` ("left right" in byte-symbol spelling, each merged token taking the
// next id), then `added` tokens (content -> id).
#ifndef MTRAIN_TOKENIZER_TOKENIZER_JSON_FOR_TEST_H_
#define MTRAIN_TOKENIZER_TOKENIZER_JSON_FOR_TEST_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mtrain {

// GPT-2's stand-in character for byte b, as UTF-8.
std::string ByteSymbolForTest(int b);

std::string TokenizerJsonForTest(const std::vector<std::pair<std::string, std::string>>& merges,
                                 const std::vector<std::pair<std::string, int32_t>>& added);

// A small BPE for English text: 12 merges of frequent pairs ("th", "he", " the", ...), then
// <|endoftext|> as id 268 (vocabulary 269). The end-to-end training tests tokenize the
// shipped corpus with it.
std::string SmallEnglishTokenizerJsonForTest();

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_TOKENIZER_JSON_FOR_TEST_H_
