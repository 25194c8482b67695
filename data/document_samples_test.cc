// DocumentSamples over real MMIDIDX files whose every token is its own position in the
// dataset's stream, so a sample's values say exactly where it came from: coverage of each
// epoch, per-epoch shuffles, identical samples with and without the disk cache, recovery
// from corrupt cache files, a cache directory that cannot be written, and ranks that
// start on one dataset at once.
#include "data/document_samples.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/indexed_dataset_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

constexpr int kSeqLength = 16;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Document lengths with many short documents (a sample spans several), a few empty ones and
// some longer than a sample.
std::vector<int> MixedLengths(int count) {
  std::vector<int> lengths;
  for (int i = 0; i < count; ++i) {
    const int kind = i % 7;
    lengths.push_back(kind == 0 ? 0 : kind < 4 ? 1 + i % 5 : kind < 6 ? 10 + i % 23 : 40 + i % 9);
  }
  return lengths;
}

// Writes an int32 dataset, one sequence per document, whose token values are their
// positions in the concatenated stream.
std::unique_ptr<IndexedDataset> MakeDataset(const std::string& name,
                                            const std::vector<int>& lengths) {
  const std::string prefix = TempPath(name);
  auto writer = IndexedDatasetWriter::Create(prefix, IndexedDtype::kInt32);
  EXPECT_TRUE(writer.ok()) << writer.status();
  int32_t position = 0;
  for (int length : lengths) {
    std::vector<int32_t> tokens(length);
    for (int32_t& token : tokens) token = position++;
    EXPECT_TRUE((*writer)->AddDocument(tokens).ok());
  }
  EXPECT_TRUE((*writer)->Finish().ok());
  auto data = IndexedDataset::Open(prefix);
  EXPECT_TRUE(data.ok()) << data.status();
  return std::move(*data);
}

DocumentSamplesOptions Options(SplitRange documents, const std::string& cache_dir) {
  DocumentSamplesOptions options;
  options.seq_length = kSeqLength;
  options.seed = 1234;
  options.split = SplitKind::kTrain;
  options.documents = documents;
  options.cache_dir = cache_dir;
  options.use_cache = !cache_dir.empty();
  return options;
}

std::unique_ptr<DocumentSamples> MustCreate(const IndexedDataset& data,
                                            const DocumentSamplesOptions& options) {
  auto samples = DocumentSamples::Create(&data, options);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? std::move(*samples) : nullptr;
}

// Samples [begin, end), one after the other.
std::vector<std::vector<int32_t>> Draw(DocumentSamples* samples, int64_t begin, int64_t end) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = begin; i < end; ++i) {
    std::vector<int32_t> sample(kSeqLength + 1);
    absl::Status status = samples->Fill(i, absl::MakeSpan(sample));
    EXPECT_TRUE(status.ok()) << "sample " << i << ": " << status;
    out.push_back(std::move(sample));
  }
  return out;
}

// Checks that `epoch` (the N samples of one epoch, in drawing order) is Megatron's epoch
// over the documents [begin, end) of `data`: chained by their shared tokens the samples
// rebuild a stream of N*S + 1 tokens made of distinct whole documents of the range (the
// last one possibly cut), each stream position of [0, N*S) an input exactly once, and the
// dropped tail is shorter than S + 1.
void ExpectWholeEpoch(const IndexedDataset& data, SplitRange range,
                      const std::vector<std::vector<int32_t>>& epoch, int64_t num_tokens) {
  const int64_t n = static_cast<int64_t>(epoch.size());
  std::map<int32_t, int64_t> by_first;  // first token -> sample
  std::set<int32_t> inputs;
  std::set<int32_t> lasts;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(by_first.emplace(epoch[i].front(), i).second) << "two samples start alike";
    inputs.insert(epoch[i].begin(), epoch[i].end() - 1);
    lasts.insert(epoch[i].back());
  }
  ASSERT_EQ(static_cast<int64_t>(inputs.size()), n * kSeqLength) << "an input repeats";
  // The stream's first sample is the one no other sample ends where it starts.
  int64_t current = -1;
  for (const auto& [first, sample] : by_first) {
    if (lasts.count(first) == 0) {
      ASSERT_EQ(current, -1) << "two chains";
      current = sample;
    }
  }
  ASSERT_NE(current, -1);
  std::vector<int32_t> stream;
  for (int64_t step = 0; step < n; ++step) {
    ASSERT_GE(current, 0) << "the chain breaks after " << step << " samples";
    const std::vector<int32_t>& sample = epoch[current];
    stream.insert(stream.end(), sample.begin(), sample.end() - 1);
    auto next = by_first.find(sample.back());
    if (step + 1 == n) stream.push_back(sample.back());
    current = next == by_first.end() ? -1 : next->second;
  }
  ASSERT_EQ(static_cast<int64_t>(stream.size()), n * kSeqLength + 1);

  // Split the stream into documents: each piece starts at a document's first token.
  std::map<int32_t, int64_t> document_starting_at;  // first token -> sequence
  for (int64_t s = range.begin; s < range.end; ++s) {
    SequenceRange sequence = *data.sequence(s);
    if (sequence.length > 0) document_starting_at[sequence.offset] = s;
  }
  std::set<int64_t> seen;
  size_t at = 0;
  while (at < stream.size()) {
    auto document = document_starting_at.find(stream[at]);
    ASSERT_NE(document, document_starting_at.end())
        << "stream token " << at << " = " << stream[at] << " starts no document of the range";
    ASSERT_TRUE(seen.insert(document->second).second) << "document " << document->second;
    const int length = data.sequence(document->second)->length;
    for (int t = 0; t < length && at < stream.size(); ++t, ++at) {
      ASSERT_EQ(stream[at], stream[at - t] + t) << "a document is cut inside the stream";
    }
  }
  EXPECT_LT(num_tokens - n * kSeqLength, kSeqLength + 1) << "the dropped tail";
}

