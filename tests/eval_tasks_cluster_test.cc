// train.eval_tasks under a coordinator (issue 20): a job on two CPU workers (pipeline 2)
// with a perplexity and a choice task evaluated at each checkpoint step (3 and 6). Checks
// that every checkpoint step's metrics line carries both results, that `trainctl evals`
// lists them from the job's stored events (text and --json), that Prometheus exports the
// last ones as mtrain_job_eval{task,data,metric}, and that the perplexity falls as the
// model trains; then `trainctl eval` evaluates a stored checkpoint on the cluster (the same
// result as the step's own task, listed by `trainctl evals`), `trainctl status` shows the
// last results, and eval refuses a job without checkpoints.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

google::protobuf::Struct ParseJson(absl::string_view text) {
  google::protobuf::Struct object;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(
                  google::protobuf::StringPiece(text.data(), text.size()), &object)
                  .ok())
      << text;
  return object;
}

class EvalTasksClusterTest : public ClusterTest {};

TEST_F(EvalTasksClusterTest, CheckpointStepsCarryTheTasksResultsToEventsAndPrometheus) {
  const std::string tasks = std::filesystem::absolute("tests/evaluation").string();
  // The task files lie outside the shipped corpus's directory: the workers' data roots
  // must name them (where they resolve to: runfiles are links into the source tree).
  worker_flags_ = {"--data_root=" +
                   std::filesystem::canonical("tests/evaluation/text.txt").parent_path().string() +
                   "," +
                   std::filesystem::canonical("tests/data/shakespeare.txt").parent_path().string()};
  StartCoordinator();
  StartWorkers(2);
  const std::string spec =
      WriteSpec("job.json", absl::StrCat(R"({"name": "evals",
      "model": {"num_layers": 2, "num_heads": 4, "hidden_size": 64, "seq_length": 32},
      "parallel": {"pipeline": 2, "micro_batch_size": 2, "global_batch_size": 4},
      "optimizer": {"lr": 3e-3, "warmup_steps": 1},
      "train": {"steps": 6, "dropout": 0.0, "checkpoint_every": 3, "eval_tasks": [
        {"task": "perplexity", "data": ")",
                                         tasks, R"(/text.txt", "overlapping_eval": 16},
        {"task": "choice", "data": ")",
                                         tasks, R"(/choice.jsonl"}]},
      "device": "DEVICE_CPU"})"));
  auto [code, output] = Trainctl({"submit", "--wait", "--json", spec}, absl::Minutes(3));
  ASSERT_EQ(code, 0) << output;

  // The metrics lines of steps 3 and 6 carry both results; the others none.
  std::map<int, google::protobuf::Struct> lines;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, "{\"step\"")) continue;
    const google::protobuf::Struct object = ParseJson(line);
    lines[static_cast<int>(object.fields().at("step").number_value())] = object;
  }
  ASSERT_EQ(lines.size(), 6u) << output;
  for (const auto& [step, object] : lines) {
    const bool evaluated = step == 3 || step == 6;
    ASSERT_EQ(object.fields().count("evals"), evaluated ? 1u : 0u) << "step " << step;
    if (evaluated) {
      EXPECT_EQ(object.fields().at("evals").list_value().values_size(), 2) << step;
    }
  }
  const auto result = [&](int step, int task) {
    return lines[step].fields().at("evals").list_value().values(task).struct_value();
  };
  const double perplexity_3 = result(3, 0).fields().at("perplexity").number_value();
  const double perplexity_6 = result(6, 0).fields().at("perplexity").number_value();
  EXPECT_LT(perplexity_6, perplexity_3) << "training lowers the perplexity";
  EXPECT_EQ(result(6, 1).fields().at("task").string_value(), "choice");
  EXPECT_EQ(result(6, 1).fields().at("examples").number_value(), 8);

  // `trainctl evals`: four lines from the job's events, text and JSON.
  auto [evals_code, evals] = Trainctl({"evals", "job-1"});
  ASSERT_EQ(evals_code, 0) << evals;
  EXPECT_THAT(evals, HasSubstr("step 3: {\"task\":\"perplexity\""));
  EXPECT_THAT(evals, HasSubstr("step 6: {\"task\":\"choice\""));
  auto [json_code, json] = Trainctl({"evals", "job-1", "--json"});
  ASSERT_EQ(json_code, 0) << json;
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(json, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "{")) continue;
    const google::protobuf::Struct row = ParseJson(line);
    EXPECT_EQ(row.fields().count("result"), 1u) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 4) << json;

  // Prometheus: the last checkpoint step's results.
  absl::StatusOr<HttpResponse> scrape = HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::string series =
      R"(mtrain_job_eval{data="text.txt",job="job-1",metric="perplexity",task="perplexity"} )";
  const size_t at = scrape->body.find(series);
  ASSERT_NE(at, std::string::npos) << scrape->body;
  double gauge = 0;
  const size_t begin = at + series.size();
  ASSERT_TRUE(
      absl::SimpleAtod(scrape->body.substr(begin, scrape->body.find('\n', begin) - begin), &gauge));
  EXPECT_NEAR(gauge, perplexity_6, 1e-6 * perplexity_6);
  EXPECT_THAT(
      scrape->body,
      HasSubstr(R"(mtrain_job_eval{data="choice.jsonl",job="job-1",metric="accuracy_norm")"));
  std::string lint;
  EXPECT_EQ(RunPromtool(scrape->body, &lint), 0) << lint;

  // `trainctl eval` on the cluster: checkpoint 6's weights evaluated again by an
  // evaluation job under the same layout give the same result as the step's own task.
  auto [eval_code, eval_output] =
      Trainctl({"eval", "job-1", "--task=choice", "--data=" + tasks + "/choice.jsonl", "--step=6"},
               absl::Minutes(3));
  ASSERT_EQ(eval_code, 0) << eval_output;
  const size_t prefix = eval_output.find("job-1 step 6: {");
  ASSERT_NE(prefix, std::string::npos) << eval_output;
  const std::string result_json =
      eval_output.substr(prefix + 14, eval_output.find('\n', prefix) - prefix - 14);
  const google::protobuf::Struct again = ParseJson(result_json);
  for (const char* key : {"loss", "accuracy", "accuracy_norm", "examples"}) {
    EXPECT_NEAR(again.fields().at(key).number_value(), result(6, 1).fields().at(key).number_value(),
                1e-7)
        << key;
  }
  // It is listed with the job's own results.
  auto [listed_code, listed] = Trainctl({"evals", "job-1"});
  ASSERT_EQ(listed_code, 0) << listed;
  EXPECT_EQ(std::count(listed.begin(), listed.end(), '\n'), 5) << listed;

  // `trainctl status` shows the last evaluated step's results.
  auto [status_code, status] = Trainctl({"status", "job-1"});
  ASSERT_EQ(status_code, 0) << status;
  EXPECT_THAT(status, HasSubstr("evaluation  step 6: {\"task\":\"perplexity\""));
  EXPECT_THAT(status, HasSubstr("evaluation  step 6: {\"task\":\"choice\""));
  // And the last `trainctl eval` run's.
  EXPECT_THAT(status, HasSubstr("evaluation  step 6, by trainctl: {\"task\":\"choice\""));

  // A job without checkpoints says so.
  const std::string running = Submit(WriteSpec("long.json", R"({"model": {"num_layers": 2,
      "num_heads": 2, "hidden_size": 32, "seq_length": 16}, "train": {"steps": 100000},
      "device": "DEVICE_CPU"})"));
  auto [none_code, none] =
      Trainctl({"eval", running, "--task=cloze", "--data=" + tasks + "/cloze.jsonl"});
  EXPECT_NE(none_code, 0);
  EXPECT_THAT(none, HasSubstr(running + " has no checkpoint yet")) << none;
  Trainctl({"cancel", running});
}

}  // namespace
}  // namespace mtrain
