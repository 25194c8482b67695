// What a step sends on each kind of link (issue 21): real `train` processes under `launch`,
// the metrics lines' tensor_bytes_sent, pipeline_bytes_sent and data_bytes_sent against the
// volumes the layout implies, exactly:
//   - (2,2,1): a first-stage rank sends every microbatch's hidden state [B*S, C] to the
//     next stage, whole without scatter/gather and its 1/t slice with it (the losses are
//     the same, bit for bit: the slices are all-gathered back unchanged), plus its share
//     of the tied embedding's gradient sum with the last stage;
//   - (1,1,2): a replica's gradient all-reduce moves 2(d-1)/d of the gradients.
// The CPU engine's activation peak is reported too.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/metrics_jsonl.h"

namespace mtrain {
namespace {

// The model: C = 32, S = 16, B = 2, 8 sequences a step (4 microbatches at d = 1), a byte
// vocabulary of 256 (padded to a multiple of 128 * t: 256 for t = 2).
constexpr int64_t kHidden = 32, kSeq = 16, kMicroBatch = 2, kGlobalBatch = 8, kVocab = 256;

std::vector<MetricsLine> Train(const std::string& name, const std::string& parallel) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  std::ofstream(dir + ".json") << absl::StrFormat(
      R"({"model": {"num_layers": 2, "num_heads": 4, "hidden_size": %d, "seq_length": %d},
          "parallel": {%s, "micro_batch_size": %d, "global_batch_size": %d},
          "train": {"steps": 2, "seed": 3, "dropout": 0.0}, "device": "DEVICE_CPU"})",
      kHidden, kSeq, parallel, kMicroBatch, kGlobalBatch);
  auto launch = ChildProcess::Start(
      {"worker/launch", "--spec=" + dir + ".json", "--out_dir=" + dir, "--threads_per_rank=1"},
      dir + ".log");
  EXPECT_TRUE(launch.ok()) << launch.status();
  if (!launch.ok()) return {};
  absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(3));
  EXPECT_TRUE(code.ok() && *code == 0) << name << ":\n" << (*launch)->Log();
  absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(dir + "/metrics.jsonl");
  EXPECT_TRUE(lines.ok()) << lines.status();
  return lines.ok() ? *lines : std::vector<MetricsLine>{};
}

// Rank `rank`'s line of step `step`.
MetricsLine LineOf(const std::vector<MetricsLine>& lines, int rank, int step) {
  for (const MetricsLine& line : lines) {
    if (line.at("rank") == rank && line.at("step") == step) return line;
  }
  ADD_FAILURE() << "no line of rank " << rank << " step " << step;
  return {};
}

TEST(CommunicationVolumeTest, ScatterGatherSendsOneTthOfEachPipelineMessage) {
  const std::string layout = R"("tensor": 2, "pipeline": 2)";
  const std::vector<MetricsLine> whole =
      Train("t2p2-whole", layout + R"(, "scatter_gather": false)");
  const std::vector<MetricsLine> sliced =
      Train("t2p2-sliced", layout + R"(, "scatter_gather": true)");
  ASSERT_FALSE(whole.empty());
  ASSERT_FALSE(sliced.empty());
  const int64_t messages = kGlobalBatch / kMicroBatch;             // 4 forwards a step
  const int64_t message_bytes = kMicroBatch * kSeq * kHidden * 4;  // [B*S, C] floats
  const int64_t embedding_bytes = kVocab / 2 * kHidden * 4;        // 2(n-1)/n of this rank's shard
  for (int step : {1, 2}) {
    // The last stage's ranks (2 and 3; they write the metrics lines) send every
    // microbatch's input gradient back, whole or sliced.
    for (int rank : {2, 3}) {
      EXPECT_EQ(LineOf(whole, rank, step).at("pipeline_bytes_sent"),
                messages * message_bytes + embedding_bytes);
      EXPECT_EQ(LineOf(sliced, rank, step).at("pipeline_bytes_sent"),
                messages * message_bytes / 2 + embedding_bytes);
    }
    // The slices travel again inside the tensor group.
    EXPECT_GT(LineOf(sliced, 2, step).at("tensor_bytes_sent"),
              LineOf(whole, 2, step).at("tensor_bytes_sent"));
    // Same training: the losses agree exactly.
    EXPECT_EQ(LineOf(whole, 2, step).at("loss"), LineOf(sliced, 2, step).at("loss"));
  }
  // Sequence parallelism: the stages hold 1/t of each hidden state, so the messages are as
  // small as scatter/gather's without the all-gather; the tensor group's all-reduces
  // become all-gathers and reduce-scatters of the same volume; activations shrink.
  const std::vector<MetricsLine> sequence =
      Train("t2p2-sequence", layout + R"(, "sequence_parallel": true)");
  ASSERT_FALSE(sequence.empty());
  for (int rank : {2, 3}) {
    EXPECT_EQ(LineOf(sequence, rank, 2).at("pipeline_bytes_sent"),
              messages * message_bytes / 2 + embedding_bytes);
    EXPECT_NEAR(LineOf(sequence, rank, 2).at("loss"), LineOf(whole, rank, 2).at("loss"),
                1e-5 * LineOf(whole, rank, 2).at("loss"));
    EXPECT_LT(LineOf(sequence, rank, 2).at("activation_memory_peak_bytes"),
              LineOf(whole, rank, 2).at("activation_memory_peak_bytes"));
  }
  std::printf(
      "(2,2,1) last stage, activation peak: %.0f bytes, %.0f with sequence "
      "parallelism\n",
      LineOf(whole, 2, 2).at("activation_memory_peak_bytes"),
      LineOf(sequence, 2, 2).at("activation_memory_peak_bytes"));
  std::printf("(2,2,1) last stage, pipeline bytes a step: %.0f whole, %.0f scatter/gather\n",
              LineOf(whole, 2, 2).at("pipeline_bytes_sent"),
              LineOf(sliced, 2, 2).at("pipeline_bytes_sent"));
}