TEST(DocumentSamplesTest, EachEpochCoversTheStreamOnce) {
  auto data = MakeDataset("cover", MixedLengths(300));
  const SplitRange range{0, 300};
  auto samples = MustCreate(*data, Options(range, ""));
  ASSERT_NE(samples, nullptr);
  const int64_t n = samples->samples_per_epoch();
  EXPECT_EQ(samples->num_tokens(), data->size());
  EXPECT_EQ(n, (data->size() - 1) / kSeqLength);
  ASSERT_GT(n, 100);
  std::vector<std::vector<int32_t>> first;
  for (int epoch = 0; epoch < 3; ++epoch) {
    SCOPED_TRACE(absl::StrCat("epoch ", epoch));
    std::vector<std::vector<int32_t>> drawn = Draw(samples.get(), epoch * n, (epoch + 1) * n);
    ExpectWholeEpoch(*data, range, drawn, samples->num_tokens());
    if (epoch == 0) {
      first = drawn;
    } else {
      EXPECT_NE(drawn, first) << "epochs must be shuffled apart";
    }
  }
}

TEST(DocumentSamplesTest, SamplesOfASubrangeStayInIt) {
  auto data = MakeDataset("subrange", MixedLengths(300));
  const SplitRange train{0, 240};
  const SplitRange validation{240, 300};
  DocumentSamplesOptions validation_options = Options(validation, "");
  validation_options.split = SplitKind::kValidation;
  auto train_samples = MustCreate(*data, Options(train, ""));
  auto validation_samples = MustCreate(*data, validation_options);
  ASSERT_NE(train_samples, nullptr);
  ASSERT_NE(validation_samples, nullptr);
  const int32_t boundary = static_cast<int32_t>(data->sequence(240)->offset);
  const int64_t n_train = train_samples->samples_per_epoch();
  const int64_t n_validation = validation_samples->samples_per_epoch();
  for (const auto& sample : Draw(train_samples.get(), 0, 2 * n_train)) {
    for (int32_t token : sample) ASSERT_LT(token, boundary);
  }
  for (const auto& sample : Draw(validation_samples.get(), 0, 2 * n_validation)) {
    for (int32_t token : sample) ASSERT_GE(token, boundary);
  }
  ExpectWholeEpoch(*data, validation,
                   Draw(validation_samples.get(), n_validation, 2 * n_validation),
                   validation_samples->num_tokens());
}

TEST(DocumentSamplesTest, SeedAndSplitChangeTheOrder) {
  auto data = MakeDataset("seed", MixedLengths(200));
  auto a = MustCreate(*data, Options({0, 200}, ""));
  DocumentSamplesOptions other_seed = Options({0, 200}, "");
  other_seed.seed = 1235;
  auto b = MustCreate(*data, other_seed);
  DocumentSamplesOptions other_split = Options({0, 200}, "");
  other_split.split = SplitKind::kTest;
  auto c = MustCreate(*data, other_split);
  auto again = MustCreate(*data, Options({0, 200}, ""));
  const int64_t n = a->samples_per_epoch();
  const auto reference = Draw(a.get(), 0, n);
  EXPECT_NE(Draw(b.get(), 0, n), reference);
  EXPECT_NE(Draw(c.get(), 0, n), reference);
  EXPECT_EQ(Draw(again.get(), 0, n), reference);
}

