// The coordinator's own bearer token: read from --auth_token_file, or, when the
// coordinator listens beyond loopback and was given none, generated once into its state
// dir, so that a default install reachable from the network is not open to anyone who can
// reach its port (submit jobs, read rendezvous values, download weights).
//
//   absl::StatusOr<ServerToken> token =
//       ChooseServerToken(listen, auth_token_file, state_dir);  // after the state dir lock
//   if (token.ok() && token->generated_path) ...  // tell the operator where it is
//
// A loopback coordinator without --auth_token_file stays open: only local users reach it,
// and single-machine use (demo, tests, `train` development) needs no setup.
#ifndef MTRAIN_COORDINATOR_SERVER_TOKEN_H_
#define MTRAIN_COORDINATOR_SERVER_TOKEN_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace mtrain {

// Name of the generated token file inside the state dir.
inline constexpr char kStateDirTokenFile[] = "auth_token";
// Random bytes in a generated token (written as twice as many hex digits): 256 bits, out
// of reach of guessing.
inline constexpr int kGeneratedTokenBytes = 32;

// Whether `listen` (HOST:PORT as --listen takes it) accepts local connections only: a
// 127.0.0.0/8 or ::1 address (bracketed or not), `localhost`, or a `unix:` socket. A
// wildcard (0.0.0.0, [::], an empty host) or any other name or address is not.
bool IsLoopbackListenAddress(const std::string& listen);

// A token file's content with trailing whitespace stripped. INVALID_ARGUMENT naming the
// flag and the file when it is unreadable, empty, or not one line of printable ASCII (what
// gRPC metadata can carry: no client could send anything else).
absl::StatusOr<std::string> ReadServerTokenFile(const std::string& path);

// DIR/auth_token: read when it exists, else created: kGeneratedTokenBytes from
// /dev/urandom as lower-case hex, mode 0600, written to a temporary file and renamed, so
// a crash never leaves half a token. Requires the state dir lock (one writer).
// FAILED_PRECONDITION when an existing file may be read by group or others (the token
// would be no secret: chmod 600 it); other errors name the file.
struct StateDirToken {
  std::string token;
  std::string path;
  bool created = false;
};
absl::StatusOr<StateDirToken> LoadOrCreateStateDirToken(const std::string& state_dir);

// The token the coordinator checks, from its flags: the content of `auth_token_file` when
// given; else none ("") on a loopback `listen`; else the state dir's token, whose path is
// returned in `generated_path` (with `created` true on the first start).
struct ServerToken {
  std::string token;
  std::optional<std::string> generated_path;
  bool created = false;
};
absl::StatusOr<ServerToken> ChooseServerToken(const std::string& listen,
                                              const std::string& auth_token_file,
                                              const std::string& state_dir);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_SERVER_TOKEN_H_
