#include "data/document_samples.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "data/indexed_dataset_format.h"
#include "data/sequence_sampler.h"
#include "data/split_mix_stream.h"

namespace mtrain {

// Arrays are written in host order; every machine we train on is little-endian, and the
// header's magic would not match on one that is not, so such a file reads as absent.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "cache files are little-endian");

struct DocumentSamples::Epoch {
  int64_t number = 0;
  std::vector<int64_t> order;    // sequence indices, in stream order
  std::vector<int64_t> offsets;  // offsets[j]: first stream token of order[j]; D + 1
  std::vector<int64_t> samples;  // position in the epoch -> sample k
};

namespace {

// Bump when the shuffles or the file layout change: old files then read as absent.
constexpr uint64_t kFormatVersion = 1;
constexpr char kMagic[8] = {'M', 'T', 'D', 'S', 'I', 'D', 'X', '\0'};
constexpr int kHeaderFields = 17;
constexpr int64_t kHeaderBytes = kHeaderFields * 8;
// One salt per shuffle, so the two streams of an epoch differ: "document", "samples".
constexpr uint64_t kDocumentsSalt = 0x646f63756d656e74ULL;
constexpr uint64_t kSamplesSalt = 0x73616d706c657300ULL;

uint64_t Mix(uint64_t h, uint64_t value) { return SplitMix64(h ^ value); }

// Order-sensitive, and cheap: the terms are independent, so the CPU overlaps them.
uint64_t Checksum(const std::vector<int64_t>* const arrays[3]) {
  uint64_t sum = 0;
  uint64_t position = 0;
  for (int a = 0; a < 3; ++a) {
    for (int64_t value : *arrays[a]) {
      sum += SplitMix64(static_cast<uint64_t>(value) * 0xD6E8FEB86659FD93ULL + position++);
    }
  }
  return sum;
}

std::string ErrnoText(int error) { return std::strerror(error); }

// mkdir -p.
absl::Status MakeDirectories(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string part = dir.substr(0, slash);
    if (!part.empty() && mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", part));
    }
    if (slash == std::string::npos) return absl::OkStatus();
  }
}

// A file descriptor closed on every path out.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error close can return (a write-back failure).
  int Close() {
    const int result = close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = write(fd, at, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("write ", path));
    }
    at += written;
    size -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DocumentSamples>> DocumentSamples::Create(
    const IndexedDataset* data, const DocumentSamplesOptions& options) {
  if (data == nullptr) return absl::InvalidArgumentError("DocumentSamples: no dataset");
  if (options.seq_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.seq_length: ", options.seq_length, " must be > 0"));
  }
  const SplitRange range = options.documents;
  const char* split_name = SplitKindName(options.split);
  if (range.begin < 0 || range.end < range.begin || range.end > data->num_sequences()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.split: the ", split_name, " split of ", data->source(),
                     " covers documents [", range.begin, ", ", range.end, "), not a range of its ",
                     data->num_sequences(), " documents [0, ", data->num_sequences(), ")"));
  }
  int64_t num_tokens = 0;
  DatasetIdentity identity;
  identity.lengths_hash = SplitMix64(static_cast<uint64_t>(range.size()));
  for (int64_t i = range.begin; i < range.end; ++i) {
    ASSIGN_OR_RETURN(SequenceRange sequence, data->sequence(i));
    num_tokens += sequence.length;
    identity.lengths_hash = Mix(identity.lengths_hash, static_cast<uint64_t>(sequence.length));
  }
  const int64_t sample_tokens = int64_t{options.seq_length} + 1;
  if (num_tokens < sample_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.split: the ", split_name, " split of ", data->source(), " (documents [", range.begin,
        ", ", range.end, ")) holds ", num_tokens,
        " tokens, fewer than model.seq_length + 1 = ", sample_tokens,
        " that one sample needs [rule: every split in use holds at least seq_length + 1 "
        "tokens]"));
  }
  if (options.use_cache) {  // the size only names cache files
    const std::string idx_path = IndexFilePath(data->source());
    struct stat idx_stat;
    if (stat(idx_path.c_str(), &idx_stat) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("stat ", idx_path));
    }
    identity.idx_file_size = idx_stat.st_size;
  }

  std::unique_ptr<DocumentSamples> samples(
      new DocumentSamples(data, options, num_tokens, identity));
  if (samples->use_cache_) {
    // Found out now rather than at the first epoch, so that Describe() is right from the
    // start; a later write failure also moves the index into memory.
    std::string reason;
    absl::Status made = MakeDirectories(samples->cache_dir_);
    if (!made.ok()) {
      reason = std::string(made.message());
    } else if (access(samples->cache_dir_.c_str(), W_OK | X_OK) != 0) {
      reason = ErrnoText(errno);
    }
    MutexLock lock(&samples->mutex_);
    if (!reason.empty()) samples->MarkNotWritable(reason);
  }
  return samples;
}

