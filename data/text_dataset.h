// A raw text file tokenized with the byte tokenizer and held in memory (4 bytes per byte of
// text): the DATA_FORMAT_TEXT source, meant for corpora of a few hundred MB at most. Larger
// corpora belong in the indexed (MMIDIDX) format, which is memory-mapped instead.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<TextDataset> data, TextDataset::Open(path));
#ifndef MTRAIN_DATA_TEXT_DATASET_H_
#define MTRAIN_DATA_TEXT_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/token_dataset.h"
#include "tokenizer/bpe_tokenizer.h"

namespace mtrain {

class TextDataset final : public TokenDataset {
 public:
  // The largest text file Open accepts: 1 GiB becomes 4 GiB of tokens in memory.
  static constexpr int64_t kMaxTextFileBytes = int64_t{1} << 30;

  // Reads and tokenizes the whole file, with the byte tokenizer or `tokenizer` (a BPE).
  // NOT_FOUND if it does not exist; INVALID_ARGUMENT if it is empty, larger than
  // kMaxTextFileBytes or not a regular file (a device such as /dev/zero, a FIFO, a
  // directory); the message names the path.
  static absl::StatusOr<std::unique_ptr<TextDataset>> Open(const std::string& path,
                                                           const BpeTokenizer* tokenizer = nullptr);

  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  absl::Status Read(int64_t offset, int length, int32_t* out) const override;
  int64_t vocab_upper_bound() const override;
  std::string source() const override { return path_; }

 private:
  TextDataset(std::string path, std::vector<int32_t> tokens, int64_t vocab_upper_bound)
      : path_(std::move(path)), tokens_(std::move(tokens)), vocab_upper_bound_(vocab_upper_bound) {}

  std::string path_;
  std::vector<int32_t> tokens_;
  int64_t vocab_upper_bound_;
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_TEXT_DATASET_H_
