#include "worker/agent.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "coordinator/grpc_service.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// A real coordinator service on a loopback port, with its own registry: constructing a
// second one on the same port is a coordinator restart that forgot every worker. With
// `auth_token` it requires that bearer token, like --auth_token_file.
class InProcessCoordinator {
 public:
  explicit InProcessCoordinator(int port, std::string auth_token = "")
      : registry_(RealClock::Get(), {absl::Milliseconds(20), absl::Seconds(5)}),
        service_(&registry_, &rendezvous_, /*jobs=*/nullptr, /*metrics=*/nullptr,
                 std::move(auth_token)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~InProcessCoordinator() { server_->Shutdown(); }

  int port() const { return port_; }
  WorkerRegistry& registry() { return registry_; }

 private:
  WorkerRegistry registry_;
  RendezvousStore rendezvous_;
  CoordinatorGrpcService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

WorkerInfo TestWorker() {
  WorkerInfo info;
  info.set_worker_id("w-test");
  info.set_incarnation_id("inc-1");
  info.set_host("127.0.0.1");
  info.set_device_kind(DEVICE_KIND_CPU);
  return info;
}

// Polls `condition` for up to 10 s.
template <typename Condition>
bool Eventually(Condition condition) {
  for (int i = 0; i < 1000; ++i) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(WorkerAgentTest, RegistersHeartbeatsAndReregistersAfterCoordinatorRestart) {
  auto coordinator = std::make_unique<InProcessCoordinator>(0);
  const int port = coordinator->port();
  ASSERT_NE(port, 0);
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto stub = Coordinator::NewStub(channel);
  WorkerAgent agent(stub.get(), TestWorker());
  Notification stop;
  std::thread runner([&] { EXPECT_TRUE(agent.Run(&stop).ok()); });

  ASSERT_TRUE(Eventually([&] { return coordinator->registry().CountAlive() == 1; }));
  ASSERT_TRUE(Eventually([&] { return agent.heartbeats() >= 3; }));
  EXPECT_EQ(coordinator->registry().List()[0].worker().worker_id(), "w-test");

  // Restart: the new coordinator knows nobody; the next heartbeat gets NOT_FOUND and the
  // agent registers again.
  coordinator.reset();
  coordinator = std::make_unique<InProcessCoordinator>(port);
  ASSERT_EQ(coordinator->port(), port);
  EXPECT_TRUE(Eventually([&] { return coordinator->registry().CountAlive() == 1; }));
  // The agent counts a registration once its RPC has returned, which may be just after the
  // new coordinator counts the worker alive.
  EXPECT_TRUE(Eventually([&] { return agent.registrations() >= 2; }))
      << "registrations: " << agent.registrations();

  stop.Notify();
  runner.join();
}

TEST(WorkerAgentTest, WaitsForACoordinatorThatStartsLater) {
  int port = 0;
  {
    InProcessCoordinator probe(0);  // Learn a free port, then free it.
    port = probe.port();
  }
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto stub = Coordinator::NewStub(channel);
  WorkerAgent agent(stub.get(), TestWorker());
  Notification stop;
  std::thread runner([&] { EXPECT_TRUE(agent.Run(&stop).ok()); });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(agent.registrations(), 0);

  InProcessCoordinator coordinator(port);
  ASSERT_EQ(coordinator.port(), port);
  EXPECT_TRUE(Eventually([&] { return coordinator.registry().CountAlive() == 1; }));

  const absl::Time stop_requested = absl::Now();
  stop.Notify();
  runner.join();
  EXPECT_LT(absl::Now() - stop_requested, absl::Seconds(2)) << "stop must not wait";
}

TEST(WorkerAgentTest, RefusedTokenEndsRunNamingTheWorkerFlag) {
  InProcessCoordinator coordinator(0, "s3cret");
  ASSERT_NE(coordinator.port(), 0);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", coordinator.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = Coordinator::NewStub(channel);
  for (const std::string token : {"guess", ""}) {
    WorkerAgent agent(stub.get(), TestWorker(), /*ranks=*/nullptr, token);
    Notification stop;
    // Run returns by itself; a retry loop would only end at the safety stop below.
    absl::Status ended;
    Notification returned;
    std::thread runner([&] {
      ended = agent.Run(&stop);
      returned.Notify();
    });
    const bool returned_alone = returned.WaitForNotificationWithTimeout(absl::Seconds(10));
    stop.Notify();
    runner.join();
    ASSERT_TRUE(returned_alone) << "token '" << token << "': kept retrying";
    EXPECT_EQ(ended.code(), absl::StatusCode::kUnauthenticated) << ended;
    EXPECT_THAT(std::string(ended.message()), HasSubstr("(UNAUTHENTICATED: "));
    EXPECT_THAT(std::string(ended.message()), HasSubstr("worker --token_file"));
    EXPECT_EQ(agent.registrations(), 0);
    EXPECT_EQ(coordinator.registry().CountAlive(), 0);
  }

  WorkerAgent agent(stub.get(), TestWorker(), /*ranks=*/nullptr, "s3cret");
  Notification stop;
  absl::Status ended = absl::UnknownError("still running");
  std::thread runner([&] { ended = agent.Run(&stop); });
  EXPECT_TRUE(Eventually([&] { return coordinator.registry().CountAlive() == 1; }));
  stop.Notify();
  runner.join();
  EXPECT_TRUE(ended.ok()) << ended;
}

TEST(WorkerAgentTest, OnlyCredentialRefusalsArePermanent) {
  EXPECT_TRUE(IsCredentialRefusal(absl::UnauthenticatedError("the bearer token is not ...")));
  EXPECT_TRUE(IsCredentialRefusal(absl::PermissionDeniedError("no")));
  EXPECT_FALSE(IsCredentialRefusal(absl::UnavailableError("connection refused")));
  EXPECT_FALSE(IsCredentialRefusal(absl::DeadlineExceededError("deadline")));
  EXPECT_FALSE(IsCredentialRefusal(absl::InvalidArgumentError("no worker_id")));

  EXPECT_EQ(ExplainCredentialRefusal(absl::UnauthenticatedError("the bearer token is not the "
                                                                "coordinator's"),
                                     /*sent_token=*/true)
                .message(),
            "the coordinator refused our token (UNAUTHENTICATED: the bearer token is not the "
            "coordinator's): check worker --token_file");
  const absl::Status none =
      ExplainCredentialRefusal(absl::UnauthenticatedError("token required"), false);
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(none.message(),
            "the coordinator wants a token and we sent none (UNAUTHENTICATED: token required): "
            "pass worker --token_file=FILE");
}

TEST(WorkerAgentTest, UnreportedExitCarriesTheLogsLastLineAndItsCode) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string log = std::string(tmp != nullptr ? tmp : "/tmp") + "/rank-oom.log";
  std::ofstream(log) << "engine: CPU\nstep 1/9 | loss 5.5\n"
                        "train[rank 3]: RESOURCE_EXHAUSTED: std::bad_alloc (std::bad_alloc) in a "
                        "worker thread: the rank needs more memory than it can get\n\n";
  RankExit exit;
  exit.assignment.set_job_id("job-7");
  exit.assignment.set_generation(2);
  exit.assignment.mutable_rank()->set_global_rank(3);
  exit.exit_code = 2;
  exit.log_path = log;
  RankResult result = UnreportedRankResult(exit, "w0");
  EXPECT_EQ(result.job_id(), "job-7");
  EXPECT_EQ(result.generation(), 2);
  EXPECT_EQ(result.global_rank(), 3);
  EXPECT_EQ(result.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(result.message(),
              ::testing::HasSubstr("training process on worker w0 exited with code 2 without "
                                   "reporting; log " +
                                   log + ": train[rank 3]: RESOURCE_EXHAUSTED: std::bad_alloc"));

  std::ofstream(log) << "step 1/9 | loss 5.5\n";
  exit.signaled = true;
  exit.signal = 11;
  result = UnreportedRankResult(exit, "w0");
  EXPECT_EQ(result.code(), static_cast<int>(absl::StatusCode::kInternal));
  EXPECT_THAT(result.message(), ::testing::HasSubstr("was killed by signal 11"));
  EXPECT_THAT(result.message(), ::testing::HasSubstr(": step 1/9 | loss 5.5"));
}

}  // namespace
}  // namespace mtrain
