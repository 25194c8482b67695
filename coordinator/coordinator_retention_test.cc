// The coordinator binary's --job_retention: a job that ended long ago is deleted by the
// running coordinator's tick, with its checkpoints, and the coordinator says so on
// stderr; jobs that have not ended, or ended recently, stay. A retention of 0 or less is
// refused at start.
#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/job_store.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

std::string TestDir() {
  const std::string dir = absl::StrCat(
      TestTempDir(), "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(CoordinatorRetentionTest, AJobEndedLongerAgoIsDeletedWithItsCheckpoints) {
  const std::string dir = TestDir();
  const std::string state_dir = dir + "/state";
  std::filesystem::create_directories(state_dir);
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  {
    // job-1 ended two days ago, job-2 a minute ago, job-3 is still waiting.
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(state_dir + "/jobs.sqlite");
    ASSERT_TRUE(store.ok()) << store.status();
    JobSpec spec;
    spec.set_name("old");
    const int64_t two_days_ago = now_ms - 2 * 24 * 3600 * 1000;
    ASSERT_TRUE((*store)->CreateJob(spec, two_days_ago).ok());
    ASSERT_TRUE((*store)->Transition("job-1", JOB_STATE_CANCELLED, "", two_days_ago).ok());
    ASSERT_TRUE((*store)->CreateJob(spec, now_ms - 60000).ok());
    ASSERT_TRUE((*store)->Transition("job-2", JOB_STATE_CANCELLED, "", now_ms - 60000).ok());
    ASSERT_TRUE((*store)->CreateJob(spec, two_days_ago).ok());
  }
  // What the checkpoint store holds for job-1 (the files need not be a checkpoint to go).
  std::filesystem::create_directories(state_dir + "/checkpoints/job-1/step-00000010");
  std::filesystem::create_directories(state_dir + "/checkpoints/job-2/step-00000010");

  absl::StatusOr<std::unique_ptr<ChildProcess>> coordinator =
      ChildProcess::Start({"coordinator/coordinator", "--listen=127.0.0.1:0",
                           "--http=", "--state_dir=" + state_dir, "--job_retention=24h"},
                          dir + "/coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::StatusOr<std::string> line =
      (*coordinator)
          ->WaitForOutput(
              "coordinator: job-1 deleted: it ended more than 24h ago (--job_retention), with its "
              "checkpoints",
              kTimeout);
  ASSERT_TRUE(line.ok()) << line.status() << "\n" << (*coordinator)->Log();
  (*coordinator)->Signal(SIGTERM);
  absl::StatusOr<int> code = (*coordinator)->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ((*coordinator)->Log().find("job-2 deleted"), std::string::npos)
      << (*coordinator)->Log();

  EXPECT_FALSE(std::filesystem::exists(state_dir + "/checkpoints/job-1"));
  EXPECT_TRUE(std::filesystem::exists(state_dir + "/checkpoints/job-2/step-00000010"));
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(state_dir + "/jobs.sqlite");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->GetJob("job-1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*store)->GetJob("job-2").ok());
  EXPECT_TRUE((*store)->GetJob("job-3").ok());
}

TEST(CoordinatorRetentionTest, ARetentionOfZeroIsRefused) {
  const std::string dir = TestDir();
  absl::StatusOr<std::unique_ptr<ChildProcess>> coordinator =
      ChildProcess::Start({"coordinator/coordinator", "--listen=127.0.0.1:0",
                           "--http=", "--state_dir=" + dir + "/state", "--job_retention=0s"},
                          dir + "/coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::StatusOr<int> code = (*coordinator)->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2);
  EXPECT_EQ((*coordinator)->Log(),
            "coordinator: --job_retention=0 must be > 0 (inf keeps jobs forever)\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/state"));
}

}  // namespace
}  // namespace mtrain
