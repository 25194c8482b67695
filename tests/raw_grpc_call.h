// One request/one response over any gRPC method, given as serialized bytes, through
// gRPC's generic (untyped) API. Lets tests talk to services whose generated classes we do
// not link, e.g. server reflection, whose classes live inside libgrpc++_reflection.
#ifndef MTRAIN_TESTS_RAW_GRPC_CALL_H_
#define MTRAIN_TESTS_RAW_GRPC_CALL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace mtrain {

// Sends `request` to `method` ("/package.Service/Method"), half-closes, and returns the
// first response message's bytes. Works for unary and streaming methods alike.
absl::StatusOr<std::string> RawGrpcCall(const std::shared_ptr<grpc::Channel>& channel,
                                        const std::string& method, const std::string& request,
                                        absl::Duration timeout);

}  // namespace mtrain

#endif  // MTRAIN_TESTS_RAW_GRPC_CALL_H_
