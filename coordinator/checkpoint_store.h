// The coordinator's checkpoint store: where ranks upload their shard files and rank 0 the
// manifest, where resuming ranks and `trainctl export` download them, and which decides
// the checkpoint a restart resumes from. The on-disk format of one checkpoint is
// docs/CHECKPOINT_FORMAT.md; this class adds where checkpoints live and how they arrive.
//
//   <root>/<job>/step-00000020/              committed: MANIFEST present and verified
//   <root>/<job>/staging/gen-3/step-00000030/ a generation's upload in progress
//   <root>/<job>/damaged-step-00000040/      failed its checksums; kept for inspection
//
// An upload writes into its generation's staging directory (so a generation that dies
// half-way never touches a committed checkpoint); committing the MANIFEST checks that
// every listed file is there with its size and CRC-32C, then renames the staging
// directory to step-NNNNNNNN in one step, replacing an older copy of the same step. Only
// the last `keep_last` committed checkpoints of a job are kept; staging directories of
// older generations are dropped at each commit.
//
// A checkpoint whose upload or commit fails (a full disk, a damaged file, a bad manifest)
// never becomes a committed one, and its staging directory is removed at once, with
// every file the generation uploaded for that step: on a full disk those files are what
// keeps it full. Other ranks still uploading into it then fail too (the checkpoint is lost
// anyway, and its generation with it).
//
// Thread-safe. No gRPC here: the adapter (grpc_service.cc) hands an upload stream to
// ReceiveFile and sends what a CheckpointFileDownload reads; the rules of both streams
// (chunk order, which file commits a checkpoint, file names) are this class's.
#ifndef MTRAIN_COORDINATOR_CHECKPOINT_STORE_H_
#define MTRAIN_COORDINATOR_CHECKPOINT_STORE_H_

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/file_io.h"
#include "common/mutex.h"
#include "proto/checkpoint.pb.h"
#include "proto/coordinator.pb.h"

namespace mtrain {

class CheckpointStore;

// One file arriving in chunks. Chunks must come in order, without gaps.
class CheckpointFileUpload {
 public:
  // INVALID_ARGUMENT if `offset` is not where the previous chunk ended.
  absl::Status Append(uint64_t offset, absl::string_view data);
  // Makes the file durable in the staging directory; for the MANIFEST, verifies and
  // commits the checkpoint (CheckpointStore::Commit's errors). Returns the bytes received.
  absl::StatusOr<uint64_t> Finish();

 private:
  friend class CheckpointStore;
  CheckpointFileUpload(CheckpointStore* store, std::string job_id, int64_t generation, int64_t step,
                       std::string file, std::optional<AtomicFileWriter> writer)
      : store_(store),
        job_id_(std::move(job_id)),
        generation_(generation),
        step_(step),
        file_(std::move(file)),
        writer_(std::move(writer)) {}

  CheckpointStore* store_;
  std::string job_id_;
  int64_t generation_;
  int64_t step_;
  std::string file_;
  std::optional<AtomicFileWriter> writer_;  // shard files; the MANIFEST is kept in memory
  std::string manifest_bytes_;
  uint64_t received_ = 0;
};

// What an upload stream delivered (CheckpointStore::ReceiveFile).
struct ReceivedCheckpointFile {
  uint64_t bytes_received = 0;
  // Set when the file was the MANIFEST and the checkpoint it completes is committed (and
  // not already dropped again by retention: an upload of a step older than the last
  // `keep_last` ones is stored and removed at once).
  std::optional<CheckpointInfo> committed;
};

// ReceiveFile pushed one chunk at a time, for a callback (reactor) stream that holds no
// thread between chunks: the same rules and errors. Not thread-safe (one stream's chunks
// arrive one after another).
class CheckpointFileReceiver {
 public:
  explicit CheckpointFileReceiver(CheckpointStore* store) : store_(store) {}

  // Takes the stream's next chunk: nullopt until the chunk with `last`, then what
  // ReceiveFile returns. After an error, the upload is abandoned: take no more.
  absl::StatusOr<std::optional<ReceivedCheckpointFile>> Take(CheckpointChunk chunk);
  // The stream ended before its `last` chunk: ReceiveFile's INVALID_ARGUMENT (the file's
  // partial bytes are dropped when the receiver goes).
  absl::Status EndedEarly() const;
  // Whether a chunk was taken; the first chunk's job, generation, step and file.
  bool started() const { return upload_ != nullptr; }
  const CheckpointChunk& header() const { return header_; }

