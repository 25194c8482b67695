// Accepted, mutated specs run on a real rank (`train`, static mode, world 1, one step)
// under an address-space limit (so a huge allocation fails instead of swapping) and a
// wall-clock cap. Each must either complete or exit non-zero with its reason on one
// line; none may die by a signal or hang. The issue behind it: of 28 accepted-but-absurd
// specs run on real workers, 7 crashed a rank and 1 hung. The pure properties of the same
// generator (thousands of specs) are in spec/job_spec_property_test.cc.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "plan/rank_memory_estimate.h"
#include "spec/job_spec_mutator.h"
#include "spec/job_spec_validation.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

// A rank gets 4 GiB of address space (OpenBLAS and the engine's own need ~0.5 GiB).
constexpr int64_t kAddressSpaceKiB = int64_t{4} << 20;
// Sanitizers reserve terabytes of address space for their shadow memory: under `ulimit -v`
// an instrumented rank dies before main. There the ranks run without the limit, and specs
// that need it to fail cleanly are not run.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
// Generous for one step of the small models sampled (each ~1 s on a loaded core).
constexpr absl::Duration kWallClock = absl::Seconds(120);
// Specs the sample counts as "small": they fit the limit with room and compute little, so
// they must train or fail for a reason of their own (a missing file), never for memory.
constexpr int64_t kSmallMemoryBytes = int64_t{1} << 30;
constexpr double kSmallWork = 5e8;  // parameters x tokens per step

// World 1 on the CPU in fp32 (what `train` runs here), one step.
JobSpec ForRank(JobSpec spec) {
  ParallelSpec* p = spec.mutable_parallel();
  p->set_tensor(1);
  p->set_pipeline(1);
  p->set_data(1);
  p->clear_min_data();
  p->clear_virtual_stages();
  p->clear_sequence_parallel();  // splits over a tensor group, which one rank has not
  if (p->schedule() == SCHEDULE_INTERLEAVED_1F1B) p->clear_schedule();
  spec.set_device(DEVICE_CPU);
  spec.clear_precision();
  spec.mutable_train()->set_steps(1);
  spec.mutable_train()->clear_checkpoint_every();
  return spec;
}

double Work(const JobSpec& resolved, const RankMemoryEstimate& memory) {
  return static_cast<double>(memory.parameters) * resolved.parallel().global_batch_size() *
         resolved.model().seq_length();
}

struct Outcome {
  int code = -1;  // exit status, 128 + N for signal N, -1 if it hung
  std::string last_line;
  std::string log;
};

Outcome RunRank(const JobSpec& spec, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::string json;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
  std::ofstream(dir + "/spec.json") << json;
  // The shell applies the limit and execs, so the rank's own exit status comes back.
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
      {"/bin/sh", "-c",
       kSanitized ? std::string("exec \"$0\" \"$@\"")
                  : absl::StrCat("ulimit -v ", kAddressSpaceKiB, " && exec \"$0\" \"$@\""),
       "worker/train", "--spec=" + dir + "/spec.json", "--rank=0", "--world_size=1",
       "--rendezvous_dir=" + dir + "/rendezvous", "--metrics_jsonl=" + dir + "/metrics.jsonl",
       "--steps=1", "--threads=1"},
      dir + "/train.log");
  Outcome outcome;
  if (!child.ok()) {
    ADD_FAILURE() << child.status();
    return outcome;
  }
  absl::StatusOr<int> code = (*child)->Wait(kWallClock);
  outcome.log = (*child)->Log();
  if (code.ok()) outcome.code = *code;
  std::vector<std::string> lines =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(outcome.log), '\n');
  if (!lines.empty()) outcome.last_line = lines.back();
  return outcome;
}

