#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint_shard_file.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/file_io.h"
#include "checkpoint/hyper_rectangle.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

// Shard data is written from and read into float buffers byte for byte; the format is
// little-endian, so the host must be too (x86-64 and AArch64 Linux are).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints assume a little-endian host");
static_assert(sizeof(float) == 4, "f32 tensors");

constexpr int64_t kBytesPerElement = sizeof(float);
constexpr absl::string_view kManifestMagic("MTMANIF\0", 8);
constexpr size_t kManifestEnvelopeBytes = 24;
// Reads for checksums and for copying short runs go through a buffer of this size: large
// enough that syscalls cost little, small enough to be no memory concern.
constexpr size_t kReadChunkBytes = size_t{4} << 20;
// A manifest is read whole before it is checked; a bigger file is not one (protobuf
// refuses messages over 2 GiB anyway, and a real one holds ~100 bytes per shard).
constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 30;

std::string JoinPath(const std::string& dir, absl::string_view file) {
  return absl::StrCat(dir, "/", file);
}

HyperRectangle BoxOf(const TensorShard& shard) {
  return {{shard.global_offset().begin(), shard.global_offset().end()},
          {shard.shape().begin(), shard.shape().end()}};
}

HyperRectangle BoxOf(const ShardedTensor& tensor) {
  return {tensor.global_offset, tensor.local_shape};
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The rules a ShardedTensor obeys, checked before its numbers index any buffer.
absl::Status CheckShardedTensor(const ShardedTensor& t) {
  const size_t rank = t.global_shape.size();
  if (t.name.empty() || t.local_shape.size() != rank || t.global_offset.size() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name,
                     "': name empty or global shape, local shape and global offset "
                     "differ in rank"));
  }
  absl::Status shape = CheckShape(t.global_shape);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", shape.message()));
  }
  for (size_t k = 0; k < rank; ++k) {
    if (t.local_shape[k] <= 0 || t.global_offset[k] < 0 ||
        t.global_offset[k] > t.global_shape[k] - t.local_shape[k]) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': shard ", DebugString(BoxOf(t)),
                       " is not inside the global shape ", ShapeString(t.global_shape)));
    }
  }
  if (static_cast<int64_t>(t.size) != Volume(t.local_shape)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': size ", t.size,
                                                   " differs from its local shape ",
                                                   ShapeString(t.local_shape)));
  }
  return absl::OkStatus();
}

bool ValidFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." && name != kManifestFileName &&
         name.find('/') == absl::string_view::npos && name.find('\0') == absl::string_view::npos;
}

// Copies runs of one stored shard into a destination buffer, reading the file through a
// window so that many short runs (a column slice of a matrix) cost few reads.
class ShardReader {
 public:
  ShardReader(const RandomAccessFile& file, const TensorShard& shard)
      : file_(file), shard_(shard), elements_(static_cast<int64_t>(shard.byte_size()) / 4) {}

  absl::Status Copy(const HyperRectangleRun& run, float* dst) {
    const size_t bytes = static_cast<size_t>(run.length) * kBytesPerElement;
    if (bytes >= kReadChunkBytes) {
      return file_.Read(shard_.byte_offset() + run.src_offset * kBytesPerElement, bytes,
                        dst + run.dst_offset);
    }
    if (run.src_offset < window_begin_ ||
        run.src_offset + run.length > window_begin_ + static_cast<int64_t>(window_.size())) {
      const int64_t length =
          std::min<int64_t>(kReadChunkBytes / kBytesPerElement, elements_ - run.src_offset);
      window_.resize(static_cast<size_t>(length));
      window_begin_ = run.src_offset;
      RETURN_IF_ERROR(file_.Read(shard_.byte_offset() + window_begin_ * kBytesPerElement,
                                 window_.size() * kBytesPerElement, window_.data()));
    }
    std::copy_n(window_.data() + (run.src_offset - window_begin_), run.length,
                dst + run.dst_offset);
    return absl::OkStatus();
  }

