// Megatron-style data end to end with real processes: `preprocess` turns the shipped text
// into an indexed dataset (a small byte-level BPE, end-of-document tokens), and `train`
// under `launch` trains a 2-layer model on it with data.split "90,10,0" and a validation
// loss every 4 steps:
//   - (1,1,1), (2,2,1) and (1,2,2) give the same train and validation losses (every layout
//     draws the same samples), and both losses fall;
//   - on a dataset small enough that the run crosses epochs, a job resumed from its
//     checkpoint mid-epoch reproduces the uninterrupted run's losses bit for bit, and the
//     epoch index files are cached beside the dataset;
//   - a blend of two datasets (data.paths, weights 0.3 and 0.7) trains, takes Megatron's
//     share from each, and (1,1,1) and (2,2,1) agree.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/metrics_jsonl.h"
#include "tokenizer/tokenizer_json_for_test.h"

namespace mtrain {
namespace {

constexpr int kSteps = 12;
constexpr int kEvalInterval = 4;

std::string TokenizerFile() {
  const std::string path = TestTempDir() + "/tokenizer.json";
  std::ofstream(path) << SmallEnglishTokenizerJsonForTest();
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The first `paragraphs` blank-line-separated paragraphs of the shipped corpus (all: -1)
// as a text file, preprocessed into an indexed dataset; returns its prefix.
std::string Preprocess(const std::string& name, int paragraphs) {
  const std::string text = TestTempDir() + "/" + name + ".txt";
  {
    std::istringstream corpus(ReadFile("tests/data/shakespeare.txt"));
    std::ofstream out(text);
    std::string line;
    int seen = 0;
    bool blank = true;
    while (std::getline(corpus, line)) {
      if (line.empty() && !blank && ++seen == paragraphs) break;
      blank = line.empty();
      out << line << "\n";
    }
  }
  const std::string prefix = TestTempDir() + "/" + name;
  auto run =
      ChildProcess::Start({"data/preprocess", "--input=" + text, "--format=text",
                           "--output-prefix=" + prefix, "--tokenizer-json=" + TokenizerFile(),
                           "--append-eod", "--min-tokens=8", "--workers=1", "--progress=false"},
                          prefix + ".log");
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return "";
  absl::StatusOr<int> code = (*run)->Wait(absl::Minutes(2));
  EXPECT_TRUE(code.ok() && *code == 0) << (*run)->Log();
  return prefix + "_text_document";
}

struct Losses {
  int exit_code = -1;
  std::string log;                   // launch's output (the narrator, the last stage, among it)
  std::string rank0_log;             // rank 0 logs the engine, the data and the memory
  std::map<int, double> train;       // by step
  std::map<int, double> validation;  // by step, evaluation steps only
};

std::string Spec(const std::string& dataset, int t, int p, int d, int steps, int checkpoint,
                 const std::string& data = "") {
  return absl::StrFormat(
      R"({"name": "gpt-data", "model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64,
          "seq_length": 32, "vocab_size": 269},
          "parallel": {"tensor": %d, "pipeline": %d, "data": %d, "micro_batch_size": 2,
                       "global_batch_size": 8},
          "data": {"format": "DATA_FORMAT_MMIDIDX", %s, "split": "90,10,0"},
          "optimizer": {"lr": 3e-3, "warmup_steps": 2, "eps": 1e-3},
          "train": {"steps": %d, "seed": 5, "dropout": 0.1, "eval_interval": %d,
                    "eval_iters": 2, "checkpoint_every": %d},
          "device": "DEVICE_CPU"})",
      t, p, d, data.empty() ? absl::StrCat("\"path\": \"", dataset, "\"") : data, steps,
      kEvalInterval, checkpoint);
}

Losses Train(const std::string& name, const std::string& spec_json, int loss_rank,
             const std::vector<std::string>& train_flags = {}) {
  Losses out;
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  const std::string spec = dir + ".json";
  std::ofstream(spec) << spec_json;
  std::vector<std::string> argv = {"worker/launch",
                                   "--spec=" + spec,
                                   "--out_dir=" + dir,
                                   "--threads_per_rank=1",
                                   "--",
                                   "--data_root=" + TestTempDir(),
                                   "--collective_timeout=60s"};
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  auto launch = ChildProcess::Start(argv, dir + ".log");
  EXPECT_TRUE(launch.ok()) << launch.status();
  if (!launch.ok()) return out;
  absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(5));
  out.exit_code = code.ok() ? *code : -1;
  out.log = (*launch)->Log();
  out.rank0_log = ReadFile(dir + "/rank-0.log");
  absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(dir + "/metrics.jsonl");
  EXPECT_TRUE(lines.ok()) << lines.status();
  if (!lines.ok()) return out;
  for (const MetricsLine& line : *lines) {
    if (static_cast<int>(line.at("rank")) != loss_rank) continue;
    const int step = static_cast<int>(line.at("step"));
    out.train[step] = line.at("loss");
    if (line.count("validation_loss") != 0) {
      out.validation[step] = line.at("validation_loss");
      // The perplexity is the loss's exp.
      EXPECT_NEAR(line.at("validation_perplexity"), std::exp(line.at("validation_loss")),
                  1e-6 * line.at("validation_perplexity"));
    }
  }
  return out;
}

void ExpectClose(const std::map<int, double>& got, const std::map<int, double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [step, loss] : want) {
    ASSERT_EQ(got.count(step), 1u) << what << " step " << step;
    EXPECT_NEAR(got.at(step), loss, 1e-5 * std::abs(loss)) << what << " step " << step;
  }
}

