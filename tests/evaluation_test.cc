// `train --evaluate` end to end (issue 20): the tiny GPT-2 of tests/parity/hf_export_model.h
// exported to HuggingFace format (train.init_from), evaluated by real `train` processes
// under `launch` on the three tasks (worker/evaluation/eval_tasks.h) and three layouts,
// (1,1,1), (2,2,1) and (2,1,1):
//   - every layout gives the same numbers;
//   - they equal an independent PyTorch computation (tests/evaluation/eval_reference.py,
//     committed as eval_reference.json): losses and perplexities to 1e-5 relative,
//     counts and accuracies exactly. Half the cloze lines end in the word the model
//     itself predicts, so the strict argmax rule is checked both ways;
//   - greedy generation (`train --generate`) of 200 tokens from a random GPT-2 with a
//     256-token context equals PyTorch's token for token, with the key-value cache under
//     (1,1,1), (2,1,1), (1,2,1) and (2,2,1) (train.init_from cut to each tensor rank's
//     slice as it is read) and without it; a prompt that fills the context is refused;
//   - interleaved pipelines (two chunks a stage) generate the tokens one rank does.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

using google::protobuf::Struct;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Struct ParseJson(const std::string& text) {
  Struct object;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &object).ok()) << text;
  return object;
}

double Number(const Struct& object, const std::string& key) {
  const auto it = object.fields().find(key);
  EXPECT_NE(it, object.fields().end()) << key;
  return it == object.fields().end() ? NAN : it->second.number_value();
}

// Runs `launch` as `name` (TEST_TMPDIR/name) with `spec_json` and the flags for every
// rank; the exit code and the logs.
std::pair<int, std::string> Launch(const std::string& name, const std::string& spec_json,
                                   const std::vector<std::string>& flags) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  std::ofstream(dir + ".json") << spec_json;
  std::vector<std::string> argv = {"worker/launch", "--spec=" + dir + ".json", "--out_dir=" + dir,
                                   "--threads_per_rank=1", "--"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto launch = ChildProcess::Start(argv, dir + ".log");
  if (!launch.ok()) return {-1, std::string(launch.status().message())};
  absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(3));
  // launch prints the narrator's log; rank 0's holds the engine, data and refusals.
  return {code.ok() ? *code : -1, (*launch)->Log() + ReadFile(dir + "/rank-0.log")};
}

class EvaluationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(TestTempDir() + "/model");
    auto writer = ChildProcess::Start(
        {"tests/parity/write_hf_export", "--output_dir=" + *model_dir_}, *model_dir_ + ".log");
    ASSERT_TRUE(writer.ok()) << writer.status();
    absl::StatusOr<int> code = (*writer)->Wait(absl::Minutes(1));
    ASSERT_TRUE(code.ok() && *code == 0) << (*writer)->Log();
  }
  static void TearDownTestSuite() { delete model_dir_; }

  // The task's result under layout (t, p, 1), as `train --evaluate` wrote it.
  static Struct Evaluate(const std::string& task, const std::string& data, int t, int p) {
    const std::string name = absl::StrCat(task, "-t", t, "p", p);
    const std::string output = absl::StrCat(TestTempDir(), "/", name, ".result.json");
    const auto [code, log] =
        Launch(name,
               absl::StrFormat(
                   R"({"name": "eval", "model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64,
                "seq_length": 32, "vocab_size": 300},
                "parallel": {"tensor": %d, "pipeline": %d, "micro_batch_size": 2,
                             "global_batch_size": 4},
                "train": {"init_from": "%s"}, "device": "DEVICE_CPU"})",
                   t, p, *model_dir_),
               {"--evaluate=" + task, "--eval_data=tests/evaluation/" + data,
                "--overlapping_eval=8", "--eval_output=" + output});
    EXPECT_EQ(code, 0) << name << ":\n" << log;
    // The narrator logged the same line.
    EXPECT_NE(log.find("evaluation: {\"task\":\"" + task + "\""), std::string::npos) << log;
    return ParseJson(ReadFile(output));
  }

  static std::string* model_dir_;
};
std::string* EvaluationTest::model_dir_ = nullptr;

void ExpectMatches(const Struct& got, const Struct& want, const std::string& what) {
  for (const auto& [key, value] : want.fields()) {
    ASSERT_EQ(got.fields().count(key), 1u) << what << " lacks " << key;
    const double expected = value.number_value();
    const double actual = got.fields().at(key).number_value();
    if (key == "loss" || key == "perplexity" || key == "adjusted_perplexity") {
      EXPECT_NEAR(actual, expected, 1e-5 * std::abs(expected)) << what << " " << key;
    } else {
      EXPECT_EQ(actual, expected) << what << " " << key;  // counts and accuracies
    }
  }
}

