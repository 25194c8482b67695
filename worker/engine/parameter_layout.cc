#include "worker/engine/parameter_layout.h"

#include "absl/strings/str_cat.h"

namespace mtrain {

size_t ParameterLayout::Add(std::string name, std::vector<int64_t> global_shape,
                            std::vector<int64_t> local_shape, std::vector<int64_t> global_offset,
                            ParamInit init, bool weight_decay) {
  ParamTensor tensor;
  tensor.name = std::move(name);
  tensor.offset = end_offset_;
  size_t size = 1;
  for (int64_t d : local_shape) size *= static_cast<size_t>(d);
  tensor.size = size;
  tensor.global_shape = std::move(global_shape);
  tensor.local_shape = std::move(local_shape);
  tensor.global_offset = std::move(global_offset);
  tensor.init = init;
  tensor.weight_decay = weight_decay;
  end_offset_ += size;
  tensors_.push_back(std::move(tensor));
  return tensors_.back().offset;
}

ParameterLayout::ParameterLayout(const ModelShape& shape, const ModelPlacement& placement,
                                 size_t base_offset)
    : shape_(shape), placement_(placement), begin_offset_(base_offset), end_offset_(base_offset) {
  const int64_t C = shape.hidden;
  const int64_t S = shape.seq_length;
  const int64_t Vp = shape.padded_vocab;
  const int64_t r = placement.tensor_rank;
  const int64_t Cl = placement.local_hidden(shape);
  const int64_t Fl = placement.local_ffn(shape);
  const int64_t Vl = placement.local_vocab(shape);
  using P = ParamInit;
  if (placement.has_embedding || placement.has_head) {
    Add("wte", {Vp, C}, {Vl, C}, {r * Vl, 0}, P::kNormal, true);
  }
  if (placement.has_embedding) Add("wpe", {S, C}, {S, C}, {0, 0}, P::kNormal, true);
  for (int i = 0; i < placement.num_layers; ++i) {
    const std::string p = absl::StrCat("layers.", placement.first_layer + i, ".");
    Add(p + "ln1.weight", {C}, {C}, {0}, P::kOnes, false);
    Add(p + "ln1.bias", {C}, {C}, {0}, P::kZeros, false);
    Add(p + "attn.qkv.weight", {3, C, C}, {3, Cl, C}, {0, r * Cl, 0}, P::kNormal, true);
    Add(p + "attn.qkv.bias", {3, C}, {3, Cl}, {0, r * Cl}, P::kZeros, false);
    Add(p + "attn.proj.weight", {C, C}, {C, Cl}, {0, r * Cl}, P::kScaledNormal, true);
    Add(p + "attn.proj.bias", {C}, {C}, {0}, P::kZeros, false);
    Add(p + "ln2.weight", {C}, {C}, {0}, P::kOnes, false);
    Add(p + "ln2.bias", {C}, {C}, {0}, P::kZeros, false);
    Add(p + "mlp.fc.weight", {4 * C, C}, {Fl, C}, {r * Fl, 0}, P::kNormal, true);
    Add(p + "mlp.fc.bias", {4 * C}, {Fl}, {r * Fl}, P::kZeros, false);
    Add(p + "mlp.proj.weight", {C, 4 * C}, {C, Fl}, {0, r * Fl}, P::kScaledNormal, true);
    Add(p + "mlp.proj.bias", {C}, {C}, {0}, P::kZeros, false);
  }
  if (placement.has_head) {
    Add("lnf.weight", {C}, {C}, {0}, P::kOnes, false);
    Add("lnf.bias", {C}, {C}, {0}, P::kZeros, false);
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
