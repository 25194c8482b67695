#include "worker/heartbeat_stream.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace mtrain {
namespace {

// How long closing a healthy stream may take before it is cancelled instead.
constexpr absl::Duration kCloseGrace = absl::Seconds(1);

}  // namespace

HeartbeatStream::HeartbeatStream(Coordinator::StubInterface* stub, std::string token)
    : stub_(stub), token_(std::move(token)) {}

HeartbeatStream::~HeartbeatStream() {
  if (stream_ != nullptr) {
    // Half-close, then collect the coordinator's OK; a coordinator too slow for that is
    // cut off (it sees a cancelled stream, which it treats alike).
    bool ok = false;
    const absl::Time deadline = absl::Now() + kCloseGrace;
    stream_->WritesDone(&tags_[kWritesDone]);
    in_flight_ = kWritesDone;
    bool closed = Await(kWritesDone, deadline, &ok) && ok;
    if (closed) {
      grpc::Status status;
      stream_->Finish(&status, &tags_[kFinished]);
      in_flight_ = kFinished;
      closed = Await(kFinished, deadline, &ok);
    }
    if (!closed) (void)Abandon(/*cancel=*/true, absl::CancelledError("stopping"));
  }
  queue_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
}

bool HeartbeatStream::Await(Op op, absl::Time deadline, bool* ok) {
  void* tag = nullptr;
  const auto until = absl::ToChronoTime(deadline);
  while (true) {
    switch (queue_.AsyncNext(&tag, ok, until)) {
      case grpc::CompletionQueue::GOT_EVENT:
        // Only one operation is ever in flight, so the event is `op`'s.
        in_flight_ = kNumOps;
        (void)op;
        return true;
      case grpc::CompletionQueue::TIMEOUT:
        return false;
      case grpc::CompletionQueue::SHUTDOWN:
        *ok = false;
        return true;
    }
  }
}

absl::Status HeartbeatStream::Open(absl::Time deadline) {
  context_ = std::make_unique<grpc::ClientContext>();
  if (!token_.empty()) context_->AddMetadata("authorization", "Bearer " + token_);
  stream_ = stub_->PrepareAsyncHeartbeatStream(context_.get(), &queue_);
  ++streams_opened_;
  stream_->StartCall(&tags_[kStarted]);
  in_flight_ = kStarted;
  bool ok = false;
  if (!Await(kStarted, deadline, &ok)) {
    return Abandon(/*cancel=*/true,
                   absl::DeadlineExceededError("opening the heartbeat stream timed out"));
  }
  if (!ok)
    return Abandon(/*cancel=*/false, absl::UnavailableError("cannot open a heartbeat stream"));
  return absl::OkStatus();
}

absl::Status HeartbeatStream::Abandon(bool cancel, const absl::Status& fallback) {
  bool ok = false;
  if (cancel) {
    context_->TryCancel();
    // A cancelled call completes what it has in flight promptly.
    if (in_flight_ != kNumOps) Await(in_flight_, absl::InfiniteFuture(), &ok);
  }
  grpc::Status status;
  stream_->Finish(&status, &tags_[kFinished]);
  in_flight_ = kFinished;
  Await(kFinished, absl::InfiniteFuture(), &ok);
  stream_.reset();
  context_.reset();
  // After our own cancel the status says only CANCELLED; the reason is ours.
  if (cancel || status.ok()) return fallback;
  return FromGrpcStatus(status);
}

absl::StatusOr<HeartbeatResponse> HeartbeatStream::Exchange(const HeartbeatRequest& request,
                                                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const auto timed_out = [&](const char* what) {
    return absl::DeadlineExceededError(
        absl::StrCat("the coordinator did not ", what, " within ", absl::FormatDuration(timeout)));
  };
  if (stream_ == nullptr) {
    if (absl::Status opened = Open(deadline); !opened.ok()) return opened;
  }
  bool ok = false;
  stream_->Write(request, &tags_[kWritten]);
  in_flight_ = kWritten;
  if (!Await(kWritten, deadline, &ok)) {
    return Abandon(/*cancel=*/true, timed_out("take the heartbeat"));
  }
  // A failed write means the stream has ended; its status says why.
  if (!ok) return Abandon(/*cancel=*/false, absl::UnavailableError("the heartbeat stream broke"));
  HeartbeatResponse response;
  stream_->Read(&response, &tags_[kRead]);
  in_flight_ = kRead;
  if (!Await(kRead, deadline, &ok))
    return Abandon(/*cancel=*/true, timed_out("answer the heartbeat"));
  if (!ok) {
    return Abandon(/*cancel=*/false,
                   absl::UnavailableError("the coordinator closed the heartbeat stream"));
  }
  return response;
}

}  // namespace mtrain
