#include "data/bert_samples.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/split_mix_stream.h"

namespace mtrain {
namespace {

// One salt per use of the seed, so the streams differ.
constexpr uint64_t kSpansSalt = 0x7370616e73000000ULL;   // "spans"
constexpr uint64_t kEpochSalt = 0x65706f6368000000ULL;   // "epoch"
constexpr uint64_t kSampleSalt = 0x73616d706c650000ULL;  // "sample"

uint64_t Mix(uint64_t h, uint64_t value) { return SplitMix64(h ^ value); }

absl::Status Refuse(const std::string& option, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat("BERT samples: ", option, ": ", rule));
}

// Removes tokens from the longer of a and b (its front or back, evenly) until they hold at
// most `target` together.
void Truncate(std::vector<int32_t>* a, std::vector<int32_t>* b, size_t target,
              SplitMixStream* stream) {
  while (a->size() + b->size() > target) {
    std::vector<int32_t>* longer = a->size() > b->size() ? a : b;
    if (stream->Uniform() < 0.5) {
      longer->erase(longer->begin());
    } else {
      longer->pop_back();
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<BertSamples>> BertSamples::Create(const IndexedDataset* data,
                                                                 BertSamplesOptions options) {
  if (options.seq_length < 8) return Refuse("seq_length", "must be >= 8");
  for (auto [name, p] : {std::pair<const char*, double>{"short_seq_prob", options.short_seq_prob},
                         {"masked_lm_prob", options.masked_lm_prob}}) {
    if (!(p >= 0 && p <= 1)) return Refuse(name, "must be in [0, 1]");
  }
  if (options.max_ngram < 1) return Refuse("max_ngram", "must be >= 1");
  if (options.vocab_size <= 0) return Refuse("vocab_size", "must be > 0");
  for (auto [name, id] : {std::pair<const char*, int32_t>{"[CLS]", options.special.cls},
                          {"[SEP]", options.special.sep},
                          {"[MASK]", options.special.mask},
                          {"[PAD]", options.special.pad}}) {
    if (id < 0 || id >= options.vocab_size) {
      return Refuse(
          absl::StrCat("special ", name),
          absl::StrCat("id ", id, " must be in [0, vocab_size ", options.vocab_size, ")"));
    }
  }
  if (!options.continues_word.empty() &&
      static_cast<int64_t>(options.continues_word.size()) != options.vocab_size) {
    return Refuse("continues_word", absl::StrCat("holds ", options.continues_word.size(),
                                                 " entries [rule: one per id, vocab_size ",
                                                 options.vocab_size, ", or none]"));
  }
  if (options.documents.begin < 0 || options.documents.end > data->num_documents() ||
      options.documents.begin > options.documents.end) {
    return Refuse("documents", absl::StrCat("[", options.documents.begin, ", ",
                                            options.documents.end, ") is not within the dataset's ",
                                            data->num_documents(), " documents"));
  }
  std::unique_ptr<BertSamples> samples(new BertSamples(data, std::move(options)));
  const BertSamplesOptions& o = samples->options_;
  const int32_t max_tokens = o.seq_length - 3;
  SplitMixStream stream(Mix(o.seed, kSpansSalt));
  auto draw_target = [&] {
    return stream.Uniform() < o.short_seq_prob
               ? static_cast<int32_t>(2 + stream.Below(static_cast<uint64_t>(max_tokens - 1)))
               : max_tokens;
  };
  for (int64_t d = o.documents.begin; d < o.documents.end; ++d) {
    ASSIGN_OR_RETURN(const DocumentRange doc, data->document(d));
    if (doc.end - doc.begin < 2) continue;  // sentence order needs two sentences
    int32_t target = draw_target();
    int64_t start = doc.begin;
    int64_t tokens = 0;
    for (int64_t s = doc.begin; s < doc.end; ++s) {
      ASSIGN_OR_RETURN(const SequenceRange sentence, data->sequence(s));
      tokens += sentence.length;
      const bool last = s + 1 == doc.end;
      const bool full = tokens >= target && doc.end - s > 1;
      if (full || last) {
        if (s + 1 - start >= 2 && tokens > 0) {
          samples->spans_.push_back(Span{start, s + 1, target});
        }
        start = s + 1;
        tokens = 0;
        target = draw_target();
      }
    }
  }
  if (samples->spans_.empty()) {
    return Refuse("documents",
                  absl::StrCat("none of documents [", o.documents.begin, ", ", o.documents.end,
                               ") has two sentences [rule: BERT's samples pair sentence spans; ",
                               "preprocess --split-sentences makes them]"));
  }
  return samples;
}

absl::Status BertSamples::Fill(int64_t index, BertSample* sample) {
  if (index < 0) return absl::InvalidArgumentError(absl::StrCat("sample index ", index, " < 0"));
  const int64_t n = samples_per_epoch();
  const int64_t epoch = index / n;
  if (epoch != epoch_) {
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), 0);
    SplitMixStream shuffle(Mix(Mix(options_.seed, kEpochSalt), static_cast<uint64_t>(epoch)));
    Shuffle(&order_, &shuffle);
    epoch_ = epoch;
  }
  const Span& span = spans_[order_[index % n]];
  const uint64_t sample_seed = Mix(Mix(options_.seed, kSampleSalt), static_cast<uint64_t>(index));
  SplitMixStream stream(sample_seed);

  const int64_t sentences = span.end_sentence - span.first_sentence;
  const int64_t a_sentences = 1 + static_cast<int64_t>(stream.Below(sentences - 1));
  std::vector<int32_t> a, b;
  for (int64_t s = span.first_sentence; s < span.end_sentence; ++s) {
    ASSIGN_OR_RETURN(std::vector<int32_t> tokens, data_->Sequence(s));
    std::vector<int32_t>& segment = s - span.first_sentence < a_sentences ? a : b;
    segment.insert(segment.end(), tokens.begin(), tokens.end());
  }
  sample->swapped = stream.Uniform() < 0.5;
  if (sample->swapped) std::swap(a, b);
  Truncate(&a, &b, static_cast<size_t>(span.target), &stream);

  const int S = options_.seq_length;
  sample->tokens.assign(S, options_.special.pad);
  sample->token_types.assign(S, 0);
  sample->labels.assign(S, -1);
  int at = 0;
  sample->tokens[at++] = options_.special.cls;
  for (int32_t t : a) sample->tokens[at++] = t;
  sample->tokens[at++] = options_.special.sep;
  const int b_start = at;
  for (int32_t t : b) sample->tokens[at++] = t;
  sample->tokens[at++] = options_.special.sep;
  std::fill(sample->token_types.begin() + b_start, sample->token_types.begin() + at, 1);
  sample->length = at;
  Mask(Mix(sample_seed, kSampleSalt), sample);
  return absl::OkStatus();
}

void BertSamples::Mask(uint64_t seed, BertSample* sample) const {
  SplitMixStream stream(seed);
  const BertSpecialIds& special = options_.special;
  // Words: runs of positions, a continuing piece joining the word right before it.
  std::vector<std::pair<int, int>> words;  // [begin, end) positions
  for (int p = 0; p < sample->length; ++p) {
    const int32_t token = sample->tokens[p];
    if (token == special.cls || token == special.sep) continue;
    const bool continues = !options_.continues_word.empty() && token >= 0 &&
                           token < options_.vocab_size && options_.continues_word[token];
    if (continues && !words.empty() && words.back().second == p) {
      words.back().second = p + 1;
    } else {
      words.push_back({p, p + 1});
    }
  }
  if (words.empty()) return;
  const int max_predictions =
      std::max(1, static_cast<int>(options_.masked_lm_prob * options_.seq_length));
  const int budget = std::min(
      max_predictions,
      std::max(1, static_cast<int>(std::lround(sample->length * options_.masked_lm_prob))));

  std::vector<int> starts(words.size());
  std::iota(starts.begin(), starts.end(), 0);
  Shuffle(&starts, &stream);
  std::vector<bool> masked_word(words.size(), false);
  int masked = 0;
  for (int start : starts) {
    if (masked >= budget) break;
    // n in [1, available] with probability proportional to 1/n.
    const int available = std::min(options_.max_ngram, static_cast<int>(words.size()) - start);
    double total = 0;
    for (int k = 1; k <= available; ++k) total += 1.0 / k;
    double u = stream.Uniform() * total;
    int n = 1;
    for (; n < available; ++n) {
      u -= 1.0 / n;
      if (u < 0) break;
    }
    auto positions = [&](int count) {
      return words[start + count - 1].second - words[start].first;
    };
    while (n > 0 && masked + positions(n) > budget) --n;
    if (n == 0) continue;
    bool touches = false;
    for (int w = start; w < start + n; ++w) touches = touches || masked_word[w];
    if (touches) continue;
    for (int w = start; w < start + n; ++w) {
      masked_word[w] = true;
      for (int p = words[w].first; p < words[w].second; ++p) {
        sample->labels[p] = sample->tokens[p];
        const double r = stream.Uniform();
        if (r < 0.8) {
          sample->tokens[p] = special.mask;
        } else if (r >= 0.9) {
          sample->tokens[p] = static_cast<int32_t>(stream.Below(options_.vocab_size));
        }
        ++masked;
      }
    }
  }
}

std::string BertSamples::Describe() const {
  return absl::StrCat(
      "BERT samples: documents [", options_.documents.begin, ", ", options_.documents.end, "), ",
      spans_.size(), " sentence spans an epoch, seq_length ", options_.seq_length,
      ", masked_lm_prob ", options_.masked_lm_prob, ", n-grams up to ", options_.max_ngram,
      options_.continues_word.empty() ? "" : ", whole-word masking");
}

}  // namespace mtrain
