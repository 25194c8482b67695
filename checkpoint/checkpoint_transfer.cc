#include "checkpoint/checkpoint_transfer.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

// Feeds `next` chunks of at most kChunkBytes into one UploadCheckpoint stream.
absl::Status UploadStream(Coordinator::Stub* stub, const PrepareContext& prepare,
                          const std::string& job_id, int64_t generation, int64_t step,
                          const std::string& file,
                          const std::function<absl::StatusOr<size_t>(std::string*)>& next) {
  grpc::ClientContext context;
  prepare(&context);
  UploadCheckpointResponse response;
  std::unique_ptr<grpc::ClientWriter<CheckpointChunk>> stream =
      stub->UploadCheckpoint(&context, &response);
  CheckpointChunk chunk;
  chunk.set_job_id(job_id);
  chunk.set_generation(generation);
  chunk.set_step(step);
  chunk.set_file(file);
  uint64_t offset = 0;
  absl::Status local = absl::OkStatus();
  while (true) {
    absl::StatusOr<size_t> got = next(chunk.mutable_data());
    if (!got.ok()) {
      local = got.status();
      context.TryCancel();
      break;
    }
    chunk.set_offset(offset);
    chunk.set_last(*got < kChunkBytes);
    offset += *got;
    // A failed write means the server ended the call: Finish says why.
    if (!stream->Write(chunk) || chunk.last()) break;
  }
  stream->WritesDone();
  const absl::Status remote = FromGrpcStatus(stream->Finish());
  if (!local.ok()) return local;
  if (!remote.ok()) {
    return absl::Status(
        remote.code(), absl::StrCat("uploading ", file, " of step ", step, ": ", remote.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status UploadCheckpointFile(Coordinator::Stub* stub, const PrepareContext& prepare,
                                  const std::string& job_id, int64_t generation, int64_t step,
                                  const std::string& file, const std::string& local_path) {
  std::ifstream in(local_path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", local_path));
  return UploadStream(stub, prepare, job_id, generation, step, file,
                      [&](std::string* data) -> absl::StatusOr<size_t> {
                        data->resize(kChunkBytes);
                        in.read(data->data(), static_cast<std::streamsize>(kChunkBytes));
                        if (in.bad()) {
                          return absl::InternalError(absl::StrCat("read error on ", local_path));
                        }
                        data->resize(static_cast<size_t>(in.gcount()));
                        return data->size();
                      });
}

absl::Status UploadCheckpointBytes(Coordinator::Stub* stub, const PrepareContext& prepare,
                                   const std::string& job_id, int64_t generation, int64_t step,
                                   const std::string& file, absl::string_view bytes) {
  size_t at = 0;
  return UploadStream(stub, prepare, job_id, generation, step, file,
                      [&](std::string* data) -> absl::StatusOr<size_t> {
                        const absl::string_view piece = bytes.substr(at, kChunkBytes);
                        data->assign(piece.data(), piece.size());
                        at += piece.size();
                        return piece.size();
                      });
}

absl::Status DownloadCheckpointFile(Coordinator::Stub* stub, const PrepareContext& prepare,
                                    const std::string& job_id, int64_t step,
                                    const std::string& file, const std::string& local_path) {
  ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Create(local_path));
  grpc::ClientContext context;
  prepare(&context);
  DownloadCheckpointRequest request;
  request.set_job_id(job_id);
  request.set_step(step);
  request.set_file(file);
  std::unique_ptr<grpc::ClientReader<CheckpointChunk>> stream =
      stub->DownloadCheckpoint(&context, request);
  CheckpointChunk chunk;
  uint64_t received = 0;
  bool complete = false;
  absl::Status local = absl::OkStatus();
  while (stream->Read(&chunk)) {
    if (chunk.offset() != received) {
      local = absl::DataLossError(absl::StrCat("download of ", file, ": chunk at ", chunk.offset(),
                                               " after ", received, " bytes"));
      context.TryCancel();
      break;
    }
    local = writer.Append(chunk.data());
    if (!local.ok()) {
      context.TryCancel();
      break;
    }
    received += chunk.data().size();
    complete = chunk.last();
  }
  const absl::Status remote = FromGrpcStatus(stream->Finish());
  if (!local.ok()) return local;
  if (!remote.ok()) {
    return absl::Status(remote.code(), absl::StrCat("downloading ", file, " of step ", step, " of ",
                                                    job_id, ": ", remote.message()));
  }
  if (!complete) {
    return absl::UnavailableError(
        absl::StrCat("download of ", file, " ended after ", received, " bytes without its end"));
  }
  return writer.Commit();
}

absl::StatusOr<CheckpointManifest> DownloadCheckpoint(
    Coordinator::Stub* stub, const PrepareContext& prepare, const std::string& job_id, int64_t step,
    const std::string& dir,
    const std::function<bool(const CheckpointManifest&, const std::string&)>& want) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  RETURN_IF_ERROR(DownloadCheckpointFile(stub, prepare, job_id, step, kManifestFileName,
                                         absl::StrCat(dir, "/", kManifestFileName)));
  ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(dir));
  for (const FileChecksum& file : manifest.files()) {
    if (want && !want(manifest, file.file())) continue;
    RETURN_IF_ERROR(DownloadCheckpointFile(stub, prepare, job_id, step, file.file(),
                                           absl::StrCat(dir, "/", file.file())));
  }
  return manifest;
}

}  // namespace mtrain