 private:
  const RandomAccessFile& file_;
  const TensorShard& shard_;
  const int64_t elements_;
  std::vector<float> window_;
  int64_t window_begin_ = 0;
};

}  // namespace

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("step-%08d", step); }

std::string ShardFileName(int global_rank) { return absl::StrFormat("rank-%05d.bin", global_rank); }

std::string FirstMomentName(absl::string_view param) { return absl::StrCat("optimizer.m.", param); }

std::string SecondMomentName(absl::string_view param) {
  return absl::StrCat("optimizer.v.", param);
}

// ------------------------------------------------------------------------------ writing

absl::StatusOr<RankShardRecords> WriteRankShards(const std::string& dir, int global_rank,
                                                 int64_t step,
                                                 absl::Span<const ShardedTensor> tensors,
                                                 const float* params, const float* first_moment,
                                                 const float* second_moment) {
  if (global_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("global rank ", global_rank, " is negative"));
  }
  if (params == nullptr || (first_moment == nullptr) != (second_moment == nullptr)) {
    return absl::InvalidArgumentError(
        "WriteRankShards needs the parameters and either both AdamW moments or neither");
  }
  absl::flat_hash_set<std::string> names;
  int64_t elements = 0;
  for (const ShardedTensor& t : tensors) {
    RETURN_IF_ERROR(CheckShardedTensor(t));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is listed twice"));
    }
    elements += static_cast<int64_t>(t.size);
  }

  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create directory ", dir, ": ", error.message()));
  }
  const std::string file = ShardFileName(global_rank);
  ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Create(JoinPath(dir, file)));

  struct Section {
    const float* buffer;
    std::string (*name)(absl::string_view);
  };
  std::vector<Section> sections = {{params, [](absl::string_view n) { return std::string(n); }}};
  if (first_moment != nullptr) {
    sections.push_back({first_moment, &FirstMomentName});
    sections.push_back({second_moment, &SecondMomentName});
  }

  ShardFileHeader header;
  header.format_version = kCheckpointFormatVersion;
  header.global_rank = static_cast<uint32_t>(global_rank);
  header.step = step;
  header.payload_bytes =
      static_cast<uint64_t>(elements) * kBytesPerElement * static_cast<uint64_t>(sections.size());
  const std::string header_bytes = EncodeShardHeader(header);
  RETURN_IF_ERROR(writer.Append(header_bytes));
  uint32_t crc = Crc32c(header_bytes.data(), header_bytes.size());
  uint64_t offset = header_bytes.size();

  RankShardRecords records;
  for (const Section& section : sections) {
    for (const ShardedTensor& t : tensors) {
      // A shard's local row-major order is exactly its layout in the flat buffer, so the
      // data goes out as one contiguous write.
      const float* data = section.buffer + t.offset;
      const size_t bytes = t.size * kBytesPerElement;
      RETURN_IF_ERROR(writer.Append(data, bytes));
      crc = ExtendCrc32c(crc, data, bytes);

      TensorEntry& entry = records.tensors.emplace_back();
      entry.set_name(section.name(t.name));
      entry.mutable_global_shape()->Add(t.global_shape.begin(), t.global_shape.end());
      entry.set_dtype(kCheckpointDtypeF32);
      TensorShard& shard = *entry.add_shards();
      shard.set_file(file);
      shard.set_byte_offset(offset);
      shard.set_byte_size(bytes);
      shard.mutable_global_offset()->Add(t.global_offset.begin(), t.global_offset.end());
      shard.mutable_shape()->Add(t.local_shape.begin(), t.local_shape.end());
      offset += bytes;
    }
  }
  RETURN_IF_ERROR(writer.Commit());

  FileChecksum& checksum = records.files.emplace_back();
  checksum.set_file(file);
  checksum.set_byte_size(offset);
  checksum.set_crc32c(crc);
  return records;
}

