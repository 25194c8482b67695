// The MMIDIDX reader and writer: round trips in every dtype, the exact bytes of the format,
// and rejection (never a crash) of corrupt and truncated files.
#include "data/indexed_dataset.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/indexed_dataset_format.h"
#include "data/indexed_dataset_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPrefix(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteWholeFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
void Overwrite(std::string* bytes, size_t at, T value) {
  std::memcpy(bytes->data() + at, &value, sizeof(T));
}

// An .idx built by hand from the format description, independent of the writer.
std::string HandMadeIndex(uint8_t dtype_code, const std::vector<int32_t>& lengths,
                          const std::vector<int64_t>& pointers,
                          const std::vector<int64_t>& document_indices) {
  std::string idx("MMIDIDX\0\0", 9);
  Append<uint64_t>(&idx, 1);
  Append<uint8_t>(&idx, dtype_code);
  Append<uint64_t>(&idx, lengths.size());
  Append<uint64_t>(&idx, document_indices.size());
  for (int32_t length : lengths) Append(&idx, length);
  for (int64_t pointer : pointers) Append(&idx, pointer);
  for (int64_t index : document_indices) Append(&idx, index);
  return idx;
}

std::vector<int32_t> Concatenate(const std::vector<std::vector<int32_t>>& documents) {
  std::vector<int32_t> all;
  for (const auto& document : documents) all.insert(all.end(), document.begin(), document.end());
  return all;
}

// Opens `prefix` and checks that it holds exactly `documents`, one sequence each, through
// every accessor.
void ExpectHoldsDocuments(const std::string& prefix,
                          const std::vector<std::vector<int32_t>>& documents) {
  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const IndexedDataset& data = **dataset;
  const std::vector<int32_t> all = Concatenate(documents);
  ASSERT_EQ(data.num_sequences(), static_cast<int64_t>(documents.size()));
  ASSERT_EQ(data.num_documents(), static_cast<int64_t>(documents.size()));
  ASSERT_EQ(data.size(), static_cast<int64_t>(all.size()));
  int64_t offset = 0;
  for (size_t i = 0; i < documents.size(); ++i) {
    absl::StatusOr<std::vector<int32_t>> sequence = data.Sequence(i);
    ASSERT_TRUE(sequence.ok()) << sequence.status();
    EXPECT_EQ(*sequence, documents[i]) << "sequence " << i;
    absl::StatusOr<SequenceRange> range = data.sequence(i);
    ASSERT_TRUE(range.ok());
    EXPECT_EQ(range->offset, offset);
    EXPECT_EQ(range->length, static_cast<int32_t>(documents[i].size()));
    absl::StatusOr<DocumentRange> document = data.document(i);
    ASSERT_TRUE(document.ok());
    EXPECT_EQ(document->begin, static_cast<int64_t>(i));
    EXPECT_EQ(document->end, static_cast<int64_t>(i + 1));
    offset += documents[i].size();
  }
  // The concatenated view, read whole and in windows that cross sequence boundaries.
  std::vector<int32_t> read(all.size());
  ASSERT_TRUE(data.Read(0, static_cast<int>(all.size()), read.data()).ok());
  EXPECT_EQ(read, all);
  for (size_t start = 0; start + 3 <= all.size(); ++start) {
    std::vector<int32_t> window(3);
    ASSERT_TRUE(data.Read(start, 3, window.data()).ok());
    EXPECT_THAT(window, ElementsAre(all[start], all[start + 1], all[start + 2]));
  }
}

TEST(IndexedDatasetTest, RoundTripsUint16) {
  const std::vector<std::vector<int32_t>> documents = {
      {1, 2, 3}, {65535, 0}, {}, {7}, {300, 301, 302, 303}};
  const std::string prefix = TempPrefix("uint16");
  ASSERT_TRUE(WriteIndexedDataset(prefix, documents).ok());
  ExpectHoldsDocuments(prefix, documents);
  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok());
  EXPECT_EQ((*dataset)->dtype(), IndexedDtype::kUint16);
  EXPECT_EQ((*dataset)->vocab_upper_bound(), 65536);
  EXPECT_EQ(ReadWholeFile(prefix + ".bin").size(), 10u * 2);
}

