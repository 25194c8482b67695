// The sizes each family derives from the width when a spec leaves them out. Header-only and
// free of every other dependency: spec/'s defaults, model/'s configuration and the
// HuggingFace conversion (whose GPT-2 config reads n_inner null as this) all use it.
#ifndef MTRAIN_MODEL_FAMILY_DEFAULTS_H_
#define MTRAIN_MODEL_FAMILY_DEFAULTS_H_

#include <algorithm>
#include <cstdint>

namespace mtrain {

// GPT-2: 4 h. Saturated rather than overflowed for widths validation refuses.
inline int Gpt2FfnHidden(int hidden) {
  return static_cast<int>(std::min<int64_t>(int64_t{4} * hidden, INT32_MAX));
}

// Llama: two thirds of 4 h (three matrices cost what GPT-2's two do), rounded up to a
// multiple of 256 (Meta's `multiple_of`; 4096 -> 11008).
inline int LlamaFfnHidden(int hidden) {
  const int64_t two_thirds = int64_t{8} * hidden / 3;
  return static_cast<int>(std::min<int64_t>((two_thirds + 255) / 256 * 256, INT32_MAX));
}

// BERT's multiple-choice head (RACE): the options of each question, one sequence each, next
// to each other in a microbatch.
inline constexpr int kRaceChoices = 4;

}  // namespace mtrain

#endif  // MTRAIN_MODEL_FAMILY_DEFAULTS_H_
