#include "worker/evaluation/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/sequence_sampler.h"

namespace mtrain {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Uniform in [0, 1) from (seed, position): 53 random bits.
double Uniform(uint64_t seed, int64_t position) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace

absl::StatusOr<int32_t> SampleToken(const std::vector<float>& logits,
                                    const SamplingOptions& options, int64_t position) {
  if (logits.empty()) return absl::InvalidArgumentError("sampling: no logits");
  if (!(options.temperature >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature: ", options.temperature, " must be >= 0 (0: greedy)"));
  }
  if (options.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top_k: ", options.top_k, " must be >= 0 (0: no limit)"));
  }
  if (!(options.top_p > 0 && options.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top_p: ", options.top_p, " must be in (0, 1] (1: no limit)"));
  }
  if (options.temperature == 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Most likely first (ties by id, so the order is deterministic).
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t kept = order.size();
  if (options.top_k > 0) kept = std::min(kept, static_cast<size_t>(options.top_k));
  std::vector<double> probabilities(kept);
  const double largest = logits[order[0]] / options.temperature;
  double sum = 0;
  for (size_t i = 0; i < kept; ++i) {
    probabilities[i] = std::exp(logits[order[i]] / options.temperature - largest);
    sum += probabilities[i];
  }
  if (options.top_p < 1) {
    // The smallest prefix whose probability reaches top_p (the first token always stays).
    double cumulative = 0;
    size_t prefix = 0;
    while (prefix < kept) {
      cumulative += probabilities[prefix] / sum;
      ++prefix;
      if (cumulative >= options.top_p) break;
    }
    kept = prefix;
    sum = std::accumulate(probabilities.begin(), probabilities.begin() + kept, 0.0);
  }
  double target = Uniform(options.seed, position) * sum;
  for (size_t i = 0; i < kept; ++i) {
    target -= probabilities[i];
    if (target < 0) return order[i];
  }
  return order[kept - 1];
}

absl::StatusOr<GenerationResult> Generate(TrainingEngine& engine, int seq_length,
                                          const std::vector<int32_t>& prompt,
                                          const GenerationOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (static_cast<int>(prompt.size()) >= seq_length) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt is ", prompt.size(),
                                                   " tokens; model.seq_length ", seq_length,
                                                   " leaves no room to generate "
                                                   "(at most ",
                                                   seq_length - 1,
                                                   " prompt tokens; a longer prompt is refused, "
                                                   "not cut)"));
  }
  GenerationResult result;
  std::vector<int32_t> context = prompt;
  auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(engine.StartGeneration(seq_length));
  // The cache goes when the sequence ends, whichever way (training may go on after).
  const absl::Cleanup end_generation = [&engine] { engine.EndGeneration(); };
  ASSIGN_OR_RETURN(std::vector<float> logits, engine.GenerateStep(prompt));
  result.prompt_seconds = SecondsSince(start);
  start = std::chrono::steady_clock::now();
  result.stopped = "max_new_tokens";
  for (int n = 0; n < options.max_new_tokens; ++n) {
    ASSIGN_OR_RETURN(const int32_t token,
                     SampleToken(logits, options.sampling, static_cast<int64_t>(context.size())));
    result.tokens.push_back(token);
    context.push_back(token);
    if (options.stop_token.has_value() && token == *options.stop_token) {
      result.stopped = "stop_token";
      break;
    }
    if (n + 1 == options.max_new_tokens) break;
    if (static_cast<int>(context.size()) >= seq_length) {
      result.stopped = "context";
      break;
    }
    if (options.kv_cache) {
      ASSIGN_OR_RETURN(logits, engine.GenerateStep({token}));
    } else {
      RETURN_IF_ERROR(engine.StartGeneration(seq_length));
      ASSIGN_OR_RETURN(logits, engine.GenerateStep(context));
    }
  }
  result.decode_seconds = SecondsSince(start);
  return result;
}

}  // namespace mtrain
