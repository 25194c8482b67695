// The activations a CPU model chunk (transformer_model.h) keeps between forward and backward.
#ifndef MTRAIN_WORKER_ENGINE_CPU_ACTIVATIONS_H_
#define MTRAIN_WORKER_ENGINE_CPU_ACTIVATIONS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/engine/model_shape.h"
#include "worker/parallel/microbatch.h"  // MicrobatchId

namespace mtrain {

// What one layer's backward needs from its forward. N = B * S tokens. Under the post
// placement (BERT's original, LayerNorm after each residual add) ln1 and ln2 hold the
// residual sums the LayerNorms normalise and h1 the first one's output; the attention reads
// the layer's input and the MLP h1.
template <typename T>
struct LayerActivations {
  std::vector<T> ln1, ln1_mean, ln1_rstd;  // [N, C], [N] (LayerNorm only), [N]
  std::vector<T> qkv;                      // [N, Ql + 2 KVl] (rotary: q and k rotated)
  std::vector<T> lse;                      // [B, Hl, S] attention log-sum-exp
  std::vector<T> attn_y;                   // [N, Ql]
  std::vector<T> h1;                       // [N, C] residual after attention
  std::vector<T> ln2, ln2_mean, ln2_rstd;
  std::vector<T> fc;    // [N, Fl] before GeLU; [N, 2 Fl] gate and up before SwiGLU
  std::vector<T> gelu;  // [N, Fl] the activation's output

  // `attention_core` false (selective recomputation): no attn_y and lse, which the
  // backward recomputes.
  // `local_rows` (sequence parallelism): the rows of ln1, h1, ln2 and of the LayerNorm
  // statistics this rank keeps (default all n).
  LayerActivations(const ModelShape& s, const ModelPlacement& p, int batch,
                   bool attention_core = true, size_t local_rows = 0) {
    const size_t n = static_cast<size_t>(batch) * s.seq_length;
    const size_t rows = local_rows > 0 ? local_rows : n;
    const size_t C = s.hidden;
    // RMSNorm keeps no mean.
    const size_t means = s.normalization == NormKind::kLayerNorm ? rows : 0;
    ln1.resize(rows * C);
    ln1_mean.resize(means);
    ln1_rstd.resize(rows);
    qkv.resize(n * p.local_qkv(s));
    if (attention_core) {
      lse.resize(static_cast<size_t>(batch) * p.local_heads(s) * s.seq_length);
      attn_y.resize(n * p.local_query(s));
    }
    h1.resize(rows * C);
    ln2.resize(rows * C);
    ln2_mean.resize(means);
    ln2_rstd.resize(rows);
    fc.resize(n * p.local_mlp_in(s));
    gelu.resize(n * p.local_ffn(s));
  }
};

// The activations of one microbatch in flight through this rank's layers.
// A linear layer's weight gradient left for later by a split backward (zero-bubble
// schedules): d_weight[out, in] += d_out^T @ input, d_bias[out] += column sums of d_out.
// The output gradient is a copy (the backward's scratch is reused by the next layer); the
// input is read where the microbatch's own activations keep it (they live until the
// weights' turn), and copied only from a recomputed layer's or a gathered scratch buffer.
template <typename T>
struct DeferredWeightGradient {
  std::vector<T> d_out;        // [rows, out_features]
  std::vector<T> in;           // [rows, in_features]; empty when in_held is set
  const T* in_held = nullptr;  // the input inside the Activations that own this job
  T* d_weight = nullptr;
  T* d_bias = nullptr;  // may be null
  int rows = 0, in_features = 0, out_features = 0;

  const T* input() const { return in_held != nullptr ? in_held : in.data(); }
};

template <typename T>
struct Activations {
  MicrobatchId id;
  std::vector<int32_t> tokens, targets, positions;  // [N]
  // Residual stream: the input of each local layer, then the output of the last one.
  std::vector<std::vector<T>> layer_io;
  // Per-layer saved activations (empty when recomputing).
  std::vector<std::unique_ptr<LayerActivations<T>>> saved;
  // Head (last stage). BERT: the logits and cross-entropy statistics of the masked rows only.
  std::vector<T> lnf, lnf_mean, lnf_rstd, logits, ce_max, ce_sum_exp, ce_target;
  bool has_forward = false;