namespace {

uint64_t CacheKey(const IndexedDataset& data, const DocumentSamplesOptions& options,
                  int64_t idx_file_size, uint64_t lengths_hash) {
  uint64_t h = SplitMix64(kFormatVersion);
  for (uint64_t field :
       {static_cast<uint64_t>(data.num_sequences()), static_cast<uint64_t>(data.size()),
        static_cast<uint64_t>(idx_file_size), lengths_hash,
        static_cast<uint64_t>(options.documents.begin),
        static_cast<uint64_t>(options.documents.end), static_cast<uint64_t>(options.seq_length),
        options.seed, static_cast<uint64_t>(options.split)}) {
    h = Mix(h, field);
  }
  return h;
}

}  // namespace

DocumentSamples::DocumentSamples(const IndexedDataset* data, const DocumentSamplesOptions& options,
                                 int64_t num_tokens, DatasetIdentity identity)
    : data_(data),
      seq_length_(options.seq_length),
      seed_(options.seed),
      split_(options.split),
      documents_(options.documents),
      use_cache_(options.use_cache),
      cache_dir_(options.cache_dir.empty() ? data->source() + ".mtrain-index" : options.cache_dir),
      num_tokens_(num_tokens),
      samples_per_epoch_((num_tokens - 1) / options.seq_length),
      identity_(identity),
      key_(CacheKey(*data, options, identity.idx_file_size, identity.lengths_hash)) {}

std::string DocumentSamples::CacheFilePath(int64_t epoch) const {
  if (!use_cache_) return "";
  return absl::StrFormat("%s/%s-%016x-epoch%d", cache_dir_, SplitKindName(split_), key_, epoch);
}

DocumentSamplesCacheStats DocumentSamples::cache_stats() const {
  MutexLock lock(&mutex_);
  return stats_;
}

absl::Status DocumentSamples::Fill(int64_t index, absl::Span<int32_t> tokens) {
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(data_->source(), ": sample index ", index, " is negative"));
  }
  if (static_cast<int64_t>(tokens.size()) != int64_t{seq_length_} + 1) {
    return absl::InvalidArgumentError(absl::StrCat(data_->source(), ": a sample is ",
                                                   seq_length_ + 1, " tokens; the buffer holds ",
                                                   tokens.size()));
  }
  const std::shared_ptr<const Epoch> epoch = GetEpoch(index / samples_per_epoch_);
  const int64_t sample = epoch->samples[index % samples_per_epoch_];
  int64_t position = sample * seq_length_;  // in the epoch's stream
  int64_t remaining = int64_t{seq_length_} + 1;
  int32_t* out = tokens.data();
  // The document holding the first token: the last j with offsets[j] <= position (empty
  // documents share their successor's offset and are skipped by taking the last).
  size_t j =
      static_cast<size_t>(std::upper_bound(epoch->offsets.begin(), epoch->offsets.end(), position) -
                          epoch->offsets.begin() - 1);
  // A sample ends at or before token N*S <= T - 1, so the loop stays inside the stream.
  while (remaining > 0) {
    const int64_t take = std::min(epoch->offsets[j + 1] - position, remaining);
    if (take > 0) {
      ASSIGN_OR_RETURN(SequenceRange sequence, data_->sequence(epoch->order[j]));
      RETURN_IF_ERROR(data_->Read(sequence.offset + (position - epoch->offsets[j]),
                                  static_cast<int>(take), out));
      out += take;
      position += take;
      remaining -= take;
    }
    ++j;
  }
  return absl::OkStatus();
}