TEST(DocumentSamplesTest, CachedIndexGivesTheSameSamples) {
  auto data = MakeDataset("cached", MixedLengths(250));
  const SplitRange range{0, 250};
  const std::string dir = TempPath("cached-index/nested");
  auto in_memory = MustCreate(*data, Options(range, ""));
  const int64_t n = in_memory->samples_per_epoch();
  // Across three epoch boundaries; then back to epoch 0, which has left memory.
  const auto reference = Draw(in_memory.get(), 0, 4 * n);
  EXPECT_EQ(Draw(in_memory.get(), 0, 3),
            std::vector<std::vector<int32_t>>(reference.begin(), reference.begin() + 3));

  auto writer = MustCreate(*data, Options(range, dir));
  EXPECT_EQ(Draw(writer.get(), 0, 4 * n), reference);
  DocumentSamplesCacheStats stats = writer->cache_stats();
  EXPECT_EQ(stats.built, 4);
  EXPECT_EQ(stats.written, 4);
  EXPECT_EQ(stats.loaded, 0);
  EXPECT_THAT(writer->Describe(), HasSubstr("index cached in " + dir));
  for (int epoch = 0; epoch < 4; ++epoch) {
    EXPECT_EQ(access(writer->CacheFilePath(epoch).c_str(), R_OK), 0) << epoch;
  }

  auto reader = MustCreate(*data, Options(range, dir));
  // Out of order and across epochs, so epochs are evicted and loaded again.
  for (int64_t i : {3 * n + 2, int64_t{0}, 2 * n - 1, 3 * n + 1, n, int64_t{5}}) {
    std::vector<int32_t> sample(kSeqLength + 1);
    ASSERT_TRUE(reader->Fill(i, absl::MakeSpan(sample)).ok());
    EXPECT_EQ(sample, reference[i]) << i;
  }
  EXPECT_EQ(Draw(reader.get(), 0, 4 * n), reference);
  stats = reader->cache_stats();
  EXPECT_EQ(stats.built, 0);
  EXPECT_GE(stats.loaded, 4);
}

void CorruptFile(const std::string& path, long at) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(at);
  char byte = 0;
  file.read(&byte, 1);
  byte ^= 0x40;
  file.seekp(at);
  file.write(&byte, 1);
}

TEST(DocumentSamplesTest, CorruptCacheFilesAreRebuilt) {
  auto data = MakeDataset("corrupt", MixedLengths(220));
  const SplitRange range{0, 220};
  const std::string dir = TempPath("corrupt-index");
  auto writer = MustCreate(*data, Options(range, dir));
  const int64_t n = writer->samples_per_epoch();
  const auto reference = Draw(writer.get(), 0, 3 * n);
  ASSERT_EQ(writer->cache_stats().written, 3);

  struct stat file_stat;
  ASSERT_EQ(stat(writer->CacheFilePath(0).c_str(), &file_stat), 0);
  ASSERT_EQ(truncate(writer->CacheFilePath(0).c_str(), file_stat.st_size - 8), 0);
  CorruptFile(writer->CacheFilePath(1), file_stat.st_size - 20);  // inside the permutation
  CorruptFile(writer->CacheFilePath(2), 8);                       // the version

  auto rebuilder = MustCreate(*data, Options(range, dir));
  EXPECT_EQ(Draw(rebuilder.get(), 0, 3 * n), reference);
  EXPECT_EQ(rebuilder->cache_stats().built, 3);
  EXPECT_EQ(rebuilder->cache_stats().loaded, 0);

  auto reader = MustCreate(*data, Options(range, dir));
  EXPECT_EQ(Draw(reader.get(), 0, 3 * n), reference);
  EXPECT_EQ(reader->cache_stats().built, 0);
  EXPECT_EQ(reader->cache_stats().loaded, 3);
}

TEST(DocumentSamplesTest, UncreatableCacheDirFallsBackToMemory) {
  auto data = MakeDataset("uncreatable", MixedLengths(150));
  const SplitRange range{0, 150};
  // A directory below a regular file (the dataset's .bin) cannot be created, even by root.
  const std::string dir = TempPath("uncreatable.bin/index");
  auto samples = MustCreate(*data, Options(range, dir));
  auto reference = MustCreate(*data, Options(range, ""));
  const int64_t n = samples->samples_per_epoch();
  EXPECT_EQ(Draw(samples.get(), 0, 2 * n), Draw(reference.get(), 0, 2 * n));
  EXPECT_THAT(samples->Describe(), HasSubstr("index in memory: " + dir + " not writable ("));
  EXPECT_EQ(samples->cache_stats().built, 2);
  EXPECT_EQ(samples->cache_stats().written, 0);
}

