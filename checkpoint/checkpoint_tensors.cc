#include "checkpoint/checkpoint_tensors.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

// A ShardedTensor whose single shard is the whole tensor, at `offset` of a flat buffer.
ShardedTensor WholeTensor(const std::string& name, const std::vector<int64_t>& shape,
                          size_t offset) {
  ShardedTensor tensor;
  tensor.name = name;
  tensor.offset = offset;
  tensor.global_shape = shape;
  tensor.local_shape = shape;
  tensor.global_offset.assign(shape.size(), 0);
  size_t size = 1;
  for (int64_t d : shape) size *= static_cast<size_t>(std::max<int64_t>(d, 0));
  tensor.size = size;
  return tensor;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<std::map<std::string, FullTensor>> ReadFullParameters(Checkpoint& checkpoint) {
  std::map<std::string, FullTensor> tensors;
  for (const TensorEntry& entry : checkpoint.manifest().tensors()) {
    if (absl::StartsWith(entry.name(), kOptimizerTensorPrefix)) continue;
    FullTensor& full = tensors[entry.name()];
    full.shape.assign(entry.global_shape().begin(), entry.global_shape().end());
    const ShardedTensor whole = WholeTensor(entry.name(), full.shape, 0);
    full.values.resize(whole.size);
    // One load per tensor straight into its own vector, rather than one load into a flat
    // buffer split afterwards: peak memory stays at one copy of the model. The price is
    // reopening the shard files per tensor, a few syscalls each.
    RETURN_IF_ERROR(LoadRankTensors(checkpoint, {whole}, full.values.data(), nullptr, nullptr));
  }
  return tensors;
}

absl::StatusOr<CheckpointManifest> WriteParameterCheckpoint(
    const std::string& dir, absl::string_view job_id, int64_t step,
    const std::map<std::string, FullTensor>& tensors, uint64_t seed) {
  if (tensors.empty()) {
    return absl::InvalidArgumentError("a parameter checkpoint needs at least one tensor");
  }
  // WriteRankShards reads every shard from one buffer, so the tensors are laid out back
  // to back in the order of the map (sorted names: a deterministic file).
  std::vector<ShardedTensor> layout;
  size_t total = 0;
  for (const auto& [name, full] : tensors) {
    if (absl::StartsWith(name, kOptimizerTensorPrefix)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' is optimizer state (its name starts with '",
                       kOptimizerTensorPrefix, "'); a parameter checkpoint holds parameters only"));
    }
    for (int64_t d : full.shape) {
      if (d <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                       ShapeString(full.shape),
                                                       "; every dimension must be positive"));
      }
    }
    ShardedTensor tensor = WholeTensor(name, full.shape, total);
    if (full.values.size() != tensor.size) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has ", full.values.size(),
                                                     " values; its shape ", ShapeString(full.shape),
                                                     " holds ", tensor.size));
    }
    total += tensor.size;
    layout.push_back(std::move(tensor));
  }
  std::vector<float> params(total);
  for (const ShardedTensor& tensor : layout) {
    const std::vector<float>& values = tensors.at(tensor.name).values;
    std::copy(values.begin(), values.end(), params.begin() + tensor.offset);
  }

  ASSIGN_OR_RETURN(RankShardRecords records, WriteRankShards(dir, /*global_rank=*/0, step, layout,
                                                             params.data(), nullptr, nullptr));
  TrainingState state;
  state.set_step(step);
  SetRngSeed(seed, &state);
  ASSIGN_OR_RETURN(CheckpointManifest manifest,
                   BuildManifest(job_id, CheckpointLayout{1, 1, 1}, state, {records}));
  RETURN_IF_ERROR(WriteManifest(dir, manifest));
  return manifest;
}

}  // namespace mtrain