TEST_F(EvaluationTest, EveryTaskMatchesPyTorchUnderEveryLayout) {
  const Struct reference = ParseJson(ReadFile("tests/evaluation/eval_reference.json"));
  ASSERT_EQ(Number(reference, "seq_length"), 32);
  ASSERT_EQ(Number(reference, "overlapping_eval"), 8);
  for (const auto& [task, data] : std::vector<std::pair<std::string, std::string>>{
           {"perplexity", "text.txt"}, {"cloze", "cloze.jsonl"}, {"choice", "choice.jsonl"}}) {
    const Struct& want = reference.fields().at(task).struct_value();
    for (const auto& [t, p] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {2, 1}}) {
      const Struct got = Evaluate(task, data, t, p);
      ExpectMatches(got, want, absl::StrCat(task, " at (", t, ",", p, ",1)"));
    }
  }
  // The cloze file is built so that strictness shows: half right, half wrong.
  EXPECT_EQ(Number(reference.fields().at("cloze").struct_value(), "accuracy"), 0.5);
}

// `train --generate` with the flags given; the JSON it wrote (and the logs).
std::pair<Struct, std::string> Generate(const std::string& name, int tensor, int pipeline,
                                        std::vector<std::string> flags) {
  const std::string output = absl::StrCat(TestTempDir(), "/", name, ".result.json");
  flags.push_back("--eval_output=" + output);
  const auto [code, log] = Launch(
      name,
      absl::StrFormat(
          R"({"model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64, "seq_length": 256,
              "vocab_size": 300}, "parallel": {"tensor": %d, "pipeline": %d},
              "train": {"init_from": "tests/evaluation/gen_model"}, "device": "DEVICE_CPU"})",
          tensor, pipeline),
      flags);
  if (code != 0) return {Struct(), log};
  return {ParseJson(ReadFile(output)), log};
}

std::vector<int> Tokens(const Struct& object) {
  std::vector<int> tokens;
  const auto it = object.fields().find("tokens");
  if (it == object.fields().end()) return tokens;
  for (const auto& value : it->second.list_value().values()) {
    tokens.push_back(static_cast<int>(value.number_value()));
  }
  return tokens;
}

TEST_F(EvaluationTest, GreedyGenerationMatchesPyTorchWithAndWithoutTheCache) {
  const Struct reference = ParseJson(ReadFile("tests/evaluation/eval_reference.json"));
  const Struct& want = reference.fields().at("generation").struct_value();
  const std::vector<int> expected = Tokens(want);
  ASSERT_EQ(expected.size(), 200u);
  const std::string prompt = want.fields().at("prompt").string_value();
  for (const auto& [name, tensor, pipeline, cache] :
       std::vector<std::tuple<std::string, int, int, bool>>{{"gen-t1", 1, 1, true},
                                                            {"gen-t2", 2, 1, true},
                                                            {"gen-p2", 1, 2, true},
                                                            {"gen-t2p2", 2, 2, true},
                                                            {"gen-t1-nocache", 1, 1, false}}) {
    const auto [got, log] = Generate(name, tensor, pipeline,
                                     {"--generate=" + prompt, "--max_new_tokens=200",
                                      absl::StrCat("--kv_cache=", cache ? "true" : "false")});
    EXPECT_EQ(Tokens(got), expected) << name << "\n" << log;
    EXPECT_EQ(got.fields().count("stopped") ? got.fields().at("stopped").string_value() : "",
              "max_new_tokens")
        << name;
    if (got.fields().count("tokens_per_second")) {
      std::printf("%s: %.0f tokens/s\n", name.c_str(), Number(got, "tokens_per_second"));
    }
  }
  // A prompt that fills the context is refused, not cut.
  const auto [refused, log] =
      Generate("gen-long", 1, 1, {"--generate=" + std::string(256, 'a'), "--max_new_tokens=5"});
  EXPECT_NE(log.find("--generate: the prompt is 256 tokens; model.seq_length 256 leaves no room"),
            std::string::npos)
      << log;
}

