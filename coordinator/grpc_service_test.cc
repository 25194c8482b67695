// The gRPC adapter over a real server on loopback: the rendezvous rules and limits reach
// clients with their codes and messages, and with a token every RPC of the service needs
// it while the health service stays open.
#include "coordinator/grpc_service.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/worker_registry.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/raw_grpc_call.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret-token";
constexpr char kLive[] = "job-1/gen-1/";

class GrpcServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& token) {
    service_ = std::make_unique<CoordinatorGrpcService>(&workers_, &rendezvous_, /*jobs=*/nullptr,
                                                        /*metrics=*/nullptr, token);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    stub_ = Coordinator::NewStub(channel_);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // A call context with `token` as bearer token ("" sends none).
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }

  grpc::Status Set(const std::string& key, const std::string& value,
                   const std::string& token = "") {
    KeyValueSetRequest request;
    request.set_key(key);
    request.set_value(value);
    KeyValueSetResponse response;
    return stub_->KeyValueSet(Context(token).get(), request, &response);
  }
  grpc::Status Get(const std::string& key, const std::string& token = "",
                   std::string* value = nullptr) {
    KeyValueGetRequest request;
    request.set_key(key);
    KeyValueGetResponse response;
    grpc::Status status = stub_->KeyValueGet(Context(token).get(), request, &response);
    if (value != nullptr) *value = response.value();
    return status;
  }
  grpc::Status Wait(const std::string& key, const std::string& token = "") {
    KeyValueWaitRequest request;
    request.add_keys(key);
    request.set_timeout_ms(100);
    KeyValueWaitResponse response;
    return stub_->KeyValueWait(Context(token).get(), request, &response);
  }

  WorkerRegistry workers_{RealClock::Get(), WorkerRegistryOptions{}};
  RendezvousStore rendezvous_{/*total_byte_limit=*/4096};
  std::unique_ptr<CoordinatorGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

