// BERT through the coordinator (issue 35): the demo spec deploy/local/bert_job.json (the
// shipped corpus made into a sentence dataset by the ranks, the shipped WordPiece
// vocabulary, tensor 2 x pipeline 2), cut to a few steps, submitted with trainctl to four CPU
// workers; it learns, its validation masked-LM and sentence-order accuracies reach trainctl's
// step lines and Prometheus (promtool-clean), and `trainctl export` writes a
// MegatronBertForPreTraining directory that the engine imports again. And RACE fine-tuning:
// deploy/local/race_job.json (the multiple-choice head on the shipped RACE-format file) in
// the same layout, its accuracies shown, and `trainctl eval --task race` on the held-out file
// giving what transformers computes with the exported MegatronBertForMultipleChoice.
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "checkpoint/hf_import.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "spec/job_spec_validation.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/metrics_scrape.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The step lines trainctl --json printed.
std::vector<google::protobuf::Struct> StepLines(const std::string& output) {
  std::vector<google::protobuf::Struct> lines;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, "{\"step\"")) continue;
    google::protobuf::Struct parsed;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &parsed).ok())
        << line;
    lines.push_back(parsed);
  }
  return lines;
}

// The last one-line JSON object in `text` that starts with `start` (a log may hold progress
// bars after it on the same line).
google::protobuf::Struct JsonObjectAt(const std::string& text, const std::string& start) {
  google::protobuf::Struct parsed;
  const size_t at = text.rfind(start);
  EXPECT_NE(at, std::string::npos) << text;
  if (at == std::string::npos) return parsed;
  const std::string object = text.substr(at, text.find('}', at) - at + 1);
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(object, &parsed).ok()) << object;
  return parsed;
}

double Field(const google::protobuf::Struct& line, const std::string& key) {
  const auto it = line.fields().find(key);
  return it == line.fields().end() ? NAN : it->second.number_value();
}

class BertClusterTest : public ClusterTest {};

TEST_F(BertClusterTest, TheDemoSpecTrainsInTwoByTwoWithValidationAccuracyShown) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile("deploy/local/bert_job.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->model().family(), MODEL_FAMILY_BERT);
  ASSERT_EQ(spec->parallel().tensor(), 2);
  ASSERT_EQ(spec->parallel().pipeline(), 2);
  spec->mutable_train()->set_steps(16);
  spec->mutable_train()->set_checkpoint_every(16);
  spec->mutable_train()->set_eval_interval(8);
  spec->mutable_train()->set_eval_iters(2);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*spec, &json).ok());
  const std::string spec_path = WriteSpec("bert.json", json);

  StartCoordinator();
  StartWorkers(4);
  auto [code, output] = Trainctl({"submit", "--wait", "--json", spec_path}, absl::Minutes(6));
  ASSERT_EQ(code, 0) << output;
  const std::vector<google::protobuf::Struct> lines = StepLines(output);
  ASSERT_GE(lines.size(), 16u) << output;
  std::vector<double> losses;
  int evaluations = 0;
  for (const google::protobuf::Struct& line : lines) {
    if (!std::isnan(Field(line, "loss"))) losses.push_back(Field(line, "loss"));
    if (line.fields().count("validation_mlm_accuracy") == 0) continue;
    ++evaluations;
    const double mlm = Field(line, "validation_mlm_accuracy");
    const double sop = Field(line, "validation_sop_accuracy");
    EXPECT_GE(mlm, 0.0);
    EXPECT_LE(mlm, 1.0);
    EXPECT_GE(sop, 0.0);
    EXPECT_LE(sop, 1.0);
    // The validation loss is its two parts' sum (each printed to 9 significant digits).
    EXPECT_NEAR(Field(line, "validation_loss"),
                Field(line, "validation_mlm_loss") + Field(line, "validation_sop_loss"), 1e-7);
    std::printf("step %.0f: validation masked-LM accuracy %.4f, sentence order %.4f\n",
                Field(line, "step"), mlm, sop);
  }
  EXPECT_EQ(evaluations, 2) << output;
  ASSERT_GE(losses.size(), 16u);
  std::printf("bert demo spec: loss %.4f at step 1, %.4f at step 16\n", losses.front(),
              losses.back());
  EXPECT_LT(losses.back(), losses.front() - 0.5) << output;

  // Prometheus: the last evaluation's accuracies, one series per head.
  absl::StatusOr<HttpResponse> scrape = HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_THAT(scrape->body,
              HasSubstr(R"(mtrain_job_validation_accuracy{head="masked_lm",job="job-1"} )"));
  EXPECT_THAT(scrape->body,
              HasSubstr(R"(mtrain_job_validation_accuracy{head="sentence_order",job="job-1"} )"));
  std::string lint;
  EXPECT_EQ(RunPromtool(scrape->body, &lint), 0) << lint;

  // The export is MegatronBertForPreTraining's, and reads back under the same spec.
  const std::string exported = Path("exported");
  auto [export_code, export_output] = Trainctl({"export", "job-1", exported});
  ASSERT_EQ(export_code, 0) << export_output;
  EXPECT_THAT(ReadFile(exported + "/config.json"), HasSubstr(R"("model_type": "megatron-bert")"));
  absl::StatusOr<std::map<std::string, FullTensor>> back =
      ImportHuggingFace(exported, spec->model());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->count("sop.weight"), 1u);
  EXPECT_EQ(back->count("layers.3.attn.k.bias"), 1u);
}

