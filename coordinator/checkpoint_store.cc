#include "coordinator/checkpoint_store.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "checkpoint/checkpoint.h"
#include "common/status_macros.h"

namespace mtrain {
namespace fs = std::filesystem;
namespace {

// Cleanup of files no checkpoint needs any more (a replaced or expired checkpoint, an
// abandoned upload): a failure loses no state, only disk space, so it is reported on
// stderr for the operator and the operation goes on; the next retention pass tries again.
void ReportCleanupFailure(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return;
  std::fprintf(stderr, "coordinator: checkpoint store: %.*s: %s\n", static_cast<int>(what.size()),
               what.data(), status.ToString().c_str());
}

constexpr char kStepPrefix[] = "step-";
constexpr char kDamagedPrefix[] = "damaged-";

// Job ids become directory names: keep them to a safe alphabet.
absl::Status CheckJobId(const std::string& job_id) {
  const bool safe = !job_id.empty() && job_id.size() <= 128 && job_id != "." && job_id != ".." &&
                    std::all_of(job_id.begin(), job_id.end(), [](char c) {
                      return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.';
                    });
  if (!safe) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job_id: '", job_id, "' is not a job id [rule: 1-128 characters of A-Z a-z 0-9 . _ -]"));
  }
  return absl::OkStatus();
}

absl::Status CheckStep(int64_t step) {
  if (step < 0 || step > 99999999) {
    return absl::InvalidArgumentError(absl::StrCat("step: ", step,
                                                   " is outside [0, 99999999] [rule: steps fit the "
                                                   "checkpoint directory name]"));
  }
  return absl::OkStatus();
}

std::optional<int64_t> ParseStepDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kStepPrefix)) return std::nullopt;
  int64_t step = 0;
  if (name.size() != 8 || !absl::SimpleAtoi(name, &step)) return std::nullopt;
  return step;
}

// Size and modification time of each file the manifest lists, in manifest order.
std::optional<std::vector<std::pair<int64_t, int64_t>>> Signature(
    const std::string& dir, const CheckpointManifest& manifest) {
  std::vector<std::pair<int64_t, int64_t>> out;
  std::vector<std::string> names = {kManifestFileName};
  for (const FileChecksum& f : manifest.files()) names.push_back(f.file());
  for (const std::string& name : names) {
    struct stat st {};
    if (::stat(absl::StrCat(dir, "/", name).c_str(), &st) != 0) return std::nullopt;
    out.emplace_back(static_cast<int64_t>(st.st_size),
                     static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
  }
  return out;
}

CheckpointInfo InfoOf(const std::string& dir, const CheckpointManifest& manifest) {
  CheckpointInfo info;
  info.set_step(manifest.step());
  info.set_created_unix_seconds(manifest.created_unix_seconds());
  info.set_tensor(manifest.tensor());
  info.set_pipeline(manifest.pipeline());
  info.set_data(manifest.data());
  uint64_t bytes = 0;
  for (const FileChecksum& f : manifest.files()) bytes += f.byte_size();
  std::error_code error;
  const uintmax_t manifest_size = fs::file_size(absl::StrCat(dir, "/", kManifestFileName), error);
  if (!error) bytes += manifest_size;
  info.set_total_bytes(bytes);
  info.set_num_files(manifest.files_size());
  info.set_num_tensors(manifest.tensors_size());
  info.set_parameters_only(
      std::none_of(manifest.tensors().begin(), manifest.tensors().end(),
                   [](const TensorEntry& t) { return absl::StartsWith(t.name(), "optimizer."); }));
  return info;
}

absl::Status RemoveAll(const std::string& path) {
  std::error_code error;
  fs::remove_all(path, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsCheckpointFileName(absl::string_view file) {
  if (file == kManifestFileName) return true;
  absl::string_view digits = file;
  if (!absl::ConsumePrefix(&digits, "rank-") || !absl::ConsumeSuffix(&digits, ".bin")) {
    return false;
  }
  return digits.size() >= 5 && digits.size() <= 9 &&
         std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit);
}

absl::Status CheckpointFileUpload::Append(uint64_t offset, absl::string_view data) {
  if (offset != received_) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset: chunk of ", file_, " at byte ", offset, " but ", received_,
                     " bytes were received [rule: chunks in order, without gaps]"));
  }
  if (writer_.has_value()) {
    if (absl::Status appended = writer_->Append(data); !appended.ok()) {
      writer_.reset();  // removes its temporary file
      return store_->AbandonStaging(job_id_, generation_, step_, appended, received_ + data.size());
    }
  } else {
    // A manifest of a model with thousands of tensors is still a few MiB at most.
    if (manifest_bytes_.size() + data.size() > (64u << 20)) {
      return absl::InvalidArgumentError("MANIFEST: larger than 64 MiB [rule: manifest <= 64 MiB]");
    }
    manifest_bytes_.append(data.data(), data.size());
  }
  received_ += data.size();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CheckpointFileUpload::Finish() {
  if (writer_.has_value()) {
    absl::Status committed = writer_->Commit();
    writer_.reset();
    if (!committed.ok()) {
      return store_->AbandonStaging(job_id_, generation_, step_, committed, received_);
    }
  } else {
    RETURN_IF_ERROR(store_->Commit(job_id_, generation_, step_, manifest_bytes_).status());
  }
  return received_;
}

