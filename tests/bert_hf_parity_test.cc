// BERT against transformers (issue 35), end to end: two small BERTs that transformers made
// in this test (tests/parity/bert/bert_reference.py: MegatronBertForPreTraining for the pre
// placement, BertForPreTraining for the post one), imported by real `train` processes under
// `launch` (train.init_from), train one step on the first global batch of the shipped corpus
// as a sentence dataset (made by the real `preprocess`). Under (1,1,1), (2,1,1), (1,2,1),
// (2,2,1) and (1,1,2) (and the multiple-choice head against BertForMultipleChoice and
// MegatronBertForMultipleChoice on RACE's format, tests at the end):
//   - the loss step 1 reports (masked-LM mean plus sentence-order mean, of the imported
//     weights) equals transformers' on the same samples to 1e-5 relative;
//   - so does the gradient norm of that loss over every parameter (1e-4), which checks the
//     backward of every tensor at once (worker/engine/cpu/bert_model_test checks each one
//     against finite differences);
// and the import exported again (ExportHuggingFace) holds the same tensors, bit for bit
// (the positions up to model.seq_length), with a config.json that transformers loads without a
// missing or unexpected tensor and that computes the same loss. Skipped with a message where torch
// or transformers is not installed (`make deps` installs them).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_interchange.h"
#include "checkpoint/safetensors.h"
#include "data/bert_split_samples.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "spec/job_spec_validation.h"
#include "tests/child_process.h"
#include "tests/metrics_jsonl.h"

namespace mtrain {
namespace {

using google::protobuf::Struct;

constexpr int kGlobalBatch = 4;
constexpr int kChoiceGlobalBatch = 8;  // two questions of four options

std::string Path(const std::string& name) { return absl::StrCat(TestTempDir(), "/", name); }

// Runs the reference script; its exit status (3: torch or transformers missing) and log.
std::pair<int, std::string> RunReference(const std::vector<std::string>& args,
                                         const std::string& log) {
  std::vector<std::string> argv = {"/usr/bin/env", "python3",
                                   "tests/parity/bert/bert_reference.py"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto process = ChildProcess::Start(argv, log);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {-1, ""};
  absl::StatusOr<int> code = (*process)->Wait(absl::Minutes(3));
  EXPECT_TRUE(code.ok()) << code.status();
  return {code.ok() ? *code : -1, (*process)->Log()};
}

class BertHfParityTest : public ::testing::Test {
 protected:
  // The sentence dataset and the two transformers models, made once.
  static void SetUpTestSuite() {
    auto preprocess = ChildProcess::Start(
        {"data/preprocess", "--input=tests/data/shakespeare.txt", "--format=text",
         "--output_prefix=" + Path("corpus"), "--tokenizer_type=BertWordPieceLowerCase",
         "--vocab_file=tests/data/bert_vocab.txt", "--split_sentences", "--min_tokens=0"},
        Path("preprocess.log"));
    ASSERT_TRUE(preprocess.ok()) << preprocess.status();
    absl::StatusOr<int> code = (*preprocess)->Wait(absl::Minutes(2));
    ASSERT_TRUE(code.ok() && *code == 0) << (*preprocess)->Log();
    const auto [made, log] = RunReference({"make", Path("hf")}, Path("make.log"));
    transformers_missing_ = made == 3;
    ASSERT_TRUE(made == 0 || made == 3) << log;
  }

  void SetUp() override {
    if (transformers_missing_) {
      GTEST_SKIP() << "torch or transformers is not installed (pip install torch "
                      "transformers; `make deps` does): BERT was not compared with them";
    }
  }

  static std::string SpecJson(const std::string& placement, int t, int p, int d,
                              const std::string& init_from) {
    return absl::StrFormat(
        R"({"name": "bert-parity",
            "model": {"family": "MODEL_FAMILY_BERT", "num_layers": 2, "num_heads": 4,
                      "hidden_size": 64, "ffn_hidden_size": 96, "seq_length": 32,
                      "vocab_size": 2048, "layernorm_placement": "LAYERNORM_PLACEMENT_%s"},
            "parallel": {"tensor": %d, "pipeline": %d, "data": %d, "micro_batch_size": 2,
                         "global_batch_size": %d},
            "data": {"path": "%s", "format": "DATA_FORMAT_MMIDIDX",
                     "tokenizer": "TOKENIZER_WORDPIECE",
                     "vocab_file": "tests/data/bert_vocab.txt"},
            "train": {"steps": 1, "dropout": 0, "init_from": "%s"},
            "device": "DEVICE_CPU"})",
        placement, t, p, d, kGlobalBatch, Path("corpus_text_sentence"), init_from);
  }

