// Reading a PyTorch reference written by gpt2_reference.py (shared by the CPU and the CUDA
// parity tests), and the error measure they hold the engines to.
#ifndef MTRAIN_TESTS_PARITY_PARITY_REFERENCE_H_
#define MTRAIN_TESTS_PARITY_PARITY_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "tests/parity/parity_config.h"
#include "worker/engine/cpu/single_rank_step.h"

namespace mtrain {

// The tensor `name` of the reference as floats; a test failure (and an empty vector) when
// it is missing.
inline std::vector<float> ReferenceFloats(const SafetensorsFile& reference,
                                          const std::string& name) {
  auto it = reference.tensors.find(name);
  EXPECT_NE(it, reference.tensors.end()) << name;
  if (it == reference.tensors.end()) return {};
  return *TensorAsFloats(it->second);
}

// Step k's batch (k = 0 .. kParitySteps - 1): kParityBatch windows of seq + 1 tokens each,
// split into inputs and the targets shifted by one.
inline std::vector<TokenBatch> ReferenceBatches(const SafetensorsFile& reference, int seq) {
  std::vector<TokenBatch> batches;
  absl::StatusOr<std::vector<int32_t>> tokens = TensorAsInt32(reference.tensors.at("tokens"));
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (!tokens.ok()) return batches;
  for (int step = 0; step < kParitySteps; ++step) {
    TokenBatch batch;
    for (int b = 0; b < kParityBatch; ++b) {
      const int32_t* window = tokens->data() + (step * kParityBatch + b) * (seq + 1);
      batch.inputs.insert(batch.inputs.end(), window, window + seq);
      batch.targets.insert(batch.targets.end(), window + 1, window + seq + 1);
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

// max |a - b| / max |b|: relative to the tensor's scale, so that tiny elements do not
// dominate. A non-finite a[i] is the worst error (std::max would skip a NaN).
inline double ScaledError(const float* a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace mtrain

#endif  // MTRAIN_TESTS_PARITY_PARITY_REFERENCE_H_
