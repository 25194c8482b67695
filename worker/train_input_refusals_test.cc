// Runs the real `train` binary on specs that pass validation but cannot run (absurd
// sizes under `ulimit -v`), on input files that are not what they claim (init_from
// /dev/zero, a truncated safetensors file) and on data outside --data_root: each must end
// the rank with exit status 1 and one line naming the reason, never abort(). Before these
// checks vocab_size 1e8, seq_length 1e6, num_layers 1e9, hidden_size 65536 and
// micro_batch_size 2^30 aborted the rank with std::bad_alloc.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

constexpr char kTrain[] = "worker/train";
// 2 GiB of address space: far below what the absurd specs need, enough for the tiny ones
// (below about 1.5 GiB OpenBLAS's library constructor retries its buffer allocation
// forever, before main), small enough that the spec that fails only in std::bad_alloc
// gets there quickly.
constexpr char kAddressSpaceKib[] = "2097152";

struct TrainRun {
  int code = -1;
  std::string output;
};

// Sanitizers reserve terabytes of address space: no `ulimit -v` leaves them room.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TrainRun RunTrain(const std::string& name, const std::string& spec_json,
                  const std::vector<std::string>& flags = {}) {
  const std::string spec = absl::StrCat(TestTempDir(), "/", name, ".json");
  std::ofstream(spec) << spec_json;
  std::vector<std::string> argv = {
      "/bin/sh",
      "-c",
      kSanitized ? std::string("exec \"$@\"")
                 : absl::StrCat("ulimit -v ", kAddressSpaceKib, " && exec \"$@\""),
      "sh",
      kTrain,
      "--threads=1",
      "--spec=" + spec};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto child = ChildProcess::Start(argv, absl::StrCat(TestTempDir(), "/", name, ".log"));
  if (!child.ok()) return {-1, child.status().ToString()};
  absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(120));
  return {code.ok() ? *code : -1, (*child)->Log()};
}

std::string Spec(const std::string& model, const std::string& rest = "") {
  return absl::StrCat(R"({"model": {"num_heads": 1, )", model, R"(}, "device": "DEVICE_CPU")",
                      rest.empty() ? "" : ", ", rest, "}");
}

// Exit status 1 and the rank's one-line reason with one of `needles`.
void ExpectCleanRefusal(const TrainRun& run, const std::vector<std::string>& needles) {
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("train[rank 0]: "), std::string::npos) << run.output;
  bool named = false;
  for (const std::string& needle : needles) named |= run.output.find(needle) != std::string::npos;
  EXPECT_TRUE(named) << "expected one of [" << absl::StrJoin(needles, "; ") << "] in\n"
                     << run.output;
}

TEST(TrainInputRefusalsTest, AbsurdButValidSizesFailCleanly) {
  if (kSanitized) GTEST_SKIP() << "needs ulimit -v, which sanitizers cannot run under";
  struct Case {
    std::string name, spec, field;
  };
  const std::vector<Case> cases = {
      {"vocab", Spec(R"("num_layers": 1, "hidden_size": 32, "seq_length": 16,
                        "vocab_size": 100000000)"),
       "model.vocab_size"},
      {"seq", Spec(R"("num_layers": 1, "hidden_size": 32, "seq_length": 1000000)"),
       "model.seq_length"},
      {"layers", Spec(R"("num_layers": 1000000000, "hidden_size": 32, "seq_length": 16)"),
       "model.num_layers"},
      {"hidden", Spec(R"("num_layers": 1, "hidden_size": 65536, "seq_length": 16)"),
       "model.hidden_size"},
      {"micro_batch",
       Spec(R"("num_layers": 1, "hidden_size": 32, "seq_length": 16)",
            R"("parallel": {"micro_batch_size": 1073741824, "global_batch_size": 1073741824})"),
       "parallel.micro_batch_size"},
      {"global_batch",
       Spec(R"("num_layers": 1, "hidden_size": 32, "seq_length": 16)",
            R"("parallel": {"micro_batch_size": 1, "global_batch_size": 2147483647})"),
       "parallel.global_batch_size"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // Refused by the spec's bounds (naming the field) or by the rank's memory check
    // (naming the need and the limit), or caught as std::bad_alloc: never an abort.
    ExpectCleanRefusal(RunTrain(c.name, c.spec),
                       {c.field, "needs about", "RESOURCE_EXHAUSTED: out of memory"});
  }
}

TEST(TrainInputRefusalsTest, TinySizesTrain) {
  const TrainRun run = RunTrain("tiny", Spec(R"("num_layers": 1, "hidden_size": 1, "seq_length": 1,
                                          "vocab_size": 256)",
                                             R"("train": {"steps": 2})"));
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("step 2/2"), std::string::npos) << run.output;
}