absl::StatusOr<CheckpointChunk> CheckpointFileDownload::Next() {
  in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  const size_t got = static_cast<size_t>(in_.gcount());
  if (in_.bad()) return absl::InternalError(absl::StrCat("read error on ", header_.file()));
  CheckpointChunk chunk = header_;
  chunk.set_offset(offset_);
  chunk.set_data(buffer_.data(), got);
  // End of file is known only once a read comes up short: a file of a whole number of
  // chunks ends with an empty one.
  chunk.set_last(in_.eof());
  offset_ += got;
  return chunk;
}

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(const std::string& root,
                                                                       int keep_last) {
  if (keep_last < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep_last: ", keep_last, " [rule: keep at least 1 checkpoint]"));
  }
  std::error_code error;
  fs::create_directories(root, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create checkpoint store ", root, ": ", error.message()));
  }
  return std::unique_ptr<CheckpointStore>(new CheckpointStore(root, keep_last));
}

std::string CheckpointStore::JobDir(const std::string& job_id) const {
  return absl::StrCat(root_, "/", job_id);
}

std::string CheckpointStore::StagingDir(const std::string& job_id, int64_t generation,
                                        int64_t step) const {
  return absl::StrCat(JobDir(job_id), "/staging/gen-", generation, "/", CheckpointDirName(step));
}

absl::StatusOr<std::unique_ptr<CheckpointFileUpload>> CheckpointStore::BeginFile(
    const std::string& job_id, int64_t generation, int64_t step, const std::string& file) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  RETURN_IF_ERROR(CheckStep(step));
  if (generation < 0) {
    return absl::InvalidArgumentError(absl::StrCat("generation: ", generation, " is negative"));
  }
  if (!IsCheckpointFileName(file)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file: '", file, "' is not a checkpoint file [rule: rank-NNNNN.bin or MANIFEST]"));
  }
  const std::string dir = StagingDir(job_id, generation, step);
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    return AbandonStaging(
        job_id, generation, step,
        absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message())));
  }
  std::optional<AtomicFileWriter> writer;
  if (file != kManifestFileName) {
    absl::StatusOr<AtomicFileWriter> created = AtomicFileWriter::Create(dir + "/" + file);
    if (!created.ok()) return AbandonStaging(job_id, generation, step, created.status());
    writer.emplace(*std::move(created));
  }
  return std::unique_ptr<CheckpointFileUpload>(
      new CheckpointFileUpload(this, job_id, generation, step, file, std::move(writer)));
}

