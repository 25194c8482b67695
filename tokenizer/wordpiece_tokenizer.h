// WordPiece, BERT's tokenizer, as HuggingFace `tokenizers` runs it: special tokens cut out of
// the raw text first, BERT's normaliser and pre-tokenizer (bert_normalizer.h), then each word
// split greedily into the longest vocabulary entries from its start, pieces after the first
// spelled with the continuing prefix "##"; a word with a part no entry covers, or longer than
// max_input_chars_per_word characters, is one [UNK]. Its ids equal `tokenizers`' on any text
// (tests/tokenizer_parity_test checks a 1.4 MB multi-script corpus).
//
//   ASSIGN_OR_RETURN(WordPieceTokenizer bert, WordPieceTokenizer::FromHuggingFaceJson(path));
//   std::vector<int32_t> ids = bert.Encode("Hello, world!");  // hello , world !
//   int32_t cls = bert.cls_id();  // [CLS]: a sample builder frames segments itself
#ifndef MTRAIN_TOKENIZER_WORDPIECE_TOKENIZER_H_
#define MTRAIN_TOKENIZER_WORDPIECE_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tokenizer/bert_normalizer.h"

namespace mtrain {

class WordPieceTokenizer {
 public:
  // BERT's vocab.txt (one token per line, the id its line number) with the normaliser's
  // options (vocab.txt does not say whether the model is cased). Needs [UNK], [CLS], [SEP],
  // [MASK] and [PAD] in the vocabulary; they are matched verbatim in text. INVALID_ARGUMENT
  // naming the file and rule otherwise; NOT_FOUND for a missing file.
  static absl::StatusOr<WordPieceTokenizer> FromVocabTxt(const std::string& path,
                                                         const BertNormalizerOptions& options);
  // A HuggingFace tokenizer.json with a WordPiece model, the BertNormalizer (or none) and the
  // BertPreTokenizer; added tokens must be special or not normalised, with no single_word,
  // lstrip or rstrip. INVALID_ARGUMENT naming the JSON field otherwise.
  static absl::StatusOr<WordPieceTokenizer> FromHuggingFaceJson(const std::string& path);
  static absl::StatusOr<WordPieceTokenizer> ParseHuggingFaceJson(absl::string_view json,
                                                                 const std::string& name);

  // Appends the ids of `text` (any bytes: invalid UTF-8 reads as U+FFFD), without [CLS] and
  // [SEP].
  void Encode(absl::string_view text, std::vector<int32_t>* ids) const;
  std::vector<int32_t> Encode(absl::string_view text) const;

  // The text of `ids` as `tokenizers`' WordPiece decoder gives it: tokens joined by spaces,
  // "##" pieces glued to the one before, spaces before . , ? ! and English contractions
  // removed. INVALID_ARGUMENT naming the first id outside the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  std::optional<int32_t> TokenId(absl::string_view token) const;
  int32_t unk_id() const { return unk_id_; }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t mask_id() const { return mask_id_; }
  int32_t pad_id() const { return pad_id_; }
  // Per id: whether the entry continues the word before it (spelled with the "##" prefix):
  // what whole-word masking groups by.
  std::vector<bool> ContinuesWord() const;

 private:
  WordPieceTokenizer() = default;
  // Checks the entries and finds the special ids; `source` names the input in messages.
  static absl::StatusOr<WordPieceTokenizer> Build(std::vector<std::string> tokens,
                                                  std::vector<std::string> added,
                                                  BertNormalizerOptions options,
                                                  std::string unk_token, std::string prefix,
                                                  int max_word_characters,
                                                  const std::string& source);
  void EncodeSegment(absl::string_view text, std::vector<int32_t>* ids) const;
  void EncodeWord(const std::u32string& word, std::vector<int32_t>* ids) const;

  std::vector<std::string> tokens_;  // by id
  absl::flat_hash_map<std::string, int32_t> ids_;
  std::vector<std::string> added_;  // matched verbatim in the raw text, longest first
  BertNormalizerOptions options_;
  std::string prefix_ = "##";
  int max_word_characters_ = 100;
  int32_t unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, mask_id_ = -1, pad_id_ = -1;
};

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_WORDPIECE_TOKENIZER_H_