  // BERT (transformer_model_bert.cc).
  std::vector<int32_t> token_types;  // [N]
  std::vector<int32_t> lengths;      // [B]
  T d_loss_per_sequence = 0;
  // Post placement: the embedding LayerNorm's input and statistics (first stage).
  std::vector<T> emb_sum, emb_ln_mean, emb_ln_rstd;
  // Masked-LM head over the M masked rows: their row indices and labels, the rows of the
  // head's input, the transform's output before and after GeLU, its LayerNorm.
  std::vector<int32_t> mlm_rows, mlm_targets;
  std::vector<T> mlm_in, mlm_fc, mlm_act, mlm_ln, mlm_ln_mean, mlm_ln_rstd;
  // Pooler (each sequence's first row, [B, C], and tanh of its dense layer) and the
  // sentence-order head's logits [B, 2] and cross-entropy statistics.
  std::vector<int32_t> sentence_order;
  std::vector<T> pooler_in, pooled, sop_logits, sop_max, sop_sum_exp, sop_target;
  // Multiple-choice head: each question's answer [B / 4], the pooler's output after its
  // dropout [B, C], each sequence's score [B] and its softmax over the question's options.
  std::vector<int32_t> choice_answers;
  std::vector<T> choice_in, choice_scores, choice_probs;

  // A split backward (BackwardInput): the layers' weight gradients BackwardWeight computes.
  std::vector<DeferredWeightGradient<T>> deferred;

  // Whether [data, data + count) lies inside the residual stream or a layer's saved
  // activations of this set (which a deferred weight gradient may then read in place).
  bool Holds(const T* data, size_t count) const {
    const auto inside = [&](const std::vector<T>& v) {
      // Integer addresses: comparing pointers into different arrays is unspecified.
      const auto begin = reinterpret_cast<std::uintptr_t>(v.data());
      const auto at = reinterpret_cast<std::uintptr_t>(data);
      return !v.empty() && at >= begin && at + count * sizeof(T) <= begin + v.size() * sizeof(T);
    };
    for (const std::vector<T>& v : layer_io) {
      if (inside(v)) return true;
    }
    for (const auto& layer : saved) {
      if (layer == nullptr) continue;
      for (const std::vector<T>* v : {&layer->ln1, &layer->qkv, &layer->attn_y, &layer->h1,
                                      &layer->ln2, &layer->fc, &layer->gelu}) {
        if (inside(*v)) return true;
      }
    }
    return false;
  }
};

// The bytes `acts` holds (every vector's elements): what a microbatch in flight keeps for
// its backward.
template <typename T>
int64_t ActivationBytes(const Activations<T>& acts) {
  size_t deferred = 0;
  for (const DeferredWeightGradient<T>& job : acts.deferred) {
    deferred += job.d_out.size() + job.in.size();
  }
  size_t elements = acts.lnf.size() + acts.lnf_mean.size() + acts.lnf_rstd.size() +
                    acts.logits.size() + acts.ce_max.size() + acts.ce_sum_exp.size() +
                    acts.ce_target.size();
  for (const std::vector<T>* v :
       {&acts.emb_sum, &acts.emb_ln_mean, &acts.emb_ln_rstd, &acts.mlm_in, &acts.mlm_fc,
        &acts.mlm_act, &acts.mlm_ln, &acts.mlm_ln_mean, &acts.mlm_ln_rstd, &acts.pooler_in,
        &acts.pooled, &acts.sop_logits, &acts.sop_max, &acts.sop_sum_exp, &acts.sop_target,
        &acts.choice_in, &acts.choice_scores, &acts.choice_probs}) {
    elements += v->size();
  }
  for (const std::vector<T>& io : acts.layer_io) elements += io.size();
  for (const std::unique_ptr<LayerActivations<T>>& layer : acts.saved) {
    if (layer == nullptr) continue;
    for (const std::vector<T>* v :
         {&layer->ln1, &layer->ln1_mean, &layer->ln1_rstd, &layer->qkv, &layer->lse, &layer->attn_y,
          &layer->h1, &layer->ln2, &layer->ln2_mean, &layer->ln2_rstd, &layer->fc, &layer->gelu}) {
      elements += v->size();
    }
  }
  const size_t ids = acts.tokens.size() + acts.targets.size() + acts.positions.size() +
                     acts.token_types.size() + acts.lengths.size() + acts.mlm_rows.size() +
                     acts.mlm_targets.size() + acts.sentence_order.size() +
                     acts.choice_answers.size();
  return static_cast<int64_t>((elements + deferred) * sizeof(T) + ids * sizeof(int32_t));
}

}  // namespace mtrain

#endif  // MTRAIN_WORKER_ENGINE_CPU_ACTIVATIONS_H_
