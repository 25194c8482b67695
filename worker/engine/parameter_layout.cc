#include "worker/engine/parameter_layout.h"

#include <utility>

namespace mtrain {

void ParameterLayout::Add(const ParameterEntry& entry, const ParamTensor* shared) {
  ParamTensor tensor;
  tensor.name = entry.name;
  tensor.offset = shared != nullptr ? shared->offset : end_offset_;
  tensor.global_shape = entry.global_shape;
  tensor.local_shape = entry.global_shape;
  tensor.global_offset.assign(entry.global_shape.size(), 0);
  if (entry.tensor_split_axis >= 0) {
    const int axis = entry.tensor_split_axis;
    tensor.local_shape[axis] = entry.global_shape[axis] / placement_.tensor_size;
    tensor.global_offset[axis] = placement_.tensor_rank * tensor.local_shape[axis];
  }
  size_t size = 1;
  for (int64_t d : tensor.local_shape) size *= static_cast<size_t>(d);
  tensor.size = size;
  tensor.padded_vocabulary_rows = entry.padded_vocabulary_rows;
  tensor.role = entry.role;
  tensor.layer = entry.layer;
  tensor.init = entry.init;
  tensor.weight_decay = entry.weight_decay;
  tensor.copy_on_first_and_last_stage = entry.holder == ParameterHolder::kFirstAndLastStage;
  tensor.shared_with_earlier_chunk = shared != nullptr;
  if (shared == nullptr) end_offset_ += size;
  tensors_.push_back(std::move(tensor));
}

ParameterLayout::ParameterLayout(const ModelShape& shape, const ModelPlacement& placement,
                                 size_t base_offset, const ParameterLayout* earlier)
    : shape_(shape), placement_(placement), begin_offset_(base_offset), end_offset_(base_offset) {
  const int last_layer = placement.first_layer + placement.num_layers;
  for (const ParameterEntry& entry : ParameterTable(shape)) {
    bool held = false;
    switch (entry.holder) {
      case ParameterHolder::kFirstStage:
        held = placement.has_embedding;
        break;
      case ParameterHolder::kLastStage:
        held = placement.has_head;
        break;
      case ParameterHolder::kFirstAndLastStage:
        held = placement.has_embedding || placement.has_head;
        break;
      case ParameterHolder::kLayer:
        held = entry.layer >= placement.first_layer && entry.layer < last_layer;
        break;
    }
    if (!held) continue;
    const ParamTensor* shared = nullptr;
    if (earlier != nullptr && entry.holder == ParameterHolder::kFirstAndLastStage) {
      shared = earlier->Find(entry.name);
    }
    Add(entry, shared);
  }
}

const ParamTensor* ParameterLayout::Find(const std::string& name) const {
  for (const ParamTensor& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

std::vector<ShardedTensor> ShardsOf(absl::Span<const ParamTensor> tensors) {
  return std::vector<ShardedTensor>(tensors.begin(), tensors.end());
}

}  // namespace mtrain
