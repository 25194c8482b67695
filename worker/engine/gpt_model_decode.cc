// GptModel's key-value-cache decoding (gpt_model.h): the same layer as LayerForward, for
// `count` new positions of one sequence attending to every cached position before them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "worker/engine/gpt_model.h"
#include "worker/engine/model_numerics.h"

namespace mtrain {

template <typename T>
typename GptModel<T>::KvCache GptModel<T>::NewKvCache(int capacity) const {
  KvCache cache;
  cache.capacity = capacity;
  const size_t elements = static_cast<size_t>(capacity) * placement_.local_hidden(shape_);
  cache.keys.assign(placement_.num_layers, std::vector<T>(elements));
  cache.values.assign(placement_.num_layers, std::vector<T>(elements));
  return cache;
}

template <typename T>
absl::Status GptModel<T>::Decode(KvCache* cache, const int32_t* tokens, const T* hidden_in,
                                 int count, T* out) {
  const int C = shape_.hidden;
  const int Cl = placement_.local_hidden(shape_);
  const int Fl = placement_.local_ffn(shape_);
  const int heads = placement_.local_heads(shape_);
  const int D = shape_.head_dim;
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
    cpu::EmbeddingForward<T>(positions.data(), p_.wpe, x.data(), count, C, 0, shape_.seq_length,
                             /*accumulate=*/true);
  } else {
    std::copy(hidden_in, hidden_in + rows * C, x.begin());
  }

  std::vector<T> ln(rows * C), mean(rows), rstd(rows), qkv(rows * 3 * Cl), y(rows * Cl),
      branch(rows * C), fc(rows * Fl), gelu(rows * Fl), scores(first + count);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  for (int l = 0; l < placement_.num_layers; ++l) {
    const LayerView<T>& w = p_.layers[l];
    cpu::LayerNormForward<T>(x.data(), w.ln1_gamma, w.ln1_beta, ln.data(), mean.data(), rstd.data(),
                             count, C, NormEpsilon(shape_));
    tp::ColumnParallelLinearForward<T>(ln.data(), w.qkv_weight, w.qkv_bias, qkv.data(), count, C,
                                       3 * Cl);
    T* keys = cache->keys[l].data();
    T* values = cache->values[l].data();
    for (int i = 0; i < count; ++i) {
      const T* row = qkv.data() + static_cast<size_t>(i) * 3 * Cl;
      std::copy(row + Cl, row + 2 * Cl, keys + static_cast<size_t>(first + i) * Cl);
      std::copy(row + 2 * Cl, row + 3 * Cl, values + static_cast<size_t>(first + i) * Cl);
    }
    // Causal attention of each new position over the cache up to itself.
    for (int i = 0; i < count; ++i) {
      const int visible = first + i + 1;
      for (int h = 0; h < heads; ++h) {
        const T* q = qkv.data() + static_cast<size_t>(i) * 3 * Cl + h * D;
        T largest = -INFINITY;
        for (int j = 0; j < visible; ++j) {
          const T* k = keys + static_cast<size_t>(j) * Cl + h * D;
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
        T* o = y.data() + static_cast<size_t>(i) * Cl + h * D;
        std::fill(o, o + D, T(0));
        for (int j = 0; j < visible; ++j) {
          const T p = scores[j] / sum;
          const T* v = values + static_cast<size_t>(j) * Cl + h * D;
          for (int d = 0; d < D; ++d) o[d] += p * v[d];
        }
      }
    }
    RETURN_IF_ERROR(tp::RowParallelLinearForward<T>(tp_, y.data(), w.proj_weight, w.proj_bias,
                                                    branch.data(), count, Cl, C));
    for (size_t i = 0; i < rows * C; ++i) x[i] += branch[i];
    cpu::LayerNormForward<T>(x.data(), w.ln2_gamma, w.ln2_beta, ln.data(), mean.data(), rstd.data(),
                             count, C, NormEpsilon(shape_));
    tp::ColumnParallelLinearForward<T>(ln.data(), w.fc_weight, w.fc_bias, fc.data(), count, C, Fl);
    cpu::GeluForward<T>(fc.data(), gelu.data(), rows * Fl);
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
  cpu::LayerNormForward<T>(last, p_.lnf_gamma, p_.lnf_beta, ln.data(), mean.data(), rstd.data(), 1,
                           C, NormEpsilon(shape_));
  tp::ColumnParallelLinearForward<T>(ln.data(), p_.wte, nullptr, out, 1, C,
                                     placement_.local_vocab(shape_));
  return absl::OkStatus();
}

// Only the members defined here: the class itself is instantiated in gpt_model.cc.
#define MTRAIN_INSTANTIATE_DECODE(T)                                         \
  template typename GptModel<T>::KvCache GptModel<T>::NewKvCache(int) const; \
  template absl::Status GptModel<T>::Decode(KvCache*, const int32_t*, const T*, int, T*);
MTRAIN_INSTANTIATE_DECODE(float)
MTRAIN_INSTANTIATE_DECODE(double)
#undef MTRAIN_INSTANTIATE_DECODE

}  // namespace mtrain