TEST_F(EvaluationTest, ACheckpointSavedAtT2P2EvaluatesAlikeAtT1P1AndT2P1) {
  const auto spec = [](int t, int p) {
    return absl::StrFormat(
        R"({"model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64, "seq_length": 32},
            "parallel": {"tensor": %d, "pipeline": %d, "micro_batch_size": 2,
                         "global_batch_size": 4},
            "optimizer": {"lr": 3e-3, "warmup_steps": 2},
            "train": {"steps": 8, "dropout": 0.0}, "device": "DEVICE_CPU"})",
        t, p);
  };
  const std::string checkpoints = TestTempDir() + "/t2p2-checkpoints";
  const auto [trained, train_log] =
      Launch("t2p2-train", spec(2, 2), {"--checkpoint_dir=" + checkpoints});
  ASSERT_EQ(trained, 0) << train_log;
  std::vector<Struct> results;
  for (const auto& [t, p] : std::vector<std::pair<int, int>>{{2, 2}, {1, 1}, {2, 1}}) {
    const std::string name = absl::StrCat("from-t2p2-at-t", t, "p", p);
    const std::string output = absl::StrCat(TestTempDir(), "/", name, ".result.json");
    const auto [code, log] =
        Launch(name, spec(t, p),
               {"--resume_from=" + checkpoints + "/step-00000008", "--evaluate=choice",
                "--eval_data=tests/evaluation/choice.jsonl", "--eval_output=" + output});
    ASSERT_EQ(code, 0) << name << ":\n" << log;
    results.push_back(ParseJson(ReadFile(output)));
  }
  for (size_t i = 1; i < results.size(); ++i) {
    ExpectMatches(results[i], results[0], absl::StrCat("layout ", i));
  }
}

// Interleaved pipelines generate too: a 4-layer model trained a few steps continues a
// prompt with the same tokens at (1,1,1), (1,2,1) with two chunks a stage and (2,2,1) with
// two chunks a stage (hidden states go chunk to chunk in the model's order).
TEST_F(EvaluationTest, InterleavedPipelinesGenerateAsOneRank) {
  const auto spec = [](int t, int p, int v) {
    return absl::StrFormat(
        R"({"model": {"num_layers": 4, "num_heads": 4, "hidden_size": 64, "seq_length": 64},
            "parallel": {"tensor": %d, "pipeline": %d, "virtual_stages": %d,
                         "schedule": "%s", "micro_batch_size": 1, "global_batch_size": 4},
            "optimizer": {"lr": 3e-3, "warmup_steps": 2},
            "train": {"steps": 6, "dropout": 0.0}, "device": "DEVICE_CPU"})",
        t, p, v, v > 1 ? "SCHEDULE_INTERLEAVED_1F1B" : "SCHEDULE_1F1B");
  };
  const std::string checkpoints = TestTempDir() + "/four-layer-checkpoints";
  const auto [trained, train_log] =
      Launch("four-layer-train", spec(1, 1, 1), {"--checkpoint_dir=" + checkpoints});
  ASSERT_EQ(trained, 0) << train_log;
  std::vector<std::vector<int>> tokens;
  for (const auto& [t, p, v] :
       std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {1, 2, 2}, {2, 2, 2}}) {
    const std::string name = absl::StrCat("interleaved-t", t, "p", p, "v", v);
    const std::string output = absl::StrCat(TestTempDir(), "/", name, ".result.json");
    const auto [code, log] =
        Launch(name, spec(t, p, v),
               {"--resume_from=" + checkpoints + "/step-00000006",
                "--generate=ROMEO:", "--max_new_tokens=40", "--eval_output=" + output});
    ASSERT_EQ(code, 0) << name << ":\n" << log;
    tokens.push_back(Tokens(ParseJson(ReadFile(output))));
    EXPECT_EQ(tokens.back().size(), 40u) << name;
  }
  EXPECT_EQ(tokens[1], tokens[0]) << "(1,2,1) v=2";
  EXPECT_EQ(tokens[2], tokens[0]) << "(2,2,1) v=2";
}

TEST_F(EvaluationTest, BadInputIsRefusedNamingTheLine) {
  const std::string bad = TestTempDir() + "/bad.jsonl";
  std::ofstream(bad) << "{\"text\": \"a fine line\"}\n{\"text\": 3}\n";
  const auto [code, log] =
      Launch("bad",
             absl::StrFormat(
                 R"({"model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64,
                     "seq_length": 32, "vocab_size": 300}, "train": {"init_from": "%s"},
                     "device": "DEVICE_CPU"})",
                 *model_dir_),
             {"--evaluate=cloze", "--eval_data=" + bad});
  EXPECT_NE(code, 0);
  EXPECT_NE(log.find(bad + ":2: needs a string \"text\""), std::string::npos) << log;
}

}  // namespace
}  // namespace mtrain