TEST(GptDatasetTrainingTest, EveryLayoutTrainsAndValidatesOnTheSameSamples) {
  const std::string dataset = Preprocess("corpus", -1);
  ASSERT_FALSE(dataset.empty());
  // The first loss-computing rank: tensor * data * (pipeline - 1).
  const Losses single = Train("t1p1d1", Spec(dataset, 1, 1, 1, kSteps, 0), 0);
  ASSERT_EQ(single.exit_code, 0) << single.log;
  ASSERT_EQ(single.train.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(single.validation.size(), 3u);  // steps 4, 8, 12
  std::printf("(1,1,1): train loss %.4f -> %.4f; validation loss %.4f, %.4f, %.4f\n",
              single.train.at(1), single.train.at(kSteps), single.validation.at(4),
              single.validation.at(8), single.validation.at(12));
  EXPECT_LT(single.train.at(kSteps), single.train.at(1) - 0.5) << "the train loss must fall";
  EXPECT_LT(single.validation.at(12), single.validation.at(4) - 0.1)
      << "the validation loss must fall";
  // The rank's log says what it samples from.
  EXPECT_NE(single.log.find("data: " + dataset + " train documents [0, "), std::string::npos)
      << single.log;
  EXPECT_NE(single.log.find(dataset + " validation documents ["), std::string::npos) << single.log;
  for (const auto& [name, t, p, d] : std::vector<std::tuple<std::string, int, int, int>>{
           {"t2p2d1", 2, 2, 1}, {"t1p2d2", 1, 2, 2}}) {
    const Losses other = Train(name, Spec(dataset, t, p, d, kSteps, 0), t * d * (p - 1));
    ASSERT_EQ(other.exit_code, 0) << name << ":\n" << other.log;
    ExpectClose(other.train, single.train, name + " train");
    ExpectClose(other.validation, single.validation, name + " validation");
  }
}

TEST(GptDatasetTrainingTest, ResumingMidEpochReproducesTheUninterruptedRunBitForBit) {
  // A few dozen samples an epoch of the train split: 12 steps of 8 cross two epoch ends.
  const std::string dataset = Preprocess("small", 25);
  ASSERT_FALSE(dataset.empty());
  const std::string checkpoints = TestTempDir() + "/checkpoints";
  const Losses full =
      Train("full", Spec(dataset, 1, 2, 1, kSteps, 5), 1, {"--checkpoint_dir=" + checkpoints});
  ASSERT_EQ(full.exit_code, 0) << full.log;
  ASSERT_EQ(full.train.size(), static_cast<size_t>(kSteps));
  // Rank 0's log line says how many samples an epoch of the train split holds.
  const std::string& log = full.rank0_log;
  const size_t described = log.find(" samples of 33 tokens an epoch");
  ASSERT_NE(described, std::string::npos) << log;
  const size_t number = log.rfind(' ', described - 1);
  int per_epoch = 0;
  ASSERT_TRUE(absl::SimpleAtoi(log.substr(number + 1, described - number - 1), &per_epoch))
      << log.substr(number, described - number);
  std::printf("train split: %d samples an epoch; %d steps of 8 samples\n", per_epoch, kSteps);
  EXPECT_LT(per_epoch * 2, kSteps * 8) << "the run must cross two epoch ends";
  const Losses resumed = Train("resumed", Spec(dataset, 1, 2, 1, kSteps, 5), 1,
                               {"--resume_from=" + checkpoints + "/step-00000005"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.log;
  ASSERT_EQ(resumed.train.size(), static_cast<size_t>(kSteps - 5));
  for (int step = 6; step <= kSteps; ++step) {
    EXPECT_EQ(resumed.train.at(step), full.train.at(step)) << "step " << step;
  }
  for (int step : {8, 12}) {
    EXPECT_EQ(resumed.validation.at(step), full.validation.at(step)) << "step " << step;
  }
  // The epochs' indexes were cached beside the dataset (Megatron's .npy files' role).
  int cached = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dataset + ".mtrain-index")) {
    if (entry.path().string().find("-epoch") != std::string::npos &&
        entry.path().extension() != ".lock") {
      ++cached;
    }
  }
  EXPECT_GE(cached, 3) << "train epochs 0-2 and validation epoch 0";
}

TEST(GptDatasetTrainingTest, ABlendTrainsAndLayoutsAgree) {
  const std::string a = Preprocess("blend_a", 300);
  const std::string b = Preprocess("blend_b", 80);
  ASSERT_FALSE(a.empty() || b.empty());
  const std::string blend = absl::StrFormat(
      R"("paths": [{"path": "%s", "weight": 0.3}, {"path": "%s", "weight": 0.7}])", a, b);
  const Losses single = Train("blend_t1p1", Spec("", 1, 1, 1, kSteps, 0, blend), 0);
  ASSERT_EQ(single.exit_code, 0) << single.log;
  ASSERT_EQ(single.train.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(single.train.at(kSteps), single.train.at(1) - 0.5) << "the train loss must fall";
  // Megatron's blending order: 12 steps of 8 = 96 samples, 29 from a and 67 from b.
  EXPECT_NE(single.rank0_log.find(absl::StrCat("blend: 96 train samples: ", a, " 29")),
            std::string::npos)
      << single.rank0_log;
  const Losses pipelined = Train("blend_t2p2", Spec("", 2, 2, 1, kSteps, 0, blend), 2);
  ASSERT_EQ(pipelined.exit_code, 0) << pipelined.log;
  ExpectClose(pipelined.train, single.train, "blend (2,2,1) train");
  ExpectClose(pipelined.validation, single.validation, "blend (2,2,1) validation");
}

}  // namespace
}  // namespace mtrain
