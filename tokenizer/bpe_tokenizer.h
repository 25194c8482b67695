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
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json_fwd.hpp"

namespace mtrain {

class BpeTokenizer {
 public:
  // GPT-2's files: vocab.json ({"token": id}) and merges.txt (a "#version" line, then one
  // "left right" pair per line, highest priority first). INVALID_ARGUMENT naming the file
  // (and line) that does not parse, a merge of tokens not in the vocabulary, or a
  // vocabulary without all 256 byte symbols; NOT_FOUND for a missing file.
  static absl::StatusOr<BpeTokenizer> FromVocabAndMerges(const std::string& vocab_path,
                                                         const std::string& merges_path);
  // A HuggingFace tokenizer.json whose model is BPE, of one of two kinds:
  //   - byte-level: the pre-tokenizer ByteLevel (GPT-2's pattern), or a Sequence of a Split
  //     by GPT-2's or Llama 3's pattern (llama3_pretokenizer.h) and ByteLevel without its
  //     own; no normalizer; ignore_merges as Llama 3 sets it;
  //   - SentencePiece-style (Llama 2, Mistral): the normalizer Sequence [Prepend "▁",
  //     Replace " " -> "▁"] with no pre-tokenizer, or no normalizer and the Metaspace
  //     pre-tokenizer ("▁", prepend_scheme always / first / never, split or not); byte
  //     fallback to <0xNN> tokens and fuse_unk as the model says.
  // INVALID_ARGUMENT naming the JSON field otherwise.
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
  // Llama 3's "<|end_of_text|>", else Llama 2's "</s>".
  std::optional<int32_t> end_of_document_id() const {
    for (const char* token : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
      if (std::optional<int32_t> id = TokenId(token)) return id;
    }
    return std::nullopt;
  }

 private:
  struct Cache;
  BpeTokenizer();
  static absl::StatusOr<BpeTokenizer> Build(
      std::vector<std::pair<std::string, int32_t>> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges,
      std::vector<std::pair<std::string, int32_t>> added, bool add_prefix_space,
      const std::string& source, bool byte_level = true);
  static absl::StatusOr<BpeTokenizer> ParseHuggingFaceJsonFields(absl::string_view json,
                                                                 const std::string& name);
  // Merges symbols (ids) by rank, lowest first, every occurrence left to right.
  void MergeSymbols(std::vector<int32_t>* symbols) const;
  void MergeSymbolsWithHeap(std::vector<int32_t>* symbols) const;
  // The piece cache: Recall appends a cached piece's ids (false when not cached).
  bool Recall(absl::string_view piece, std::vector<int32_t>* ids) const;
  void Remember(std::string piece, std::vector<int32_t> symbols) const;
  void EncodePiece(absl::string_view bytes, std::vector<int32_t>* ids) const;
  void EncodeText(absl::string_view text, bool at_start, std::vector<int32_t>* ids) const;

  enum class Pretokenizer { kGpt2, kLlama3 };
  // SentencePiece-style BPE (Llama 2, Mistral; bpe_sentencepiece.cc): symbols are
  // characters, spaces are U+2581 ("▁"), unknown characters fall back to <0xNN> byte
  // tokens.
  struct SentencePiece {
    bool enabled = false;
    // Where a "▁" goes in front: every segment between added tokens (the Prepend
    // normalizer, or Metaspace "always"), the text's first segment only ("first"), never.
    enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
    bool split = false;      // Metaspace split: pieces start at each "▁"
    bool metaspace = false;  // the Metaspace pre-tokenizer (else the Prepend normalizer)
    bool byte_fallback = false;
    bool fuse_unk = false;
    int32_t unk_id = -1;               // -1: none
    int32_t byte_token_ids[256] = {};  // <0x00>..<0xFF>, when byte_fallback
  };
  // Reads the SentencePiece-style settings of a tokenizer.json (normalizer, pre_tokenizer,
  // model) into `sp`; INVALID_ARGUMENT naming the field that is not supported.
  absl::Status ConfigureSentencePiece(const nlohmann::json& root, const std::string& name);
  void EncodeSentencePieceText(absl::string_view text, bool at_start,
                               std::vector<int32_t>* ids) const;
  void EncodeSentencePiecePiece(const std::u32string& chars, size_t begin, size_t end,
                                std::vector<int32_t>* ids) const;

  int32_t vocab_size_ = 0;
  bool add_prefix_space_ = false;
  Pretokenizer pretokenizer_ = Pretokenizer::kGpt2;
  bool ignore_merges_ = false;
  SentencePiece sp_;
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
