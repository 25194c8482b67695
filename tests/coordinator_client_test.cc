#include "worker/coordinator_client.h"

#include <memory>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "coordinator/grpc_service.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

// The rendezvous store over a real coordinator service on loopback.
class CoordinatorKeyValueStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The coordinator serves keys only under generations it placed (JobManager opens them).
    for (const char* prefix : {"job-1/gen-2/", "job-1/gen-3/", "p/"}) {
      ASSERT_TRUE(rendezvous_.OpenGeneration(prefix, 1 << 20).ok());
    }
    service_ =
        std::make_unique<CoordinatorGrpcService>(&workers_, &rendezvous_, nullptr, nullptr, "");
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<CoordinatorClient>("127.0.0.1:" + std::to_string(port_), "");
  }
  void TearDown() override { server_->Shutdown(); }

  WorkerRegistry workers_{RealClock::Get(), WorkerRegistryOptions{}};
  RendezvousStore rendezvous_;
  std::unique_ptr<CoordinatorGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(CoordinatorKeyValueStoreTest, KeysLiveUnderThePrefix) {
  CoordinatorKeyValueStore store(client_.get(), "job-1/gen-2/");
  ASSERT_TRUE(store.Set("a", "1").ok());
  EXPECT_EQ(*store.Get("a"), "1");
  EXPECT_TRUE(store.Wait({"a"}, absl::Seconds(1)).ok());
  CoordinatorKeyValueStore other(client_.get(), "job-1/gen-3/");
  EXPECT_EQ(other.Get("a").status().code(), absl::StatusCode::kNotFound);
  // A generation the coordinator does not run (ended, or never placed) is refused.
  CoordinatorKeyValueStore stale(client_.get(), "job-1/gen-1/");
  EXPECT_EQ(stale.Set("a", "1").code(), absl::StatusCode::kFailedPrecondition);
}

// A wait for a sliver of a millisecond (what remains of a watchdog's deadline) must not
// become the coordinator's 30 s default, which a request timeout of 0 means.
TEST_F(CoordinatorKeyValueStoreTest, SubMillisecondWaitsStayShort) {
  CoordinatorKeyValueStore store(client_.get(), "p/");
  for (absl::Duration wait : {absl::Microseconds(300), absl::ZeroDuration()}) {
    const absl::Time start = absl::Now();
    const absl::Status status = store.Wait({"never-set"}, wait);
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "a " << wait << " wait took too long";
  }
}

}  // namespace
}  // namespace mtrain
