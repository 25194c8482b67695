// BERT's pretraining samples (Megatron-LM's BertDataset, with the Megatron paper's sentence-
// order prediction) over an indexed dataset whose documents are runs of sentences, one
// sentence a sequence (`preprocess --split-sentences`):
//
// Spans, built once (a pure function of the dataset range and the seed): each document of
// two sentences or more is cut into spans of consecutive sentences, walking its sentences and
// closing a span once it holds a target's worth of tokens (or at the document's end) and has
// two sentences; the target is seq_length - 3, or with probability short_seq_prob a length
// drawn uniformly from [2, seq_length - 3] (Megatron's short sequences). An epoch is the
// spans in an order shuffled for it; global sample i is epoch i / N, span perm_e[i % N].
//
// Sample i, from its span and a random stream seeded by (seed, i) alone, so a resumed job (or
// another layout) draws the same sample, masks included:
//   1. the span's first a sentences are segment A, the rest B, a uniform in [1, n - 1];
//   2. with probability 1/2 A and B change places: `swapped` is the sentence-order label;
//   3. while A and B hold more than the target, the longer loses a token at its front or
//      back (probability 1/2 each), as Megatron truncates;
//   4. tokens [CLS] A [SEP] B [SEP], token types 0 up to the first [SEP], 1 after;
//   5. masking: positions are grouped into words (a token that continues a word, WordPiece's
//      "##" piece, joins the word before it: whole-word masking); the words' n-grams,
//      n <= max_ngram, are candidates in an order shuffled per sample; for each, n is drawn
//      with probability proportional to 1/n (Megatron's choice for BERT, p = 6/11, 3/11,
//      2/11 for n = 1, 2, 3; its geometric draw is for span-corruption models) and lowered
//      while the n-gram would overshoot the budget, and an n-gram touching a masked word is
//      passed over; the budget is round(masked_lm_prob x tokens), at least 1 and at most
//      masked_lm_prob x seq_length. Each chosen position becomes [MASK] with probability
//      0.8, stays itself with 0.1, or becomes an id uniform in [0, vocab_size) with 0.1;
//      its label is the original token;
//   6. padding with [PAD] to seq_length (type 0, no label).
//
//   ASSIGN_OR_RETURN(auto samples, BertSamples::Create(data.get(), options));
//   BertSample sample;
//   RETURN_IF_ERROR(samples->Fill(k, &sample));
#ifndef MTRAIN_DATA_BERT_SAMPLES_H_
#define MTRAIN_DATA_BERT_SAMPLES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/indexed_dataset.h"
#include "spec/data_split.h"

namespace mtrain {

struct BertSpecialIds {
  int32_t cls = -1, sep = -1, mask = -1, pad = -1;
};

struct BertSamplesOptions {
  int seq_length = 0;  // S: [CLS] A [SEP] B [SEP] and padding
  uint64_t seed = 0;
  SplitRange documents;  // [begin, end) of the dataset's documents
  BertSpecialIds special;
  int32_t vocab_size = 0;  // ids of the tokenizer; random replacements come from [0, this)
  // Per id: whether the token continues the word before it (WordPiece: starts with "##").
  // Empty: every token is a word of its own.
  std::vector<bool> continues_word;
  double short_seq_prob = 0.1;
  double masked_lm_prob = 0.15;
  int max_ngram = 3;
};

struct BertSample {
  std::vector<int32_t> tokens;       // [S]
  std::vector<int32_t> token_types;  // [S]
  std::vector<int32_t> labels;       // [S]: the original token where masked, else -1
  int length = 0;                    // tokens before the padding
  bool swapped = false;              // B came before A in the text
  // Multiple choice (race_dataset.h): the question's correct option, carried by each of its
  // options' samples; -1 for pretraining samples.
  int answer = -1;
};

// What a BERT job draws its samples from: pretraining spans (BertSamples) or RACE's
// questions (race_dataset.h). Sample `index` is a pure function of the index, the data and
// the seed. Not thread-safe.
class BertSampleSource {
 public:
  virtual ~BertSampleSource() = default;
  virtual absl::Status Fill(int64_t index, BertSample* sample) = 0;
  // One line for the rank's log.
  virtual std::string Describe() const = 0;
};

class BertSamples : public BertSampleSource {
 public:
  // INVALID_ARGUMENT naming the option and rule (seq_length < 8, a probability outside
  // [0, 1], max_ngram < 1, special ids outside the vocabulary, continues_word of another
  // size, a document range outside the dataset, no document of two sentences).
  static absl::StatusOr<std::unique_ptr<BertSamples>> Create(const IndexedDataset* data,
                                                             BertSamplesOptions options);

  // N: spans, and so samples, per epoch.
  int64_t samples_per_epoch() const { return static_cast<int64_t>(spans_.size()); }

  // Sample `index` (any index >= 0). Not thread-safe (the epoch's order is kept).
  absl::Status Fill(int64_t index, BertSample* sample) override;

  // One line for the rank's log.
  std::string Describe() const override;

 private:
  struct Span {
    int64_t first_sentence = 0;  // dataset sequences [first, end)
    int64_t end_sentence = 0;
    int32_t target = 0;  // tokens A and B may hold together
  };
  BertSamples(const IndexedDataset* data, BertSamplesOptions options)
      : data_(data), options_(std::move(options)) {}
  // Chooses and masks positions of `sample` (its tokens set, length known).
  void Mask(uint64_t sample_seed, BertSample* sample) const;

  const IndexedDataset* data_;
  const BertSamplesOptions options_;
  std::vector<Span> spans_;
  int64_t epoch_ = -1;  // whose order order_ holds
  std::vector<int64_t> order_;
};

}  // namespace mtrain

#endif  // MTRAIN_DATA_BERT_SAMPLES_H_