  // The first global batch of the spec's train split, as the trainer draws it, written as
  // the reference script's JSON.
  static std::string WriteFirstBatch(const std::string& spec_json, const std::string& path) {
    absl::StatusOr<JobSpec> spec = ParseJobSpecJson(spec_json);
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<BertSplitSamples> samples = OpenBertSplitSamples(*spec);
    EXPECT_TRUE(samples.ok()) << samples.status();
    if (!samples.ok()) return path;
    std::vector<std::string> tokens, types, labels, lengths, orders;
    BertSample sample;
    for (int i = 0; i < kGlobalBatch; ++i) {
      EXPECT_TRUE(samples->train->Fill(i, &sample).ok());
      tokens.push_back(absl::StrCat("[", absl::StrJoin(sample.tokens, ","), "]"));
      types.push_back(absl::StrCat("[", absl::StrJoin(sample.token_types, ","), "]"));
      labels.push_back(absl::StrCat("[", absl::StrJoin(sample.labels, ","), "]"));
      lengths.push_back(absl::StrCat(sample.length));
      orders.push_back(sample.swapped ? "1" : "0");
    }
    auto list = [](const std::vector<std::string>& items) {
      return absl::StrCat("[", absl::StrJoin(items, ","), "]");
    };
    std::ofstream(path) << absl::StrCat(R"({"tokens": )", list(tokens), R"(, "token_types": )",
                                        list(types), R"(, "labels": )", list(labels),
                                        R"(, "lengths": )", list(lengths),
                                        R"(, "sentence_order": )", list(orders), "}");
    return path;
  }