TEST(IndexedDatasetTest, RoundTripsInt32WhenIdsExceedUint16) {
  const std::vector<std::vector<int32_t>> documents = {{1, 70000}, {2147483647}, {-5, 0, 5}};
  const std::string prefix = TempPrefix("int32");
  ASSERT_TRUE(WriteIndexedDataset(prefix, documents).ok());
  ExpectHoldsDocuments(prefix, documents);
  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok());
  EXPECT_EQ((*dataset)->dtype(), IndexedDtype::kInt32);
  EXPECT_EQ(ReadWholeFile(prefix + ".bin").size(), 6u * 4);
  EXPECT_EQ(ChooseTokenDtype({{65536}}), IndexedDtype::kInt32);
  EXPECT_EQ(ChooseTokenDtype({{-1}}), IndexedDtype::kInt32);
  EXPECT_EQ(ChooseTokenDtype({{0, 65535}, {}}), IndexedDtype::kUint16);
}

TEST(IndexedDatasetTest, RoundTripsEveryDtype) {
  const std::vector<std::vector<int32_t>> documents = {{0, 1, 100}, {127, 5}};
  for (uint8_t code = 1; code <= 8; ++code) {
    const IndexedDtype dtype = static_cast<IndexedDtype>(code);
    SCOPED_TRACE(DtypeName(dtype));
    const std::string prefix = TempPrefix(absl::StrCat("dtype_", code));
    auto writer = IndexedDatasetWriter::Create(prefix, dtype);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const auto& document : documents) ASSERT_TRUE((*writer)->AddDocument(document).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    ExpectHoldsDocuments(prefix, documents);
    EXPECT_EQ(ReadWholeFile(prefix + ".bin").size(), 5u * DtypeSize(dtype));
  }
}

TEST(IndexedDatasetTest, WritesExactlyTheDocumentedBytes) {
  const std::string prefix = TempPrefix("layout");
  auto writer = IndexedDatasetWriter::Create(prefix, IndexedDtype::kUint16);
  ASSERT_TRUE(writer.ok());
  // Two sequences in the first document, one in the second (Megatron's builder API).
  ASSERT_TRUE((*writer)->AddSequence({1, 2, 3}).ok());
  ASSERT_TRUE((*writer)->AddSequence({258}).ok());
  (*writer)->EndDocument();
  ASSERT_TRUE((*writer)->AddSequence({4, 5}).ok());
  ASSERT_TRUE((*writer)->Finish().ok());  // ends the open second document

  EXPECT_EQ(ReadWholeFile(prefix + ".idx"), HandMadeIndex(8, {3, 1, 2}, {0, 6, 8}, {0, 2, 3}));
  EXPECT_EQ(ReadWholeFile(prefix + ".bin"),
            std::string("\x01\x00\x02\x00\x03\x00\x02\x01\x04\x00\x05\x00", 12));

  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->num_sequences(), 3);
  EXPECT_EQ((*dataset)->num_documents(), 2);
  absl::StatusOr<DocumentRange> first = (*dataset)->document(0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->begin, 0);
  EXPECT_EQ(first->end, 2);
  absl::StatusOr<DocumentRange> second = (*dataset)->document(1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->begin, 2);
  EXPECT_EQ(second->end, 3);
  EXPECT_EQ((*dataset)->document(2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*dataset)->document(-1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*dataset)->Sequence(3).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*dataset)->Sequence(-1).status().code(), absl::StatusCode::kOutOfRange);
  std::vector<int32_t> out(7);
  EXPECT_EQ((*dataset)->Read(1, 6, out.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*dataset)->Read(-1, 1, out.data()).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE((*dataset)->Read(2, 4, out.data()).ok());
  EXPECT_THAT(std::vector<int32_t>(out.begin(), out.begin() + 4), ElementsAre(3, 258, 4, 5));
}

TEST(IndexedDatasetTest, WriterRejectsIdsTheDtypeCannotHold) {
  const std::string prefix = TempPrefix("too_big");
  auto writer = IndexedDatasetWriter::Create(prefix, IndexedDtype::kUint8);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->AddDocument({1, 2}).ok());
  absl::Status status = (*writer)->AddDocument({3, 256});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("sequence 1, position 1"), HasSubstr("256"), HasSubstr("uint8")));
  auto floats = IndexedDatasetWriter::Create(TempPrefix("float_too_big"), IndexedDtype::kFloat32);
  ASSERT_TRUE(floats.ok());
  EXPECT_TRUE((*floats)->AddDocument({1 << 24}).ok());
  EXPECT_FALSE((*floats)->AddDocument({(1 << 24) + 1}).ok());  // not exact in float32
  EXPECT_FALSE((*floats)->AddDocument({2147483647}).ok());
}

