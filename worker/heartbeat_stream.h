// The worker daemon's end of Coordinator.HeartbeatStream: one long-lived stream on which
// each heartbeat is a message and its answer the next message back. At thousands of
// workers a unary call a second per worker was most of the coordinator's gRPC work (call
// setup, headers and trailers on both ends); a message on an open stream costs a fraction
// of that.
//
// A stream cannot carry a per-call deadline, so each exchange waits on a private
// completion queue with its own deadline: a coordinator that stops answering (hung, or
// its machine gone without a reset) fails the exchange after `timeout` as a unary call's
// deadline would, the stream is cancelled, and the next exchange opens a new one.
#ifndef MTRAIN_WORKER_HEARTBEAT_STREAM_H_
#define MTRAIN_WORKER_HEARTBEAT_STREAM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"

namespace mtrain {

class HeartbeatStream {
 public:
  // `stub` must outlive this object. A non-empty `token` is sent as the bearer token when
  // a stream opens.
  HeartbeatStream(Coordinator::StubInterface* stub, std::string token);
  // Closes the open stream, if any (the coordinator sees a clean end).
  ~HeartbeatStream();
  HeartbeatStream(const HeartbeatStream&) = delete;
  HeartbeatStream& operator=(const HeartbeatStream&) = delete;

  // Sends `request` (opening a stream first if none is open) and waits up to `timeout`
  // for its answer. An error is the coordinator's (the stream ended with it: NOT_FOUND,
  // FAILED_PRECONDITION, UNAUTHENTICATED, UNIMPLEMENTED from a coordinator without the
  // method, ...), or DEADLINE_EXCEEDED, or UNAVAILABLE for a broken connection; after an
  // error the stream is gone and the next call opens another.
  absl::StatusOr<HeartbeatResponse> Exchange(const HeartbeatRequest& request,
                                             absl::Duration timeout);

  // Streams opened so far (each error costs one; tests read it).
  int streams_opened() const { return streams_opened_; }

 private:
  enum Op { kStarted, kWritten, kRead, kWritesDone, kFinished, kNumOps };

  // Starts the call and waits for it until `deadline`.
  absl::Status Open(absl::Time deadline);
  // Waits until operation `op` (the only one in flight) completes or `deadline` passes;
  // false on the deadline. `ok` is the operation's outcome.
  bool Await(Op op, absl::Time deadline, bool* ok);
  // Ends the stream after an error or a timeout and forgets it: with `cancel` (a timeout)
  // cancels it and waits for the operation in flight, then collects the final status.
  // Returns the coordinator's error, or `fallback` when there is none to tell (it ended
  // OK, or we cancelled).
  absl::Status Abandon(bool cancel, const absl::Status& fallback);

  Coordinator::StubInterface* const stub_;
  const std::string token_;
  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientAsyncReaderWriterInterface<HeartbeatRequest, HeartbeatResponse>>
      stream_;
  // The operation whose completion has not been taken from the queue yet, or kNumOps.
  Op in_flight_ = kNumOps;
  int tags_[kNumOps] = {};
  int streams_opened_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_WORKER_HEARTBEAT_STREAM_H_
