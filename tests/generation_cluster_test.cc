// train.generate and `trainctl generate` under a coordinator (issue 20): a job on two CPU
// workers (tensor 2) with a BPE tokenizer and two prompts (one greedy, one sampled)
// continued at each checkpoint step (2 and 4). Checks that the checkpoint steps' metrics
// lines carry both texts, that `trainctl evals` and `trainctl status` show them from the
// job's events, that Prometheus exports mtrain_job_generation_tokens_per_second; then that
// `trainctl generate` continues a prompt with a stored checkpoint on the cluster exactly as
// the step's own generation did, and as a single `train` process does from the exported
// checkpoint; and that a prompt too long for the context fails naming the rule.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/metrics_scrape.h"
#include "tokenizer/tokenizer_json_for_test.h"

namespace mtrain {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

GeneratedText ParseGenerated(absl::string_view json) {
  GeneratedText text;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(
                  google::protobuf::StringPiece(json.data(), json.size()), &text)
                  .ok())
      << json;
  return text;
}

// The metrics JSON line's "generations" items, by step (only steps that have them).
std::map<int, std::vector<GeneratedText>> GenerationsByStep(const std::string& output) {
  std::map<int, std::vector<GeneratedText>> out;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, "{\"step\"")) continue;
    const size_t at = line.find(",\"generations\":[");
    if (at == absl::string_view::npos) continue;
    int step = 0;
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(8, line.find(',') - 8), &step)) << line;
    // Each item is one GeneratedText object; the array closes before the next key.
    StepMetrics metrics;
    const std::string wrapped =
        absl::StrCat("{", line.substr(at + 1, line.find("}]", at) - at + 1), "}");
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(wrapped, &metrics).ok()) << wrapped;
    out[step].assign(metrics.generations().begin(), metrics.generations().end());
  }
  return out;
}

class GenerationClusterTest : public ClusterTest {};