absl::StatusOr<std::optional<ReceivedCheckpointFile>> CheckpointFileReceiver::Take(
    CheckpointChunk chunk) {
  if (upload_ == nullptr) {
    ASSIGN_OR_RETURN(
        upload_, store_->BeginFile(chunk.job_id(), chunk.generation(), chunk.step(), chunk.file()));
    header_ = chunk;
    header_.clear_data();  // kept for its header only
  } else if (chunk.job_id() != header_.job_id() || chunk.generation() != header_.generation() ||
             chunk.step() != header_.step() || chunk.file() != header_.file()) {
    return absl::InvalidArgumentError(
        "a chunk names another job, generation, step or file than the stream's first "
        "[rule: one file per upload stream]");
  }
  RETURN_IF_ERROR(upload_->Append(chunk.offset(), chunk.data()));
  if (!chunk.last()) return std::nullopt;
  ReceivedCheckpointFile received;
  ASSIGN_OR_RETURN(received.bytes_received, upload_->Finish());
  if (header_.file() == kManifestFileName) {
    // Listed, not taken from the commit: retention may already have dropped it.
    for (const CheckpointInfo& info : store_->List(header_.job_id())) {
      if (info.step() == header_.step()) received.committed = info;
    }
  }
  return received;
}

absl::Status CheckpointFileReceiver::EndedEarly() const {
  return absl::InvalidArgumentError(absl::StrCat(
      header_.file(), ": the stream ended without a chunk with `last` set (upload cut off)"));
}

absl::StatusOr<ReceivedCheckpointFile> CheckpointStore::ReceiveFile(
    CheckpointChunk first, absl::FunctionRef<bool(CheckpointChunk*)> next) {
  CheckpointFileReceiver receiver(this);
  ASSIGN_OR_RETURN(std::optional<ReceivedCheckpointFile> received, receiver.Take(std::move(first)));
  CheckpointChunk chunk;
  while (!received.has_value()) {
    if (!next(&chunk)) return receiver.EndedEarly();
    ASSIGN_OR_RETURN(received, receiver.Take(std::move(chunk)));
  }
  return *std::move(received);
}

absl::StatusOr<std::unique_ptr<CheckpointFileDownload>> CheckpointStore::OpenDownload(
    const std::string& job_id, int64_t step, const std::string& file) const {
  ASSIGN_OR_RETURN(const std::string path, FilePath(job_id, step, file));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", file));
  CheckpointChunk header;
  header.set_job_id(job_id);
  header.set_step(step);
  header.set_file(file);
  return std::unique_ptr<CheckpointFileDownload>(
      new CheckpointFileDownload(std::move(in), std::move(header)));
}

void CheckpointStore::SetWriteFailureListener(WriteFailureListener listener, const void* owner) {
  MutexLock lock(&mutex_);
  on_write_failure_ = std::move(listener);
  on_write_failure_owner_ = owner;
}

void CheckpointStore::RemoveWriteFailureListener(const void* owner) {
  MutexLock lock(&mutex_);
  if (on_write_failure_owner_ != owner) return;
  on_write_failure_ = nullptr;
  on_write_failure_owner_ = nullptr;
}

