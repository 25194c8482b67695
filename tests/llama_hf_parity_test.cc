// Llama-style decoders against transformers (issue 33), end to end: two small
// LlamaForCausalLM models that transformers made and saved (tests/parity/llama/, written by
// llama_reference.py: grouped-query heads with an untied output layer; multi-head with
// attention biases, a tied output layer and sharded files) imported by real `train`
// processes under `launch` (train.init_from, each rank reading its slice):
//   - the loss of the imported weights (what step 1 reports) over tests/evaluation/text.txt
//     by `--evaluate=perplexity` equals transformers' to 1e-5 relative under (1,1,1),
//     (2,1,1), (1,2,1), (2,2,1) and (1,1,2);
//   - greedy generation with the key-value cache (key-value heads only) and without it
//     gives transformers' 26 tokens, under (1,1,1), (2,1,1) and (1,2,1).
#include <cmath>
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

const Struct& Reference() {
  static const Struct* reference =
      new Struct(ParseJson(ReadFile("tests/parity/llama/llama_reference.json")));
  return *reference;
}

// The spec fields of each model (its config.json's settings).
struct Model {
  std::string name;
  std::string model_fields;
};

const Model kModels[] = {
    {"gqa", R"("num_kv_heads": 2, "norm_epsilon": 1e-6)"},
    {"mha_tied_sharded", R"("num_kv_heads": 4, "norm_epsilon": 1e-5, "rope_theta": 500,
                           "linear_bias": true, "tie_word_embeddings": true)"},
};

// Runs `train` under `launch` with `flags`, the model imported from its fixture; the
// JSON result it wrote and the logs.
std::pair<Struct, std::string> RunTrain(const Model& model, const std::string& name, int t, int p,
                                        int d, std::vector<std::string> flags) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", model.name, "-", name);
  std::ofstream(dir + ".json") << absl::StrFormat(
      R"({"name": "llama", "model": {"family": "MODEL_FAMILY_LLAMA", "num_layers": 2,
            "num_heads": 4, "hidden_size": 64, "ffn_hidden_size": 96, "seq_length": 32,
            "vocab_size": 300, %s},
          "parallel": {"tensor": %d, "pipeline": %d, "data": %d, "micro_batch_size": 2,
                       "global_batch_size": %d},
          "train": {"init_from": "tests/parity/llama/%s"}, "device": "DEVICE_CPU"})",
      model.model_fields, t, p, d, 2 * d, model.name);
  const std::string output = dir + ".result.json";
  std::vector<std::string> argv = {"worker/launch",
                                   "--spec=" + dir + ".json",
                                   "--out_dir=" + dir,
                                   "--threads_per_rank=1",
                                   "--",
                                   "--eval_output=" + output};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto launch = ChildProcess::Start(argv, dir + ".log");
  if (!launch.ok()) return {Struct(), std::string(launch.status().message())};
  absl::StatusOr<int> code = (*launch)->Wait(absl::Minutes(3));
  const std::string log = (*launch)->Log() + ReadFile(dir + "/rank-0.log");
  EXPECT_TRUE(code.ok() && *code == 0) << name << ":\n" << log;
  if (!code.ok() || *code != 0) return {Struct(), log};
  return {ParseJson(ReadFile(output)), log};
}

double Number(const Struct& object, const std::string& key) {
  const auto it = object.fields().find(key);
  EXPECT_NE(it, object.fields().end()) << key;
  return it == object.fields().end() ? NAN : it->second.number_value();
}

std::vector<int> Ints(const google::protobuf::Value& list) {
  std::vector<int> values;
  for (const auto& value : list.list_value().values()) {
    values.push_back(static_cast<int>(value.number_value()));
  }
  return values;
}

TEST(LlamaHfParityTest, LossOfTheImportedWeightsEqualsTransformersUnderEveryLayout) {
  for (const Model& model : kModels) {
    const Struct& want =
        Reference().fields().at(model.name).struct_value().fields().at("perplexity").struct_value();
    const double expected = Number(want, "loss");
    for (const auto& [t, p, d] : std::vector<std::tuple<int, int, int>>{
             {1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 1}, {1, 1, 2}}) {
      const std::string layout = absl::StrCat("t", t, "p", p, "d", d);
      const auto [got, log] =
          RunTrain(model, "ppl-" + layout, t, p, d,
                   {"--evaluate=perplexity", "--eval_data=tests/evaluation/text.txt",
                    "--overlapping_eval=8"});
      EXPECT_NEAR(Number(got, "loss"), expected, 1e-5 * expected)
          << model.name << " at " << layout << "\n"
          << log;
      EXPECT_EQ(Number(got, "scored_tokens"), Number(want, "scored_tokens")) << layout;
      std::printf("%s %s: loss %.9f, transformers %.9f\n", model.name.c_str(), layout.c_str(),
                  Number(got, "loss"), expected);
    }
  }
}

TEST(LlamaHfParityTest, GreedyGenerationEqualsTransformersWithAndWithoutTheCache) {
  const std::string prompt = Reference().fields().at("prompt").string_value();
  const int new_tokens = static_cast<int>(Number(Reference(), "max_new_tokens"));
  for (const Model& model : kModels) {
    const std::vector<int> expected =
        Ints(Reference().fields().at(model.name).struct_value().fields().at("generation"));
    ASSERT_EQ(expected.size(), static_cast<size_t>(new_tokens));
    for (const auto& [name, t, p, cache] :
         std::vector<std::tuple<std::string, int, int, bool>>{{"gen-t1", 1, 1, true},
                                                              {"gen-t2", 2, 1, true},
                                                              {"gen-p2", 1, 2, true},
                                                              {"gen-t1-nocache", 1, 1, false}}) {
      const auto [got, log] =
          RunTrain(model, name, t, p, 1,
                   {"--generate=" + prompt, absl::StrCat("--max_new_tokens=", new_tokens),
                    absl::StrCat("--kv_cache=", cache ? "true" : "false")});
      const auto tokens = got.fields().find("tokens");
      ASSERT_NE(tokens, got.fields().end()) << model.name << " " << name << "\n" << log;
      EXPECT_EQ(Ints(tokens->second), expected) << model.name << " " << name;
      EXPECT_EQ(got.fields().at("stopped").string_value(), "max_new_tokens") << name;
    }
  }
}

}  // namespace
}  // namespace mtrain
