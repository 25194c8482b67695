// BERT's text normaliser and pre-tokenizer, as HuggingFace `tokenizers` defines them
// (BertNormalizer, BertPreTokenizer), for the WordPiece tokenizer (wordpiece_tokenizer.h):
//   normaliser: clean_text drops U+0000, U+FFFD and every other character of general category
//     C (control, format, unassigned, private use, surrogate) except tab, newline and
//     carriage return, and maps white space (the White_Space property, plus \t \n \r) to a
//     space; handle_chinese_chars puts spaces around CJK ideographs (BERT's eight blocks);
//     strip_accents (default: as lowercase) decomposes to NFD and drops nonspacing marks
//     (Mn); lowercase maps each character to its full lower case, one at a time (so a final
//     sigma stays σ, as `tokenizers` does);
//   pre-tokenizer: splits at white space (dropped) and isolates each punctuation character
//     (ASCII punctuation, which includes $ + < = > ^ ` | ~, and Unicode's P categories).
// The Unicode data (normalisation, case mapping, categories) comes from ICU rather than
// tables of our own.
//
//   std::u32string text = BertNormalize(DecodeUtf8Lossy("Héllo, WORLD"), {});  // hello, world
//   std::vector<std::u32string> words = BertPreTokenize(text);  // hello | , | world
#ifndef MTRAIN_TOKENIZER_BERT_NORMALIZER_H_
#define MTRAIN_TOKENIZER_BERT_NORMALIZER_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mtrain {

struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  // unset: the same as lowercase
  bool lowercase = true;
};

std::u32string BertNormalize(std::u32string_view text, const BertNormalizerOptions& options);

// The words of normalised text, in order.
std::vector<std::u32string> BertPreTokenize(std::u32string_view text);

// The character classes above, exposed for tests.
bool IsBertWhiteSpace(char32_t c);
bool IsBertControl(char32_t c);
bool IsBertPunctuation(char32_t c);
bool IsBertChineseCharacter(char32_t c);

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_BERT_NORMALIZER_H_