TEST_F(GenerationClusterTest, CheckpointStepsAndTrainctlGenerateContinueThePrompts) {
  const std::string tokenizer = Path("tokenizer.json");
  std::ofstream(tokenizer) << SmallEnglishTokenizerJsonForTest();
  worker_flags_ = {"--data_root=" + std::filesystem::path(tokenizer).parent_path().string() + "," +
                   std::filesystem::canonical("tests/data/shakespeare.txt").parent_path().string()};
  StartCoordinator();
  StartWorkers(2);
  const std::string model = R"("model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64,
      "seq_length": 32, "vocab_size": 269})";
  const std::string data = absl::StrCat(
      R"("data": {"tokenizer": "TOKENIZER_HF_JSON", "tokenizer_json": ")", tokenizer, R"("})");
  const std::string spec =
      WriteSpec("job.json", absl::StrCat(R"({"name": "samples", )", model, ", ", data, R"(,
      "parallel": {"tensor": 2, "micro_batch_size": 2, "global_batch_size": 4},
      "optimizer": {"lr": 3e-3, "warmup_steps": 1},
      "train": {"steps": 4, "dropout": 0.0, "checkpoint_every": 2, "generate": [
        {"prompt": "ROMEO:", "max_new_tokens": 12},
        {"prompt": "The king", "max_new_tokens": 10, "temperature": 0.9, "top_k": 20,
         "top_p": 0.95, "seed": 7}]},
      "device": "DEVICE_CPU"})"));
  auto [code, output] = Trainctl({"submit", "--wait", "--json", spec}, absl::Minutes(3));
  ASSERT_EQ(code, 0) << output;

  // Steps 2 and 4 carry both texts: 12 greedy tokens (nothing stops them but the count),
  // at most 10 sampled ones.
  const std::map<int, std::vector<GeneratedText>> steps = GenerationsByStep(output);
  ASSERT_EQ(steps.size(), 2u) << output;
  for (const int step : {2, 4}) {
    ASSERT_EQ(steps.count(step), 1u) << output;
    const std::vector<GeneratedText>& texts = steps.at(step);
    ASSERT_EQ(texts.size(), 2u) << step;
    EXPECT_EQ(texts[0].prompt(), "ROMEO:");
    EXPECT_EQ(texts[0].prompt_tokens(), 6) << "no merge applies to ROMEO:";
    EXPECT_EQ(texts[0].tokens_size(), 12) << texts[0].ShortDebugString();
    EXPECT_FALSE(texts[0].text().empty());
    EXPECT_GT(texts[0].tokens_per_second(), 0);
    EXPECT_EQ(texts[1].prompt(), "The king");
    EXPECT_EQ(texts[1].prompt_tokens(), 6) << "\"he\" and \"in\" merged";
    EXPECT_GE(texts[1].tokens_size(), 1);
    EXPECT_LE(texts[1].tokens_size(), 10);
  }
  const GeneratedText& greedy_4 = steps.at(4)[0];
  const GeneratedText& sampled_4 = steps.at(4)[1];
  std::printf("step 4: \"ROMEO:%s\" (%.0f tokens/s), \"The king%s\"\n", greedy_4.text().c_str(),
              greedy_4.tokens_per_second(), sampled_4.text().c_str());

  // `trainctl evals`: four lines, from the job's "generation" events.
  auto [evals_code, evals] = Trainctl({"evals", "job-1", "--json"});
  ASSERT_EQ(evals_code, 0) << evals;
  EXPECT_EQ(std::count(evals.begin(), evals.end(), '\n'), 4) << evals;
  EXPECT_THAT(evals, HasSubstr(R"({"step":4,"kind":"generation","result":{"prompt":"ROMEO:")"));
  // `trainctl status`: the last step's texts, quoted on one line each.
  auto [status_code, status] = Trainctl({"status", "job-1"});
  ASSERT_EQ(status_code, 0) << status;
  EXPECT_THAT(status, HasSubstr("generation  step 4: \"ROMEO:\" -> \""));
  EXPECT_THAT(status, HasSubstr("generation  step 4: \"The king\" -> \""));

  // Prometheus: each prompt's speed at the last checkpoint step.
  absl::StatusOr<HttpResponse> scrape = HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_THAT(scrape->body,
              HasSubstr(R"(mtrain_job_generation_tokens_per_second{job="job-1",prompt="0"} )"));
  EXPECT_THAT(scrape->body,
              HasSubstr(R"(mtrain_job_generation_tokens_per_second{job="job-1",prompt="1"} )"));
  std::string lint;
  EXPECT_EQ(RunPromtool(scrape->body, &lint), 0) << lint;

  // `trainctl generate` with checkpoint 4 on the cluster: the same tokens as step 4's own
  // generation, greedy and sampled alike (sampling is a pure function of the seed).
  auto [greedy_code, greedy] = Trainctl(
      {"generate", "job-1", "--prompt=ROMEO:", "--max_new_tokens=12", "--step=4", "--json"},
      absl::Minutes(3));
  ASSERT_EQ(greedy_code, 0) << greedy;
  const GeneratedText again = ParseGenerated(greedy.substr(greedy.find("{\"prompt\"")));
  EXPECT_THAT(again.tokens(), ElementsAreArray(greedy_4.tokens()));
  EXPECT_EQ(again.text(), greedy_4.text());
  auto [sampled_code, sampled] =
      Trainctl({"generate", "job-1", "--prompt=The king", "--max_new_tokens=10",
                "--temperature=0.9", "--top_k=20", "--top_p=0.95", "--sample_seed=7"},
               absl::Minutes(3));
  ASSERT_EQ(sampled_code, 0) << sampled;
  // Plain output: the prompt and its continuation, then the figures.
  EXPECT_THAT(sampled, HasSubstr(absl::StrCat("The king", sampled_4.text(), "\n"))) << sampled;
  EXPECT_THAT(sampled, HasSubstr("trainctl generate: job-1 step 4: ")) << sampled;
  // `trainctl status` adds the last run's text.
  auto [after_code, after] = Trainctl({"status", "job-1"});
  ASSERT_EQ(after_code, 0) << after;
  EXPECT_THAT(after, HasSubstr("generation  step 4, by trainctl: \"The king\" -> \""));
  EXPECT_THAT(after, HasSubstr("generation  step 4: \"ROMEO:\" -> \"")) << after;
  // Both runs are listed with the job's own.
  auto [listed_code, listed] = Trainctl({"evals", "job-1"});
  ASSERT_EQ(listed_code, 0) << listed;
  EXPECT_EQ(std::count(listed.begin(), listed.end(), '\n'), 6) << listed;

  // One `train` process (no tensor parallelism) from the exported checkpoint continues
  // the prompt with the same tokens.
  const std::string exported = Path("exported");
  auto [export_code, export_output] = Trainctl({"export", "job-1", exported});
  ASSERT_EQ(export_code, 0) << export_output;
  const std::string single = Path("single.json");
  std::ofstream(single) << absl::StrCat(R"({"name": "single", )", model, ", ", data,
                                        R"(, "train": {"init_from": ")", exported,
                                        R"("}, "device": "DEVICE_CPU"})");
  const std::string result = Path("single.result.json");
  auto train =
      ChildProcess::Start({"worker/launch", "--spec=" + single, "--out_dir=" + Path("single"), "--",
                           "--data_root=" + std::filesystem::path(tokenizer).parent_path().string(),
                           "--generate=ROMEO:", "--max_new_tokens=12", "--eval_output=" + result},
                          Path("single.log"));
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<int> train_code = (*train)->Wait(absl::Minutes(2));
  ASSERT_TRUE(train_code.ok() && *train_code == 0) << (*train)->Log();
  std::ifstream in(result);
  const std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const GeneratedText alone = ParseGenerated(line);
  EXPECT_THAT(alone.tokens(), ElementsAreArray(greedy_4.tokens())) << line;
  EXPECT_EQ(alone.text(), greedy_4.text());

  // A prompt that leaves no room in the context fails, saying why.
  auto [long_code, long_output] =
      Trainctl({"generate", "job-1", "--prompt=" + std::string(40, 'z')}, absl::Minutes(3));
  EXPECT_NE(long_code, 0);
  EXPECT_THAT(long_output, HasSubstr("train.generate: the prompt is 40 tokens; model.seq_length "
                                     "32 leaves no room to generate"))
      << long_output;
  // A flag outside the rules is refused before anything runs.
  auto [bad_code, bad] = Trainctl({"generate", "job-1", "--prompt=a", "--top_p=0"});
  EXPECT_NE(bad_code, 0);
  EXPECT_THAT(bad, HasSubstr("top_p 0 [rule: in (0, 1]]")) << bad;
}

}  // namespace
}  // namespace mtrain
