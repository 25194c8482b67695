// A stream of pseudo-random numbers fixed by its starting value alone, for the samplers that
// must draw the same on every rank and machine (document_samples.h, bert_samples.h): the
// splitmix64 generator (its output is SplitMix64 of a counter stepped by the golden gamma),
// Lemire's unbiased bounded draw, and a Fisher-Yates shuffle over it.
//
//   SplitMixStream stream(SplitMix64(seed ^ salt));
//   uint64_t die = stream.Below(6);
#ifndef MTRAIN_DATA_SPLIT_MIX_STREAM_H_
#define MTRAIN_DATA_SPLIT_MIX_STREAM_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "data/sequence_sampler.h"  // SplitMix64

namespace mtrain {

class SplitMixStream {
 public:
  static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

  explicit SplitMixStream(uint64_t start) : state_(start) {}

  uint64_t Next() {
    const uint64_t out = SplitMix64(state_);
    state_ += kGolden;
    return out;
  }

  // Uniform in [0, bound), bound > 0: Lemire's multiply-shift, rejecting the few low
  // products that would make some results more likely than others.
  uint64_t Below(uint64_t bound) {
    using uint128 = unsigned __int128;
    uint128 product = static_cast<uint128>(Next()) * bound;
    uint64_t low = static_cast<uint64_t>(product);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        product = static_cast<uint128>(Next()) * bound;
        low = static_cast<uint64_t>(product);
      }
    }
    return static_cast<uint64_t>(product >> 64);
  }

  // Uniform in [0, 1): the top 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Fisher-Yates over the stream.
template <typename T>
void Shuffle(std::vector<T>* values, SplitMixStream* stream) {
  for (size_t i = values->size(); i > 1; --i) {
    const uint64_t j = stream->Below(i);
    std::swap((*values)[i - 1], (*values)[j]);
  }
}

}  // namespace mtrain

#endif  // MTRAIN_DATA_SPLIT_MIX_STREAM_H_