std::optional<uint64_t> CheckpointStore::FreeBytes() const {
  struct statvfs st {};
  if (::statvfs(root_.c_str(), &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

absl::Status CheckpointStore::AbandonStaging(const std::string& job_id, int64_t generation,
                                             int64_t step, const absl::Status& failure,
                                             uint64_t unstaged_bytes) {
  const std::string staging = StagingDir(job_id, generation, step);
  uint64_t bytes_lost = unstaged_bytes;
  std::error_code ignored;
  for (const fs::directory_entry& entry : fs::directory_iterator(staging, ignored)) {
    std::error_code error;
    const uintmax_t size = entry.file_size(error);
    if (!error) bytes_lost += size;
  }
  fs::remove_all(staging, ignored);
  // A refused request (a bad manifest, a missing file) is the uploader's to explain; a
  // write the storage refused is the operator's, so it is counted and logged too.
  const bool storage = failure.code() != absl::StatusCode::kInvalidArgument &&
                       failure.code() != absl::StatusCode::kDataLoss;
  const absl::Status status(
      failure.code(),
      absl::StrCat("checkpoint step ", step, " of ", job_id,
                   " not stored (its uploaded files are removed): ", failure.message()));
  WriteFailureListener listener;
  {
    MutexLock lock(&mutex_);
    listener = on_write_failure_;
  }
  if (storage && listener) listener(job_id, step, status, bytes_lost);
  return status;
}

absl::StatusOr<CheckpointInfo> CheckpointStore::Commit(const std::string& job_id,
                                                       int64_t generation, int64_t step,
                                                       absl::string_view manifest_bytes) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  RETURN_IF_ERROR(CheckStep(step));
  absl::StatusOr<CheckpointInfo> committed = CommitStaged(job_id, generation, step, manifest_bytes);
  if (!committed.ok()) return AbandonStaging(job_id, generation, step, committed.status());
  return committed;
}

absl::StatusOr<CheckpointInfo> CheckpointStore::CommitStaged(const std::string& job_id,
                                                             int64_t generation, int64_t step,
                                                             absl::string_view manifest_bytes) {
  absl::StatusOr<CheckpointManifest> manifest = ParseManifest(manifest_bytes);
  if (!manifest.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MANIFEST of step ", step, ": ", manifest.status().message()));
  }
  if (absl::Status valid = ValidateManifest(*manifest); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MANIFEST of step ", step, ": ", valid.message()));
  }
  if (manifest->job_id() != job_id || manifest->step() != step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MANIFEST: describes job ", manifest->job_id(), " step ", manifest->step(),
        " but was uploaded for job ", job_id, " step ", step, " [rule: manifest matches upload]"));
  }
  const std::string staging = StagingDir(job_id, generation, step);
  RETURN_IF_ERROR(WriteManifest(staging, *manifest));
  // Every listed file, whole: what is committed must be loadable.
  absl::StatusOr<Checkpoint> opened =
      OpenCheckpoint(staging, ChecksumVerification::kAllFilesOnOpen);
  if (!opened.ok()) {
    return absl::DataLossError(absl::StrCat("not committed, a listed file is missing or damaged: ",
                                            opened.status().message()));
  }
  MutexLock lock(&mutex_);
  const std::string final_dir = absl::StrCat(JobDir(job_id), "/", CheckpointDirName(step));
  // An older copy of the same step (an earlier generation reached it too) is moved aside,
  // the new one moved in, then the old one deleted. A crash between the renames leaves
  // this step missing, never half-written: restarts then use the previous checkpoint.
  const std::string replaced = absl::StrCat(final_dir, ".replaced");
  std::error_code error;
  if (fs::exists(final_dir)) {
    RETURN_IF_ERROR(RemoveAll(replaced));
    fs::rename(final_dir, replaced, error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot move ", final_dir, ": ", error.message()));
    }
  }
  fs::rename(staging, final_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot move ", staging, " to ", final_dir, ": ", error.message()));
  }
  RETURN_IF_ERROR(SyncDirectory(JobDir(job_id)));
  ReportCleanupFailure(RemoveAll(replaced), "removing the replaced checkpoint");
  if (std::optional<std::vector<std::pair<int64_t, int64_t>>> signature =
          Signature(final_dir, *manifest)) {
    verified_[{job_id, step}] = Verification{*std::move(signature), absl::OkStatus()};
  }
  ApplyRetentionLocked(job_id, generation);
  return InfoOf(final_dir, *manifest);
}

