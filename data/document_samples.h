// DocumentSamples: Megatron's GPT dataset sampling over one split of an indexed dataset, as a
// SampleSource. The split is a range of the dataset's sequences (Megatron's GPT "documents"
// are the .idx's sequences).
//
// With T the tokens of the range's documents and S = seq_length, an epoch holds
// N = (T - 1) / S samples (Megatron's count, with its extra token). Epoch e:
//   1. the documents in an order shuffled for e (Fisher-Yates);
//   2. their tokens concatenated into the epoch's stream; sample k of the epoch is stream
//      tokens [k*S, k*S + S], S + 1 tokens, so consecutive samples share one token and each
//      stream position of [0, N*S) is an input exactly once; the tail is dropped;
//   3. the samples in an order shuffled for e: global index i is epoch i / N, sample
//      perm_e[i % N].
// Epochs never end: any index >= 0 is valid. Everything is a pure function of the dataset
// and the options, in integer arithmetic, so every rank on every machine draws the same
// samples. The shuffles use a splitmix64 counter stream seeded from (seed, split, epoch, a
// salt per shuffle) and Lemire's unbiased multiply-shift bounded draw.
//
// Epochs are built at first touch; at most two stay in memory (a batch near an epoch
// boundary touches both). Like Megatron's .npy index files, each epoch's index is cached
// on disk, one file per epoch in `cache_dir`, so the ranks of a job (and later jobs) build
// it once. Several processes may start on one dataset at once: the builder holds
// flock(LOCK_EX) on "<file>.lock", re-checks, writes "<file>.tmp.<pid>.<n>", fsyncs and
// renames it into place, so a reader sees a whole file or none. A cache directory that
// cannot be created or written is no error: the index is built in memory and Describe()
// says why.
//
// Cache file "<split>-<key>-epoch<e>", <key> 16 hex digits hashing the fields marked *;
// all integers 64-bit little-endian:
//   magic "MTDSIDX\0", version*, key, dataset sequence count*, dataset tokens*, .idx file
//   size*, hash of the range's sequence lengths*, range begin*, range end*, seq_length*,
//   seed*, split*, epoch, documents D, tokens T, samples N, checksum of the arrays;
//   then int64 document order[D], int64 stream offsets[D + 1] (offsets[j] = first token of
//   order[j] in the stream), int64 sample permutation[N].
// A file whose header, size or checksum does not match is treated as absent and rebuilt.
//
// Thread-safe: Fill may be called from several threads.
//
//   DocumentSamplesOptions options;
//   options.seq_length = 2048;
//   options.seed = 1234;
//   options.split = SplitKind::kTrain;
//   options.documents = SplitBoundaries(split, data->num_sequences(), SplitKind::kTrain);
//   ASSIGN_OR_RETURN(std::unique_ptr<DocumentSamples> samples,
//                    DocumentSamples::Create(data.get(), options));
//   RETURN_IF_ERROR(samples->Fill(k, absl::MakeSpan(sample)));
#ifndef MTRAIN_DATA_DOCUMENT_SAMPLES_H_
#define MTRAIN_DATA_DOCUMENT_SAMPLES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "data/indexed_dataset.h"
#include "data/sample_source.h"
#include "spec/data_split.h"

namespace mtrain {

struct DocumentSamplesOptions {
  int seq_length = 0;  // S
  uint64_t seed = 0;
  // Mixed into the shuffles' seeds and the cache file names.
  SplitKind split = SplitKind::kTrain;
  // [begin, end) of the dataset's sequences.
  SplitRange documents;
  // Empty: "<prefix>.mtrain-index" beside the dataset.
  std::string cache_dir;
  // False: never touch the disk.
  bool use_cache = true;
};

// How the epochs this instance used came to be, for tests and logs.
struct DocumentSamplesCacheStats {
  int64_t built = 0;    // shuffled here (and written to the cache when it is writable)
  int64_t loaded = 0;   // read from a valid cache file
  int64_t written = 0;  // of those built, how many were written to the cache
};

class DocumentSamples final : public SampleSource {
 public:
  // `data` must outlive the result. INVALID_ARGUMENT for seq_length <= 0, a range outside
  // [0, num_sequences] or reversed, or a range with fewer than seq_length + 1 tokens (an
  // empty one included), the message starting "data.split: " and naming the split, the
  // dataset and the numbers. Reads nothing but the dataset's index; epochs are built later.
  static absl::StatusOr<std::unique_ptr<DocumentSamples>> Create(
      const IndexedDataset* data, const DocumentSamplesOptions& options);

  // SampleSource.
  int seq_length() const override { return seq_length_; }
  absl::Status Fill(int64_t index, absl::Span<int32_t> tokens) override;
  std::string Describe() const override;

  int64_t num_documents() const { return documents_.size(); }
  int64_t num_tokens() const { return num_tokens_; }                // T
  int64_t samples_per_epoch() const { return samples_per_epoch_; }  // N

  // Where epoch `epoch`'s index is cached (whether or not the file exists); empty when
  // the cache is off.
  std::string CacheFilePath(int64_t epoch) const;
  DocumentSamplesCacheStats cache_stats() const;

 private:
  struct Epoch;  // one epoch's document order, stream offsets and sample permutation
  // The dataset's identity, as hashed into the cache key.
  struct DatasetIdentity {
    int64_t idx_file_size = 0;
    uint64_t lengths_hash = 0;  // of the range's sequence lengths, in order
  };

  DocumentSamples(const IndexedDataset* data, const DocumentSamplesOptions& options,
                  int64_t num_tokens, DatasetIdentity identity);

  // The index of `epoch`, from memory, the cache or built; keeps the two used last.
  std::shared_ptr<const Epoch> GetEpoch(int64_t epoch);
  // Loads or builds (and caches) `epoch`; called with mutex_ held.
  std::shared_ptr<const Epoch> LoadOrBuild(int64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::shared_ptr<const Epoch> Build(int64_t epoch) const;
  // The epoch's file, or nullptr when it is absent or invalid.
  std::shared_ptr<const Epoch> Load(const std::string& path, int64_t epoch) const;
  // Writes `index` to `path` atomically; an error means nothing was written.
  absl::Status Write(const Epoch& index, const std::string& path) const;
  // The header of an epoch's cache file (the format above).
  std::vector<uint64_t> Header(int64_t epoch, uint64_t checksum) const;
  // Gives up on the cache after a failure to create or write in it.
  void MarkNotWritable(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const IndexedDataset* const data_;
  const int seq_length_;
  const uint64_t seed_;
  const SplitKind split_;
  const SplitRange documents_;
  const bool use_cache_;
  const std::string cache_dir_;
  const int64_t num_tokens_;
  const int64_t samples_per_epoch_;
  const DatasetIdentity identity_;
  // Hash of the fields that decide the index (see the file format above).
  const uint64_t key_;

  mutable Mutex mutex_;
  // The two epochs used last; slot order carries no meaning.
  std::shared_ptr<const Epoch> epochs_[2] ABSL_GUARDED_BY(mutex_);
  int last_used_slot_ ABSL_GUARDED_BY(mutex_) = 0;
  // Empty while the cache directory is usable; else why the index lives in memory.
  std::string not_writable_ ABSL_GUARDED_BY(mutex_);
  DocumentSamplesCacheStats stats_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_DOCUMENT_SAMPLES_H_