TEST_F(BertClusterTest, RaceFineTuningShowsAccuracyAndTrainctlEvalMatchesTransformers) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile("deploy/local/race_job.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->model().bert_head(), BERT_HEAD_MULTIPLE_CHOICE);
  ASSERT_EQ(spec->parallel().tensor(), 2);
  ASSERT_EQ(spec->parallel().pipeline(), 2);
  spec->mutable_train()->set_steps(6);
  spec->mutable_train()->set_checkpoint_every(6);
  spec->mutable_train()->set_eval_interval(3);
  spec->mutable_train()->set_eval_iters(1);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*spec, &json).ok());
  const std::string spec_path = WriteSpec("race.json", json);

  StartCoordinator();
  StartWorkers(4);
  auto [code, output] = Trainctl({"submit", "--wait", "--json", spec_path}, absl::Minutes(6));
  ASSERT_EQ(code, 0) << output;
  int trained = 0, evaluations = 0;
  for (const google::protobuf::Struct& line : StepLines(output)) {
    if (line.fields().count("choice_accuracy") > 0) {
      ++trained;
      // A quarter of a question at a time: 4 questions a step.
      const double right = Field(line, "choice_accuracy") * 4;
      EXPECT_NEAR(right, std::round(right), 1e-9);
      EXPECT_GT(Field(line, "loss"), 0.0);
    }
    if (line.fields().count("validation_choice_accuracy") == 0) continue;
    ++evaluations;
    EXPECT_GE(Field(line, "validation_choice_accuracy"), 0.0);
    EXPECT_LE(Field(line, "validation_choice_accuracy"), 1.0);
    EXPECT_GT(Field(line, "validation_loss"), 0.0);
  }
  EXPECT_EQ(trained, 6) << output;
  EXPECT_EQ(evaluations, 2) << output;
  absl::StatusOr<HttpResponse> scrape = HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_THAT(scrape->body,
              HasSubstr(R"(mtrain_job_validation_accuracy{head="multiple_choice",job="job-1"} )"));
  std::string lint;
  EXPECT_EQ(RunPromtool(scrape->body, &lint), 0) << lint;

  // trainctl eval on the held-out file: its questions, loss and accuracy.
  auto [eval_code, eval_output] =
      Trainctl({"eval", "job-1", "--task=race", "--data=tests/data/race_small_dev.jsonl", "--json"},
               absl::Minutes(4));
  ASSERT_EQ(eval_code, 0) << eval_output;
  const google::protobuf::Struct result = JsonObjectAt(eval_output, "{\"task\"");
  EXPECT_EQ(Field(result, "examples"), 120);
  std::printf("trainctl eval --task race: %d questions, loss %.9f, accuracy %.4f\n",
              static_cast<int>(Field(result, "examples")), Field(result, "loss"),
              Field(result, "accuracy"));

  // The export is MegatronBertForMultipleChoice's; transformers, with sequences and
  // WordPiece ids built by the reference script itself, computes the same loss and accuracy.
  const std::string exported = Path("exported-race");
  auto [export_code, export_output] = Trainctl({"export", "job-1", exported});
  ASSERT_EQ(export_code, 0) << export_output;
  EXPECT_THAT(ReadFile(exported + "/config.json"), HasSubstr("MegatronBertForMultipleChoice"));
  auto reference =
      ChildProcess::Start({"/usr/bin/env", "python3", "tests/parity/bert/bert_reference.py",
                           "race_eval", exported, "tests/data/race_small_dev.jsonl",
                           "tests/data/bert_vocab.txt", std::to_string(spec->model().seq_length())},
                          Path("race_reference.log"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<int> reference_code = (*reference)->Wait(absl::Minutes(3));
  ASSERT_TRUE(reference_code.ok()) << reference_code.status();
  if (*reference_code == 3) {
    GTEST_SKIP() << "torch or transformers is not installed (`make deps` installs them): the "
                    "race evaluation was not compared with transformers";
  }
  ASSERT_EQ(*reference_code, 0) << (*reference)->Log();
  const google::protobuf::Struct want = JsonObjectAt((*reference)->Log(), "{\"questions\"");
  EXPECT_EQ(Field(want, "questions"), Field(result, "examples"));
  EXPECT_NEAR(Field(result, "loss"), Field(want, "loss"), 1e-5 * Field(want, "loss"));
  // Equal, but for the questions whose scores tie within float32's rounding.
  EXPECT_NEAR(Field(result, "accuracy"), Field(want, "accuracy"),
              Field(want, "near_ties") / Field(want, "questions") + 1e-9);
  std::printf("transformers on the export: loss %.9f, accuracy %.4f (%.0f near ties)\n",
              Field(want, "loss"), Field(want, "accuracy"), Field(want, "near_ties"));
}

}  // namespace
}  // namespace mtrain
