// CudaGptModel's key-value-cache decoding (cuda_gpt_model.h): the layer of LayerForward for
// `count` new positions of one sequence, each attending to every cached position before
// it (kernels/cuda/attention_decode.h), as worker/engine/cpu/transformer_model_decode.cc on the
// CPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/matmul.h"
#include "worker/engine/cuda/cuda_gpt_model.h"
#include "worker/engine/cuda/cuda_layer_blocks.h"
#include "worker/engine/model_numerics.h"

namespace mtrain::cuda {

template <typename T>
absl::StatusOr<typename CudaGptModel<T>::KvCache> CudaGptModel<T>::NewKvCache(int capacity) const {
  KvCache cache;
  cache.capacity = capacity;
  // Key-value heads only: grouped-query attention caches Hkv / H of multi-head's bytes.
  const size_t elements = static_cast<size_t>(capacity) * placement_.local_kv(shape_);
  for (int l = 0; l < placement_.num_layers; ++l) {
    ASSIGN_OR_RETURN(DeviceBuffer<T> keys, DeviceBuffer<T>::Create(elements, "the key cache"));
    ASSIGN_OR_RETURN(DeviceBuffer<T> values, DeviceBuffer<T>::Create(elements, "the value cache"));
    cache.keys.push_back(std::move(keys));
    cache.values.push_back(std::move(values));
  }
  return cache;
}

template <typename T>
absl::Status CudaGptModel<T>::Decode(KvCache* cache, const int32_t* tokens, const T* hidden_in,
                                     int count, T* out) {
  const int C = shape_.hidden;
  const int Ql = placement_.local_query(shape_);
  const int KVl = placement_.local_kv(shape_);
  const int QKVl = placement_.local_qkv(shape_);
  const int Fl = placement_.local_ffn(shape_);
  const int heads = placement_.local_heads(shape_);
  const int first = cache->length;
  if (count <= 0 || first + count > cache->capacity || first + count > shape_.seq_length) {
    return absl::OutOfRangeError(
        absl::StrCat("decoding positions [", first, ", ", first + count, ") past the cache (",
                     cache->capacity, " positions) or model.seq_length (", shape_.seq_length, ")"));
  }
  // The temporaries, grown to this run's rows (the prompt's, at most seq_length).
  DecodeScratch& d = decode_;
  if (count > d.rows) {
    const size_t rows = static_cast<size_t>(count);
    ASSIGN_OR_RETURN(d.tokens, DeviceBuffer<int32_t>::Create(rows, "decoding"));
    ASSIGN_OR_RETURN(d.x, DeviceBuffer<T>::Create(rows * C, "decoding"));
    ASSIGN_OR_RETURN(d.ln, DeviceBuffer<T>::Create(rows * C, "decoding"));
    ASSIGN_OR_RETURN(d.qkv, DeviceBuffer<T>::Create(rows * QKVl, "decoding"));
    ASSIGN_OR_RETURN(d.y, DeviceBuffer<T>::Create(rows * Ql, "decoding"));
    ASSIGN_OR_RETURN(d.branch, DeviceBuffer<T>::Create(rows * C, "decoding"));
    ASSIGN_OR_RETURN(d.fc,
                     DeviceBuffer<T>::Create(rows * placement_.local_mlp_in(shape_), "decoding"));
    ASSIGN_OR_RETURN(d.gelu, DeviceBuffer<T>::Create(rows * Fl, "decoding"));
    ASSIGN_OR_RETURN(d.mean, DeviceBuffer<float>::Create(rows, "decoding"));
    ASSIGN_OR_RETURN(d.rstd, DeviceBuffer<float>::Create(rows, "decoding"));
    d.rows = count;
  }
  const size_t score_count = static_cast<size_t>(count) * heads * (first + count);
  if (score_count > d.score_count) {
    ASSIGN_OR_RETURN(d.scores, DeviceBuffer<float>::Create(score_count, "attention scores"));
    d.score_count = score_count;
  }
  const size_t rows_c = static_cast<size_t>(count) * C;
  if (placement_.has_embedding) {
    for (int i = 0; i < count; ++i) {
      if (tokens[i] < 0 || tokens[i] >= shape_.vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token ", i, " (", tokens[i], ") is outside the vocabulary [0, ", shape_.vocab, ")"));
      }
    }
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d.tokens.get(), tokens, count * sizeof(int32_t),
                                               cudaMemcpyHostToDevice, stream_),
                               "uploading the tokens"));
    // Positions first..first+count-1: the learned position table (if any) from row `first`,
    // as one sequence of `count`.
    const T* wpe = placement_.tensor_rank == 0 && p_.wpe != nullptr
                       ? p_.wpe + static_cast<size_t>(first) * C
                       : nullptr;
    RETURN_IF_ERROR(TokenPositionEmbeddingForward<T>(d.tokens.get(), p_.wte, wpe, d.x.get(), 1,
                                                     count, C, placement_.vocab_start(shape_),
                                                     placement_.local_vocab(shape_), stream_));
    RETURN_IF_ERROR(TensorAllReduce(d.x.get(), rows_c));
  } else {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d.x.get(), hidden_in, rows_c * sizeof(T),
                                               cudaMemcpyDeviceToDevice, stream_),
                               "taking the previous stage's output"));
  }
  const bool adds_bias = placement_.tensor_rank == 0;
  for (int l = 0; l < placement_.num_layers; ++l) {
    const LayerView<const T>& w = p_.layers[l];
    RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, d.x.get(), w.ln1_gamma, w.ln1_beta,
                                                 d.ln.get(), d.mean.get(), d.rstd.get(), count,
                                                 stream_));
    RETURN_IF_ERROR(MatmulForward<T>(*blas_, d.ln.get(), QkvWeight(w), QkvBias(w), d.qkv.get(),
                                     count, C, QKVl, stream_));
    // Rotary positions first..first+count-1 (one sequence of `count` from `first`).
    RETURN_IF_ERROR(layer_blocks::RotateQueriesAndKeys<T>(shape_, placement_, rotary_, d.qkv.get(),
                                                          count, count, first, false, stream_));
    // The new keys and values join the cache: columns [Ql, Ql + KVl) and [Ql + KVl, QKVl).
    T* keys = cache->keys[l].get() + static_cast<size_t>(first) * KVl;
    T* values = cache->values[l].get() + static_cast<size_t>(first) * KVl;
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy2DAsync(keys, KVl * sizeof(T), d.qkv.get() + Ql, QKVl * sizeof(T),
                                     KVl * sizeof(T), count, cudaMemcpyDeviceToDevice, stream_),
                   "appending to the key cache"));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy2DAsync(values, KVl * sizeof(T), d.qkv.get() + Ql + KVl, QKVl * sizeof(T),
                          KVl * sizeof(T), count, cudaMemcpyDeviceToDevice, stream_),
        "appending to the value cache"));
    const DecodeShape attention{first,           count, heads,
                                shape_.head_dim, QKVl,  placement_.local_kv_heads(shape_)};
    RETURN_IF_ERROR(DecodeAttention<T>(d.qkv.get(), cache->keys[l].get(), cache->values[l].get(),
                                       attention, d.scores.get(), d.y.get(), stream_));
    RETURN_IF_ERROR(MatmulForward<T>(*blas_, d.y.get(), w.proj_weight,
                                     adds_bias ? w.proj_bias : nullptr, d.branch.get(), count, Ql,
                                     C, stream_));
    RETURN_IF_ERROR(TensorAllReduce(d.branch.get(), rows_c));
    RETURN_IF_ERROR(AddTensors<T>(d.x.get(), d.branch.get(), d.x.get(), rows_c, stream_));
    RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, d.x.get(), w.ln2_gamma, w.ln2_beta,
                                                 d.ln.get(), d.mean.get(), d.rstd.get(), count,
                                                 stream_));
    RETURN_IF_ERROR(layer_blocks::MlpInForward<T>(*blas_, shape_, d.ln.get(), MlpInWeight(w),
                                                  MlpInBias(w), d.fc.get(), d.gelu.get(), count, Fl,
                                                  stream_));
    RETURN_IF_ERROR(MatmulForward<T>(*blas_, d.gelu.get(), w.fc_proj_weight,
                                     adds_bias ? w.fc_proj_bias : nullptr, d.branch.get(), count,
                                     Fl, C, stream_));
    RETURN_IF_ERROR(TensorAllReduce(d.branch.get(), rows_c));
    RETURN_IF_ERROR(AddTensors<T>(d.x.get(), d.branch.get(), d.x.get(), rows_c, stream_));
  }
  cache->length = first + count;
  if (!placement_.has_head) {
    return CudaStatus(
        cudaMemcpyAsync(out, d.x.get(), rows_c * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
        "copying the stage's output");
  }
  // The head on the last position only: its logits pick the next token.
  const T* last = d.x.get() + static_cast<size_t>(count - 1) * C;
  RETURN_IF_ERROR(layer_blocks::NormForward<T>(shape_, last, p_.lnf_gamma, p_.lnf_beta, d.ln.get(),
                                               d.mean.get(), d.rstd.get(), 1, stream_));
  return MatmulForward<T>(*blas_, d.ln.get(), OutputWeight(p_), nullptr, out, 1, C,
                          placement_.local_vocab(shape_), stream_);
}

// Only the members defined here: the class itself is instantiated in cuda_gpt_model.cc.
#define MTRAIN_INSTANTIATE_CUDA_DECODE(T)                                                     \
  template absl::StatusOr<typename CudaGptModel<T>::KvCache> CudaGptModel<T>::NewKvCache(int) \
      const;                                                                                  \
  template absl::Status CudaGptModel<T>::Decode(KvCache*, const int32_t*, const T*, int, T*);
MTRAIN_INSTANTIATE_CUDA_DECODE(float)
MTRAIN_INSTANTIATE_CUDA_DECODE(__nv_bfloat16)
MTRAIN_INSTANTIATE_CUDA_DECODE(__half)
#undef MTRAIN_INSTANTIATE_CUDA_DECODE

}  // namespace mtrain::cuda