TEST(IndexedDatasetTest, AbandonedWriterLeavesNoFiles) {
  const std::string prefix = TempPrefix("abandoned");
  {
    auto writer = IndexedDatasetWriter::Create(prefix, IndexedDtype::kUint16);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddDocument({1, 2}).ok());
  }
  EXPECT_FALSE(std::ifstream(prefix + ".bin.tmp").good());
  EXPECT_FALSE(std::ifstream(prefix + ".bin").good());
  EXPECT_FALSE(std::ifstream(prefix + ".idx").good());
  EXPECT_EQ(IndexedDataset::Open(prefix).status().code(), absl::StatusCode::kNotFound);
}

TEST(IndexedDatasetTest, ValuesThatAreNotInt32TokenIdsAreDataLoss) {
  // int64 and floating-point files can hold values no token id has.
  const std::string prefix = TempPrefix("wide_values");
  std::string bin;
  Append<int64_t>(&bin, 5);
  Append<int64_t>(&bin, int64_t{1} << 40);
  WriteWholeFile(prefix + ".bin", bin);
  WriteWholeFile(prefix + ".idx", HandMadeIndex(5, {2}, {0}, {0, 1}));
  auto dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<int32_t> out(2);
  ASSERT_TRUE((*dataset)->Read(0, 1, out.data()).ok());
  EXPECT_EQ(out[0], 5);
  absl::Status status = (*dataset)->Read(0, 2, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(prefix + ".bin"), HasSubstr("token offset 1")));

  bin.clear();
  Append<float>(&bin, 1.5f);
  WriteWholeFile(prefix + ".bin", bin);
  WriteWholeFile(prefix + ".idx", HandMadeIndex(7, {1}, {0}, {0, 1}));
  dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->Read(0, 1, out.data()).code(), absl::StatusCode::kDataLoss);
}

// Corruption tests start from this valid dataset: three sequences of uint16.
class CorruptIndexedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = TempPrefix(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(WriteIndexedDataset(prefix_, {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}}).ok());
    idx_ = ReadWholeFile(prefix_ + ".idx");
    bin_ = ReadWholeFile(prefix_ + ".bin");
    ASSERT_EQ(idx_.size(), 34u + 3 * 12 + 4 * 8);
    ASSERT_TRUE(IndexedDataset::Open(prefix_).ok());
  }

  // Writes the (modified) files and opens them; the open must fail with `code` and a
  // message naming `file` and containing `what`.
  void ExpectRejected(absl::StatusCode code, const std::string& file, const std::string& what) {
    WriteWholeFile(prefix_ + ".idx", idx_);
    WriteWholeFile(prefix_ + ".bin", bin_);
    absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix_);
    ASSERT_FALSE(dataset.ok()) << "accepted a dataset with " << what;
    EXPECT_EQ(dataset.status().code(), code) << dataset.status();
    EXPECT_THAT(dataset.status().message(), AllOf(HasSubstr(file), HasSubstr(what)));
  }

  std::string idx_path() const { return prefix_ + ".idx"; }
  std::string bin_path() const { return prefix_ + ".bin"; }

  // Offsets inside the .idx.
  static constexpr size_t kVersionAt = 9;
  static constexpr size_t kDtypeAt = 17;
  static constexpr size_t kSequenceCountAt = 18;
  static constexpr size_t kDocumentCountAt = 26;
  static constexpr size_t kLengthsAt = 34;
  static constexpr size_t kPointersAt = 34 + 3 * 4;
  static constexpr size_t kDocumentsAt = kPointersAt + 3 * 8;

  std::string prefix_;
  std::string idx_;
  std::string bin_;
};

TEST_F(CorruptIndexedDatasetTest, BadMagic) {
  idx_[0] = 'X';
  ExpectRejected(absl::StatusCode::kInvalidArgument, idx_path(), "bad magic");
}

TEST_F(CorruptIndexedDatasetTest, NotAnIndexAtAll) {
  idx_ = "hello";
  ExpectRejected(absl::StatusCode::kInvalidArgument, idx_path(), "bad magic");
}

