// BERT through the coordinator (issue 35): the demo spec deploy/local/bert_job.json (the
// shipped corpus made into a sentence dataset by the ranks, the shipped WordPiece
// vocabulary, tensor 2 x pipeline 2), cut to a few steps, submitted with trainctl to four CPU
// workers; it learns, its validation masked-LM and sentence-order accuracies reach trainctl's
// step lines and Prometheus (promtool-clean), and `trainctl export` writes a
// MegatronBertForPreTraining directory that the engine imports again.
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

}  // namespace
}  // namespace mtrain
