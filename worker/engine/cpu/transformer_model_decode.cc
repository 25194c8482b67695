// TransformerModel's key-value-cache decoding (transformer_model.h): the same layer as
// LayerForward, for `count` new positions of one sequence attending to every cached position before
// them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/embedding.h"
#include "worker/engine/cpu/layer_blocks.h"
#include "worker/engine/cpu/transformer_model.h"
#include "worker/engine/model_numerics.h"

namespace mtrain {

template <typename T>
KvCache<T> TransformerModel<T>::NewKvCache(int capacity) const {
  KvCache<T> cache;
  cache.capacity = capacity;
  // Key-value heads only: grouped-query attention caches Hkv / H of multi-head's bytes.
  const size_t elements = static_cast<size_t>(capacity) * placement_.local_kv(shape_);
  cache.keys.assign(placement_.num_layers, std::vector<T>(elements));
  cache.values.assign(placement_.num_layers, std::vector<T>(elements));
  return cache;
}

template <typename T>
absl::Status TransformerModel<T>::Decode(KvCache<T>* cache, const int32_t* tokens,
                                         const T* hidden_in, int count, T* out) {
  const int C = shape_.hidden;
  const int Ql = placement_.local_query(shape_);
  const int KVl = placement_.local_kv(shape_);
  const int W = placement_.local_qkv(shape_);  // [q | k | v] per row
  const int Fl = placement_.local_ffn(shape_);
  const int heads = placement_.local_heads(shape_);
  const int group = heads / placement_.local_kv_heads(shape_);  // query heads per kv head
  const int D = shape_.head_dim;
  if (shape_.family == ArchitectureFamily::kBert) {
    return absl::FailedPreconditionError(
        "generation needs a causal decoder: model.family BERT attends in both directions");
  }
  const int first = cache->length;
  if (count <= 0 || first + count > cache->capacity || first + count > shape_.seq_length) {
    return absl::OutOfRangeError(
        absl::StrCat("decoding positions [", first, ", ", first + count, ") past the cache (",
                     cache->capacity, " positions) or model.seq_length (", shape_.seq_length, ")"));
  }
  const size_t rows = static_cast<size_t>(count);
  std::vector<T> x(rows * C);
  if (placement_.has_embedding) {
    RETURN_IF_ERROR(tp::VocabParallelEmbeddingForward<T>(tp_, tokens, p_.wte, x.data(), count, C,
                                                         placement_.vocab_start(shape_),
                                                         placement_.local_vocab(shape_)));
    std::vector<int32_t> positions(rows);
    for (int i = 0; i < count; ++i) positions[i] = first + i;
    if (p_.wpe != nullptr) {
      cpu::EmbeddingForward<T>(positions.data(), p_.wpe, x.data(), count, C, 0, shape_.seq_length,
                               /*accumulate=*/true);
    }
  } else {
    std::copy(hidden_in, hidden_in + rows * C, x.begin());
  }

  std::vector<T> ln(rows * C), mean(rows), rstd(rows), qkv(rows * W), y(rows * Ql),
      branch(rows * C), fc(rows * placement_.local_mlp_in(shape_)), gelu(rows * Fl),
      scores(first + count);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  for (int l = 0; l < placement_.num_layers; ++l) {
    const LayerView<T>& w = p_.layers[l];
    layer_blocks::NormForward<T>(shape_, x.data(), w.ln1_gamma, w.ln1_beta, ln.data(), mean.data(),
                                 rstd.data(), count);
    tp::ColumnParallelLinearForward<T>(ln.data(), layer_blocks::QkvWeight(w),
                                       layer_blocks::QkvBias(w), qkv.data(), count, C, W);
    layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, qkv.data(), count,
                                          shape_.seq_length, first, /*inverse=*/false);
    T* keys = cache->keys[l].data();
    T* values = cache->values[l].data();
    for (int i = 0; i < count; ++i) {
      const T* row = qkv.data() + static_cast<size_t>(i) * W;
      std::copy(row + Ql, row + Ql + KVl, keys + static_cast<size_t>(first + i) * KVl);
      std::copy(row + Ql + KVl, row + W, values + static_cast<size_t>(first + i) * KVl);
    }
    // Causal attention of each new position over the cache up to itself.
    for (int i = 0; i < count; ++i) {
      const int visible = first + i + 1;
      for (int h = 0; h < heads; ++h) {
        const T* q = qkv.data() + static_cast<size_t>(i) * W + h * D;
        const int kv = h / group;
        T largest = -INFINITY;
        for (int j = 0; j < visible; ++j) {
          const T* k = keys + static_cast<size_t>(j) * KVl + kv * D;
          T dot = 0;
          for (int d = 0; d < D; ++d) dot += q[d] * k[d];
          scores[j] = dot * scale;
          largest = std::max(largest, scores[j]);
        }
        T sum = 0;
        for (int j = 0; j < visible; ++j) {
          scores[j] = std::exp(scores[j] - largest);
          sum += scores[j];
        }
        T* o = y.data() + static_cast<size_t>(i) * Ql + h * D;
        std::fill(o, o + D, T(0));
        for (int j = 0; j < visible; ++j) {
          const T p = scores[j] / sum;
          const T* v = values + static_cast<size_t>(j) * KVl + kv * D;
          for (int d = 0; d < D; ++d) o[d] += p * v[d];
        }
      }
    }
    RETURN_IF_ERROR(tp::RowParallelLinearForward<T>(tp_, y.data(), w.proj_weight, w.proj_bias,
                                                    branch.data(), count, Ql, C));
    for (size_t i = 0; i < rows * C; ++i) x[i] += branch[i];
    layer_blocks::NormForward<T>(shape_, x.data(), w.ln2_gamma, w.ln2_beta, ln.data(), mean.data(),
                                 rstd.data(), count);
    tp::ColumnParallelLinearForward<T>(ln.data(), layer_blocks::MlpInWeight(w),
                                       layer_blocks::MlpInBias(w), fc.data(), count, C,
                                       placement_.local_mlp_in(shape_));
    layer_blocks::MlpActivationForward<T>(shape_, fc.data(), gelu.data(), count, Fl);
    RETURN_IF_ERROR(tp::RowParallelLinearForward<T>(tp_, gelu.data(), w.fc_proj_weight,
                                                    w.fc_proj_bias, branch.data(), count, Fl, C));
    for (size_t i = 0; i < rows * C; ++i) x[i] += branch[i];
  }
  cache->length = first + count;
  if (!placement_.has_head) {
    std::copy(x.begin(), x.end(), out);
    return absl::OkStatus();
  }
  // The head on the last position only: its logits pick the next token.
  const T* last = x.data() + (rows - 1) * C;
  layer_blocks::NormForward<T>(shape_, last, p_.lnf_gamma, p_.lnf_beta, ln.data(), mean.data(),
                               rstd.data(), 1);
  tp::ColumnParallelLinearForward<T>(ln.data(), OutputWeight(p_), nullptr, out, 1, C,
                                     placement_.local_vocab(shape_));
  return absl::OkStatus();
}

// Only the members defined here: the class itself is instantiated in transformer_model.cc.
#define MTRAIN_INSTANTIATE_DECODE(T)                              \
  template KvCache<T> TransformerModel<T>::NewKvCache(int) const; \
  template absl::Status TransformerModel<T>::Decode(KvCache<T>*, const int32_t*, const T*, int, T*);
MTRAIN_INSTANTIATE_DECODE(float)
MTRAIN_INSTANTIATE_DECODE(double)
#undef MTRAIN_INSTANTIATE_DECODE

}  // namespace mtrain