TEST_F(CorruptIndexedDatasetTest, WrongVersion) {
  Overwrite<uint64_t>(&idx_, kVersionAt, 2);
  ExpectRejected(absl::StatusCode::kInvalidArgument, idx_path(), "version 2 is not supported");
}

TEST_F(CorruptIndexedDatasetTest, UnknownDtype) {
  Overwrite<uint8_t>(&idx_, kDtypeAt, 9);
  ExpectRejected(absl::StatusCode::kInvalidArgument, idx_path(), "unknown dtype code 9");
  Overwrite<uint8_t>(&idx_, kDtypeAt, 0);
  ExpectRejected(absl::StatusCode::kInvalidArgument, idx_path(), "unknown dtype code 0");
}

TEST_F(CorruptIndexedDatasetTest, TruncatedHeader) {
  idx_.resize(20);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "truncated header");
  idx_.clear();
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "truncated header");
}

TEST_F(CorruptIndexedDatasetTest, TruncatedIndex) {
  idx_.pop_back();
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "truncated index");
}

TEST_F(CorruptIndexedDatasetTest, CountsTooLargeForTheFile) {
  // Counts whose byte size overflows 64 bits must still be caught, not wrap around.
  Overwrite<uint64_t>(&idx_, kSequenceCountAt, uint64_t{1} << 62);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "truncated index");
  Overwrite<uint64_t>(&idx_, kSequenceCountAt, 3);
  Overwrite<uint64_t>(&idx_, kDocumentCountAt, ~uint64_t{0});
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "truncated index");
}

TEST_F(CorruptIndexedDatasetTest, TrailingDataInIndex) {
  idx_ += std::string(3, '\0');
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "trailing data");
}

TEST_F(CorruptIndexedDatasetTest, TruncatedData) {
  bin_.resize(bin_.size() - 2);
  ExpectRejected(absl::StatusCode::kDataLoss, bin_path(), "truncated data file: sequence 2");
  bin_.clear();
  ExpectRejected(absl::StatusCode::kDataLoss, bin_path(), "truncated data file: sequence 0");
}

TEST_F(CorruptIndexedDatasetTest, DataLongerThanTheIndexSays) {
  bin_ += "xx";
  ExpectRejected(absl::StatusCode::kDataLoss, bin_path(), "size mismatch");
}

TEST_F(CorruptIndexedDatasetTest, PointerOutOfRange) {
  Overwrite<int64_t>(&idx_, kPointersAt + 2 * 8, int64_t{1} << 40);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "pointer out of range: sequence 2");
  Overwrite<int64_t>(&idx_, kPointersAt + 2 * 8, -8);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "pointer out of range: sequence 2");
  // Inside the file at its start, but running past its end.
  Overwrite<int64_t>(&idx_, kPointersAt + 2 * 8, 12);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "pointer out of range: sequence 2");
}

TEST_F(CorruptIndexedDatasetTest, LengthOutOfRange) {
  Overwrite<int32_t>(&idx_, kLengthsAt + 1 * 4, 1 << 30);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "bad length: sequence 1");
}

TEST_F(CorruptIndexedDatasetTest, NegativeLength) {
  Overwrite<int32_t>(&idx_, kLengthsAt + 1 * 4, -1);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "sequence 1 has a negative length");
}

TEST_F(CorruptIndexedDatasetTest, PointersNotMonotonic) {
  // Sequence 1 claims to start where sequence 0 does.
  Overwrite<int64_t>(&idx_, kPointersAt + 1 * 8, 0);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "pointers not monotonic: sequence 1");
}

TEST_F(CorruptIndexedDatasetTest, GapBetweenSequences) {
  Overwrite<int64_t>(&idx_, kPointersAt + 1 * 8, 8);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "gap in data: sequence 1");
}

TEST_F(CorruptIndexedDatasetTest, DocumentIndicesOutOfOrder) {
  Overwrite<int64_t>(&idx_, kDocumentsAt + 2 * 8, 0);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "document index 2 is 0");
  Overwrite<int64_t>(&idx_, kDocumentsAt + 2 * 8, 4);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "document index 2 is 4");
}

TEST_F(CorruptIndexedDatasetTest, DocumentIndicesMustSpanAllSequences) {
  const std::string valid = idx_;
  Overwrite<int64_t>(&idx_, kDocumentsAt, 1);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "document index 0 is 1");
  idx_ = valid;
  Overwrite<int64_t>(&idx_, kDocumentsAt + 3 * 8, 2);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "document index 3 is 2");
  idx_ = valid.substr(0, kDocumentsAt);
  Overwrite<uint64_t>(&idx_, kDocumentCountAt, 0);
  ExpectRejected(absl::StatusCode::kDataLoss, idx_path(), "no document indices");
}

