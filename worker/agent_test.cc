#include "worker/agent.h"

#include <memory>
#include <thread>

#include "common/clock.h"
#include "coordinator/grpc_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

// A real coordinator service on a loopback port, with its own registry: constructing a
// second one on the same port is a coordinator restart that forgot every worker.
class InProcessCoordinator {
 public:
  explicit InProcessCoordinator(int port)
      : registry_(RealClock::Get(), {absl::Milliseconds(20), absl::Seconds(5)}),
        service_(&registry_, &rendezvous_, /*jobs=*/nullptr, /*metrics=*/nullptr,
                 /*auth_token=*/"") {
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
  std::thread runner([&] { agent.Run(&stop); });

  ASSERT_TRUE(Eventually([&] { return coordinator->registry().CountAlive() == 1; }));
  ASSERT_TRUE(Eventually([&] { return agent.heartbeats() >= 3; }));
  EXPECT_EQ(coordinator->registry().List()[0].worker().worker_id(), "w-test");

  // Restart: the new coordinator knows nobody; the next heartbeat gets NOT_FOUND and the
  // agent registers again.
  coordinator.reset();
  coordinator = std::make_unique<InProcessCoordinator>(port);
  ASSERT_EQ(coordinator->port(), port);
  EXPECT_TRUE(Eventually([&] { return coordinator->registry().CountAlive() == 1; }));
  EXPECT_GE(agent.registrations(), 2);

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
  std::thread runner([&] { agent.Run(&stop); });
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

}  // namespace
}  // namespace mtrain
