// The bearer token trainctl sends: read from --token or --token_file and attached to
// every RPC as gRPC metadata `authorization: Bearer <token>` (what a coordinator started
// with --auth_token_file checks on mutating RPCs), and the hint printed when the
// coordinator refuses a call for want of it.
#ifndef MTRAIN_COORDINATOR_CLI_AUTH_TOKEN_H_
#define MTRAIN_COORDINATOR_CLI_AUTH_TOKEN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtrain {

// The metadata key and value prefix; gRPC requires lower-case keys.
inline constexpr char kAuthorizationMetadataKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// The file's content with trailing whitespace removed (editors and `echo` add a newline
// that is no part of the token). INVALID_ARGUMENT naming the flag and the file when it
// cannot be read or holds no token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The token from the flag values: `token` if set, else the content of `token_file` if
// set, else "" (send no authorization). INVALID_ARGUMENT when both are set, or as
// ReadTokenFile.
absl::StatusOr<std::string> ResolveToken(const std::string& token, const std::string& token_file);

// For an UNAUTHENTICATED status: the same code with a message that says how to fix it
// (pass --token_file, or check it when a token was sent and refused). Other statuses are
// returned unchanged.
absl::Status ExplainUnauthenticated(const absl::Status& status, bool sent_token);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_CLI_AUTH_TOKEN_H_
