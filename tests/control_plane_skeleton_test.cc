// Starts the real coordinator, worker and trainctl binaries on loopback and checks what
// the skeleton promises: a port picked by the OS and printed, health and reflection,
// registration and heartbeats, `trainctl workers`, dead-worker detection, malformed
// checkpoint uploads refused, and clean shutdown on SIGTERM.
#include <signal.h>

#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/cuda_device_query.h"
#include "tests/child_process.h"
#include "tests/raw_grpc_call.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kStartTimeout = absl::Seconds(20);

class ControlPlaneSkeletonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto coordinator = ChildProcess::Start(
        {"coordinator/coordinator", "--listen=127.0.0.1:0", "--http=127.0.0.1:0",
         "--state_dir=" + Path("state"), "--heartbeat_interval=100ms", "--heartbeat_timeout=1s"},
        Path("coordinator.log"));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    absl::StatusOr<std::string> line =
        coordinator_->WaitForOutput("coordinator listening on ", kStartTimeout);
    ASSERT_TRUE(line.ok()) << line.status();
    address_ = line->substr(line->rfind(' ') + 1);
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(address_.substr(address_.rfind(':') + 1), &port));
    ASSERT_GT(port, 0) << "port 0 must be replaced by the port actually bound";
  }

  std::string Path(const std::string& name) { return absl::StrCat(TestTempDir(), "/", name); }

  // Runs trainctl to completion; returns {exit code, output}.
  std::pair<int, std::string> Trainctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"coordinator/cli/trainctl", "--coordinator=" + address_};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = Path(absl::StrCat("trainctl-", ++trainctl_runs_, ".log"));
    auto child = ChildProcess::Start(argv, log);
    if (!child.ok()) return {-1, child.status().ToString()};
    absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(30));
    return {code.ok() ? *code : -1, (*child)->Log()};
  }

  std::unique_ptr<ChildProcess> StartWorker(const std::string& id) {
    auto worker = ChildProcess::Start(
        {"worker/worker", "--coordinator=" + address_, "--device=cpu", "--worker_id=" + id},
        Path(id + ".log"));
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? *std::move(worker) : nullptr;
  }

  std::unique_ptr<ChildProcess> coordinator_;
  std::string address_;
  int trainctl_runs_ = 0;
};

TEST_F(ControlPlaneSkeletonTest, HealthServiceReportsServing) {
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  // HealthCheckRequest{service: ""} serializes to zero bytes.
  absl::StatusOr<std::string> response =
      RawGrpcCall(channel, "/grpc.health.v1.Health/Check", "", absl::Seconds(10));
  ASSERT_TRUE(response.ok()) << response.status();
  // HealthCheckResponse{status: SERVING (1)}: field 1, varint 1.
  EXPECT_EQ(*response, std::string("\x08\x01", 2));
}

TEST_F(ControlPlaneSkeletonTest, ReflectionListsTheCoordinatorService) {
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  absl::StatusOr<std::string> response =
      RawGrpcCall(channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                  std::string("\x3a\x00", 2), absl::Seconds(10));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(*response, HasSubstr("mtrain.Coordinator"));
  EXPECT_THAT(*response, HasSubstr("grpc.health.v1.Health"));
}