TEST(DocumentSamplesTest, ReadOnlyCacheDirFallsBackToMemory) {
  auto data = MakeDataset("readonly", MixedLengths(150));
  const SplitRange range{0, 150};
  const std::string dir = TempPath("readonly-index");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0555), 0);
  if (access(dir.c_str(), W_OK) == 0) {
    chmod(dir.c_str(), 0755);
    GTEST_SKIP() << "running as root: chmod 0555 does not stop writes, so the read-only "
                    "case cannot be checked here";
  }
  auto samples = MustCreate(*data, Options(range, dir));
  auto reference = MustCreate(*data, Options(range, ""));
  const int64_t n = samples->samples_per_epoch();
  EXPECT_EQ(Draw(samples.get(), 0, 2 * n), Draw(reference.get(), 0, 2 * n));
  EXPECT_THAT(samples->Describe(), HasSubstr("index in memory: " + dir + " not writable ("));
  EXPECT_EQ(samples->cache_stats().written, 0);
  chmod(dir.c_str(), 0755);
}

// What one child process found: its samples, and how it came by its epochs.
constexpr int kChildren = 4;
constexpr int kChildEpochs = 3;
// Enough that the children overlap while one of them builds an epoch.
constexpr int kTogetherDocuments = 4000;

// The child's body: waits at the barrier, then draws every sample of three epochs through
// the shared cache and writes them, with its build and load counts, to `out_path`.
int RunChild(const std::string& prefix, const std::string& dir, int barrier_fd,
             const std::string& out_path) {
  char go;
  if (read(barrier_fd, &go, 1) != 0) return 2;  // EOF: the parent let everyone go
  auto data = IndexedDataset::Open(prefix);
  if (!data.ok()) return 3;
  auto samples = DocumentSamples::Create(data->get(), Options({0, kTogetherDocuments}, dir));
  if (!samples.ok()) return 4;
  const int64_t n = (*samples)->samples_per_epoch();
  std::vector<int32_t> all;
  std::vector<int32_t> sample(kSeqLength + 1);
  for (int64_t i = 0; i < kChildEpochs * n; ++i) {
    if (!(*samples)->Fill(i, absl::MakeSpan(sample)).ok()) return 5;
    all.insert(all.end(), sample.begin(), sample.end());
  }
  const DocumentSamplesCacheStats stats = (*samples)->cache_stats();
  all.push_back(static_cast<int32_t>(stats.built));
  all.push_back(static_cast<int32_t>(stats.loaded));
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(all.data()), all.size() * sizeof(int32_t));
  return out.good() ? 0 : 6;
}

TEST(DocumentSamplesTest, ProcessesStartingTogetherShareOneCache) {
  auto data = MakeDataset("together", MixedLengths(kTogetherDocuments));
  const std::string prefix = TempPath("together");
  const std::string dir = TempPath("together-index");
  auto in_memory = MustCreate(*data, Options({0, kTogetherDocuments}, ""));
  const int64_t n = in_memory->samples_per_epoch();
  std::vector<int32_t> reference;
  for (const auto& sample : Draw(in_memory.get(), 0, kChildEpochs * n)) {
    reference.insert(reference.end(), sample.begin(), sample.end());
  }

  int barrier[2];
  ASSERT_EQ(pipe(barrier), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(barrier[1]);
      _exit(RunChild(prefix, dir, barrier[0], TempPath(absl::StrCat("together-", c))));
    }
    children.push_back(pid);
  }
  close(barrier[0]);
  close(barrier[1]);  // all children start now

  int64_t built = 0;
  int64_t loaded = 0;
  for (int c = 0; c < kChildren; ++c) {
    int status = 0;
    ASSERT_EQ(waitpid(children[c], &status, 0), children[c]);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << c << ": " << status;
    std::ifstream in(TempPath(absl::StrCat("together-", c)), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int32_t> got(bytes.size() / sizeof(int32_t));
    std::memcpy(got.data(), bytes.data(), got.size() * sizeof(int32_t));
    ASSERT_EQ(got.size(), reference.size() + 2);
    loaded += got.back();
    got.pop_back();
    built += got.back();
    got.pop_back();
    EXPECT_TRUE(got == reference) << "child " << c << " drew other samples";
  }
  // The lock lets exactly one process build each epoch; the others load its file.
  EXPECT_EQ(built, kChildEpochs);
  EXPECT_EQ(loaded, (kChildren - 1) * kChildEpochs);

  auto reader = MustCreate(*data, Options({0, kTogetherDocuments}, dir));
  std::vector<int32_t> reread;
  for (const auto& sample : Draw(reader.get(), 0, kChildEpochs * n)) {
    reread.insert(reread.end(), sample.begin(), sample.end());
  }
  EXPECT_TRUE(reread == reference);
  EXPECT_EQ(reader->cache_stats().loaded, kChildEpochs);
  EXPECT_EQ(reader->cache_stats().built, 0);
  // No temporary file is left behind.
  DIR* listing = opendir(dir.c_str());
  ASSERT_NE(listing, nullptr);
  while (const dirent* entry = readdir(listing)) {
    EXPECT_EQ(std::string(entry->d_name).find(".tmp."), std::string::npos) << entry->d_name;
  }
  closedir(listing);
}

