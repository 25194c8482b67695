// libFuzzer target for the coordinator's HTTP port: each input is written, as a client
// would, to a live HttpServer (libmicrohttpd and this project's glue around it) on
// loopback, then the client's side is shut and the reply read until the server closes.
// Whatever the bytes: the handler sees only GET or HEAD and a clean absolute path, a
// reply is an HTTP/1.1 status line or nothing, a reply once begun ends (a stall aborts),
// and the server still answers a plain GET every kCheckEvery inputs. Built with
// Debian's clang by tools/fuzz_http_message.sh (`-fsanitize=fuzzer,address,undefined`:
// the glue is instrumented, Debian's libmicrohttpd is not, its crashes still show);
// Bazel compiles it too (as a library: gcc has no libFuzzer), so it never rots.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "coordinator/http_server.h"

namespace {

// A reply that has begun and takes this long to end is a hang.
constexpr auto kReplyDeadline = std::chrono::seconds(10);
// How long an input's silence is waited for: the server answers a whole request in well
// under a millisecond, and this bounds the time spent on inputs that are not one.
constexpr auto kQuiet = std::chrono::milliseconds(20);
// How long the plain GET of the check may take to begin answering.
constexpr auto kCheckQuiet = std::chrono::milliseconds(5000);
// A plain GET checks the server is still answering after every this many inputs.
constexpr int kCheckEvery = 16;

mtrain::HttpResponse Handle(const mtrain::HttpRequest& request) {
  if (request.method != "GET" && request.method != "HEAD") std::abort();
  const std::string& path = request.path;
  if (path.empty() || path[0] != '/') std::abort();
  for (const char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) std::abort();
  }
  if (path == "/ping") return {200, "text/plain", "pong", {}};
  // The query goes back in a header too: whatever bytes it holds must not break the reply.
  return {200, "text/plain", path + "?" + request.query, {{"X-Echo", request.query}}};
}

int Port() {
  static const int port = [] {
    mtrain::HttpServerLimits limits;
    // Short: an input that is not a whole request holds its connection until a timeout.
    // Those connections must not reach the per-client limit either, as every input comes
    // from 127.0.0.1.
    limits.head_timeout_ms = 200;
    limits.idle_timeout_s = 1;
    limits.max_connections = 1000;
    limits.max_connections_per_client = 1000;
    static absl::StatusOr<std::unique_ptr<mtrain::HttpServer>> server =
        mtrain::HttpServer::Start("127.0.0.1:0", Handle, limits);
    if (!server.ok()) {
      std::fprintf(stderr, "http_message_fuzz: %s\n", server.status().ToString().c_str());
      std::abort();
    }
    return (*server)->port();
  }();
  return port;
}

// Sends `bytes` on a fresh connection, shuts the sending side and returns what the server
// writes until it closes. A server that says nothing for `quiet` is waiting for the rest
// of a request (libmicrohttpd 0.9.75 does not always notice the shut side, and holds such
// a connection until its head timeout): the input is done with. A reply, once begun, must
// end with the close within kReplyDeadline, else this aborts.
std::string Exchange(absl::string_view bytes, std::chrono::milliseconds quiet) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(Port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    std::perror("http_message_fuzz: connect");
    std::abort();
  }
  // The server may close early (a refusal): stop sending then, keep what it said.
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  const auto start = std::chrono::steady_clock::now();
  char buffer[65536];
  for (;;) {
    const auto deadline = start + (reply.empty() ? quiet : kReplyDeadline);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd polled = {fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&polled, 1, static_cast<int>(left.count())) <= 0) {
      if (reply.empty()) break;  // silent: still waiting for a request
      std::fprintf(stderr, "http_message_fuzz: a reply did not end within %lld s\n",
                   static_cast<long long>(kReplyDeadline.count()));
      std::abort();
    }
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;  // closed (or reset)
    reply.append(buffer, static_cast<size_t>(n));
  }
  // A reset rather than TIME_WAIT: thousands of connections a second would otherwise run
  // out of ephemeral ports.
  const linger reset = {1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  ::close(fd);
  return reply;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  Port();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string reply =
      Exchange(absl::string_view(reinterpret_cast<const char*>(data), size), kQuiet);
  if (!reply.empty() && !absl::StartsWith(reply, "HTTP/1.1 ")) {
    std::fprintf(stderr, "http_message_fuzz: reply is not HTTP/1.1: %.60s\n", reply.c_str());
    std::abort();
  }
  static int inputs = 0;
  if (++inputs % kCheckEvery == 0) {
    const std::string check = Exchange("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", kCheckQuiet);
    if (!absl::StartsWith(check, "HTTP/1.1 200 ") || !absl::EndsWith(check, "\r\n\r\npong")) {
      std::fprintf(stderr, "http_message_fuzz: the server stopped answering: %.60s\n",
                   check.c_str());
      std::abort();
    }
  }
  return 0;
}
