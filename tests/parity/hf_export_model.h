// The tiny GPT-2 exported to HuggingFace for the transformers check, shared by the tool
// that feeds tests/parity/hf_export_reference.py (write_hf_export) and by the test that
// replays it without torch (hf_export_test). Changing anything here means regenerating
// hf_gpt2_export_reference.safetensors.
//
// Weights are a pure function of (tensor name, element index) through integer hashing and
// exact float arithmetic (no libm), so the exported file is byte-identical on every
// machine and the test can compare its CRC-32C with the reference's. They are large
// enough (std ~0.2) that attention is far from uniform and GeLU far from linear, and
// LayerNorm gains and all biases are perturbed away from 1 and 0: a wrong head order,
// transpose, activation or epsilon would show in the logits.
#ifndef MTRAIN_TESTS_PARITY_HF_EXPORT_MODEL_H_
#define MTRAIN_TESTS_PARITY_HF_EXPORT_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/full_tensor.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

inline constexpr int kHfExportBatch = 2;
inline constexpr uint64_t kHfExportSeed = 2024;

// The models checked, each with its own reference file.
enum class HfExportVariant {
  kGpt2,     // GPT-2's architecture as the spec defaults it
  kWideFfn,  // model.ffn_hidden_size 3 h (HF n_inner) and model.norm_epsilon 1e-3
};
inline constexpr HfExportVariant kHfExportVariants[] = {HfExportVariant::kGpt2,
                                                        HfExportVariant::kWideFfn};
// "" or "_wide_ffn": the reference is tests/parity/hf_gpt2_export_reference<suffix>.safetensors.
const char* HfExportVariantSuffix(HfExportVariant variant);

// 2 layers, 4 heads, hidden 64, seq 32, vocab 300 (padded to 384 by the engine: the
// export must drop the padding), dropout 0.1 (config only: both sides run without it).
// Defaults applied.
JobSpec HfExportSpec(HfExportVariant variant = HfExportVariant::kGpt2);

// Every parameter at the engine's global shapes (wte [384, 64], padding rows included).
std::map<std::string, FullTensor> HfExportWeights(HfExportVariant variant = HfExportVariant::kGpt2);

// [kHfExportBatch, seq_length] token ids covering [0, vocab_size).
std::vector<int32_t> HfExportTokens();

// The engine's fp32 logits of `tokens` under `weights` (no dropout), with the padded
// vocabulary columns removed: [kHfExportBatch * seq_length, vocab_size].
absl::StatusOr<std::vector<float>> EngineLogits(const std::map<std::string, FullTensor>& weights,
                                                const std::vector<int32_t>& tokens,
                                                HfExportVariant variant = HfExportVariant::kGpt2);

}  // namespace mtrain

#endif  // MTRAIN_TESTS_PARITY_HF_EXPORT_MODEL_H_
