#include "tests/raw_grpc_call.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/generic/generic_stub.h"

namespace mtrain {
namespace {

// Waits for the completion of the operation tagged `tag`.
bool Await(grpc::CompletionQueue* queue, void* expected) {
  void* tag = nullptr;
  bool ok = false;
  return queue->Next(&tag, &ok) && tag == expected && ok;
}

}  // namespace

absl::StatusOr<std::string> RawGrpcCall(const std::shared_ptr<grpc::Channel>& channel,
                                        const std::string& method, const std::string& request,
                                        absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &queue);
  int start = 0, write = 0, done = 0, read = 0, finish = 0;
  call->StartCall(&start);
  absl::Status failure;
  if (!Await(&queue, &start)) failure = absl::UnavailableError("cannot start the call");

  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer response_buffer;
  bool got_response = false;
  if (failure.ok()) {
    call->Write(request_buffer, &write);
    if (!Await(&queue, &write)) failure = absl::UnavailableError("write failed");
  }
  if (failure.ok()) {
    call->WritesDone(&done);
    Await(&queue, &done);
    call->Read(&response_buffer, &read);
    got_response = Await(&queue, &read);
  }
  grpc::Status status;
  call->Finish(&status, &finish);
  Await(&queue, &finish);
  queue.Shutdown();
  void* tag;
  bool ok;
  while (queue.Next(&tag, &ok)) {
  }
  if (!status.ok()) return FromGrpcStatus(status);
  if (!failure.ok()) return failure;
  if (!got_response) return absl::NotFoundError(absl::StrCat(method, ": no response"));
  std::vector<grpc::Slice> slices;
  (void)response_buffer.Dump(&slices);
  std::string response;
  for (const grpc::Slice& s : slices) {
    response.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return response;
}

}  // namespace mtrain
