// Conversions between absl::Status (used everywhere inside the project) and grpc::Status
// (used only at the transport edge). The canonical codes are numerically identical.
#ifndef MTRAIN_COMMON_GRPC_STATUS_H_
#define MTRAIN_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace mtrain {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace mtrain

#endif  // MTRAIN_COMMON_GRPC_STATUS_H_