std::string SerializeRankShardRecords(const RankShardRecords& records) {
  CheckpointManifest carrier;
  for (const TensorEntry& entry : records.tensors) *carrier.add_tensors() = entry;
  for (const FileChecksum& file : records.files) *carrier.add_files() = file;
  return carrier.SerializeAsString();
}

absl::StatusOr<RankShardRecords> ParseRankShardRecords(absl::string_view bytes) {
  CheckpointManifest carrier;
  if (!carrier.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("rank shard records do not parse as a CheckpointManifest");
  }
  RankShardRecords records;
  records.tensors.assign(carrier.tensors().begin(), carrier.tensors().end());
  records.files.assign(carrier.files().begin(), carrier.files().end());
  return records;
}

absl::StatusOr<CheckpointManifest> BuildManifest(absl::string_view job_id,
                                                 const CheckpointLayout& layout,
                                                 const TrainingState& state,
                                                 absl::Span<const RankShardRecords> ranks) {
  CheckpointManifest manifest;
  manifest.set_format_version(kCheckpointFormatVersion);
  manifest.set_job_id(std::string(job_id));
  manifest.set_step(state.step());
  manifest.set_tensor(layout.tensor);
  manifest.set_pipeline(layout.pipeline);
  manifest.set_data(layout.data);
  *manifest.mutable_state() = state;
  manifest.set_created_unix_seconds(absl::ToUnixSeconds(absl::Now()));

  absl::flat_hash_set<std::string> files;
  absl::flat_hash_map<std::string, int> index;  // tensor name -> position in manifest
  for (const RankShardRecords& records : ranks) {
    for (const FileChecksum& file : records.files) {
      if (!files.insert(file.file()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("file ", file.file(), " is listed by two writers"));
      }
      *manifest.add_files() = file;
    }
    for (const TensorEntry& entry : records.tensors) {
      auto [it, inserted] = index.try_emplace(entry.name(), manifest.tensors_size());
      if (inserted) {
        TensorEntry& merged = *manifest.add_tensors();
        merged = entry;
        merged.clear_shards();
      }
      TensorEntry& merged = *manifest.mutable_tensors(it->second);
      if (!std::equal(merged.global_shape().begin(), merged.global_shape().end(),
                      entry.global_shape().begin(), entry.global_shape().end()) ||
          merged.dtype() != entry.dtype()) {
        return absl::InvalidArgumentError(
            absl::StrCat("writers disagree on tensor '", entry.name(), "': ", merged.dtype(),
                         ShapeString(merged.global_shape()), " vs ", entry.dtype(),
                         ShapeString(entry.global_shape())));
      }
      for (const TensorShard& shard : entry.shards()) {
        // A replicated tensor is written by several ranks with the same hyper-rectangle:
        // one copy is enough (the replicas are kept identical by training itself).
        const HyperRectangle box = BoxOf(shard);
        const bool duplicate =
            std::any_of(merged.shards().begin(), merged.shards().end(),
                        [&](const TensorShard& kept) { return BoxOf(kept) == box; });
        if (!duplicate) *merged.add_shards() = shard;
      }
    }
  }
  absl::Status valid = ValidateManifest(manifest);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot build the manifest of step ", state.step(), ": ", valid.message()));
  }
  return manifest;
}