TEST(DocumentSamplesTest, TooFewTokensIsAnError) {
  // Documents of 20, 30 and 7 tokens: 57 in all.
  auto data = MakeDataset("few", {100, 20, 30, 7, 100});
  DocumentSamplesOptions options = Options({1, 4}, "");
  options.seq_length = 128;
  options.split = SplitKind::kValidation;
  auto samples = DocumentSamples::Create(data.get(), options);
  ASSERT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(samples.status().message(),
              HasSubstr("data.split: the validation split of " + TempPath("few") +
                        " (documents [1, 4)) holds 57 tokens, fewer than model.seq_length + 1 "
                        "= 129 that one sample needs"));

  options.documents = {2, 2};
  samples = DocumentSamples::Create(data.get(), options);
  ASSERT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(samples.status().message(), HasSubstr("(documents [2, 2)) holds 0 tokens"));

  // Exactly seq_length + 1 tokens make one sample.
  options.seq_length = 56;
  options.documents = {1, 4};
  samples = DocumentSamples::Create(data.get(), options);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)->samples_per_epoch(), 1);
}

TEST(DocumentSamplesTest, BadArgumentsAreRejected) {
  auto data = MakeDataset("bad", MixedLengths(50));
  for (SplitRange range : {SplitRange{-1, 10}, SplitRange{0, 51}, SplitRange{10, 5}}) {
    auto samples = DocumentSamples::Create(data.get(), Options(range, ""));
    EXPECT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(samples.status().message(), HasSubstr("data.split: "));
  }
  DocumentSamplesOptions zero = Options({0, 50}, "");
  zero.seq_length = 0;
  EXPECT_EQ(DocumentSamples::Create(data.get(), zero).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto samples = MustCreate(*data, Options({0, 50}, ""));
  std::vector<int32_t> sample(kSeqLength + 1);
  EXPECT_EQ(samples->Fill(-1, absl::MakeSpan(sample)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> short_buffer(kSeqLength);
  EXPECT_EQ(samples->Fill(0, absl::MakeSpan(short_buffer)).code(),
            absl::StatusCode::kInvalidArgument);
  // Far beyond the first epoch is fine: epochs never end.
  EXPECT_TRUE(samples->Fill(int64_t{1} << 40, absl::MakeSpan(sample)).ok());
}

TEST(DocumentSamplesTest, DescribeSaysWhatAndWhere) {
  auto data = MakeDataset("describe", {10, 20, 30});
  DocumentSamplesOptions options = Options({0, 3}, "");
  options.seq_length = 8;
  auto samples = MustCreate(*data, options);
  EXPECT_EQ(samples->Describe(),
            TempPath("describe") +
                " train documents [0, 3) (3 documents, 60 tokens): 7 samples of 9 tokens an "
                "epoch, index in memory (cache off)");
  options.use_cache = true;
  options.cache_dir.clear();
  samples = MustCreate(*data, options);
  EXPECT_THAT(samples->Describe(),
              HasSubstr("index cached in " + TempPath("describe") + ".mtrain-index"));
  EXPECT_THAT(samples->CacheFilePath(2),
              testing::StartsWith(TempPath("describe") + ".mtrain-index/train-"));
  EXPECT_THAT(samples->CacheFilePath(2), testing::EndsWith("-epoch2"));
}

}  // namespace
}  // namespace mtrain