TEST(CommunicationVolumeTest, DataParallelSumsAndActivationPeaks) {
  const std::vector<MetricsLine> d2 = Train("d2", R"("data": 2)");
  ASSERT_FALSE(d2.empty());
  // Every gradient once through a ring all-reduce of two: 2(2-1)/2 = its bytes. The
  // parameters: embeddings (V*C + S*C), 2 layers of 12*C*C + 13*C, the final LayerNorm.
  const int64_t per_layer = 12 * kHidden * kHidden + 13 * kHidden;
  const int64_t parameters = kVocab * kHidden + kSeq * kHidden + 2 * per_layer + 2 * kHidden;
  const MetricsLine line = LineOf(d2, 0, 2);
  EXPECT_GE(line.at("data_bytes_sent"), parameters * 4);
  // The loss and the norm's scalars ride along (a few bytes more, never a gradient more).
  EXPECT_LT(line.at("data_bytes_sent"), parameters * 4 + 1024);
  EXPECT_EQ(line.at("tensor_bytes_sent"), 0);
  EXPECT_EQ(line.at("pipeline_bytes_sent"), 0);
  // ZeRO-1 reduce-scatters the gradients (half an all-reduce's bytes: (d-1)/d) and
  // all-gathers the updated parameters (the other half): what plain data parallelism
  // sends, where an all-reduce of the gradients before the gather sent half again more.
  // Beside the loss, the replicas sum their shards' squared gradients (8 more bytes).
  const std::vector<MetricsLine> zero = Train("d2-zero1", R"("data": 2, "zero_stage": 1)");
  ASSERT_FALSE(zero.empty());
  EXPECT_EQ(LineOf(zero, 0, 2).at("data_bytes_sent"), line.at("data_bytes_sent") + 8);
  EXPECT_EQ(LineOf(zero, 0, 2).at("loss"), line.at("loss"));
  // A rank without a pipeline keeps one microbatch's activations at a time; the last of
  // two 1F1B stages one too, of half the layers (and the head).
  const std::vector<MetricsLine> p2 = Train("p2", R"("pipeline": 2)");
  ASSERT_FALSE(p2.empty());
  const double alone = LineOf(d2, 0, 2).at("activation_memory_peak_bytes");
  const double last_stage = LineOf(p2, 1, 2).at("activation_memory_peak_bytes");
  EXPECT_GT(last_stage, 0);
  EXPECT_LT(last_stage, alone) << "one microbatch of half the layers";
  std::printf("activation peak: %.0f bytes at (1,1,2), %.0f on the last of 2 stages\n", alone,
              last_stage);
}

}  // namespace
}  // namespace mtrain