  // The multiple-choice head on RACE's format: the shipped small file, questions of four
  // sequences (micro batch 4: one question; global batch 8).
  static std::string ChoiceSpecJson(const std::string& placement, int t, int p, int d,
                                    const std::string& init_from) {
    return absl::StrFormat(
        R"({"name": "bert-choice-parity",
            "model": {"family": "MODEL_FAMILY_BERT", "num_layers": 2, "num_heads": 4,
                      "hidden_size": 64, "ffn_hidden_size": 96, "seq_length": 64,
                      "vocab_size": 2048, "layernorm_placement": "LAYERNORM_PLACEMENT_%s",
                      "bert_head": "BERT_HEAD_MULTIPLE_CHOICE"},
            "parallel": {"tensor": %d, "pipeline": %d, "data": %d, "micro_batch_size": 4,
                         "global_batch_size": %d},
            "data": {"path": "tests/data/race_small.jsonl", "format": "DATA_FORMAT_RACE",
                     "tokenizer": "TOKENIZER_WORDPIECE",
                     "vocab_file": "tests/data/bert_vocab.txt"},
            "train": {"steps": 1, "dropout": 0, "init_from": "%s"},
            "device": "DEVICE_CPU"})",
        placement, t, p, d, kChoiceGlobalBatch, init_from);
  }

  // The first global batch of the RACE job, as the trainer draws it.
  static std::string WriteFirstChoiceBatch(const std::string& spec_json, const std::string& path) {
    absl::StatusOr<JobSpec> spec = ParseJobSpecJson(spec_json);
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<BertSplitSamples> samples = OpenBertSplitSamples(*spec);
    EXPECT_TRUE(samples.ok()) << samples.status();
    if (!samples.ok()) return path;
    std::vector<std::string> tokens, types, lengths, answers;
    BertSample sample;
    for (int i = 0; i < kChoiceGlobalBatch; ++i) {
      EXPECT_TRUE(samples->train->Fill(i, &sample).ok());
      tokens.push_back(absl::StrCat("[", absl::StrJoin(sample.tokens, ","), "]"));
      types.push_back(absl::StrCat("[", absl::StrJoin(sample.token_types, ","), "]"));
      lengths.push_back(absl::StrCat(sample.length));
      if (i % 4 == 0) answers.push_back(absl::StrCat(sample.answer));
    }
    auto list = [](const std::vector<std::string>& items) {
      return absl::StrCat("[", absl::StrJoin(items, ","), "]");
    };
    std::ofstream(path) << absl::StrCat(R"({"tokens": )", list(tokens), R"(, "token_types": )",
                                        list(types), R"(, "lengths": )", list(lengths),
                                        R"(, "answers": )", list(answers), "}");
    return path;
  }

  // Runs `launch` on `spec_json`; the metrics line of the rank that computes the loss.
  static MetricsLine LaunchOneStep(const std::string& name, const std::string& spec_json,
                                   int world) {
    const std::string dir = Path(name);
    std::ofstream(dir + ".json") << spec_json;
    auto launch = ChildProcess::Start(
        {"worker/launch", "--spec=" + dir + ".json", "--out_dir=" + dir, "--threads_per_rank=1"},
        dir + ".log");
    EXPECT_TRUE(launch.ok()) << launch.status();
    if (!launch.ok()) return {};
    absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(3));
    EXPECT_TRUE(code.ok() && *code == 0) << name << ":\n" << (*launch)->Log();
    absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(dir + "/metrics.jsonl");
    EXPECT_TRUE(lines.ok()) << lines.status();
    if (!lines.ok()) return {};
    for (const MetricsLine& line : *lines) {
      // The last rank is on the last stage: it computes the loss.
      if (line.count("rank") > 0 && line.at("rank") == world - 1 && line.count("loss") > 0) {
        return line;
      }
    }
    ADD_FAILURE() << name << ": no loss from rank " << world - 1;
    return {};
  }

  // transformers' loss, its parts and the gradient norm for `model_dir` on `batch`.
  static Struct ReferenceOf(const std::string& model_dir, const std::string& batch,
                            const std::string& log, const std::string& mode = "loss") {
    const auto [code, output] = RunReference({mode, model_dir, batch}, log);
    EXPECT_EQ(code, 0) << output;
    Struct result;
    const std::string last_line = output.substr(output.rfind('{'));
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(last_line, &result).ok()) << output;
    return result;
  }

  static double Number(const Struct& s, const std::string& key) {
    const auto it = s.fields().find(key);
    EXPECT_NE(it, s.fields().end()) << key;
    return it == s.fields().end() ? NAN : it->second.number_value();
  }

  static bool transformers_missing_;
};

bool BertHfParityTest::transformers_missing_ = false;

TEST_F(BertHfParityTest, ImportedWeightsGiveTransformersLossAndGradientNormUnderEveryLayout) {
  for (const char* placement : {"PRE", "POST"}) {
    const std::string model_dir = Path(placement[1] == 'R' ? "hf/pre" : "hf/post");
    const std::string batch = WriteFirstBatch(SpecJson(placement, 1, 1, 1, model_dir),
                                              Path(absl::StrCat("batch-", placement, ".json")));
    const Struct want = ReferenceOf(model_dir, batch, Path(absl::StrCat("ref-", placement)));
    const double loss = Number(want, "loss"), norm = Number(want, "grad_norm");
    for (const auto& [t, p, d] : std::vector<std::tuple<int, int, int>>{
             {1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 1}, {1, 1, 2}}) {
      const std::string name = absl::StrCat(placement, "-t", t, "p", p, "d", d);
      const std::string dir = Path(name);
      std::ofstream(dir + ".json") << SpecJson(placement, t, p, d, model_dir);
      auto launch = ChildProcess::Start(
          {"worker/launch", "--spec=" + dir + ".json", "--out_dir=" + dir, "--threads_per_rank=1"},
          dir + ".log");
      ASSERT_TRUE(launch.ok()) << launch.status();
      absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(3));
      ASSERT_TRUE(code.ok() && *code == 0) << name << ":\n" << (*launch)->Log();
      absl::StatusOr<std::vector<MetricsLine>> lines = ReadMetricsJsonl(dir + "/metrics.jsonl");
      ASSERT_TRUE(lines.ok()) << lines.status();
      // The last rank is on the last stage: it computes the loss.
      const int last = t * p * d - 1;
      bool found = false;
      for (const MetricsLine& line : *lines) {
        if (line.count("rank") == 0 || line.at("rank") != last || line.count("loss") == 0) {
          continue;
        }
        found = true;
        EXPECT_NEAR(line.at("loss"), loss, 1e-5 * loss) << name;
        EXPECT_NEAR(line.at("mlm_loss"), Number(want, "mlm_loss"), 1e-5 * loss) << name;
        EXPECT_NEAR(line.at("sop_loss"), Number(want, "sop_loss"), 1e-5 * loss) << name;
        EXPECT_NEAR(line.at("grad_norm"), norm, 1e-4 * norm) << name;
        std::printf("%s: loss %.9f (transformers %.9f), gradient norm %.7f (transformers %.7f)\n",
                    name.c_str(), line.at("loss"), loss, line.at("grad_norm"), norm);
      }
      EXPECT_TRUE(found) << name << ": no loss from rank " << last;
    }
  }
}