// Accepted world-1 specs from the mutator, split by what a rank should do with them.
void Sample(uint64_t seed, int small_wanted, int large_wanted, std::vector<JobSpec>* small,
            std::vector<JobSpec>* large) {
  JobSpecMutator mutator(seed);
  std::set<std::string> seen;
  for (int tries = 0; tries < 100000 && (static_cast<int>(small->size()) < small_wanted ||
                                         static_cast<int>(large->size()) < large_wanted);
       ++tries) {
    const JobSpec base = ForRank(mutator.SeedSpec());
    const JobSpec spec = ForRank(mutator.Mutate(base, 3));
    // Only specs the mutation changed, each once: the sample is small.
    if (google::protobuf::util::MessageDifferencer::Equals(spec, base) ||
        !seen.insert(spec.SerializeAsString()).second) {
      continue;
    }
    absl::StatusOr<JobSpec> resolved = ResolveJobSpec(spec);
    if (!resolved.ok()) continue;
    const RankMemoryEstimate memory = EstimateRankMemory(*resolved);
    if (memory.total_bytes <= kSmallMemoryBytes && Work(*resolved, memory) <= kSmallWork) {
      if (static_cast<int>(small->size()) < small_wanted) small->push_back(spec);
    } else if (memory.weight_bytes > 4 * (kAddressSpaceKiB << 10)) {
      // The weights alone exceed the limit four times: allocation fails before any compute.
      if (static_cast<int>(large->size()) < large_wanted) large->push_back(spec);
    }
  }
  ASSERT_EQ(static_cast<int>(small->size()), small_wanted);
  ASSERT_EQ(static_cast<int>(large->size()), large_wanted);
}

TEST(JobSpecWorkerSampleTest, AcceptedSpecsTrainOrFailCleanly) {
  std::vector<JobSpec> small, large;
  Sample(/*seed=*/1125, /*small_wanted=*/12, /*large_wanted=*/0, &small, &large);
  int trained = 0;
  for (size_t i = 0; i < small.size(); ++i) {
    const std::string what = "spec: " + small[i].ShortDebugString();
    const Outcome outcome = RunRank(small[i], absl::StrCat(TestTempDir(), "/small-", i));
    std::printf("small %zu: exit %d: %s\n  %s\n", i, outcome.code, outcome.last_line.c_str(),
                what.c_str());
    ASSERT_NE(outcome.code, -1) << "hung\n" << what << "\n" << outcome.log;
    EXPECT_LT(outcome.code, 128) << "killed by signal " << outcome.code - 128 << "\n"
                                 << what << "\n"
                                 << outcome.log;
    if (outcome.code == 0) {
      ++trained;
    } else {
      // The reason on the rank's last line, naming the rank ("train[rank 0]: ...").
      EXPECT_NE(outcome.last_line.find("train"), std::string::npos) << what << outcome.log;
    }
  }
  // Most sampled specs are fine as they are; the sample is not all refusals.
  EXPECT_GE(trained, 6);
}

// Needs the rank to turn std::bad_alloc into a clean error (a sibling change); until then
// these end in SIGABRT ("terminate called after throwing an instance of
// 'std::bad_alloc'"), which is what this test exists to catch.
TEST(JobSpecWorkerSampleTest, AcceptedSpecsTooLargeForTheRankFailCleanly) {
  if (kSanitized) GTEST_SKIP() << "needs ulimit -v, which sanitizers cannot run under";
  std::vector<JobSpec> small, large;
  Sample(/*seed=*/1126, /*small_wanted=*/0, /*large_wanted=*/3, &small, &large);
  for (size_t i = 0; i < large.size(); ++i) {
    const std::string what = "spec: " + large[i].ShortDebugString();
    const Outcome outcome = RunRank(large[i], absl::StrCat(TestTempDir(), "/large-", i));
    std::printf("large %zu: exit %d: %s\n  %s\n", i, outcome.code, outcome.last_line.c_str(),
                what.c_str());
    ASSERT_NE(outcome.code, -1) << "hung\n" << what << "\n" << outcome.log;
    EXPECT_GT(outcome.code, 0) << what << outcome.log;
    EXPECT_LT(outcome.code, 128) << "killed by signal " << outcome.code - 128 << "\n"
                                 << what << "\n"
                                 << outcome.log;
  }
}

}  // namespace
}  // namespace mtrain