absl::Status ValidateManifest(const CheckpointManifest& m) {
  if (m.format_version() != kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint format version ", m.format_version(),
        " is not known to this reader (it reads version ", kCheckpointFormatVersion, ")"));
  }
  if (m.tensor() <= 0 || m.pipeline() <= 0 || m.data() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("layout (", m.tensor(), ", ", m.pipeline(), ", ",
                                                   m.data(), ") is not positive"));
  }
  if (m.step() != m.state().step()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest step ", m.step(), " differs from the training state's step ", m.state().step()));
  }
  absl::flat_hash_map<std::string, uint64_t> file_sizes;
  for (const FileChecksum& file : m.files()) {
    if (!ValidFileName(file.file())) {
      return absl::InvalidArgumentError(
          absl::StrCat("file name '", file.file(), "' is not a plain name inside the directory"));
    }
    if (!file_sizes.try_emplace(file.file(), file.byte_size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("file ", file.file(), " is listed twice"));
    }
  }
  absl::flat_hash_set<std::string> names;
  for (const TensorEntry& entry : m.tensors()) {
    if (!names.insert(entry.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", entry.name(), "' is listed twice"));
    }
    if (entry.dtype() != kCheckpointDtypeF32) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", entry.name(), "' has dtype '",
                                                     entry.dtype(), "'; version 1 stores f32"));
    }
    std::vector<HyperRectangle> boxes;
    for (const TensorShard& shard : entry.shards()) {
      const HyperRectangle box = BoxOf(shard);
      auto file = file_sizes.find(shard.file());
      if (file == file_sizes.end()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", entry.name(), "': shard ",
                                                       DebugString(box), " is in file ",
                                                       shard.file(), ", which is not listed"));
      }
      boxes.push_back(box);
    }
    const std::vector<int64_t> global(entry.global_shape().begin(), entry.global_shape().end());
    // Tiling first: it bounds every extent, so the byte sizes below cannot overflow.
    absl::Status tiling = CheckTiling(global, boxes);
    if (!tiling.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", entry.name(), "' ",
                                                     ShapeString(global), ": ", tiling.message()));
    }
    for (const TensorShard& shard : entry.shards()) {
      const uint64_t expected =
          static_cast<uint64_t>(Volume(BoxOf(shard).shape)) * kBytesPerElement;
      const uint64_t file_size = file_sizes[shard.file()];
      if (shard.byte_size() != expected || shard.byte_offset() < kShardHeaderBytes ||
          shard.byte_offset() > file_size || file_size - shard.byte_offset() < shard.byte_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", entry.name(), "': shard ", DebugString(BoxOf(shard)), " claims bytes [",
            shard.byte_offset(), ", +", shard.byte_size(), ") of ", shard.file(), " (", file_size,
            " bytes); it needs ", expected, " bytes inside the payload"));
      }
    }
  }
  return absl::OkStatus();
}

std::string SerializeManifest(const CheckpointManifest& manifest) {
  const std::string payload = manifest.SerializeAsString();
  std::string out(kManifestMagic);
  PutLittleEndian(payload.size(), 8, &out);
  PutLittleEndian(Crc32c(payload.data(), payload.size()), 4, &out);
  PutLittleEndian(0, 4, &out);
  out += payload;
  return out;
}

absl::StatusOr<CheckpointManifest> ParseManifest(absl::string_view bytes) {
  if (bytes.size() < kManifestEnvelopeBytes || bytes.substr(0, 8) != kManifestMagic) {
    return absl::DataLossError("manifest is shorter than its envelope or has a bad magic");
  }
  const uint64_t size = GetLittleEndian(bytes, 8, 8);
  const uint32_t crc = static_cast<uint32_t>(GetLittleEndian(bytes, 16, 4));
  const absl::string_view payload = bytes.substr(kManifestEnvelopeBytes);
  if (payload.size() != size) {
    return absl::DataLossError(absl::StrCat("manifest payload has ", payload.size(),
                                            " bytes, its envelope says ", size, " (truncated)"));
  }
  if (Crc32c(payload.data(), payload.size()) != crc) {
    return absl::DataLossError("manifest payload fails its CRC-32C (corrupt)");
  }
  CheckpointManifest manifest;
  if (!manifest.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError("manifest payload does not parse as a CheckpointManifest");
  }
  return manifest;
}

