// The upper bounds of a JobSpec's fields, each with its reason. job_spec_validation refuses
// a spec beyond any of them, naming the field, the value and the bound; README.md's table
// of spec fields lists the same numbers.
//
// Two kinds of bound. Typo bounds sit far above every published model (GPT-3 175B: 96
// layers, 12288 wide, 96 heads; Megatron's 1T: 128 layers, 25600 wide, 160 heads; the
// largest tokenizers about 256k tokens) so no real job meets them, while an extra digit or
// an attacker's 2^31 - 1 does. Structural bounds keep what the coordinator builds from a
// spec small whatever the spec says: the explicit per-rank schedule, and the memory a rank
// would need. Together they keep every product the planner and the engine form
// (layers x hidden, tokens x vocabulary, parameter count, memory) far inside 64 bits, and
// each single dimension inside the engine's `int`.
#ifndef MTRAIN_SPEC_JOB_SPEC_LIMITS_H_
#define MTRAIN_SPEC_JOB_SPEC_LIMITS_H_

#include <cstdint>

namespace mtrain {

// model: typo bounds (see above).
inline constexpr int kMaxNumLayers = 1024;
inline constexpr int kMaxNumHeads = 1024;
inline constexpr int kMaxHiddenSize = 32768;
// Longest context of published dense models is ~10^5 tokens with special attention; this
// engine's attention is quadratic, and the memory bound below refuses most of this range.
inline constexpr int kMaxSeqLength = 65536;
inline constexpr int kMaxVocabSize = 1 << 20;
// Published FFN widths stay below 4 x 8 hidden (Llama 3 405B: 53248 at h 16384).
inline constexpr int kMaxFfnHiddenSize = 4 * kMaxHiddenSize;
inline constexpr float kMaxNormEpsilon = 1.0f;
// Llama 3 uses 500000; long-context variants a few million.
inline constexpr float kMaxRopeTheta = 1e9f;

// parallel: a world larger than any cluster this service is meant for (each degree alone
// and their product).
inline constexpr int kMaxWorldSize = 4096;
// Model chunks per stage cannot exceed the layers a stage holds.
inline constexpr int kMaxVirtualStages = kMaxNumLayers;
// Sequences per microbatch and per step: typo bounds (Megatron's largest runs use global
// batches of a few thousand sequences).
inline constexpr int kMaxMicroBatchSize = 8192;
inline constexpr int kMaxGlobalBatchSize = 1 << 20;
// Microbatches per step on one replica times model chunks per stage (m * v), at the
// smallest data-parallel degree the job may shrink to (which gives the most). Every rank's
// Assignment lists its schedule explicitly, about four actions of ~12 bytes per
// (microbatch, chunk): 8192 keeps an Assignment under 500 KB (490 KB measured by
// assignment_plan_test), an eighth of gRPC's 4 MB message limit.
inline constexpr int kMaxScheduledMicrobatches = 8192;
// The same summed over every rank of the job (world * m * v): the coordinator holds every
// rank's Assignment of a generation at once (and a copy in each worker's command queue)
// and checks each pipeline group's schedules. 2^18 keeps a generation's schedules near
// 50 MB in memory: a 4096-rank job gets 64 microbatches per replica, a 512-rank one 512.
inline constexpr int64_t kMaxPlanScheduledMicrobatches = int64_t{1} << 18;

// optimizer: typo bounds on values that are finite and positive but absurd.
inline constexpr float kMaxLearningRate = 10.0f;
inline constexpr float kMaxWeightDecay = 10.0f;
inline constexpr float kMaxEps = 1.0f;
inline constexpr float kMaxGradClip = 1e6f;

// train: a step count no job reaches (10^8 steps at 1 s each is three years); it bounds
// warmup_steps, decay_steps and checkpoint_every too.
inline constexpr int kMaxSteps = 100'000'000;
inline constexpr int kMaxRestarts = 1000;
// Global batches per validation: a typo bound (Megatron's default is 100).
inline constexpr int kMaxEvalIters = 1'000'000;
// Datasets in one blend (data.paths): far above published blends (tens of sources), and
// each one costs the rank an open file pair and an index.
inline constexpr int kMaxBlendDatasets = 1024;
// Evaluation tasks run at each checkpoint: a handful in practice.
inline constexpr int kMaxEvalTasks = 64;
// train.generate: prompts per checkpoint, each prompt's bytes, new tokens per prompt.
inline constexpr int kMaxGenerationPrompts = 16;
inline constexpr int kMaxPromptBytes = 64 * 1024;
inline constexpr int kMaxNewTokens = kMaxSeqLength;

// Strings: a Linux path (PATH_MAX), and the job name (it appears in metrics labels).
inline constexpr int kMaxPathLength = 4096;
inline constexpr int kMaxNameLength = 128;

// The whole JSON text of a spec: the longest valid spec (two paths of kMaxPathLength and
// every field) is a few tens of KB.
inline constexpr int kMaxJobSpecJsonBytes = 1 << 20;

// Per-rank memory estimate (rank_memory_estimate.h): more than any single machine this
// service places a rank on. A spec above it cannot run anywhere; one below it may still be
// refused at submission when no live worker has that much memory.
inline constexpr int64_t kMaxRankMemoryBytes = int64_t{1} << 40;  // 1 TiB

}  // namespace mtrain

#endif  // MTRAIN_SPEC_JOB_SPEC_LIMITS_H_
