// Text generation from a trained model with the engine's key-value cache (issue 20):
// the prompt runs once, then each new token one position at a time, sampled from the last
// position's logits. Every tensor rank receives the same gathered logits and draws with
// the same counter-based randomness, so all pick the same token without a broadcast.
//
// Sampling, in the order transformers applies it: temperature 0 is greedy (the first
// largest logit); otherwise the logits are divided by the temperature, kept to the top_k
// largest (0: all), then to the smallest set of most likely tokens whose probability
// reaches top_p (1: all), renormalised, and one token is drawn with a uniform number that
// is a pure function of (seed, position).
//
//   GenerationOptions options;
//   options.max_new_tokens = 100;
//   ASSIGN_OR_RETURN(GenerationResult out, Generate(trainer.engine(), seq_length, prompt,
//   options));
#ifndef MTRAIN_WORKER_EVALUATION_GENERATION_H_
#define MTRAIN_WORKER_EVALUATION_GENERATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/training_engine.h"

namespace mtrain {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy
  int top_k = 0;           // 0: no limit
  double top_p = 1.0;      // 1: no limit
  uint64_t seed = 0;
};

struct GenerationOptions {
  SamplingOptions sampling;
  int max_new_tokens = 64;
  std::optional<int32_t> stop_token;  // the end-of-document token, when the tokenizer has one
  // false: the whole context runs again for every token (the cost the cache saves).
  bool kv_cache = true;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // the new tokens (the stop token included when it came)
  std::string stopped;          // "stop_token", "max_new_tokens" or "context" (seq_length full)
  double prompt_seconds = 0;    // running the prompt
  double decode_seconds = 0;    // the new tokens after the first
};

// INVALID_ARGUMENT (naming the option) for a temperature < 0, top_k < 0, top_p outside
// (0, 1], or logits empty. `position` selects the random number.
absl::StatusOr<int32_t> SampleToken(const std::vector<float>& logits,
                                    const SamplingOptions& options, int64_t position);

// Collective over the engine's ranks. INVALID_ARGUMENT for an empty prompt or one of
// seq_length tokens or more (no room to generate: it is refused, not cut; the message
// names no field: the caller prefixes the one it read the prompt from); the engine's
// errors pass through (UNIMPLEMENTED from an engine without generation).
absl::StatusOr<GenerationResult> Generate(TrainingEngine& engine, int seq_length,
                                          const std::vector<int32_t>& prompt,
                                          const GenerationOptions& options);

}  // namespace mtrain

#endif  // MTRAIN_WORKER_EVALUATION_GENERATION_H_