TEST_F(BertHfParityTest, ExportGivesBackTheTensorsAndTransformersLoadsIt) {
  for (const char* placement : {"PRE", "POST"}) {
    const std::string model_dir = Path(placement[1] == 'R' ? "hf/pre" : "hf/post");
    const std::string spec_json = SpecJson(placement, 1, 1, 1, model_dir);
    absl::StatusOr<JobSpec> spec = ParseJobSpecJson(spec_json);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<std::map<std::string, FullTensor>> ours =
        ImportHuggingFace(model_dir, spec->model());
    ASSERT_TRUE(ours.ok()) << ours.status();
    const std::string exported = Path(absl::StrCat("exported-", placement));
    const absl::Status exported_status = ExportHuggingFace(*ours, *spec, exported);
    ASSERT_TRUE(exported_status.ok()) << exported_status;
    absl::StatusOr<SafetensorsFile> original = ReadSafetensors(model_dir + "/model.safetensors");
    absl::StatusOr<SafetensorsFile> again = ReadSafetensors(exported + "/" + kHuggingFaceModelFile);
    ASSERT_TRUE(original.ok() && again.ok());
    ASSERT_EQ(again->tensors.size(), original->tensors.size());
    for (const auto& [name, tensor] : original->tensors) {
      ASSERT_EQ(again->tensors.count(name), 1u) << name << " not exported";
      absl::StatusOr<std::vector<float>> a = TensorAsFloats(tensor);
      absl::StatusOr<std::vector<float>> b = TensorAsFloats(again->tensors.at(name));
      ASSERT_TRUE(a.ok() && b.ok()) << name;
      std::vector<int64_t> shape = tensor.shape;
      if (name == "bert.embeddings.position_embeddings.weight") {
        // transformers' 40 positions; the job's model has seq_length 32 of them.
        shape[0] = 32;
        a->resize(32 * 64);
      }
      EXPECT_EQ(*a, *b) << name;
      EXPECT_EQ(again->tensors.at(name).shape, shape) << name;
    }
    // transformers loads the export (the script refuses missing or unexpected tensors) and
    // computes what it computes with the original.
    const std::string batch = WriteFirstBatch(spec_json, Path("batch-export.json"));
    const Struct want = ReferenceOf(model_dir, batch, Path("export-ref-original"));
    const Struct got = ReferenceOf(exported, batch, Path("export-ref-exported"));
    EXPECT_EQ(Number(got, "loss"), Number(want, "loss")) << placement;
    EXPECT_EQ(Number(got, "grad_norm"), Number(want, "grad_norm")) << placement;
  }
}