 private:
  CheckpointStore* const store_;
  CheckpointChunk header_;  // the first chunk without its data
  std::unique_ptr<CheckpointFileUpload> upload_;
};

// One file of a committed checkpoint, read in order for a download. Not thread-safe; the
// file stays open while this lives.
class CheckpointFileDownload {
 public:
  // At most this much data per chunk (proto/coordinator.proto promises 1 MiB).
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  // The next chunk: the request's job, step and file, the chunk's offset and data, and
  // `last` on the final one (which may be empty). INTERNAL naming the file on a read
  // error. Call no more after the last chunk.
  absl::StatusOr<CheckpointChunk> Next();

 private:
  friend class CheckpointStore;
  CheckpointFileDownload(std::ifstream in, CheckpointChunk header)
      : in_(std::move(in)), header_(std::move(header)), buffer_(kChunkBytes, '\0') {}

  std::ifstream in_;
  CheckpointChunk header_;  // job_id, step and file of every chunk
  std::string buffer_;
  uint64_t offset_ = 0;
};

class CheckpointStore {
 public:
  // Creates `root` if needed. INVALID_ARGUMENT if keep_last < 1.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Open(const std::string& root,
                                                               int keep_last);

  // Starts receiving `file` ("rank-NNNNN.bin" or "MANIFEST") of `step` from `generation`.
  // Whether the generation may upload is the job manager's call, made before.
  // INVALID_ARGUMENT naming the rule for a bad job id, file name or step.
  absl::StatusOr<std::unique_ptr<CheckpointFileUpload>> BeginFile(const std::string& job_id,
                                                                  int64_t generation, int64_t step,
                                                                  const std::string& file);

  // Receives one file of an upload stream: `first` is the stream's first chunk, `next`
  // reads the following ones into its argument (false: the stream ended). Every chunk
  // must name the first's job, generation, step and file and continue where the previous
  // one ended; the chunk with `last` set ends the file. The MANIFEST, received last by
  // its uploader, commits the checkpoint (Commit). Whether the generation may upload is
  // the job manager's call, made before.
  // INVALID_ARGUMENT naming the rule for a bad job id, file name or step (BeginFile), a
  // chunk naming another job, generation, step or file, a chunk out of order, or a
  // stream that ends without `last`; a commit's errors (Commit); INTERNAL (or another
  // code of the storage) if the file cannot be stored, its step's uploads then removed.
  absl::StatusOr<ReceivedCheckpointFile> ReceiveFile(
      CheckpointChunk first, absl::FunctionRef<bool(CheckpointChunk*)> next);

  // Opens a committed checkpoint's file for download. FilePath's errors
  // (INVALID_ARGUMENT, NOT_FOUND); NOT_FOUND naming the file if it cannot be opened.
  absl::StatusOr<std::unique_ptr<CheckpointFileDownload>> OpenDownload(
      const std::string& job_id, int64_t step, const std::string& file) const;

  // Commits `step` of the generation's staging directory with this manifest. The manifest
  // must parse, obey docs/CHECKPOINT_FORMAT.md's rules and name this job and step
  // (INVALID_ARGUMENT); every file it lists must be in staging with its size and CRC-32C
  // (DATA_LOSS naming the file). Then applies retention.
  absl::StatusOr<CheckpointInfo> Commit(const std::string& job_id, int64_t generation, int64_t step,
                                        absl::string_view manifest_bytes);

  // Committed checkpoints of the job, oldest first (none for an unknown job).
  std::vector<CheckpointInfo> List(const std::string& job_id) const;
  bool Has(const std::string& job_id, int64_t step) const;

  // Path of a committed checkpoint's file. INVALID_ARGUMENT for a bad name; NOT_FOUND if
  // the checkpoint or the file does not exist.
  absl::StatusOr<std::string> FilePath(const std::string& job_id, int64_t step,
                                       const std::string& file) const;
  // Directory of a committed checkpoint; NOT_FOUND if there is none for `step`.
  absl::StatusOr<std::string> CheckpointDir(const std::string& job_id, int64_t step) const;