TEST_F(CorruptIndexedDatasetTest, MissingFilesAreNotFound) {
  std::remove(bin_path().c_str());
  absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix_);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr(bin_path()));
  std::remove(idx_path().c_str());
  dataset = IndexedDataset::Open(prefix_);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr(idx_path()));
}

TEST_F(CorruptIndexedDatasetTest, EveryTruncationIsRejected) {
  const std::string idx = idx_;
  for (size_t size = 0; size < idx.size(); ++size) {
    WriteWholeFile(idx_path(), idx.substr(0, size));
    absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix_);
    ASSERT_FALSE(dataset.ok()) << "accepted an .idx cut to " << size << " bytes";
    EXPECT_EQ(dataset.status().code(), absl::StatusCode::kDataLoss) << dataset.status();
  }
  WriteWholeFile(idx_path(), idx);
  for (size_t size = 0; size < bin_.size(); ++size) {
    WriteWholeFile(bin_path(), bin_.substr(0, size));
    EXPECT_EQ(IndexedDataset::Open(prefix_).status().code(), absl::StatusCode::kDataLoss)
        << "a .bin cut to " << size << " bytes";
  }
}

TEST_F(CorruptIndexedDatasetTest, RandomCorruptionNeverCrashes) {
  // Whatever a flipped byte does, Open either rejects the files or returns a dataset whose
  // every token can be read (under AddressSanitizer this also proves no access strays).
  std::mt19937 random(42);
  const std::string idx = idx_;
  int accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string corrupt = idx;
    const int flips = 1 + static_cast<int>(random() % 3);
    for (int f = 0; f < flips; ++f) {
      corrupt[random() % corrupt.size()] = static_cast<char>(random() % 256);
    }
    WriteWholeFile(idx_path(), corrupt);
    absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix_);
    if (!dataset.ok()) continue;
    ++accepted;
    const IndexedDataset& data = **dataset;
    std::vector<int32_t> all(data.size());
    ASSERT_TRUE(data.Read(0, static_cast<int>(all.size()), all.data()).ok());
    for (int64_t i = 0; i < data.num_sequences(); ++i) ASSERT_TRUE(data.Sequence(i).ok());
    for (int64_t d = 0; d < data.num_documents(); ++d) ASSERT_TRUE(data.document(d).ok());
  }
  // Flips in the token-free parts (e.g. a dtype of the same width) leave readable files.
  EXPECT_GT(accepted, 0);
}

// Random mutations of the .idx and .bin (fixed seed): Open never crashes; a dataset it
// accepts can be read end to end, each read OK or DATA_LOSS (a value that is no token id).
TEST_F(CorruptIndexedDatasetTest, MutatedFilesAreRefusedOrReadableNeverCrash) {
  const std::string idx = idx_, bin = bin_;
  std::mt19937 rng(15);
  int opened = 0;
  for (int i = 0; i < 500; ++i) {
    idx_ = idx;
    bin_ = bin;
    std::string& target = rng() % 4 == 0 ? bin_ : idx_;
    for (int e = 1 + static_cast<int>(rng() % 3); e > 0; --e) {
      target[rng() % target.size()] = static_cast<char>(rng() % 256);
    }
    if (rng() % 8 == 0) target.resize(rng() % target.size());
    WriteWholeFile(prefix_ + ".idx", idx_);
    WriteWholeFile(prefix_ + ".bin", bin_);
    absl::StatusOr<std::unique_ptr<IndexedDataset>> dataset = IndexedDataset::Open(prefix_);
    if (!dataset.ok()) {
      EXPECT_TRUE(dataset.status().code() == absl::StatusCode::kDataLoss ||
                  dataset.status().code() == absl::StatusCode::kInvalidArgument)
          << dataset.status();
      continue;
    }
    ++opened;
    std::vector<int32_t> tokens((*dataset)->size());
    const absl::Status read = (*dataset)->Read(0, static_cast<int>(tokens.size()), tokens.data());
    EXPECT_TRUE(read.ok() || read.code() == absl::StatusCode::kDataLoss) << read;
  }
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace mtrain
