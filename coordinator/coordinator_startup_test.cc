// The coordinator binary refuses to start beside a running one: on the same gRPC address
// (gRPC's default SO_REUSEPORT would have let both listen, splitting the clients between
// them) or on the same --state_dir (its recovery would re-queue, and so abort, the running
// one's jobs). Either way it exits 1 with one line on stderr, having changed nothing. And
// one listening beyond loopback without --auth_token_file generates its own token.
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
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/child_process.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

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

// A coordinator reachable beyond loopback is never open by default: without
// --auth_token_file it generates STATE_DIR/auth_token (0600) on its first start, says where,
// reuses it afterwards, and answers every RPC only with it.
TEST(CoordinatorStartupTest, BeyondLoopbackWithoutATokenFileATokenIsGeneratedAndReused) {
  const std::string dir = TestDir();
  const std::string state_dir = dir + "/state";
  const std::string token_path = state_dir + "/auth_token";
  std::string token;
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
        {"coordinator/coordinator", "--listen=0.0.0.0:0", "--http=", "--state_dir=" + state_dir},
        absl::StrCat(dir, "/run-", run, ".log"));
    ASSERT_TRUE(child.ok()) << child.status();
    absl::StatusOr<std::string> listening =
        (*child)->WaitForOutput("coordinator listening on ", kTimeout);
    ASSERT_TRUE(listening.ok()) << listening.status();
    const std::string port = listening->substr(listening->rfind(':') + 1);
    absl::StatusOr<std::string> where = (*child)->WaitForOutput("coordinator token in ", kTimeout);
    ASSERT_TRUE(where.ok()) << where.status() << (*child)->Log();
    EXPECT_THAT(*where, HasSubstr(token_path));
    EXPECT_THAT(*where, HasSubstr(run == 0 ? "(generated:" : "(generated earlier:"));
    EXPECT_THAT(*where, HasSubstr("--token_file"));

    struct stat info;
    ASSERT_EQ(::stat(token_path.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600u);
    const std::string content = ReadFile(token_path);
    ASSERT_EQ(content.size(), 65u) << content;  // 32 random bytes in hex, newline
    if (run == 0) token = content.substr(0, 64);
    EXPECT_EQ(content, token + "\n") << "the token must survive a restart";

    auto stub = Coordinator::NewStub(
        grpc::CreateChannel("127.0.0.1:" + port, grpc::InsecureChannelCredentials()));
    for (const std::string& sent : {std::string(), token}) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      if (!sent.empty()) context.AddMetadata("authorization", "Bearer " + sent);
      ListJobsResponse response;
      const grpc::Status status = stub->ListJobs(&context, ListJobsRequest(), &response);
      EXPECT_EQ(status.error_code(),
                sent.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::OK)
          << status.error_message();
    }
    (*child)->Signal(SIGTERM);
    ASSERT_TRUE((*child)->Wait(kTimeout).ok());
  }

  // On loopback without a token file nothing is generated (single-machine use needs no
  // setup); a token file that cannot serve is refused before the state dir is touched.
  std::string address;
  std::unique_ptr<ChildProcess> local =
      StartCoordinator(dir + "/local", dir + "/local.log", &address);
  ASSERT_NE(local, nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir + "/local/auth_token"));
  std::ofstream(dir + "/empty-token") << "\n";
  absl::StatusOr<std::unique_ptr<ChildProcess>> refused = ChildProcess::Start(
      {"coordinator/coordinator", "--listen=0.0.0.0:0", "--http=", "--state_dir=" + dir + "/never",
       "--auth_token_file=" + dir + "/empty-token"},
      dir + "/refused.log");
  ASSERT_TRUE(refused.ok()) << refused.status();
  absl::StatusOr<int> code = (*refused)->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2);
  EXPECT_EQ((*refused)->Log(), absl::StrCat("coordinator: --auth_token_file=", dir,
                                            "/empty-token: the file is empty\n"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/never"));
}

}  // namespace
}  // namespace mtrain