// The multiple-choice head (RACE fine-tuning): BertForMultipleChoice (post) and
// MegatronBertForMultipleChoice (pre) imported, one step on the RACE file's first global
// batch: the loss (the mean cross-entropy over its questions), the share right and the
// gradient norm equal transformers' under every layout; the export loads into transformers
// with no warning and computes the same.
TEST_F(BertHfParityTest, MultipleChoiceGivesTransformersLossUnderEveryLayoutAndExportsBack) {
  for (const char* placement : {"PRE", "POST"}) {
    const std::string model_dir = Path(placement[1] == 'R' ? "hf/pre-choice" : "hf/post-choice");
    const std::string spec_json = ChoiceSpecJson(placement, 1, 1, 1, model_dir);
    const std::string batch =
        WriteFirstChoiceBatch(spec_json, Path(absl::StrCat("choice-batch-", placement, ".json")));
    const Struct want =
        ReferenceOf(model_dir, batch, Path(absl::StrCat("choice-ref-", placement)), "choice_loss");
    const double loss = Number(want, "loss"), norm = Number(want, "grad_norm");
    for (const auto& [t, p, d] : std::vector<std::tuple<int, int, int>>{
             {1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 1}, {1, 1, 2}}) {
      const std::string name = absl::StrCat("choice-", placement, "-t", t, "p", p, "d", d);
      const MetricsLine line =
          LaunchOneStep(name, ChoiceSpecJson(placement, t, p, d, model_dir), t * p * d);
      if (line.count("loss") == 0) continue;
      EXPECT_NEAR(line.at("loss"), loss, 1e-5 * loss) << name;
      EXPECT_EQ(line.at("choice_accuracy"), Number(want, "accuracy")) << name;
      EXPECT_NEAR(line.at("grad_norm"), norm, 1e-4 * norm) << name;
      std::printf("%s: loss %.9f (transformers %.9f), gradient norm %.7f (transformers %.7f)\n",
                  name.c_str(), line.at("loss"), loss, line.at("grad_norm"), norm);
    }
    absl::StatusOr<JobSpec> spec = ParseJobSpecJson(spec_json);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<std::map<std::string, FullTensor>> ours =
        ImportHuggingFace(model_dir, spec->model());
    ASSERT_TRUE(ours.ok()) << ours.status();
    EXPECT_EQ(ours->count("choice.weight"), 1u);
    const std::string exported = Path(absl::StrCat("exported-choice-", placement));
    const absl::Status exported_status = ExportHuggingFace(*ours, *spec, exported);
    ASSERT_TRUE(exported_status.ok()) << exported_status;
    const Struct got = ReferenceOf(exported, batch, Path(absl::StrCat("choice-export-", placement)),
                                   "choice_loss");
    EXPECT_EQ(Number(got, "loss"), loss) << placement;
    EXPECT_EQ(Number(got, "grad_norm"), norm) << placement;
  }
}

// Fine-tuning starts from a pretrained BERT: its pretraining heads are left out, the
// classifier starts from the seeded initialisation, and the job trains from there.
TEST_F(BertHfParityTest, MultipleChoiceFineTunesFromAPretrainedBert) {
  const std::string pretrained = Path("hf/pre");
  // The pretrained model has 40 positions: a 32-token RACE job fits them.
  std::string spec_json = ChoiceSpecJson("PRE", 2, 1, 1, pretrained);
  const std::string positions = "\"seq_length\": 64";
  spec_json.replace(spec_json.find(positions), positions.size(), "\"seq_length\": 32");
  absl::StatusOr<JobSpec> spec = ParseJobSpecJson(spec_json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::map<std::string, FullTensor>> ours =
      ImportHuggingFace(pretrained, spec->model());
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_EQ(ours->count("choice.weight"), 0u) << "the pretrained file has no classifier";
  EXPECT_EQ(ours->count("pooler.weight"), 1u);
  for (const auto& [name, tensor] : *ours) {
    EXPECT_NE(name.rfind("mlm.", 0), 0u) << name;
    EXPECT_NE(name.rfind("sop.", 0), 0u) << name;
  }
  const MetricsLine line = LaunchOneStep("choice-from-pretrained", spec_json, 2);
  ASSERT_EQ(line.count("loss"), 1u);
  // A fresh classifier scores the options alike: about log 4.
  EXPECT_NEAR(line.at("loss"), std::log(4.0), 0.05);
}

}  // namespace
}  // namespace mtrain
