// Moving checkpoint files between a machine and the coordinator's checkpoint store
// (coordinator/checkpoint_store.h) over the UploadCheckpoint / DownloadCheckpoint streams:
// ranks upload what they saved and download what they resume from; trainctl exports and
// uploads initial weights. One file per stream, in chunks of 1 MiB.
//
//   RETURN_IF_ERROR(UploadCheckpointFile(stub, prepare, job, generation, step,
//                                        "rank-00003.bin", local_path));
//   RETURN_IF_ERROR(UploadCheckpointBytes(stub, prepare, job, generation, step, "MANIFEST",
//                                         SerializeManifest(manifest)));
//   ASSIGN_OR_RETURN(CheckpointManifest m, DownloadCheckpoint(stub, prepare, job, step, dir,
//                                                             want_file));
#ifndef MTRAIN_CHECKPOINT_CHECKPOINT_TRANSFER_H_
#define MTRAIN_CHECKPOINT_CHECKPOINT_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "proto/checkpoint.pb.h"
#include "proto/coordinator.grpc.pb.h"

namespace mtrain {

// Prepares each call's context (bearer token, deadline).
using PrepareContext = std::function<void(grpc::ClientContext*)>;

// Streams the local file `local_path` as `file` of the job's checkpoint `step`. The
// coordinator's status on failure (FAILED_PRECONDITION for a stale generation, DATA_LOSS
// when a MANIFEST does not match the stored files, ...); INTERNAL if the file cannot be
// read.
absl::Status UploadCheckpointFile(Coordinator::Stub* stub, const PrepareContext& prepare,
                                  const std::string& job_id, int64_t generation, int64_t step,
                                  const std::string& file, const std::string& local_path);
// The same from memory (the MANIFEST).
absl::Status UploadCheckpointBytes(Coordinator::Stub* stub, const PrepareContext& prepare,
                                   const std::string& job_id, int64_t generation, int64_t step,
                                   const std::string& file, absl::string_view bytes);

// Downloads one file of a committed checkpoint to `local_path` (written atomically).
absl::Status DownloadCheckpointFile(Coordinator::Stub* stub, const PrepareContext& prepare,
                                    const std::string& job_id, int64_t step,
                                    const std::string& file, const std::string& local_path);

// Downloads the MANIFEST of checkpoint `step` into `dir` (created if needed), then every
// file it lists for which `want(manifest, file)` is true (all when `want` is empty).
// Returns the manifest. Open the result with kOnFirstUseSubset when some files were left
// out; checksums are verified when the files are read.
absl::StatusOr<CheckpointManifest> DownloadCheckpoint(
    Coordinator::Stub* stub, const PrepareContext& prepare, const std::string& job_id, int64_t step,
    const std::string& dir,
    const std::function<bool(const CheckpointManifest&, const std::string&)>& want);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_CHECKPOINT_TRANSFER_H_
