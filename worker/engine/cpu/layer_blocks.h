// The parts of a CPU transformer layer where the model families differ (model/'s
// TransformerConfig), for TransformerModel's full, sequence-parallel and decoding paths: the
// normalisation (LayerNorm or RMSNorm), the fused attention input projection ([q|k|v], one
// GEMM over GPT-2's qkv tensor or Llama's adjacent q, k and v tensors), rotary positions on
// q and k, the attention core (causal, or BERT's bidirectional one over each sequence's
// real positions) and the MLP's activation (tanh GeLU or exact GeLU on fc, or SwiGLU on
// [gate|up]). Everything
// else in a layer is the same GEMMs, attention core, dropouts and residual adds whatever the
// family, so it stays written once in transformer_model*.cc.
#ifndef MTRAIN_WORKER_ENGINE_CPU_LAYER_BLOCKS_H_
#define MTRAIN_WORKER_ENGINE_CPU_LAYER_BLOCKS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/bidirectional_attention.h"
#include "kernels/gelu.h"
#include "kernels/gelu_exact.h"
#include "kernels/layernorm.h"
#include "kernels/rms_norm.h"
#include "kernels/rotary.h"
#include "kernels/swiglu.h"
#include "worker/engine/model_numerics.h"
#include "worker/engine/parameter_layout.h"

namespace mtrain::layer_blocks {

// y = Norm(x) for `rows` rows of the residual stream. `beta` and `mean` are unused (and may
// be null) under RMSNorm.
template <typename T>
void NormForward(const ModelShape& shape, const T* x, const T* gamma, const T* beta, T* y, T* mean,
                 T* rstd, int rows) {
  if (shape.normalization == NormKind::kRmsNorm) {
    cpu::RmsNormForward<T>(x, gamma, y, rstd, rows, shape.hidden, NormEpsilon(shape));
  } else {
    cpu::LayerNormForward<T>(x, gamma, beta, y, mean, rstd, rows, shape.hidden, NormEpsilon(shape));
  }
}

// Accumulates d_x, d_gamma (and d_beta under LayerNorm) from d_y.
template <typename T>
void NormBackward(const ModelShape& shape, const T* d_y, const T* x, const T* gamma, const T* mean,
                  const T* rstd, T* d_x, T* d_gamma, T* d_beta, int rows) {
  if (shape.normalization == NormKind::kRmsNorm) {
    cpu::RmsNormBackward<T>(d_y, x, gamma, rstd, d_x, d_gamma, rows, shape.hidden);
  } else {
    cpu::LayerNormBackward<T>(d_y, x, gamma, mean, rstd, d_x, d_gamma, d_beta, rows, shape.hidden);
  }
}

// The projections' weights and biases as one GEMM each (parameter_layout.h).
using ::mtrain::MlpInBias;
using ::mtrain::MlpInWeight;
using ::mtrain::QkvBias;
using ::mtrain::QkvWeight;

// Rotates (inverse: back, the backward pass) the query and key heads of qkv [rows, Ql + 2
// KVl] for positions first_position + row % seq_length. No-op with learned positions.
template <typename T>
void RotateQueriesAndKeys(const ModelShape& shape, const ModelPlacement& placement,
                          const cpu::RotaryTable& table, T* qkv, int rows, int seq_length,
                          int first_position, bool inverse) {
  if (shape.positions != Positions::kRotary) return;
  const int stride = placement.local_qkv(shape);
  cpu::ApplyRotary<T>(qkv, rows, stride, placement.local_heads(shape), seq_length, first_position,
                      table, inverse);
  cpu::ApplyRotary<T>(qkv + placement.local_query(shape), rows, stride,
                      placement.local_kv_heads(shape), seq_length, first_position, table, inverse);
}

// The attention core over qkv [B, S, Ql + 2 KVl]: causal for the decoders; for BERT each
// query sees every real position of its sequence (`lengths` [B]).
template <typename T>
void AttentionCoreForward(const ModelShape& shape, const T* qkv, const int32_t* lengths, T* y,
                          T* lse, const cpu::AttentionShape& attention,
                          const cpu::AttentionDropout& dropout) {
  if (shape.family == ArchitectureFamily::kBert) {
    cpu::BidirectionalAttentionForward<T>(qkv, lengths, y, lse, attention, dropout);
  } else {
    cpu::AttentionForward<T>(qkv, y, lse, attention, dropout);
  }
}

// Accumulates d_qkv from d_y, given the forward's y and lse.
template <typename T>
void AttentionCoreBackward(const ModelShape& shape, const T* d_y, const T* qkv, const T* y,
                           const T* lse, const int32_t* lengths, T* d_qkv,
                           const cpu::AttentionShape& attention,
                           const cpu::AttentionDropout& dropout) {
  if (shape.family == ArchitectureFamily::kBert) {
    cpu::BidirectionalAttentionBackward<T>(d_y, qkv, y, lse, lengths, d_qkv, attention, dropout);
  } else {
    cpu::AttentionBackward<T>(d_y, qkv, y, lse, d_qkv, attention, dropout);
  }
}

// act [rows, Fl] = GeLU(fc) (tanh or exact form) or SwiGLU([gate | up]).
template <typename T>
void MlpActivationForward(const ModelShape& shape, const T* fc, T* act, int rows, int Fl) {
  if (shape.activation == ActivationKind::kSwiGlu) {
    cpu::SwiGluForward<T>(fc, act, rows, Fl);
  } else if (shape.activation == ActivationKind::kGelu) {
    cpu::GeluExactForward<T>(fc, act, static_cast<size_t>(rows) * Fl);
  } else {
    cpu::GeluForward<T>(fc, act, static_cast<size_t>(rows) * Fl);
  }
}

// Accumulates d_fc ([rows, Fl], or [rows, 2 Fl] under SwiGLU) from d_act.
template <typename T>
void MlpActivationBackward(const ModelShape& shape, const T* d_act, const T* fc, T* d_fc, int rows,
                           int Fl) {
  if (shape.activation == ActivationKind::kSwiGlu) {
    cpu::SwiGluBackward<T>(d_act, fc, d_fc, rows, Fl);
  } else if (shape.activation == ActivationKind::kGelu) {
    cpu::GeluExactBackward<T>(d_act, fc, d_fc, static_cast<size_t>(rows) * Fl);
  } else {
    cpu::GeluBackward<T>(d_act, fc, d_fc, static_cast<size_t>(rows) * Fl);
  }
}

}  // namespace mtrain::layer_blocks

#endif  // MTRAIN_WORKER_ENGINE_CPU_LAYER_BLOCKS_H_
