// The worker's --data_root on real processes: a job whose data.path leaves the roots
// (`/etc/shadow`, `../../etc/passwd`) fails with the rank's reason, one inside trains, and
// a worker given a root that does not exist refuses to start.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

class WorkerDataRootTest : public ClusterTest {};

std::string TinySpec(const std::string& path) {
  return absl::StrCat(R"({"model": {"num_layers": 1, "num_heads": 1, "hidden_size": 8,
                                    "seq_length": 8},
                          "data": {"path": ")",
                      path, R"("}, "train": {"steps": 2, "max_restarts": 0}})");
}

TEST_F(WorkerDataRootTest, DataPathsOutsideTheRootsFailTheJobByName) {
  const std::string root = Path("data");
  std::filesystem::create_directories(root);
  {
    std::ofstream corpus(root + "/corpus.txt");
    for (int i = 0; i < 200; ++i) corpus << "to be or not to be, that is the question. ";
  }
  worker_flags_ = {"--data_root=" + root};
  StartCoordinator();
  StartWorkers(1);

  std::string up;  // enough ".." to reach "/" from any depth
  for (int i = 0; i < 64; ++i) up += "/..";
  for (const std::string& outside : {std::string("/etc/shadow"), root + up + "/etc/passwd"}) {
    SCOPED_TRACE(outside);
    const std::string job = Submit(WriteSpec("outside.json", TinySpec(outside)));
    ASSERT_TRUE(WaitFor([&] { return StateOf(job) == JOB_STATE_FAILED; }, absl::Seconds(60)))
        << Trainctl({"status", job}).second;
    const absl::StatusOr<JobStatus> status = Status(job);
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_THAT(status->message(), HasSubstr("data.path: " + outside));
    EXPECT_THAT(status->message(), HasSubstr("is outside the data roots"));
    // The rank itself reported the refusal (not the daemon for a rank that died).
    EXPECT_THAT(status->message(), ::testing::Not(HasSubstr("without reporting")));
  }

  const std::string inside = Submit(WriteSpec("inside.json", TinySpec(root + "/corpus.txt")));
  ASSERT_TRUE(WaitFor([&] { return StateOf(inside) == JOB_STATE_SUCCEEDED; }, absl::Seconds(90)))
      << Trainctl({"status", inside}).second;
}

TEST_F(WorkerDataRootTest, AMissingRootStopsTheWorker) {
  StartCoordinator();
  auto worker = ChildProcess::Start({"worker/worker", "--coordinator=" + address_, "--device=cpu",
                                     "--worker_id=bad", "--data_root=" + Path("no-such-dir")},
                                    Path("bad-worker.log"));
  ASSERT_TRUE(worker.ok()) << worker.status();
  const absl::StatusOr<int> code = (*worker)->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2) << (*worker)->Log();
  EXPECT_THAT((*worker)->Log(), HasSubstr("--data_root: " + Path("no-such-dir")));
}

}  // namespace
}  // namespace mtrain
