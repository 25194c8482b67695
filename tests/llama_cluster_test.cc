// A Llama-style decoder trained through the coordinator (issue 33): the shipped demo spec
// deploy/local/llama_job.json (grouped-query heads, tensor 2 x pipeline 2 on four CPU
// workers), cut to a few steps, trains and learns; `trainctl export` writes a HuggingFace
// directory that the engine imports again, and that transformers' LlamaForCausalLM loads
// without a warning and scores exactly as the engine does (tests/parity/llama/
// check_export.py; skipped with a message where transformers is not installed).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/hf_import.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "spec/job_spec_validation.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The "loss" of each metrics line trainctl --json printed, in step order.
std::vector<double> PrintedLosses(const std::string& output) {
  std::vector<double> losses;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, "{\"step\"")) continue;
    const size_t at = line.find("\"loss\":");
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + 7);
    double loss = 0;
    if (absl::SimpleAtod(rest.substr(0, rest.find_first_of(",}")), &loss)) losses.push_back(loss);
  }
  return losses;
}

class LlamaClusterTest : public ClusterTest {};

TEST_F(LlamaClusterTest, TheDemoSpecTrainsAndItsExportLoadsInTransformers) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile("deploy/local/llama_job.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->model().family(), MODEL_FAMILY_LLAMA);
  spec->mutable_train()->set_steps(12);
  spec->mutable_train()->set_checkpoint_every(12);
  spec->mutable_train()->set_eval_interval(0);
  spec->mutable_train()->clear_eval_tasks();
  spec->mutable_train()->clear_generate();
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*spec, &json).ok());
  const std::string spec_path = WriteSpec("llama.json", json);

  StartCoordinator();
  StartWorkers(4);
  auto [code, output] = Trainctl({"submit", "--wait", "--json", spec_path}, absl::Minutes(5));
  ASSERT_EQ(code, 0) << output;
  const std::vector<double> losses = PrintedLosses(output);
  ASSERT_GE(losses.size(), 12u) << output;
  std::printf("llama demo spec: loss %.4f at step 1, %.4f at step 12\n", losses.front(),
              losses.back());
  EXPECT_LT(losses.back(), losses.front() - 0.5) << output;

  const std::string exported = Path("exported");
  auto [export_code, export_output] = Trainctl({"export", "job-1", exported});
  ASSERT_EQ(export_code, 0) << export_output;
  EXPECT_THAT(ReadFile(exported + "/config.json"), HasSubstr(R"("model_type": "llama")"));
  // The engine reads its own export back under the same spec (config.json checked).
  absl::StatusOr<std::map<std::string, FullTensor>> back =
      ImportHuggingFace(exported, spec->model());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->count("lm_head"), 1u);
  EXPECT_EQ(back->count("layers.3.attn.k.weight"), 1u);

  // The engine's loss of the exported weights on the evaluation text ...
  const std::string eval_spec = Path("eval.json");
  JobSpec single = *spec;
  single.mutable_parallel()->set_tensor(1);
  single.mutable_parallel()->set_pipeline(1);
  single.mutable_train()->set_init_from(exported);
  json.clear();  // MessageToJsonString appends
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(single, &json).ok());
  std::ofstream(eval_spec) << json;
  const std::string result = Path("eval.result.json");
  auto train =
      ChildProcess::Start({"worker/launch", "--spec=" + eval_spec, "--out_dir=" + Path("eval"),
                           "--", "--evaluate=perplexity", "--eval_data=tests/data/eval_text.txt",
                           "--overlapping_eval=8", "--eval_output=" + result},
                          Path("eval.log"));
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<int> train_code = (*train)->Wait(absl::Minutes(3));
  ASSERT_TRUE(train_code.ok() && *train_code == 0) << (*train)->Log();
  google::protobuf::Struct ours;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ReadFile(result), &ours).ok());
  const double engine_loss = ours.fields().at("loss").number_value();

  // ... and transformers' of the same directory.
  auto check = ChildProcess::Start({"/usr/bin/env", "python3", "tests/parity/llama/check_export.py",
                                    exported, "tests/data/eval_text.txt"},
                                   Path("check.log"));
  ASSERT_TRUE(check.ok()) << check.status();
  absl::StatusOr<int> check_code = (*check)->Wait(absl::Minutes(3));
  ASSERT_TRUE(check_code.ok()) << check_code.status();
  if (*check_code == 3) {
    GTEST_SKIP() << "transformers is not installed (pip install transformers torch): the "
                    "export was not loaded in transformers";
  }
  ASSERT_EQ(*check_code, 0) << (*check)->Log();
  const std::string log = (*check)->Log();
  google::protobuf::Struct theirs;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(log.substr(log.rfind("{\"loss\"")), &theirs).ok())
      << log;
  const double transformers_loss = theirs.fields().at("loss").number_value();
  std::printf("exported weights: engine loss %.9f, transformers %.9f\n", engine_loss,
              transformers_loss);
  EXPECT_NEAR(engine_loss, transformers_loss, 1e-5 * transformers_loss);
  EXPECT_EQ(ours.fields().at("scored_tokens").number_value(),
            theirs.fields().at("scored_tokens").number_value());
  EXPECT_EQ(theirs.fields().at("warnings").list_value().values_size(), 0) << log;
}

}  // namespace
}  // namespace mtrain
