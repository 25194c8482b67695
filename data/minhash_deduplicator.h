// Near-duplicate detection by MinHash locality-sensitive hashing, as the Megatron paper's
// corpus was cleaned (documents at Jaccard similarity above 0.7 removed; Broder 1997's
// MinHash, banded as in Leskovec et al.'s "Mining of Massive Datasets" ch. 3). A document's
// shingles (word or character n-grams) are hashed; `bands * rows` seeded permutations
// h(x) = (a x + b) mod (2^61 - 1) give its signature (the minimum of each over the
// shingles); two documents whose signatures agree on all `rows` values of any band are
// candidates, with probability 1 - (1 - J^rows)^bands for Jaccard similarity J. A streaming
// pass drops every document that shares a band with any earlier one (kept or dropped, so
// chains of near-duplicates go too), so the kept document of a cluster is its first in
// input order: deterministic, whatever the thread count that computed the signatures.
//
//   MinHashDeduplicator dedup(options);
//   const MinHashSignature s = dedup.Signature(text);       // any thread
//   if (dedup.IsNearDuplicateAndRemember(s)) drop(...);      // one thread, input order
#ifndef MTRAIN_DATA_MINHASH_DEDUPLICATOR_H_
#define MTRAIN_DATA_MINHASH_DEDUPLICATOR_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"

namespace mtrain {

enum class ShingleKind { kWords, kCharacters };

struct MinHashOptions {
  ShingleKind shingles = ShingleKind::kWords;
  int ngram = 5;   // words or bytes a shingle
  int bands = 17;  // see OptimalBandsAndRows: for 0.7 with 136 permutations
  int rows = 8;
  uint64_t seed = 42;
};

// The (bands, rows) with bands * rows <= permutations whose candidate curve
// 1 - (1 - J^rows)^bands best separates similarity above `threshold` from below: the
// least sum of the false-positive area (J < threshold) and false-negative area
// (J >= threshold), as datasketch's MinHashLSH chooses.
std::pair<int, int> OptimalBandsAndRows(double threshold, int permutations);

// One band hash per band.
using MinHashSignature = std::vector<uint64_t>;

class MinHashDeduplicator {
 public:
  explicit MinHashDeduplicator(const MinHashOptions& options);

  // The band hashes of `text` (thread-safe). A text shorter than one shingle is one shingle.
  MinHashSignature Signature(absl::string_view text) const;

  // Whether an earlier document shares a band with `signature`; remembers it either way.
  bool IsNearDuplicateAndRemember(const MinHashSignature& signature);

  const MinHashOptions& options() const { return options_; }
  // Bytes the band tables hold (about 9 per band per document, plus the sets' slack).
  size_t memory_bytes() const;

 private:
  MinHashOptions options_;
  std::vector<uint64_t> a_, b_;                      // the bands * rows permutations
  std::vector<absl::flat_hash_set<uint64_t>> seen_;  // per band
};

// A 64-bit hash of `bytes` that is the same on every run and machine (FNV-1a with a
// finalizer); the shingles' hash, and the preprocess tool's exact-duplicate key.
uint64_t StableHash(absl::string_view bytes);

// Estimated Jaccard similarity of two documents' shingle sets, exactly (for tests and
// benchmarks).
double ShingleJaccard(absl::string_view a, absl::string_view b, ShingleKind kind, int ngram);

}  // namespace mtrain

#endif  // MTRAIN_DATA_MINHASH_DEDUPLICATOR_H_