std::vector<int64_t> CheckpointStore::CommittedStepsLocked(const std::string& job_id) const {
  std::vector<int64_t> steps;
  if (!CheckJobId(job_id).ok()) return steps;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(JobDir(job_id), error)) {
    const std::optional<int64_t> step = ParseStepDirName(entry.path().filename().string());
    if (!step.has_value()) continue;
    if (!fs::exists(entry.path() / kManifestFileName)) continue;
    steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void CheckpointStore::ApplyRetentionLocked(const std::string& job_id, int64_t generation) {
  const std::vector<int64_t> steps = CommittedStepsLocked(job_id);
  for (size_t i = 0; i + keep_last_ < steps.size(); ++i) {
    const std::string dir = absl::StrCat(JobDir(job_id), "/", CheckpointDirName(steps[i]));
    // The manifest first: a half-deleted checkpoint must never look complete.
    std::error_code ignored;
    fs::remove(absl::StrCat(dir, "/", kManifestFileName), ignored);
    ReportCleanupFailure(SyncDirectory(dir), "syncing an expired checkpoint's directory");
    ReportCleanupFailure(RemoveAll(dir), "removing an expired checkpoint");
    verified_.erase({job_id, steps[i]});
  }
  // Uploads of older generations were abandoned when their generation failed.
  std::error_code error;
  const std::string staging = absl::StrCat(JobDir(job_id), "/staging");
  for (const fs::directory_entry& entry : fs::directory_iterator(staging, error)) {
    // filename() is a temporary: keep the string the view points into.
    const std::string filename = entry.path().filename().string();
    absl::string_view name = filename;
    int64_t gen = 0;
    if (absl::ConsumePrefix(&name, "gen-") && absl::SimpleAtoi(name, &gen) && gen < generation) {
      ReportCleanupFailure(RemoveAll(entry.path().string()), "removing an abandoned upload");
    }
  }
}

std::vector<CheckpointInfo> CheckpointStore::List(const std::string& job_id) const {
  MutexLock lock(&mutex_);
  std::vector<CheckpointInfo> out;
  for (int64_t step : CommittedStepsLocked(job_id)) {
    const std::string dir = absl::StrCat(JobDir(job_id), "/", CheckpointDirName(step));
    absl::StatusOr<CheckpointManifest> manifest = ReadManifest(dir);
    if (manifest.ok()) out.push_back(InfoOf(dir, *manifest));
  }
  return out;
}

bool CheckpointStore::Has(const std::string& job_id, int64_t step) const {
  MutexLock lock(&mutex_);
  const std::vector<int64_t> steps = CommittedStepsLocked(job_id);
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

absl::StatusOr<std::string> CheckpointStore::CheckpointDir(const std::string& job_id,
                                                           int64_t step) const {
  RETURN_IF_ERROR(CheckJobId(job_id));
  RETURN_IF_ERROR(CheckStep(step));
  const std::string dir = absl::StrCat(JobDir(job_id), "/", CheckpointDirName(step));
  if (!fs::exists(absl::StrCat(dir, "/", kManifestFileName))) {
    return absl::NotFoundError(absl::StrCat(job_id, " has no checkpoint of step ", step));
  }
  return dir;
}

absl::StatusOr<std::string> CheckpointStore::FilePath(const std::string& job_id, int64_t step,
                                                      const std::string& file) const {
  if (!IsCheckpointFileName(file)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file: '", file, "' is not a checkpoint file [rule: rank-NNNNN.bin or MANIFEST]"));
  }
  ASSIGN_OR_RETURN(const std::string dir, CheckpointDir(job_id, step));
  const std::string path = absl::StrCat(dir, "/", file);
  if (!fs::exists(path)) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint step ", step, " of ", job_id, " has no file ", file));
  }
  return path;
}

absl::Status CheckpointStore::VerifyLocked(const std::string& job_id, int64_t step) {
  const std::string dir = absl::StrCat(JobDir(job_id), "/", CheckpointDirName(step));
  ASSIGN_OR_RETURN(const CheckpointManifest manifest, ReadManifest(dir));
  std::optional<std::vector<std::pair<int64_t, int64_t>>> signature = Signature(dir, manifest);
  const auto cached = verified_.find({job_id, step});
  if (signature.has_value() && cached != verified_.end() &&
      cached->second.signature == *signature) {
    return cached->second.status;
  }
  absl::Status status = OpenCheckpoint(dir, ChecksumVerification::kAllFilesOnOpen).status();
  if (signature.has_value()) {
    verified_[{job_id, step}] = Verification{*std::move(signature), status};
  }
  return status;
}

void CheckpointStore::VerifyAhead(const std::string& job_id) {
  std::vector<int64_t> steps;
  {
    MutexLock lock(&mutex_);
    steps = CommittedStepsLocked(job_id);
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::pair<std::string, int64_t> key = {job_id, *it};
    const std::string dir = absl::StrCat(JobDir(job_id), "/", CheckpointDirName(*it));
    absl::StatusOr<CheckpointManifest> manifest = ReadManifest(dir);
    if (!manifest.ok()) continue;  // deleted meanwhile, or damaged: LatestUsable decides
    std::optional<std::vector<std::pair<int64_t, int64_t>>> signature = Signature(dir, *manifest);
    if (!signature.has_value()) continue;
    {
      MutexLock lock(&mutex_);
      const auto cached = verified_.find(key);
      if (cached != verified_.end() && cached->second.signature == *signature) {
        if (cached->second.status.ok()) return;  // the resume point is known good
        continue;                                // known damaged: the one before
      }
    }
    absl::Status status = OpenCheckpoint(dir, ChecksumVerification::kAllFilesOnOpen).status();
    {
      MutexLock lock(&mutex_);
      // Retention may have deleted it while it was read (the manifest goes first): then
      // there is nothing to record.
      std::error_code error;
      if (!fs::exists(absl::StrCat(dir, "/", kManifestFileName), error)) continue;
      verified_[key] = Verification{*std::move(signature), status};
    }
    if (status.ok()) return;
  }
}

std::optional<CheckpointInfo> CheckpointStore::LatestUsable(const std::string& job_id,
                                                            std::vector<std::string>* damaged,
                                                            int64_t newest_step) {
  MutexLock lock(&mutex_);
  std::vector<int64_t> steps = CommittedStepsLocked(job_id);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it > newest_step) continue;
    const std::string dir = absl::StrCat(JobDir(job_id), "/", CheckpointDirName(*it));
    absl::Status verified = VerifyLocked(job_id, *it);
    if (verified.ok()) {
      absl::StatusOr<CheckpointManifest> manifest = ReadManifest(dir);
      if (manifest.ok()) return InfoOf(dir, *manifest);
      verified = manifest.status();
    }
    // Moved aside, not deleted: whoever investigates the damage wants the bytes.
    const std::string aside =
        absl::StrCat(JobDir(job_id), "/", kDamagedPrefix, CheckpointDirName(*it));
    ReportCleanupFailure(RemoveAll(aside), "removing an older damaged copy");
    std::error_code error;
    fs::rename(dir, aside, error);
    verified_.erase({job_id, *it});
    if (damaged != nullptr) {
      damaged->push_back(absl::StrCat(
          "checkpoint step ", *it, " is damaged (", absl::StatusCodeToString(verified.code()), ": ",
          verified.message(), "); moved aside to ", error ? dir : aside));
    }
    if (error) {
      // Could not move it: deleting its manifest keeps it from being offered again.
      fs::remove(absl::StrCat(dir, "/", kManifestFileName), error);
    }
  }
  return std::nullopt;
}

absl::Status CheckpointStore::DeleteJob(const std::string& job_id) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  MutexLock lock(&mutex_);
  for (auto it = verified_.lower_bound({job_id, INT64_MIN});
       it != verified_.end() && it->first.first == job_id;) {
    it = verified_.erase(it);
  }
  return RemoveAll(JobDir(job_id));
}

void CheckpointStore::ForgetVerified(const std::string& job_id) {
  MutexLock lock(&mutex_);
  for (auto it = verified_.begin(); it != verified_.end();) {
    it = it->first.first == job_id ? verified_.erase(it) : std::next(it);
  }
}

}  // namespace mtrain