absl::Status WriteManifest(const std::string& dir, const CheckpointManifest& manifest) {
  // The shard files were renamed into `dir` earlier; make those names durable before the
  // manifest that refers to them can be.
  RETURN_IF_ERROR(SyncDirectory(dir));
  ASSIGN_OR_RETURN(AtomicFileWriter writer,
                   AtomicFileWriter::Create(JoinPath(dir, kManifestFileName)));
  RETURN_IF_ERROR(writer.Append(SerializeManifest(manifest)));
  return writer.Commit();
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestFileName);
  absl::StatusOr<RandomAccessFile> file = RandomAccessFile::Open(path);
  if (absl::IsNotFound(file.status())) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir, ": it has no ",
                                            kManifestFileName, " (absent or never completed)"));
  }
  if (absl::IsInvalidArgument(file.status())) {  // not a regular file
    return absl::DataLossError(file.status().message());
  }
  if (!file.ok()) return file.status();
  ASSIGN_OR_RETURN(const uint64_t size, file->Size());
  if (size > kMaxManifestBytes) {
    return absl::DataLossError(absl::StrCat(path, " has ", size, " bytes, more than any manifest (",
                                            kMaxManifestBytes, " bytes at most)"));
  }
  std::string bytes(size, '\0');
  RETURN_IF_ERROR(file->Read(0, bytes.size(), bytes.data()));
  absl::StatusOr<CheckpointManifest> manifest = ParseManifest(bytes);
  if (!manifest.ok())
    return absl::DataLossError(absl::StrCat(path, ": ", manifest.status().message()));
  absl::Status valid = ValidateManifest(*manifest);
  if (absl::IsFailedPrecondition(valid)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", valid.message()));
  }
  if (!valid.ok()) {
    return absl::DataLossError(absl::StrCat(path, " is inconsistent: ", valid.message()));
  }
  return manifest;
}

// ------------------------------------------------------------------------------ reading

const TensorEntry* Checkpoint::Find(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &manifest_.tensors(it->second);
}

absl::Status Checkpoint::VerifyFile(const std::string& name) {
  if (verified_files_.contains(name)) return absl::OkStatus();
  auto index = file_index_.find(name);
  if (index == file_index_.end()) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir_, " lists no file ", name));
  }
  const FileChecksum& expected = manifest_.files(index->second);
  const std::string path = JoinPath(dir_, name);
  absl::StatusOr<RandomAccessFile> file = RandomAccessFile::Open(path);
  if (absl::IsNotFound(file.status())) {
    return absl::DataLossError(absl::StrCat("shard file ", path, " is missing"));
  }
  if (absl::IsInvalidArgument(file.status())) {  // not a regular file
    return absl::DataLossError(absl::StrCat("shard file ", file.status().message()));
  }
  if (!file.ok()) return file.status();
  ASSIGN_OR_RETURN(const uint64_t size, file->Size());
  if (size != expected.byte_size()) {
    return absl::DataLossError(absl::StrCat("shard file ", path, " has ", size,
                                            " bytes, the manifest records ", expected.byte_size(),
                                            " (truncated or replaced)"));
  }
  std::string chunk;
  uint32_t crc = 0;
  for (uint64_t at = 0; at < size; at += chunk.size()) {
    chunk.resize(static_cast<size_t>(std::min<uint64_t>(kReadChunkBytes, size - at)));
    RETURN_IF_ERROR(file->Read(at, chunk.size(), chunk.data()));
    crc = ExtendCrc32c(crc, chunk.data(), chunk.size());
  }
  if (crc != expected.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "shard file %s fails its CRC-32C: computed %08x, the manifest records %08x (corrupt)", path,
        crc, expected.crc32c()));
  }
  // The checksum covers the header too, but a file of another step or format that was
  // recorded by mistake would still pass it; the header says which it is.
  std::string header_bytes(kShardHeaderBytes, '\0');
  if (size < static_cast<uint64_t>(kShardHeaderBytes)) {
    return absl::DataLossError(absl::StrCat("shard file ", path, " is shorter than its header"));
  }
  RETURN_IF_ERROR(file->Read(0, header_bytes.size(), header_bytes.data()));
  ASSIGN_OR_RETURN(const ShardFileHeader header, DecodeShardHeader(path, header_bytes));
  if (header.format_version != static_cast<uint32_t>(manifest_.format_version()) ||
      header.step != manifest_.step() || header.payload_bytes != size - kShardHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("shard file ", path, " header (version ", header.format_version, ", step ",
                     header.step, ", payload ", header.payload_bytes,
                     " bytes) does not match the manifest (version ", manifest_.format_version(),
                     ", step ", manifest_.step(), ", ", size - kShardHeaderBytes, " bytes)"));
  }
  verified_files_.insert(name);
  return absl::OkStatus();
}

