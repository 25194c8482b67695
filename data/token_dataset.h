// A flat stream of token ids, the view the sequence sampler draws training samples from.
// Implementations: TextDataset (a text file tokenized in memory) and IndexedDataset
// (Megatron's .bin/.idx, all sequences concatenated in order).
//
// Implementations are immutable once opened, so Read may be called from several threads.
#ifndef MTRAIN_DATA_TOKEN_DATASET_H_
#define MTRAIN_DATA_TOKEN_DATASET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace mtrain {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;

  // Number of tokens.
  virtual int64_t size() const = 0;

  // Copies tokens [offset, offset + length) to `out`. OUT_OF_RANGE unless
  // 0 <= offset, 0 <= length and offset + length <= size(). Implementations that convert
  // stored values may also return DATA_LOSS for a value that is not a valid token id.
  virtual absl::Status Read(int64_t offset, int length, int32_t* out) const = 0;

  // A bound B, known without reading the tokens, such that every token id is in [0, B):
  // 256 for the byte tokenizer, 65536 for an indexed dataset stored as uint16. 2^31 means
  // no guarantee. Lets the vocabulary check skip reading every token when B already fits.
  virtual int64_t vocab_upper_bound() const = 0;

  // Where the tokens come from (a file path or prefix), for error messages.
  virtual std::string source() const = 0;
};

// The OUT_OF_RANGE check every Read implementation starts with, naming `source`.
absl::Status CheckReadRange(const TokenDataset& dataset, int64_t offset, int length);

}  // namespace mtrain

#endif  // MTRAIN_DATA_TOKEN_DATASET_H_
