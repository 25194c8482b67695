// Layout-independent checkpoints: every rank writes its shards of the parameters and of
// the AdamW moments into one file, each shard recorded with its place in the global tensor
// (a hyper-rectangle), and a manifest written LAST makes the checkpoint exist. Any other
// (tensor, pipeline, data) layout can load it: each rank reads the parts of the stored
// shards that overlap its own. The on-disk format is docs/CHECKPOINT_FORMAT.md; the
// manifest's fields are proto/checkpoint.proto.
//
// Every function is keyed on ShardedTensor (sharded_tensor.h): a name, a place in the
// rank's flat buffer and a hyper-rectangle of the global tensor. Who fills them (the
// engine from its parameter layout, an importer, a test) is no concern of this library.
//
// Saving step N (every data-parallel-rank-0 rank, then one rank):
//   const std::string dir = absl::StrCat(root, "/", CheckpointDirName(N));
//   ASSIGN_OR_RETURN(RankShardRecords mine,
//                    WriteRankShards(dir, global_rank, N, shards, params, m, v));
//   ... gather every writer's records on one rank (SerializeRankShardRecords) ...
//   ASSIGN_OR_RETURN(CheckpointManifest manifest,
//                    BuildManifest(job_id, {t, p, d}, state, all_records));
//   RETURN_IF_ERROR(WriteManifest(dir, manifest));  // only once every shard file is stored
//
// Resuming under any layout (every rank):
//   ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(dir));
//   RETURN_IF_ERROR(LoadRankTensors(checkpoint, shards, params, m, v));
//   const TrainingState& state = checkpoint.manifest().state();
//
// Errors follow their retry meaning: NOT_FOUND (no such checkpoint, or a tensor it lacks),
// DATA_LOSS (a stored file is missing, truncated or corrupt: use an older checkpoint),
// FAILED_PRECONDITION (a format version this reader does not know), INVALID_ARGUMENT (the
// caller's tensors or records break a rule), INTERNAL (I/O errors). Messages name the file
// or tensor and the rule.
#ifndef MTRAIN_CHECKPOINT_CHECKPOINT_H_
#define MTRAIN_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "checkpoint/sharded_tensor.h"
#include "proto/checkpoint.pb.h"

