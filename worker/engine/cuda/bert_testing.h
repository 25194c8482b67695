// What the CUDA BERT tests share (cuda_bert_model_test, cuda_bert_parallel_test): a small
// BERT whose head dimension the flash kernels take, and a microbatch with padded sequences,
// token types, masked-LM labels at some real positions and sentence-order labels.
#ifndef MTRAIN_WORKER_ENGINE_CUDA_BERT_TESTING_H_
#define MTRAIN_WORKER_ENGINE_CUDA_BERT_TESTING_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "worker/engine/model_shape.h"

namespace mtrain::cuda::testing {

// Head dim 32 (the flash kernels' smallest), a padded vocabulary (100 real of 128).
inline ModelShape SmallBert(NormPlacement placement) {
  return BertConfig(/*num_layers=*/2, /*num_heads=*/2, /*hidden=*/64, /*ffn_hidden=*/96,
                    /*seq_length=*/48, /*vocab=*/100, /*padded_vocab=*/128, placement);
}

struct BertBatch {
  std::vector<int32_t> tokens, types, targets, lengths, order;
  int masked = 0;  // rows with a masked-LM label
};

// lengths.size() sequences: sequence s has lengths[s] real positions (token type 0 for the
// first half of them, 1 after), a masked-LM label at about one real position in
// `mask_one_in` (never the first), -1 elsewhere; sentence-order labels `order`.
inline BertBatch MakeBertBatch(const ModelShape& shape, uint64_t seed, std::vector<int32_t> lengths,
                               std::vector<int32_t> order, int mask_one_in) {
  std::mt19937_64 rng(seed);
  const int S = shape.seq_length;
  BertBatch b;
  b.lengths = std::move(lengths);
  b.order = std::move(order);
  for (size_t s = 0; s < b.lengths.size(); ++s) {
    for (int i = 0; i < S; ++i) {
      b.tokens.push_back(static_cast<int32_t>(rng() % shape.vocab));
      b.types.push_back(i < b.lengths[s] / 2 ? 0 : 1);
      const bool masked = i > 0 && i < b.lengths[s] && rng() % mask_one_in == 0;
      b.targets.push_back(masked ? static_cast<int32_t>(rng() % shape.vocab) : -1);
      b.masked += masked ? 1 : 0;
    }
  }
  return b;
}

}  // namespace mtrain::cuda::testing

#endif  // MTRAIN_WORKER_ENGINE_CUDA_BERT_TESTING_H_