// KeyValueWait runs on the callback API: 64 waits in flight at once hold no server thread
// each, each ends with the Set of its key, and a client that gives up (its deadline)
// leaves nothing pending in the store.
TEST_F(GrpcServiceTest, RendezvousWaitsAreAnsweredWhenTheKeyIsSetOrTheClientGoes) {
  Start("");
  ASSERT_TRUE(rendezvous_.OpenGeneration(kLive, 1000000).ok());
  constexpr int kWaits = 64;
  std::vector<grpc::Status> results(kWaits);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaits; ++i) {
    waiters.emplace_back([this, i, &results] {
      KeyValueWaitRequest request;
      request.add_keys(absl::StrCat(kLive, "rank-", i % 4));
      request.set_timeout_ms(20000);
      KeyValueWaitResponse response;
      results[i] = stub_->KeyValueWait(Context().get(), request, &response);
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (rendezvous_.PendingWaits() < kWaits && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(rendezvous_.PendingWaits(), static_cast<size_t>(kWaits));
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(Set(absl::StrCat(kLive, "rank-", r), "addr").ok());
  for (std::thread& t : waiters) t.join();
  for (const grpc::Status& status : results) EXPECT_TRUE(status.ok()) << status.error_message();

  // A client deadline well before the wait's own: the call is cancelled, and so is the wait.
  KeyValueWaitRequest request;
  request.add_keys(absl::StrCat(kLive, "never"));
  request.set_timeout_ms(60000);
  KeyValueWaitResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  EXPECT_EQ(stub_->KeyValueWait(&context, request, &response).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  const absl::Time gone = absl::Now() + absl::Seconds(10);
  while (rendezvous_.PendingWaits() > 0 && absl::Now() < gone) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(rendezvous_.PendingWaits(), 0u) << "the cancelled call's wait was not dropped";
}

TEST_F(GrpcServiceTest, RendezvousKeysOutsideLiveGenerationsAreRefusedNamingKeyAndRule) {
  Start("");
  ASSERT_TRUE(rendezvous_.OpenGeneration(kLive, 1000).ok());
  ASSERT_TRUE(Set(absl::StrCat(kLive, "rank-0"), "addr").ok());
  std::string value;
  ASSERT_TRUE(Get(absl::StrCat(kLive, "rank-0"), "", &value).ok());
  EXPECT_EQ(value, "addr");

  for (const grpc::Status& refused :
       {Set("attacker/blob", "x"), Get("job-1/gen-0/rank-0"), Wait("job-2/gen-1/rank-0")}) {
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << refused.error_message();
    EXPECT_THAT(refused.error_message(), HasSubstr("outside every live generation"));
    EXPECT_THAT(refused.error_message(), HasSubstr("rule: rendezvous keys start with"));
  }
  EXPECT_THAT(Set("attacker/blob", "x").error_message(), HasSubstr("'attacker/blob'"));

  // A generation ended: its keys are gone, and a late rank learns it at once.
  rendezvous_.CloseGeneration(kLive);
  EXPECT_EQ(Get(absl::StrCat(kLive, "rank-0")).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(rendezvous_.TotalBytes(), 0u);
}

TEST_F(GrpcServiceTest, RendezvousByteLimitsAnswerResourceExhaustedNamingTheLimit) {
  Start("");
  ASSERT_TRUE(rendezvous_.OpenGeneration(kLive, 1000).ok());
  ASSERT_TRUE(rendezvous_.OpenGeneration("job-2/gen-1/", 4096).ok());
  const grpc::Status generation = Set(absl::StrCat(kLive, "big"), std::string(1000, 'x'));
  EXPECT_EQ(generation.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(generation.error_message(), HasSubstr("over its limit of 1000"));
  ASSERT_TRUE(Set(absl::StrCat(kLive, "fits"), std::string(900, 'x')).ok());
  // 4096 in all: job-2 gets what job-1 left, not its own 4096.
  const grpc::Status total = Set("job-2/gen-1/big", std::string(3500, 'x'));
  EXPECT_EQ(total.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(total.error_message(), HasSubstr("total limit of 4096"));
  EXPECT_THAT(total.error_message(), HasSubstr("--rendezvous_max_bytes"));
  EXPECT_TRUE(Set("job-2/gen-1/small", std::string(100, 'x')).ok());
  const grpc::Status value_too_big =
      Set(absl::StrCat(kLive, "huge"), std::string(kMaxRendezvousValueBytes + 1, 'x'));
  EXPECT_EQ(value_too_big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcServiceTest, WithATokenEveryRpcNeedsItAndHealthChecksStayOpen) {
  Start(kToken);
  ASSERT_TRUE(rendezvous_.OpenGeneration(kLive, 1000).ok());
  ASSERT_TRUE(rendezvous_.Set(absl::StrCat(kLive, "rank-0"), "addr").ok());

  // Every read, unary or streaming, without the token (and with a wrong one).
  for (const std::string& token : {std::string(), std::string("not-it")}) {
    std::vector<std::pair<std::string, grpc::Status>> calls;
    calls.emplace_back("KeyValueGet", Get(absl::StrCat(kLive, "rank-0"), token));
    calls.emplace_back("KeyValueWait", Wait(absl::StrCat(kLive, "rank-0"), token));
    {
      ListWorkersResponse response;
      calls.emplace_back("ListWorkers",
                         stub_->ListWorkers(Context(token).get(), ListWorkersRequest(), &response));
    }
    {
      GetJobRequest request;
      request.set_job_id("job-1");
      JobStatus response;
      calls.emplace_back("GetJob", stub_->GetJob(Context(token).get(), request, &response));
    }
    {
      ListJobsResponse response;
      calls.emplace_back("ListJobs",
                         stub_->ListJobs(Context(token).get(), ListJobsRequest(), &response));
    }
    {
      ListJobEventsRequest request;
      request.set_job_id("job-1");
      ListJobEventsResponse response;
      calls.emplace_back("ListJobEvents",
                         stub_->ListJobEvents(Context(token).get(), request, &response));
    }
    {
      ListCheckpointsRequest request;
      request.set_job_id("job-1");
      ListCheckpointsResponse response;
      calls.emplace_back("ListCheckpoints",
                         stub_->ListCheckpoints(Context(token).get(), request, &response));
    }
    {
      WatchJobRequest request;
      request.set_job_id("job-1");
      auto context = Context(token);
      auto reader = stub_->WatchJob(context.get(), request);
      JobStatus status;
      EXPECT_FALSE(reader->Read(&status));
      calls.emplace_back("WatchJob", reader->Finish());
    }
    {
      DownloadCheckpointRequest request;
      request.set_job_id("job-1");
      request.set_file("MANIFEST");
      auto context = Context(token);
      auto reader = stub_->DownloadCheckpoint(context.get(), request);
      CheckpointChunk chunk;
      EXPECT_FALSE(reader->Read(&chunk));
      calls.emplace_back("DownloadCheckpoint", reader->Finish());
    }
    calls.emplace_back("KeyValueSet", Set(absl::StrCat(kLive, "rank-1"), "x", token));
    for (const auto& [method, status] : calls) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << " with token '" << token << "': " << status.error_message();
    }
  }

  // With the token: the rendezvous works, and job reads get past authentication (this
  // service runs no job manager, so they answer UNAVAILABLE).
  std::string value;
  ASSERT_TRUE(Get(absl::StrCat(kLive, "rank-0"), kToken, &value).ok());
  EXPECT_EQ(value, "addr");
  EXPECT_TRUE(Set(absl::StrCat(kLive, "rank-1"), "x", kToken).ok());
  EXPECT_TRUE(Wait(absl::StrCat(kLive, "rank-1"), kToken).ok());
  ListWorkersResponse workers;
  EXPECT_TRUE(stub_->ListWorkers(Context(kToken).get(), ListWorkersRequest(), &workers).ok());
  GetJobRequest get;
  get.set_job_id("job-1");
  JobStatus job;
  EXPECT_EQ(stub_->GetJob(Context(kToken).get(), get, &job).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // Probes need no secret: HealthCheckRequest{} is zero bytes; SERVING is field 1 = 1.
  absl::StatusOr<std::string> health =
      RawGrpcCall(channel_, "/grpc.health.v1.Health/Check", "", absl::Seconds(10));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, std::string("\x08\x01", 2));
}

// Issue 15: a spec whose strings are not UTF-8 got INTERNAL (proto3 refuses it before any
// typed handler runs); it is INVALID_ARGUMENT naming the field, and a well-formed request
// still reaches the submit logic (here: no job manager, so UNAVAILABLE).
TEST_F(GrpcServiceTest, ASpecWithInvalidUtf8IsRefusedNamingTheField) {
  Start("");
  SubmitJobRequest request;
  request.mutable_spec()->set_name("utf8");
  request.mutable_spec()->mutable_data()->set_path("data/@@.txt");
  std::string bytes = request.SerializeAsString();
  const size_t at = bytes.find("@@");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 2, "\xff\xfe");
  absl::StatusOr<std::string> refused =
      RawGrpcCall(channel_, "/mtrain.Coordinator/SubmitJob", bytes, absl::Seconds(30));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::StartsWith("data.path: not valid UTF-8"));

  absl::StatusOr<std::string> garbage = RawGrpcCall(channel_, "/mtrain.Coordinator/SubmitJob",
                                                    std::string("\x0a\xff", 2), absl::Seconds(30));
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument) << garbage.status();
  EXPECT_THAT(std::string(garbage.status().message()), ::testing::HasSubstr("malformed"));

  SubmitJobResponse response;
  const grpc::Status typed = stub_->SubmitJob(Context().get(), request, &response);
  EXPECT_EQ(typed.error_code(), grpc::StatusCode::UNAVAILABLE) << typed.error_message();
}

TEST_F(GrpcServiceTest, SubmitBytesNeedTheTokenBeforeTheyAreParsed) {
  Start("secret");
  absl::StatusOr<std::string> refused = RawGrpcCall(channel_, "/mtrain.Coordinator/SubmitJob",
                                                    std::string("\x0a\xff", 2), absl::Seconds(30));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
}

}  // namespace
}  // namespace mtrain
