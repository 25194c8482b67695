// Training on text tokenized by a BPE (data.tokenizer TOKENIZER_HF_JSON) end to end: real
// `train` processes under `launch`, the shipped corpus tokenized on load by a small
// byte-level BPE, split 95/5 by token ranges with a validation loss every 4 steps, a
// 2-layer model under (1,1,1) and (2,2,1): train and validation losses fall and both
// layouts give the same ones.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/metrics_jsonl.h"
#include "tokenizer/tokenizer_json_for_test.h"

namespace mtrain {
namespace {

std::string TokenizerFile() {
  const std::string path = TestTempDir() + "/tokenizer.json";
  std::ofstream(path) << SmallEnglishTokenizerJsonForTest();
  return path;
}

struct Losses {
  std::vector<double> train;       // by step
  std::vector<double> validation;  // steps 4, 8, 12
};

Losses Train(const std::string& name, int tensor, int pipeline) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  const std::string spec = dir + ".json";
  std::ofstream(spec) << absl::StrCat(
      R"({"name": "bpe", "model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64,
          "seq_length": 32, "vocab_size": 269},
          "parallel": {"tensor": )",
      tensor, R"(, "pipeline": )", pipeline, R"(, "micro_batch_size": 2,
          "global_batch_size": 8},
          "data": {"tokenizer": "TOKENIZER_HF_JSON", "split": "95,5,0", "tokenizer_json": ")",
      TokenizerFile(),
      R"("}, "optimizer": {"lr": 3e-3, "warmup_steps": 2, "eps": 1e-3},
          "train": {"steps": 12, "seed": 5, "dropout": 0.0, "eval_interval": 4,
                    "eval_iters": 2}, "device": "DEVICE_CPU"})");
  // The tokenizer lies in the test's directory: a data root besides the corpus's.
  const std::string roots =
      absl::StrCat(TestTempDir(), ",", std::filesystem::absolute("tests/data").string());
  auto launch = ChildProcess::Start({"worker/launch", "--spec=" + spec, "--out_dir=" + dir,
                                     "--threads_per_rank=1", "--", "--data_root=" + roots},
                                    dir + ".log");
  EXPECT_TRUE(launch.ok()) << launch.status();
  if (!launch.ok()) return {};
  absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(5));
  EXPECT_TRUE(code.ok() && *code == 0) << name << ":\n" << (*launch)->Log();
  absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(dir + "/metrics.jsonl");
  EXPECT_TRUE(lines.ok()) << lines.status();
  if (!lines.ok()) return {};
  const int last_rank = tensor * pipeline - tensor;  // the first loss-computing rank
  absl::StatusOr<std::vector<double>> losses = LossesOfRank(*lines, last_rank);
  EXPECT_TRUE(losses.ok()) << losses.status();
  Losses out;
  if (losses.ok()) out.train = *losses;
  for (const MetricsLine& line : *lines) {
    if (static_cast<int>(line.at("rank")) == last_rank && line.count("validation_loss") != 0) {
      out.validation.push_back(line.at("validation_loss"));
    }
  }
  return out;
}

TEST(BpeTrainingTest, ABpeTokenizedCorpusTrainsAndLayoutsAgree) {
  const Losses single = Train("single", 1, 1);
  const Losses parallel = Train("t2p2", 2, 2);
  ASSERT_EQ(single.train.size(), 12u);
  ASSERT_EQ(parallel.train.size(), 12u);
  EXPECT_LT(single.train.back(), single.train.front() - 0.5) << "the loss must fall";
  for (size_t s = 0; s < single.train.size(); ++s) {
    EXPECT_NEAR(parallel.train[s], single.train[s], 1e-5 * std::abs(single.train[s]))
        << "step " << s + 1;
  }
  ASSERT_EQ(single.validation.size(), 3u);
  ASSERT_EQ(parallel.validation.size(), 3u);
  EXPECT_LT(single.validation.back(), single.validation.front()) << "validation must fall";
  for (size_t e = 0; e < single.validation.size(); ++e) {
    EXPECT_NEAR(parallel.validation[e], single.validation[e], 1e-5 * std::abs(single.validation[e]))
        << "evaluation " << e + 1;
  }
}

}  // namespace
}  // namespace mtrain