std::string DocumentSamples::Describe() const {
  std::string where;
  if (!use_cache_) {
    where = "index in memory (cache off)";
  } else {
    MutexLock lock(&mutex_);
    where = not_writable_.empty() ? absl::StrCat("index cached in ", cache_dir_)
                                  : absl::StrCat("index in memory: ", cache_dir_, " not writable (",
                                                 not_writable_, ")");
  }
  return absl::StrCat(data_->source(), " ", SplitKindName(split_), " documents [", documents_.begin,
                      ", ", documents_.end, ") (", documents_.size(), " documents, ", num_tokens_,
                      " tokens): ", samples_per_epoch_, " samples of ", seq_length_ + 1,
                      " tokens an epoch, ", where);
}

std::shared_ptr<const DocumentSamples::Epoch> DocumentSamples::GetEpoch(int64_t epoch) {
  MutexLock lock(&mutex_);
  for (int slot = 0; slot < 2; ++slot) {
    if (epochs_[slot] != nullptr && epochs_[slot]->number == epoch) {
      last_used_slot_ = slot;
      return epochs_[slot];
    }
  }
  // Evict the one not used last; a Fill still reading it holds its own reference.
  last_used_slot_ = 1 - last_used_slot_;
  epochs_[last_used_slot_] = LoadOrBuild(epoch);
  return epochs_[last_used_slot_];
}

std::shared_ptr<const DocumentSamples::Epoch> DocumentSamples::LoadOrBuild(int64_t epoch) {
  if (!use_cache_) {
    ++stats_.built;
    return Build(epoch);
  }
  const std::string path = CacheFilePath(epoch);
  // A finished file is complete (it was renamed into place), so reading needs no lock.
  if (std::shared_ptr<const Epoch> loaded = Load(path, epoch)) {
    ++stats_.loaded;
    return loaded;
  }
  if (!not_writable_.empty()) {
    ++stats_.built;
    return Build(epoch);
  }
  const std::string lock_path = path + ".lock";
  ScopedFd lock_fd(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock_fd.get() < 0) {
    MarkNotWritable(absl::StrCat("open ", lock_path, ": ", ErrnoText(errno)));
    ++stats_.built;
    return Build(epoch);
  }
  // Without the lock (a file system that refuses flock) ranks may build the same epoch
  // side by side: wasted work, never a torn file, since each writes its own temporary.
  int locked;
  do {
    locked = flock(lock_fd.get(), LOCK_EX);
  } while (locked != 0 && errno == EINTR);
  // Another process may have written it while this one waited.
  if (std::shared_ptr<const Epoch> loaded = Load(path, epoch)) {
    ++stats_.loaded;
    return loaded;  // closing the descriptor releases the lock
  }
  std::shared_ptr<const Epoch> built = Build(epoch);
  ++stats_.built;
  absl::Status written = Write(*built, path);
  if (written.ok()) {
    ++stats_.written;
  } else {
    MarkNotWritable(std::string(written.message()));
  }
  return built;
}

void DocumentSamples::MarkNotWritable(const std::string& reason) {
  if (not_writable_.empty()) not_writable_ = reason;
}

std::shared_ptr<const DocumentSamples::Epoch> DocumentSamples::Build(int64_t epoch) const {
  auto index = std::make_shared<Epoch>();
  index->number = epoch;
  const uint64_t epoch_seed =
      Mix(Mix(SplitMix64(seed_), static_cast<uint64_t>(split_)), static_cast<uint64_t>(epoch));

  index->order.resize(documents_.size());
  std::iota(index->order.begin(), index->order.end(), documents_.begin);
  SplitMixStream document_stream(Mix(epoch_seed, kDocumentsSalt));
  Shuffle(&index->order, &document_stream);

  index->offsets.resize(index->order.size() + 1);
  index->offsets[0] = 0;
  for (size_t j = 0; j < index->order.size(); ++j) {
    // Create read every sequence of the range, so this cannot fail.
    index->offsets[j + 1] = index->offsets[j] + data_->sequence(index->order[j])->length;
  }

  index->samples.resize(samples_per_epoch_);
  std::iota(index->samples.begin(), index->samples.end(), int64_t{0});
  SplitMixStream sample_stream(Mix(epoch_seed, kSamplesSalt));
  Shuffle(&index->samples, &sample_stream);
  return index;
}