namespace mtrain {

// The format this code writes and the only one it reads (manifest and shard files).
inline constexpr int32_t kCheckpointFormatVersion = 1;
inline constexpr char kManifestFileName[] = "MANIFEST";
inline constexpr char kCheckpointDtypeF32[] = "f32";

// "step-00000100": the directory of the checkpoint taken after `step` optimizer steps.
std::string CheckpointDirName(int64_t step);
// "rank-00005.bin": the shard file written by `global_rank`.
std::string ShardFileName(int global_rank);
// "optimizer.m.<param>" and "optimizer.v.<param>": AdamW's first and second moments of a
// parameter, stored as tensors of the parameter's shape and sharding.
std::string FirstMomentName(absl::string_view param);
std::string SecondMomentName(absl::string_view param);

// ------------------------------------------------------------------------------ writing

// What one rank's shard file contributes to the manifest.
struct RankShardRecords {
  std::vector<FileChecksum> files;   // the file written, with its size and CRC-32C
  std::vector<TensorEntry> tensors;  // one entry per stored tensor, each with one shard
};

// Writes "<dir>/rank-NNNNN.bin" (creating `dir` if needed): the header, then every tensor
// shard of `params` in the order of `tensors`, then those of `first_moment`, then those of
// `second_moment`. `tensors` locate the shards in the flat buffers (ShardedTensor::offset,
// local_shape in row-major order) and in the global tensors. The moment buffers are
// indexed like `params` (under ZeRO-1 gather the slices first); pass both as null to store
// parameters only. The file appears complete or not at all (written to a temporary file,
// fsynced, renamed).
// INVALID_ARGUMENT naming the tensor if a ShardedTensor is inconsistent (size vs local
// shape, shard outside the global shape, duplicate name) or only one moment is given;
// INTERNAL for I/O errors.
absl::StatusOr<RankShardRecords> WriteRankShards(const std::string& dir, int global_rank,
                                                 int64_t step,
                                                 absl::Span<const ShardedTensor> tensors,
                                                 const float* params, const float* first_moment,
                                                 const float* second_moment);

// Bytes to carry records from the writing ranks to the rank that builds the manifest (a
// CheckpointManifest holding only `tensors` and `files`), and back. DATA_LOSS if `bytes`
// do not parse.
std::string SerializeRankShardRecords(const RankShardRecords& records);
absl::StatusOr<RankShardRecords> ParseRankShardRecords(absl::string_view bytes);

// The parallel layout a checkpoint was written under (informational: loading re-slices).
struct CheckpointLayout {
  int tensor = 1;
  int pipeline = 1;
  int data = 1;
};

// Merges every writer's records into a manifest (format_version 1, step = state.step(),
// created now). Shards of one tensor with identical hyper-rectangles (a tensor replicated
// across tensor-parallel ranks, the tied embedding on the first and last stage) are kept
// once: the first in `ranks` order. Then every tensor's shards must tile its global shape
// exactly. INVALID_ARGUMENT naming the tensor or file and the rule: ranks disagreeing on a
// tensor's global shape or dtype, a file listed twice, shards that overlap or leave a gap.
absl::StatusOr<CheckpointManifest> BuildManifest(absl::string_view job_id,
                                                 const CheckpointLayout& layout,
                                                 const TrainingState& state,
                                                 absl::Span<const RankShardRecords> ranks);

// The rules every manifest obeys: format version (FAILED_PRECONDITION if unknown), then
// (INVALID_ARGUMENT naming the tensor or file) positive layout, unique file names without
// '/', unique tensor names, dtype "f32", shards in listed files and inside their payload,
// byte sizes matching shapes, and shards tiling each global shape exactly.
absl::Status ValidateManifest(const CheckpointManifest& manifest);

// The MANIFEST file's bytes: a 24-byte envelope (magic "MTMANIF\0", uint64 payload size,
// uint32 CRC-32C of the payload, 4 zero bytes) around the binary-serialized proto. The
// envelope catches truncation and corruption, which a binary proto alone may not.
std::string SerializeManifest(const CheckpointManifest& manifest);
// DATA_LOSS if the envelope or the proto is damaged. Does not validate the contents.
absl::StatusOr<CheckpointManifest> ParseManifest(absl::string_view bytes);

// Writes "<dir>/MANIFEST" atomically: syncs the directory first (so the shard files' names
// are durable before anything refers to them), then a temporary file, fsync, rename,
// fsync of the directory. Call it only once every shard file is complete in `dir`: a
// checkpoint without a complete manifest does not exist. Writes `manifest` as given.
absl::Status WriteManifest(const std::string& dir, const CheckpointManifest& manifest);

// Reads and validates "<dir>/MANIFEST" without touching the shard files (listing
// checkpoints). NOT_FOUND if there is no MANIFEST; DATA_LOSS if it is damaged or breaks a
// rule of ValidateManifest; FAILED_PRECONDITION for an unknown format version.
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir);

// ------------------------------------------------------------------------------ reading

enum class ChecksumVerification {
  // OpenCheckpoint reads every file once and checks its CRC-32C: simplest, and right for
  // tools and the checkpoint store.
  kAllFilesOnOpen,
  // OpenCheckpoint checks only that every file exists with its recorded size; each file's
  // CRC-32C is checked in full the first time LoadRankTensors reads from it. A resuming
  // rank then reads only the files its shards overlap, not the whole checkpoint.
  kOnFirstUse,
  // Like kOnFirstUse, but OpenCheckpoint does not require every listed file: a rank that
  // downloaded only the files it needs (FilesOverlapping) opens that subset. A missing
  // file is DATA_LOSS when LoadRankTensors first needs it.
  kOnFirstUseSubset,
};