TEST(TrainInputRefusalsTest, InitFromThatIsNotAWeightsFileIsRefusedByName) {
  const std::string model = R"("num_layers": 1, "hidden_size": 8, "seq_length": 4)";
  // /dev/zero used to be read to its (absent) end: std::bad_alloc.
  ExpectCleanRefusal(RunTrain("init_zero", Spec(model, R"("train": {"init_from": "/dev/zero"})")),
                     {"INVALID_ARGUMENT: train.init_from: /dev/zero is not a regular file"});
  // A header length of 2^62 and a header that runs past the end of the file.
  const std::string huge = absl::StrCat(TestTempDir(), "/huge_header.safetensors");
  std::ofstream(huge, std::ios::binary) << std::string("\0\0\0\0\0\0\0\x40{}", 10);
  ExpectCleanRefusal(
      RunTrain("init_huge", Spec(model, absl::StrCat(R"("train": {"init_from": ")", huge, "\"}"))),
      {absl::StrCat("DATA_LOSS: train.init_from: ", huge,
                    ": not a valid safetensors file: header length")});
}

TEST(TrainInputRefusalsTest, AHuggingFaceDirectoryWhoseConfigDisagreesIsRefusedByName) {
  const std::string model = R"("num_layers": 1, "hidden_size": 8, "seq_length": 4)";  // 1 head
  const auto init_from = [](const std::string& path) {
    return absl::StrCat(R"("train": {"init_from": ")", path, R"("})");
  };
  const std::string dir = absl::StrCat(TestTempDir(), "/hf_dir");
  std::filesystem::create_directories(dir);
  // config.json is checked before a tensor is read: the weights file need not be valid.
  std::ofstream(dir + "/model.safetensors") << "not read";
  std::ofstream(dir + "/config.json") << R"({"model_type": "gpt2", "n_head": 4, "n_embd": 8})";
  ExpectCleanRefusal(RunTrain("init_dir", Spec(model, init_from(dir))),
                     {absl::StrCat("INVALID_ARGUMENT: train.init_from: ", dir,
                                   "/config.json describes another model than the spec: n_head "
                                   "is 4 but model.num_heads is 1")});
  const std::string empty = absl::StrCat(TestTempDir(), "/hf_empty");
  std::filesystem::create_directories(empty);
  ExpectCleanRefusal(
      RunTrain("init_empty", Spec(model, init_from(empty))),
      {absl::StrCat("NOT_FOUND: train.init_from: ", empty, " holds neither model.safetensors")});
}

TEST(TrainInputRefusalsTest, DataOutsideTheDataRootsIsRefused) {
  const std::string model = R"("num_layers": 1, "hidden_size": 8, "seq_length": 4)";
  for (const std::string path : {"/etc/shadow", "../../../../../../../../../../../../etc/passwd"}) {
    SCOPED_TRACE(path);
    ExpectCleanRefusal(
        RunTrain("outside", Spec(model, absl::StrCat(R"("data": {"path": ")", path, "\"}")),
                 {"--data_root=" + TestTempDir()}),
        {absl::StrCat("INVALID_ARGUMENT: data.path: ", path)});
  }
}

}  // namespace
}  // namespace mtrain
