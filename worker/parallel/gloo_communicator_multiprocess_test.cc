// Members as separate processes: the parent forks them before anything Gloo-related (an
// event-loop thread) exists in it, and they meet only through a DirectoryStore on disk.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/parallel/gloo_communicator.h"
#include "worker/parallel/key_value_store.h"

namespace mtrain {
namespace {

constexpr int kMembers = 3;
constexpr size_t kCount = 100000;

// The whole life of one member; returns its exit code (0 = every check passed).
int RunMember(const std::string& directory, int rank) {
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(directory);
  absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
  if (!store.ok() || !device.ok()) return 2;
  GroupSpec spec;
  spec.name = "data-0";
  spec.members = {4, 5, 6};
  spec.global_rank = spec.members[rank];
  spec.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Communicator>> group = ConnectGlooGroup(**store, *device, spec);
  if (!group.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, group.status().ToString().c_str());
    return 3;
  }
  std::vector<float> data(kCount);
  for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>((rank + 1) * (i % 100));
  absl::Status status = (*group)->AllReduce(data.data(), kCount, ReduceOp::kSum);
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
    return 4;
  }
  for (size_t i = 0; i < kCount; ++i) {
    if (data[i] != static_cast<float>(6 * (i % 100))) {
      std::fprintf(stderr, "rank %d: element %zu is %f\n", rank, i, data[i]);
      return 5;
    }
  }
  // A point-to-point message around the ring as well.
  const int right = (rank + 1) % kMembers;
  const int left = (rank + kMembers - 1) % kMembers;
  const int64_t out = 1000 + rank;
  int64_t in = 0;
  absl::StatusOr<std::unique_ptr<PendingSend>> send =
      (*group)->StartSend(&out, sizeof(out), right, 11);
  if (!send.ok()) return 6;
  status = (*group)->Recv(&in, sizeof(in), left, 11);
  if (!status.ok() || !(*send)->Wait().ok() || in != 1000 + left) return 7;
  return (*group)->Barrier().ok() ? 0 : 8;
}

// The hang the watchdog exists for, for real: one member stops itself with SIGSTOP
// between two all-reduces. The others must time out naming it, by global rank, in the
// message their operation returns (written to "<directory>/status-<rank>" for the
// parent to check).
int RunMemberThatMayStop(const std::string& directory, int rank, int stopper) {
  absl::StatusOr<std::unique_ptr<DirectoryStore>> store = DirectoryStore::Open(directory);
  absl::StatusOr<GlooDevice> device = CreateGlooDevice("127.0.0.1");
  if (!store.ok() || !device.ok()) return 2;
  GroupSpec spec;
  spec.name = "data-1";
  spec.members = {4, 5, 6};
  spec.global_rank = spec.members[rank];
  spec.timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<Communicator>> group = ConnectGlooGroup(**store, *device, spec);
  if (!group.ok()) return 3;
  std::vector<float> data(kCount, 1.0f);
  if (!(*group)->AllReduce(data.data(), kCount, ReduceOp::kSum).ok()) return 4;
  if (rank == stopper) {
    ::raise(SIGSTOP);  // the parent kills it once the others are done
    return 9;
  }
  const absl::Status status = (*group)->AllReduce(data.data(), kCount, ReduceOp::kSum);
  std::ofstream(absl::StrCat(directory, "/status-", rank)) << status.ToString();
  return 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string TestDirectory(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return absl::StrCat(root != nullptr ? root : "/tmp", "/", name, "-", ::getpid());
}

// Waits for `pid` until `deadline`; a child still running then is killed (so a hang fails
// the test instead of stalling it) and false returned.
bool ReapBefore(pid_t pid, absl::Time deadline, int* wait_status) {
  pid_t done = 0;
  while ((done = ::waitpid(pid, wait_status, WNOHANG)) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (done != 0) return true;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, wait_status, 0);
  return false;
}

TEST(GlooMultiprocessTest, ForkedMembersAllReduceThroughADirectoryStore) {
  const std::string directory = TestDirectory("gloo-multiprocess");
  std::vector<pid_t> children;
  for (int rank = 0; rank < kMembers; ++rank) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) ::_exit(RunMember(directory, rank));
    children.push_back(pid);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int rank = 0; rank < kMembers; ++rank) {
    int wait_status = 0;
    if (!ReapBefore(children[rank], deadline, &wait_status)) {
      ADD_FAILURE() << "rank " << rank << " hung";
      continue;
    }
    ASSERT_TRUE(WIFEXITED(wait_status)) << "rank " << rank << " crashed";
    EXPECT_EQ(WEXITSTATUS(wait_status), 0) << "rank " << rank << " failed a check";
  }
}

TEST(GlooMultiprocessTest, AStoppedMemberIsNamedByTheMembersItLeftWaiting) {
  constexpr int kStopper = 1;  // global rank 5
  const std::string directory = TestDirectory("gloo-sigstop");
  std::vector<pid_t> children;
  for (int rank = 0; rank < kMembers; ++rank) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) ::_exit(RunMemberThatMayStop(directory, rank, kStopper));
    children.push_back(pid);
  }
  // The stopped member first, so it cannot be left behind by a failed assertion.
  int stopped_status = 0;
  const pid_t stopped = ::waitpid(children[kStopper], &stopped_status, WUNTRACED);
  EXPECT_TRUE(stopped == children[kStopper] && WIFSTOPPED(stopped_status))
      << "the member meant to stop did not";
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int rank = 0; rank < kMembers; ++rank) {
    if (rank == kStopper) continue;
    int wait_status = 0;
    if (!ReapBefore(children[rank], deadline, &wait_status)) {
      ADD_FAILURE() << "rank " << rank << " hung";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)
        << "rank " << rank << " failed before the second all-reduce";
    const std::string status = ReadFile(absl::StrCat(directory, "/status-", rank));
    std::printf("rank %d: %s\n", rank, status.c_str());
    EXPECT_NE(status.find("DEADLINE_EXCEEDED: "), std::string::npos) << status;
    EXPECT_NE(status.find("AllReduce #2 in group data-1 (ranks 4,5,6) did not complete"),
              std::string::npos)
        << status;
    EXPECT_NE(status.find("did not arrive: global rank 5 (group rank 1): no watchdog report "
                          "within 2s (hung, dead or behind)"),
              std::string::npos)
        << status;
  }
  ::kill(children[kStopper], SIGKILL);
  ::waitpid(children[kStopper], &stopped_status, 0);
}

}  // namespace
}  // namespace mtrain