// A complete checkpoint on disk: its validated manifest and its directory. Movable; not
// thread-safe (it remembers which files it has verified).
class Checkpoint {
 public:
  const std::string& dir() const { return dir_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  // Null if the checkpoint has no tensor of that name.
  const TensorEntry* Find(absl::string_view name) const;

  // Checks `file`'s size, CRC-32C and header (magic, version, step, payload size) against
  // the manifest, once: later calls return OK at once. DATA_LOSS naming the file.
  absl::Status VerifyFile(const std::string& file);
  absl::Status VerifyAllFiles();

 private:
  friend absl::StatusOr<Checkpoint> OpenCheckpoint(const std::string& dir,
                                                   ChecksumVerification verification);
  Checkpoint() = default;

  std::string dir_;
  CheckpointManifest manifest_;
  absl::flat_hash_map<std::string, int> tensor_index_;  // name -> index in manifest_.tensors
  absl::flat_hash_map<std::string, int> file_index_;    // name -> index in manifest_.files
  absl::flat_hash_set<std::string> verified_files_;
};

// Opens the checkpoint in `dir` (e.g. "<root>/step-00000100"). NOT_FOUND if `dir` has no
// MANIFEST (absent or never completed); FAILED_PRECONDITION for an unknown format version;
// DATA_LOSS naming the file for a damaged manifest or a shard file that is missing, has
// another size than recorded or (with kAllFilesOnOpen) a CRC-32C mismatch.
absl::StatusOr<Checkpoint> OpenCheckpoint(
    const std::string& dir,
    ChecksumVerification verification = ChecksumVerification::kAllFilesOnOpen);

// Fills this rank's flat buffers for ANY layout: for each of `tensors`, the elements of its
// hyper-rectangle (global_offset, local_shape) are copied from the overlapping parts of the
// stored shards into params[offset, offset + size), and likewise the moments
// "optimizer.m/v.<name>" into `first_moment` / `second_moment` unless those are null.
// Elements of the buffers outside `tensors` (e.g. ZeRO padding) are not touched.
//
// The padded vocabulary (a multiple of 128 * tensor) may differ between layouts: if a
// stored global shape differs from the wanted one ONLY in the first dimension of a tensor
// whose `padded_vocabulary_rows` is set (the parameter or its moments), the common rows are copied
// and the rows beyond the stored ones are zeroed. Rows at or past the real vocabulary never affect
// training (no input token selects them, the loss masks their logits), so this is exact for the
// same real vocabulary; the manifest does not record it, the caller must keep it.
//
// NOT_FOUND naming a tensor the checkpoint lacks; INVALID_ARGUMENT naming a tensor whose
// global shape differs otherwise or whose ShardedTensor is inconsistent; DATA_LOSS naming
// the file if a shard file read is damaged.
absl::Status LoadRankTensors(Checkpoint& checkpoint, absl::Span<const ShardedTensor> tensors,
                             float* params, float* first_moment, float* second_moment);

// The files of `manifest` holding some part of `tensors` (each a rank's hyper-rectangle),
// and of their moments "optimizer.m/v.<name>" when `with_moments`: what a rank must fetch
// to LoadRankTensors. Sorted; tensors the manifest lacks are ignored here (the load names
// them).
std::vector<std::string> FilesOverlapping(const CheckpointManifest& manifest,
                                          absl::Span<const ShardedTensor> tensors,
                                          bool with_moments);

// -------------------------------------------------------------------- training state

// The random number generators of this trainer are counter-based: dropout masks and data
// samples are pure functions of (seed, step, global indices) (kernels/dropout.h,
// data/sequence_sampler.h). The whole RNG state is therefore the seed (the
// step is TrainingState.step), identical on every rank; it is stored once, in
// rng_states[0], as 8 little-endian bytes.
void SetRngSeed(uint64_t seed, TrainingState* state);
// NOT_FOUND if rng_states has no entry 0; DATA_LOSS if it is not 8 bytes.
absl::StatusOr<uint64_t> GetRngSeed(const TrainingState& state);

}  // namespace mtrain

#endif  // MTRAIN_CHECKPOINT_CHECKPOINT_H_
