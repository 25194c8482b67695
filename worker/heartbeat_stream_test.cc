// The worker's heartbeat stream against small real gRPC services on loopback: answers come
// back one per heartbeat on one stream, the coordinator's refusal comes back with its code,
// a coordinator that stops answering fails the exchange at its deadline, and the next
// exchange opens a fresh stream.
#include "worker/heartbeat_stream.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;

// A coordinator that implements only HeartbeatStream (synchronously: one thread per
// stream is fine in a test). Each heartbeat is answered with an abort command naming the
// request's worker and the count of beats the stream has seen; worker "refuse-me" ends the
// stream with NOT_FOUND, and while `silent` it reads without answering.
class ScriptedCoordinator final : public Coordinator::Service {
 public:
  grpc::Status HeartbeatStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<HeartbeatResponse, HeartbeatRequest>* stream) override {
    {
      absl::MutexLock lock(&mutex_);
      ++streams_;
      const auto token = context->client_metadata().find("authorization");
      if (token != context->client_metadata().end()) {
        last_token_ = std::string(token->second.data(), token->second.size());
      }
    }
    HeartbeatRequest request;
    int beats = 0;
    while (stream->Read(&request)) {
      if (request.worker_id() == "refuse-me") {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "worker refuse-me is not registered");
      }
      if (silent()) continue;
      HeartbeatResponse response;
      AbortCommand* abort = response.add_commands()->mutable_abort();
      abort->set_job_id(request.worker_id());
      abort->set_generation(++beats);
      if (!stream->Write(response)) break;
    }
    return grpc::Status::OK;
  }

  void set_silent(bool silent) {
    absl::MutexLock lock(&mutex_);
    silent_ = silent;
  }
  bool silent() {
    absl::MutexLock lock(&mutex_);
    return silent_;
  }
  int streams() {
    absl::MutexLock lock(&mutex_);
    return streams_;
  }
  std::string last_token() {
    absl::MutexLock lock(&mutex_);
    return last_token_;
  }

 private:
  absl::Mutex mutex_;
  bool silent_ = false;
  int streams_ = 0;
  std::string last_token_;
};

class HeartbeatStreamTest : public ::testing::Test {
 protected:
  void Start(grpc::Service* service) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Coordinator::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  static HeartbeatRequest Beat(const std::string& worker) {
    HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_incarnation_id("inc");
    return request;
  }

  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

TEST_F(HeartbeatStreamTest, EachBeatGetsItsAnswerOnOneStream) {
  ScriptedCoordinator coordinator;
  Start(&coordinator);
  {
    HeartbeatStream stream(stub_.get(), "tok");
    for (int beat = 1; beat <= 5; ++beat) {
      absl::StatusOr<HeartbeatResponse> answer = stream.Exchange(Beat("w7"), absl::Seconds(10));
      ASSERT_TRUE(answer.ok()) << answer.status();
      ASSERT_EQ(answer->commands_size(), 1);
      EXPECT_EQ(answer->commands(0).abort().job_id(), "w7");
      EXPECT_EQ(answer->commands(0).abort().generation(), beat);  // the same stream's count
    }
    EXPECT_EQ(stream.streams_opened(), 1);
  }
  EXPECT_EQ(coordinator.streams(), 1);
  EXPECT_EQ(coordinator.last_token(), "Bearer tok");
}

TEST_F(HeartbeatStreamTest, TheCoordinatorsRefusalComesBackWithItsCodeAndANewStreamFollows) {
  ScriptedCoordinator coordinator;
  Start(&coordinator);
  HeartbeatStream stream(stub_.get(), "");
  ASSERT_TRUE(stream.Exchange(Beat("w1"), absl::Seconds(10)).ok());
  absl::StatusOr<HeartbeatResponse> refused = stream.Exchange(Beat("refuse-me"), absl::Seconds(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("not registered"));
  absl::StatusOr<HeartbeatResponse> again = stream.Exchange(Beat("w1"), absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->commands(0).abort().generation(), 1);  // counted by a new stream
  EXPECT_EQ(stream.streams_opened(), 2);
}

TEST_F(HeartbeatStreamTest, ACoordinatorThatStopsAnsweringFailsTheBeatAtItsDeadline) {
  ScriptedCoordinator coordinator;
  Start(&coordinator);
  HeartbeatStream stream(stub_.get(), "");
  ASSERT_TRUE(stream.Exchange(Beat("w1"), absl::Seconds(10)).ok());
  coordinator.set_silent(true);
  const absl::Time start = absl::Now();
  absl::StatusOr<HeartbeatResponse> late = stream.Exchange(Beat("w1"), absl::Milliseconds(300));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("did not answer the heartbeat"));
  EXPECT_GE(waited, absl::Milliseconds(290));
  EXPECT_LT(waited, absl::Seconds(5));
  coordinator.set_silent(false);
  absl::StatusOr<HeartbeatResponse> back = stream.Exchange(Beat("w1"), absl::Seconds(10));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(stream.streams_opened(), 2);
}

TEST_F(HeartbeatStreamTest, ACoordinatorWithoutTheMethodAnswersUnimplemented) {
  Coordinator::Service bare;  // every method UNIMPLEMENTED
  Start(&bare);
  HeartbeatStream stream(stub_.get(), "");
  absl::StatusOr<HeartbeatResponse> answer = stream.Exchange(Beat("w1"), absl::Seconds(10));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnimplemented) << answer.status();
}

TEST_F(HeartbeatStreamTest, NoCoordinatorIsUnavailableNotAHang) {
  int port = 0;
  {
    grpc::ServerBuilder builder;  // learn a free port, then free it
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    Coordinator::Service bare;
    builder.RegisterService(&bare);
    builder.BuildAndStart()->Shutdown();
  }
  stub_ = Coordinator::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  HeartbeatStream stream(stub_.get(), "");
  const absl::Time start = absl::Now();
  absl::StatusOr<HeartbeatResponse> answer = stream.Exchange(Beat("w1"), absl::Seconds(3));
  EXPECT_FALSE(answer.ok());
  EXPECT_TRUE(answer.status().code() == absl::StatusCode::kUnavailable ||
              answer.status().code() == absl::StatusCode::kDeadlineExceeded)
      << answer.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace mtrain
