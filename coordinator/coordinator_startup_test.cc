// The coordinator binary refuses to start beside a running one: on the same gRPC address
// (gRPC's default SO_REUSEPORT would have let both listen, splitting the clients between
// them) or on the same --state_dir (its recovery would re-queue, and so abort, the running
// one's jobs). Either way it exits 1 with one line on stderr, having changed nothing.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

// A fresh directory for the current test's files.
std::string TestDir() {
  const std::string dir = absl::StrCat(
      TestTempDir(), "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A socket listening on a free loopback port; `reuse_port` as gRPC sets it by default.
class Listener {
 public:
  explicit Listener(bool reuse_port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuse_port) ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), length) == 0 && ::listen(fd_, 4) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port_ = ntohs(address.sin_port);
    }
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Runs a coordinator expected to refuse to start; returns its output.
std::string RunRefused(const std::vector<std::string>& flags, const std::string& log) {
  std::vector<std::string> argv = {"coordinator/coordinator"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(argv, log);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return "";
  absl::StatusOr<int> code = (*child)->Wait(kTimeout);
  EXPECT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(code.value_or(-1), 1) << (*child)->Log();
  return (*child)->Log();
}

// Starts a coordinator on free ports; returns it and its gRPC address.
std::unique_ptr<ChildProcess> StartCoordinator(const std::string& state_dir, const std::string& log,
                                               std::string* address) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start({"coordinator/coordinator", "--listen=127.0.0.1:0", "--http=127.0.0.1:0",
                           "--state_dir=" + state_dir},
                          log);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return nullptr;
  absl::StatusOr<std::string> line = (*child)->WaitForOutput("coordinator listening on ", kTimeout);
  EXPECT_TRUE(line.ok()) << line.status();
  if (!line.ok()) return nullptr;
  *address = line->substr(line->rfind(' ') + 1);
  return *std::move(child);
}

TEST(CoordinatorStartupTest, TakenPortIsRefusedBeforeTheStateDirIsTouched) {
  const std::string dir = TestDir();
  // Without SO_REUSEPORT (any program) and with it (a coordinator from before the fix, or
  // any other gRPC server): the second would have been let in by gRPC's default.
  for (const bool reuse_port : {false, true}) {
    SCOPED_TRACE(reuse_port ? "listener with SO_REUSEPORT" : "plain listener");
    Listener listener(reuse_port);
    ASSERT_NE(listener.port(), 0);
    const std::string address = absl::StrCat("127.0.0.1:", listener.port());
    const std::string state_dir = dir + "/state";
    const std::string output =
        RunRefused({"--listen=" + address, "--http=", "--state_dir=" + state_dir},
                   absl::StrCat(dir, "/grpc-", reuse_port, ".log"));
    EXPECT_EQ(output, absl::StrCat("coordinator: cannot listen on ", address,
                                   " (--listen): address in use\n"));
    EXPECT_FALSE(std::filesystem::exists(state_dir));
  }
}

TEST(CoordinatorStartupTest, TakenHttpPortIsRefusedBeforeTheStateDirIsTouched) {
  const std::string dir = TestDir();
  Listener listener(/*reuse_port=*/false);
  ASSERT_NE(listener.port(), 0);
  const std::string address = absl::StrCat("127.0.0.1:", listener.port());
  const std::string state_dir = dir + "/state";
  const std::string output = RunRefused(
      {"--listen=127.0.0.1:0", "--http=" + address, "--state_dir=" + state_dir}, dir + "/c.log");
  EXPECT_EQ(output, absl::StrCat("coordinator: --http: cannot serve HTTP on ", address,
                                 ": address in use\n"));
  EXPECT_FALSE(std::filesystem::exists(state_dir));
}

TEST(CoordinatorStartupTest, SecondCoordinatorOnTheSamePortIsRefused) {
  const std::string dir = TestDir();
  std::string address;
  std::unique_ptr<ChildProcess> first = StartCoordinator(dir + "/a", dir + "/a.log", &address);
  ASSERT_NE(first, nullptr);
  const std::string output =
      RunRefused({"--listen=" + address, "--http=", "--state_dir=" + dir + "/b"}, dir + "/b.log");
  EXPECT_EQ(output, absl::StrCat("coordinator: cannot listen on ", address,
                                 " (--listen): address in use\n"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/b"));
  EXPECT_TRUE(first->Running());
}

TEST(CoordinatorStartupTest, StateDirIsLockedWhileACoordinatorRunsAndFreedWhenItIsKilled) {
  const std::string dir = TestDir();
  const std::string state_dir = dir + "/state";
  std::string address;
  std::unique_ptr<ChildProcess> first = StartCoordinator(state_dir, dir + "/first.log", &address);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(ReadFile(state_dir + "/LOCK"), absl::StrCat(first->pid(), "\n"));
  // SQLite may have written the database file since its last checkpoint, but a refused
  // coordinator must not: compare what is there before and after.
  const std::string database = ReadFile(state_dir + "/jobs.sqlite");

  const std::string output = RunRefused(
      {"--listen=127.0.0.1:0", "--http=127.0.0.1:0", "--state_dir=" + state_dir}, dir + "/2.log");
  EXPECT_EQ(output, absl::StrCat("coordinator: state dir ", state_dir,
                                 " is in use by another coordinator (pid ", first->pid(), ")\n"));
  EXPECT_EQ(ReadFile(state_dir + "/jobs.sqlite"), database);
  EXPECT_TRUE(first->Running());

  // SIGKILL runs no cleanup; the kernel drops the flock with the process.
  first->Signal(SIGKILL);
  ASSERT_TRUE(first->Wait(kTimeout).ok());
  std::unique_ptr<ChildProcess> third = StartCoordinator(state_dir, dir + "/third.log", &address);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(ReadFile(state_dir + "/LOCK"), absl::StrCat(third->pid(), "\n"));

  third->Signal(SIGTERM);
  absl::StatusOr<int> code = third->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << third->Log();
}

}  // namespace
}  // namespace mtrain