std::vector<uint64_t> DocumentSamples::Header(int64_t epoch, uint64_t checksum) const {
  uint64_t magic;
  std::memcpy(&magic, kMagic, sizeof(magic));
  return {magic,
          kFormatVersion,
          key_,
          static_cast<uint64_t>(data_->num_sequences()),
          static_cast<uint64_t>(data_->size()),
          static_cast<uint64_t>(identity_.idx_file_size),
          identity_.lengths_hash,
          static_cast<uint64_t>(documents_.begin),
          static_cast<uint64_t>(documents_.end),
          static_cast<uint64_t>(seq_length_),
          seed_,
          static_cast<uint64_t>(split_),
          static_cast<uint64_t>(epoch),
          static_cast<uint64_t>(documents_.size()),
          static_cast<uint64_t>(num_tokens_),
          static_cast<uint64_t>(samples_per_epoch_),
          checksum};
}

std::shared_ptr<const DocumentSamples::Epoch> DocumentSamples::Load(const std::string& path,
                                                                    int64_t epoch) const {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return nullptr;
  const absl::string_view bytes = (*file)->bytes();
  const int64_t num_documents = documents_.size();
  const int64_t array_bytes = 8 * (2 * num_documents + 1 + samples_per_epoch_);
  if (static_cast<int64_t>(bytes.size()) != kHeaderBytes + array_bytes) return nullptr;

  uint64_t header[kHeaderFields];
  std::memcpy(header, bytes.data(), kHeaderBytes);
  const std::vector<uint64_t> expected = Header(epoch, header[kHeaderFields - 1]);
  if (!std::equal(expected.begin(), expected.end(), header)) return nullptr;

  auto index = std::make_shared<Epoch>();
  index->number = epoch;
  index->order.resize(num_documents);
  index->offsets.resize(num_documents + 1);
  index->samples.resize(samples_per_epoch_);
  const char* at = bytes.data() + kHeaderBytes;
  for (std::vector<int64_t>* array : {&index->order, &index->offsets, &index->samples}) {
    std::memcpy(array->data(), at, array->size() * 8);
    at += array->size() * 8;
  }
  const std::vector<int64_t>* arrays[3] = {&index->order, &index->offsets, &index->samples};
  if (Checksum(arrays) != header[kHeaderFields - 1]) return nullptr;
  return index;
}

absl::Status DocumentSamples::Write(const Epoch& index, const std::string& path) const {
  // Unique among the processes and the instances of this one that write side by side.
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(path, ".tmp.", getpid(), ".", counter++);
  ScopedFd fd(open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return absl::ErrnoToStatus(errno, absl::StrCat("create ", temp));

  const std::vector<int64_t>* arrays[3] = {&index.order, &index.offsets, &index.samples};
  const std::vector<uint64_t> header = Header(index.number, Checksum(arrays));
  absl::Status status = WriteAll(fd.get(), header.data(), header.size() * 8, temp);
  for (const std::vector<int64_t>* array : arrays) {
    if (status.ok()) status = WriteAll(fd.get(), array->data(), array->size() * 8, temp);
  }
  // Durable before it gets its final name, so a crash never leaves a valid-looking name
  // on a file whose blocks never reached the disk.
  if (status.ok() && fsync(fd.get()) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("fsync ", temp));
  }
  if (fd.Close() != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("close ", temp));
  }
  if (status.ok() && rename(temp.c_str(), path.c_str()) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("rename ", temp, " to ", path));
  }
  if (!status.ok()) {
    unlink(temp.c_str());
    return status;
  }
  // The rename itself, durable (best effort: a lost rename only costs a rebuild).
  ScopedFd dir(open(cache_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) fsync(dir.get());
  return absl::OkStatus();
}

}  // namespace mtrain
