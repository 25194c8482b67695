#include "coordinator/state_dir_lock.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

// A fresh directory path (not created) under the test's temporary directory.
std::string NewDirPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, "-", ::getpid());
  std::filesystem::remove_all(path);
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(StateDirLockTest, CreatesTheDirectoryAndRecordsThePid) {
  const std::string dir = NewDirPath("fresh");
  absl::StatusOr<std::unique_ptr<StateDirLock>> lock = StateDirLock::Acquire(dir);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ((*lock)->path(), dir + "/LOCK");
  EXPECT_EQ(ReadFile(dir + "/LOCK"), absl::StrCat(::getpid(), "\n"));
}

TEST(StateDirLockTest, SecondAcquireIsRefusedUntilTheFirstIsReleased) {
  const std::string dir = NewDirPath("twice");
  absl::StatusOr<std::unique_ptr<StateDirLock>> first = StateDirLock::Acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  // flock locks belong to the open file description, so a second open in this process
  // conflicts exactly as a second coordinator would.
  absl::StatusOr<std::unique_ptr<StateDirLock>> second = StateDirLock::Acquire(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      second.status().message(),
      absl::StrCat("state dir ", dir, " is in use by another coordinator (pid ", ::getpid(), ")"));
  // The refused attempt must not have overwritten the holder's pid.
  EXPECT_EQ(ReadFile(dir + "/LOCK"), absl::StrCat(::getpid(), "\n"));

  first->reset();
  absl::StatusOr<std::unique_ptr<StateDirLock>> third = StateDirLock::Acquire(dir);
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST(StateDirLockTest, ProcessKilledWhileHoldingLeavesNoStaleLock) {
  const std::string dir = NewDirPath("killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    absl::StatusOr<std::unique_ptr<StateDirLock>> lock = StateDirLock::Acquire(dir);
    const char ok = lock.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    for (;;) ::pause();  // Holds the lock until SIGKILLed.
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(ok, 'y');

  absl::StatusOr<std::unique_ptr<StateDirLock>> refused = StateDirLock::Acquire(dir);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(absl::StrCat("(pid ", child, ")")),
            absl::string_view::npos)
      << refused.status();

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wait_status));

  // No unlock ran, yet the kernel dropped the lock with the process.
  absl::StatusOr<std::unique_ptr<StateDirLock>> after = StateDirLock::Acquire(dir);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(ReadFile(dir + "/LOCK"), absl::StrCat(::getpid(), "\n"));
}

TEST(StateDirLockTest, MissingParentIsAnError) {
  const std::string dir = NewDirPath("no-parent") + "/child";
  absl::StatusOr<std::unique_ptr<StateDirLock>> lock = StateDirLock::Acquire(dir);
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kNotFound) << lock.status();
  EXPECT_NE(lock.status().message().find(dir), absl::string_view::npos) << lock.status();
}

TEST(StateDirLockTest, AFileInsteadOfADirectoryIsAnError) {
  const std::string path = NewDirPath("a-file");
  std::ofstream(path) << "not a directory\n";
  absl::StatusOr<std::unique_ptr<StateDirLock>> lock = StateDirLock::Acquire(path);
  EXPECT_FALSE(lock.ok());
  EXPECT_NE(lock.status().code(), absl::StatusCode::kFailedPrecondition) << lock.status();
}

}  // namespace
}  // namespace mtrain