  // The newest committed checkpoint whose every file passes its size and CRC-32C check,
  // i.e. the one a restart resumes from. A checkpoint that fails is moved aside to
  // damaged-step-NNNNNNNN and described in `damaged` (one line each, newest first), so it
  // is never offered again. Files verified before and not modified since (same size and
  // modification time) are not read again. nullopt when nothing usable remains.
  // Checkpoints of a step above `newest_step` are passed over (neither read nor offered).
  std::optional<CheckpointInfo> LatestUsable(const std::string& job_id,
                                             std::vector<std::string>* damaged,
                                             int64_t newest_step = INT64_MAX);

  // Reads and checks, without holding the store's lock (nor any caller's), the newest
  // committed checkpoints of the job whose present files have not been checked yet, newest
  // first until one passes, and records each outcome; LatestUsable then reads nothing it
  // covers. The job manager calls it before placing, outside its own lock: reading a large
  // checkpoint takes seconds (after a coordinator restart nothing is recorded yet).
  void VerifyAhead(const std::string& job_id);

  // Forgets which files were verified (e.g. after a rank failed to load one), so the next
  // LatestUsable reads every file again.
  void ForgetVerified(const std::string& job_id);

  // Removes everything stored for the job (committed, staging and damaged checkpoints),
  // when the job itself is deleted. OK if there was nothing; INVALID_ARGUMENT for a bad
  // job id; INTERNAL naming the path if the files cannot be removed.
  absl::Status DeleteJob(const std::string& job_id);

  const std::string& root() const { return root_; }
  int keep_last() const { return keep_last_; }

  // Called (without the store's lock held) when a write of an upload or a commit fails
  // for a reason of the storage rather than of the request (a full disk, an I/O error),
  // after the step's staging directory was removed. `bytes_lost` is what the step had
  // stored by then (its staged files and the failed file's bytes received): at least
  // that much must be free before it can fit. One listener at a time, replaced by the
  // next; `owner` identifies it, so that an owner going away removes only its own.
  using WriteFailureListener = std::function<void(
      const std::string& job_id, int64_t step, const absl::Status& failure, uint64_t bytes_lost)>;
  void SetWriteFailureListener(WriteFailureListener listener, const void* owner = nullptr);
  void RemoveWriteFailureListener(const void* owner);

  // Bytes free for the store's files (statvfs of the root, as an unprivileged writer
  // sees it); nullopt if that cannot be read.
  std::optional<uint64_t> FreeBytes() const;

 private:
  friend class CheckpointFileUpload;
  CheckpointStore(std::string root, int keep_last)
      : root_(std::move(root)), keep_last_(keep_last) {}

  std::string JobDir(const std::string& job_id) const;
  // Removes the staging directory of a failed upload or commit and tells the listener
  // (storage failures only). Returns `failure`, its message prefixed with what was lost.
  absl::Status AbandonStaging(const std::string& job_id, int64_t generation, int64_t step,
                              const absl::Status& failure, uint64_t unstaged_bytes = 0);
  absl::StatusOr<CheckpointInfo> CommitStaged(const std::string& job_id, int64_t generation,
                                              int64_t step, absl::string_view manifest_bytes);
  std::string StagingDir(const std::string& job_id, int64_t generation, int64_t step) const;
  std::vector<int64_t> CommittedStepsLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ApplyRetentionLocked(const std::string& job_id, int64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status VerifyLocked(const std::string& job_id, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string root_;
  const int keep_last_;
  mutable Mutex mutex_;
  // The outcome of reading every file of a checkpoint, valid while each file keeps the
  // size and modification time it had then.
  struct Verification {
    std::vector<std::pair<int64_t, int64_t>> signature;  // per file: (size, mtime ns)
    absl::Status status;                                 // OK, or why it is unusable
  };
  std::map<std::pair<std::string, int64_t>, Verification> verified_
      ABSL_GUARDED_BY(mutex_);  // (job, step)
  WriteFailureListener on_write_failure_ ABSL_GUARDED_BY(mutex_);
  const void* on_write_failure_owner_ ABSL_GUARDED_BY(mutex_) = nullptr;
};

// "rank-NNNNN.bin" or "MANIFEST"; anything else (paths, temporary names) is refused.
bool IsCheckpointFileName(absl::string_view file);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CHECKPOINT_STORE_H_