absl::Status Checkpoint::VerifyAllFiles() {
  for (const FileChecksum& file : manifest_.files()) RETURN_IF_ERROR(VerifyFile(file.file()));
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> OpenCheckpoint(const std::string& dir,
                                          ChecksumVerification verification) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  ASSIGN_OR_RETURN(checkpoint.manifest_, ReadManifest(dir));
  const CheckpointManifest& manifest = checkpoint.manifest_;
  for (int i = 0; i < manifest.tensors_size(); ++i) {
    checkpoint.tensor_index_[manifest.tensors(i).name()] = i;
  }
  for (int i = 0; i < manifest.files_size(); ++i) {
    const FileChecksum& file = manifest.files(i);
    checkpoint.file_index_[file.file()] = i;
    if (verification == ChecksumVerification::kOnFirstUseSubset) continue;
    // Existence and size are cheap and catch the common damage (a missing or truncated
    // upload) at once, whatever the verification mode.
    const std::string path = JoinPath(dir, file.file());
    std::error_code error;
    const uintmax_t size = std::filesystem::file_size(path, error);
    if (error) {
      return absl::DataLossError(
          absl::StrCat("shard file ", path, " is missing or unreadable: ", error.message()));
    }
    if (size != file.byte_size()) {
      return absl::DataLossError(absl::StrCat("shard file ", path, " has ", size,
                                              " bytes, the manifest records ", file.byte_size(),
                                              " (truncated or replaced)"));
    }
  }
  if (verification == ChecksumVerification::kAllFilesOnOpen) {
    RETURN_IF_ERROR(checkpoint.VerifyAllFiles());
  }
  return checkpoint;
}