TEST_F(ControlPlaneSkeletonTest, WorkersRegisterAndAreListedThenDetectedDead) {
  std::unique_ptr<ChildProcess> worker_a = StartWorker("worker-a");
  std::unique_ptr<ChildProcess> worker_b = StartWorker("worker-b");
  ASSERT_TRUE(worker_a->WaitForOutput("registered as worker-a", kStartTimeout).ok())
      << worker_a->Log();
  ASSERT_TRUE(worker_b->WaitForOutput("registered as worker-b", kStartTimeout).ok())
      << worker_b->Log();

  auto [code, output] = Trainctl({"workers"});
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("worker-a"));
  EXPECT_THAT(output, HasSubstr("worker-b"));
  EXPECT_THAT(output, HasSubstr("idle"));
  EXPECT_THAT(output, Not(HasSubstr("dead")));

  auto [json_code, json] = Trainctl({"workers", "--json"});
  ASSERT_EQ(json_code, 0) << json;
  EXPECT_THAT(json, HasSubstr(R"("worker_id":"worker-a")"));
  EXPECT_THAT(json, HasSubstr(R"("alive":true)"));

  // A killed worker stops heartbeating; past the 1 s timeout it is listed dead while the
  // other stays alive (its heartbeats keep flowing every 100 ms).
  worker_a->Signal(SIGKILL);
  absl::SleepFor(absl::Milliseconds(1500));
  auto [after_code, after] = Trainctl({"workers"});
  ASSERT_EQ(after_code, 0) << after;
  EXPECT_THAT(after, testing::ContainsRegex("worker-a[^\n]*dead"));
  EXPECT_THAT(after, testing::ContainsRegex("worker-b[^\n]*idle"));

  // SIGTERM stops a worker cleanly.
  worker_b->Signal(SIGTERM);
  absl::StatusOr<int> worker_exit = worker_b->Wait(absl::Seconds(10));
  ASSERT_TRUE(worker_exit.ok()) << worker_exit.status();
  EXPECT_EQ(*worker_exit, 0) << worker_b->Log();
}

TEST_F(ControlPlaneSkeletonTest, MalformedUploadsAndBadSpecsAreRefusedAndServingGoesOn) {
  // A checkpoint chunk naming no job is refused; the coordinator keeps serving.
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  absl::StatusOr<std::string> upload =
      RawGrpcCall(channel, "/mtrain.Coordinator/UploadCheckpoint", "", absl::Seconds(10));
  EXPECT_EQ(upload.status().code(), absl::StatusCode::kNotFound) << upload.status();
  auto [list_code, list_output] = Trainctl({"list"});
  EXPECT_EQ(list_code, 0) << list_output;

  const std::string bad_spec = Path("bad.json");
  FILE* file = fopen(bad_spec.c_str(), "w");
  ASSERT_NE(file, nullptr);
  fputs(R"({"model": {"num_heads": 6, "hidden_size": 192}, "parallel": {"tensor": 4}})", file);
  fclose(file);
  auto [submit_code, submit_output] = Trainctl({"submit", bad_spec});
  EXPECT_NE(submit_code, 0);
  EXPECT_THAT(submit_output, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(submit_output, HasSubstr("num_heads % tensor == 0"));
  // One line on stderr.
  EXPECT_EQ(std::count(submit_output.begin(), submit_output.end(), '\n'), 1) << submit_output;
}

TEST_F(ControlPlaneSkeletonTest, UnreachableCoordinatorIsAOneLineError) {
  auto child = ChildProcess::Start(
      {"coordinator/cli/trainctl", "--coordinator=127.0.0.1:1", "--timeout_seconds=2", "workers"},
      Path("unreachable.log"));
  ASSERT_TRUE(child.ok());
  absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  EXPECT_THAT((*child)->Log(), HasSubstr("UNAVAILABLE"));
}

TEST_F(ControlPlaneSkeletonTest, WorkerWithCudaDeviceFailsCleanlyWithoutAGpu) {
  if (QueryCudaDevices().ok()) GTEST_SKIP() << "a GPU is present; nothing to refuse";
  auto worker = ChildProcess::Start(
      {"worker/worker", "--coordinator=" + address_, "--device=cuda", "--worker_id=w"},
      Path("cuda-worker.log"));
  ASSERT_TRUE(worker.ok());
  absl::StatusOr<int> code = (*worker)->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
  EXPECT_THAT((*worker)->Log(), HasSubstr("--device=cuda but CUDA is not usable"));
}

TEST_F(ControlPlaneSkeletonTest, CoordinatorStopsOnSigterm) {
  coordinator_->Signal(SIGTERM);
  absl::StatusOr<int> code = coordinator_->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << coordinator_->Log();
}

}  // namespace
}  // namespace mtrain
