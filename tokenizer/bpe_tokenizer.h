// Byte-level BPE, the tokenizer of GPT-2 (OpenAI's encoder.json/vocab.json + merges.txt)
// and of the BPE models HuggingFace `tokenizers` saves as tokenizer.json with a ByteLevel
// pre-tokenizer. Its ids equal `tokenizers`' on any text (tests/tokenizer_parity_test
// checks a 1 MB corpus of many scripts, emoji, white-space runs, digits, contractions and
// invalid UTF-8, which both read as Python's decode(errors="replace") does).
//
// Encoding: added tokens (e.g. <|endoftext|>) are cut out of the text verbatim first; the
// rest is split by GPT-2's pattern (gpt2_pretokenizer.h); each piece's UTF-8 bytes become
// byte symbols, adjacent symbols merge by the merges' ranks (lowest first, leftmost
// first), and the final symbols are the ids. Pieces repeat, so each distinct piece's ids
// are cached (a bounded cache; Encode is const and thread-compatible only: one tokenizer
// per thread, or copy it).
//
//   ASSIGN_OR_RETURN(BpeTokenizer gpt2, BpeTokenizer::FromVocabAndMerges("vocab.json",
//                                                                     "merges.txt"));
//   std::vector<int32_t> ids = gpt2.Encode("Hello world<|endoftext|>");  // 15496 995 50256
//   ASSIGN_OR_RETURN(std::string text, gpt2.Decode(ids));
#ifndef MTRAIN_TOKENIZER_BPE_TOKENIZER_H_
#define MTRAIN_TOKENIZER_BPE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mtrain {

class BpeTokenizer {
 public:
  // GPT-2's files: vocab.json ({"token": id}) and merges.txt (a "#version" line, then one
  // "left right" pair per line, highest priority first). INVALID_ARGUMENT naming the file
  // (and line) that does not parse, a merge of tokens not in the vocabulary, or a
  // vocabulary without all 256 byte symbols; NOT_FOUND for a missing file.
  static absl::StatusOr<BpeTokenizer> FromVocabAndMerges(const std::string& vocab_path,
                                                         const std::string& merges_path);
  // A HuggingFace tokenizer.json whose model is BPE (no byte fallback; ignore_merges as
  // Llama 3 sets it) and whose pre-tokenizer is ByteLevel (GPT-2's pattern), or a Sequence
  // of a Split by GPT-2's or Llama 3's pattern (llama3_pretokenizer.h) and ByteLevel without
  // its own; no normalizer. INVALID_ARGUMENT naming the JSON field otherwise.
  static absl::StatusOr<BpeTokenizer> FromHuggingFaceJson(const std::string& path);
  // The same from the file's contents (`name` is used in messages).
  static absl::StatusOr<BpeTokenizer> ParseHuggingFaceJson(absl::string_view json,
                                                           const std::string& name);

  // A copy with its own (empty) cache, for another thread.
  BpeTokenizer Clone() const;

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  // Appends the ids of `text` (any bytes: invalid UTF-8 reads as U+FFFD).
  void Encode(absl::string_view text, std::vector<int32_t>* ids) const;
  std::vector<int32_t> Encode(absl::string_view text) const;

  // The text of `ids`. INVALID_ARGUMENT naming the position and value of the first id
  // that is not in the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  // One more than the largest id (ids need not be dense).
  int32_t vocab_size() const { return vocab_size_; }
  // The id of a token's text (a vocabulary entry in its byte-symbol spelling, or an added
  // token's content), if there is one.
  std::optional<int32_t> TokenId(absl::string_view token) const;
  // The end-of-document token's id, if the vocabulary has one: GPT-2's "<|endoftext|>", else
  // Llama 3's "<|end_of_text|>".
  std::optional<int32_t> end_of_document_id() const {
    if (std::optional<int32_t> gpt2 = TokenId("<|endoftext|>")) return gpt2;
    return TokenId("<|end_of_text|>");
  }

 private:
  struct Cache;
  BpeTokenizer();
  static absl::StatusOr<BpeTokenizer> Build(
      std::vector<std::pair<std::string, int32_t>> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges,
      std::vector<std::pair<std::string, int32_t>> added, bool add_prefix_space,
      const std::string& source);
  void EncodePiece(absl::string_view bytes, std::vector<int32_t>* ids) const;
  void EncodeText(absl::string_view text, std::vector<int32_t>* ids) const;

  enum class Pretokenizer { kGpt2, kLlama3 };

  int32_t vocab_size_ = 0;
  bool add_prefix_space_ = false;
  Pretokenizer pretokenizer_ = Pretokenizer::kGpt2;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256] = {};
  // (left id << 32 | right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  absl::flat_hash_map<std::string, int32_t> token_ids_;  // byte-symbol spelling -> id
  std::vector<std::string> id_bytes_;                    // id -> the bytes it stands for
  std::vector<bool> known_ids_;                          // id -> whether an entry names it
  std::vector<std::pair<std::string, int32_t>> added_;   // longest first
  std::unique_ptr<Cache> cache_;
};

}  // namespace mtrain

#endif  // MTRAIN_TOKENIZER_BPE_TOKENIZER_H_