namespace {

// Loads one stored tensor (a parameter or a moment) into `wanted`'s place in `buffer`.
absl::Status LoadTensor(Checkpoint& checkpoint, const std::string& name,
                        const ShardedTensor& wanted, float* buffer,
                        std::map<std::string, RandomAccessFile>& open_files) {
  const TensorEntry* entry = checkpoint.Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", checkpoint.dir(), " has no tensor '", name, "'"));
  }
  const std::vector<int64_t> stored(entry->global_shape().begin(), entry->global_shape().end());
  bool vocabulary_resized = false;
  if (stored != wanted.global_shape) {
    vocabulary_resized =
        wanted.padded_vocabulary_rows && !stored.empty() &&
        stored.size() == wanted.global_shape.size() &&
        std::equal(stored.begin() + 1, stored.end(), wanted.global_shape.begin() + 1);
    if (!vocabulary_resized) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': the checkpoint holds global shape ", ShapeString(stored),
          ", this layout needs ", ShapeString(wanted.global_shape),
          " (only the padded vocabulary rows of an embedding or output layer may differ)"));
    }
  }
  float* dst = buffer + wanted.offset;
  // Rows past the stored padded vocabulary have no stored value; they are padding.
  if (vocabulary_resized) std::fill_n(dst, wanted.size, 0.0f);

  const HyperRectangle wanted_box = BoxOf(wanted);
  int64_t copied = 0;
  for (const TensorShard& shard : entry->shards()) {
    const HyperRectangle stored_box = BoxOf(shard);
    const std::optional<HyperRectangle> common = Intersect(stored_box, wanted_box);
    if (!common.has_value()) continue;
    RETURN_IF_ERROR(checkpoint.VerifyFile(shard.file()));
    auto it = open_files.find(shard.file());
    if (it == open_files.end()) {
      absl::StatusOr<RandomAccessFile> file =
          RandomAccessFile::Open(JoinPath(checkpoint.dir(), shard.file()));
      if (absl::IsNotFound(file.status())) {
        return absl::DataLossError(absl::StrCat("shard file ", checkpoint.dir(), "/", shard.file(),
                                                " disappeared after it was verified"));
      }
      if (!file.ok()) return file.status();
      it = open_files.emplace(shard.file(), *std::move(file)).first;
    }
    ShardReader reader(it->second, shard);
    absl::Status status;
    ForEachRun(stored_box, wanted_box, *common, [&](const HyperRectangleRun& run) {
      if (status.ok()) status = reader.Copy(run, dst);
    });
    RETURN_IF_ERROR(status);
    copied += Volume(common->shape);
  }
  // The manifest's shards tile the stored shape exactly (validated on open), so a wanted
  // box of the same global shape is covered exactly once.
  if (!vocabulary_resized && copied != static_cast<int64_t>(wanted.size)) {
    return absl::DataLossError(absl::StrCat("tensor '", name, "': stored shards cover ", copied,
                                            " of the ", wanted.size, " wanted elements"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadRankTensors(Checkpoint& checkpoint, absl::Span<const ShardedTensor> tensors,
                             float* params, float* first_moment, float* second_moment) {
  if (params == nullptr) return absl::InvalidArgumentError("LoadRankTensors needs a params buffer");
  // Files are opened once per call and closed at its end: a rank reads a few of them.
  std::map<std::string, RandomAccessFile> open_files;
  for (const ShardedTensor& t : tensors) {
    RETURN_IF_ERROR(CheckShardedTensor(t));
    RETURN_IF_ERROR(LoadTensor(checkpoint, t.name, t, params, open_files));
    if (first_moment != nullptr) {
      RETURN_IF_ERROR(LoadTensor(checkpoint, FirstMomentName(t.name), t, first_moment, open_files));
    }
    if (second_moment != nullptr) {
      RETURN_IF_ERROR(
          LoadTensor(checkpoint, SecondMomentName(t.name), t, second_moment, open_files));
    }
  }
  return absl::OkStatus();
}

// -------------------------------------------------------------------- training state

void SetRngSeed(uint64_t seed, TrainingState* state) {
  std::string bytes;
  PutLittleEndian(seed, 8, &bytes);
  (*state->mutable_rng_states())[0] = bytes;
}

absl::StatusOr<uint64_t> GetRngSeed(const TrainingState& state) {
  auto it = state.rng_states().find(0);
  if (it == state.rng_states().end()) {
    return absl::NotFoundError("training state has no RNG seed (rng_states[0])");
  }
  if (it->second.size() != 8) {
    return absl::DataLossError(
        absl::StrCat("training state's RNG seed has ", it->second.size(), " bytes, expected 8"));
  }
  return GetLittleEndian(it->second, 0, 8);
}

}  // namespace mtrain

namespace mtrain {

std::vector<std::string> FilesOverlapping(const CheckpointManifest& manifest,
                                          absl::Span<const ShardedTensor> tensors,
                                          bool with_moments) {
  absl::flat_hash_map<std::string, const TensorEntry*> entries;
  for (const TensorEntry& entry : manifest.tensors()) entries[entry.name()] = &entry;
  std::set<std::string> files;
  for (const ShardedTensor& tensor : tensors) {
    const HyperRectangle wanted{tensor.global_offset, tensor.local_shape};
    std::vector<std::string> names = {tensor.name};
    if (with_moments) {
      names.push_back(FirstMomentName(tensor.name));
      names.push_back(SecondMomentName(tensor.name));
    }
    for (const std::string& name : names) {
      const auto it = entries.find(name);
      if (it == entries.end()) continue;
      for (const TensorShard& shard : it->second->shards()) {
        const HyperRectangle stored{{shard.global_offset().begin(), shard.global_offset().end()},
                                    {shard.shape().begin(), shard.shape().end()}};
        if (Intersect(stored, wanted).has_value()) files.insert(shard.file());
      }
    }
  }
  return std::vector<std::string>(files.begin(), files.end());
}

}  // namespace mtrain
