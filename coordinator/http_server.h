// The coordinator's HTTP port: a small server that hands every request to one handler
// function. Routing and content belong to the caller (coordinator/http_routes.h); the
// wire format to coordinator/http_message.h; this file owns only the sockets and threads.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> server,
//                    HttpServer::Start("127.0.0.1:0", [](const HttpRequest& request) {
//                      return HttpResponse{200, "text/plain; charset=utf-8", "hello\n"};
//                    }));
//   std::printf("serving on port %d\n", server->port());
//
// Why not civetweb (which served this port before): civetweb gives each connection a
// thread from the moment it is accepted, so a handful of clients that connect and send
// nothing held every thread until its request timeout, and Prometheus got no answer (8
// half-open connections: 0 of 6 scrapes answered in 30 s). Here one event-loop thread
// owns every socket: it reads request heads without blocking and hands only complete
// requests to the handler threads, so an idle connection costs a file descriptor and a
// buffer, never a thread. Limits (constants below):
//   - the request head must arrive within kHttpRequestTimeoutMs of the connection's
//     accept (408 if part of it came, closed silently if nothing did), and be at most
//     kHttpMaxRequestHeadBytes (431);
//   - a response must be taken within kHttpWriteTimeoutMs;
//   - one request per connection (no keep-alive: nothing waits on an idle connection);
//   - at most kHttpMaxConnectionsPerClient connections per client address and
//     kHttpMaxConnections in all. A connection beyond either limit closes the oldest one
//     (of that address, or of all) that has not yet sent a complete request, so idle
//     connections can never lock out a client that sends its request; if every
//     connection is busy with a request, the new one gets 503 naming the limit.
//
// Thread-safety: the handler runs on kHttpServerThreads threads at once, never on the
// caller's or on gRPC's, so a slow page cannot hold up the coordinator's RPCs; it must be
// thread-safe. Only GET and HEAD reach it; another method is answered 405 and a request
// that does not parse 400 without calling it. HEAD gets the GET's status and headers
// without the body. Destroying the server closes the port and every connection at once,
// waits for handlers in flight, then returns; no handler runs after that.
#ifndef MTRAIN_COORDINATOR_HTTP_SERVER_H_
#define MTRAIN_COORDINATOR_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/http_message.h"

namespace mtrain {

// Threads that run the handler. No socket ever holds one (the event loop reads whole
// requests first), and a page takes milliseconds, so a few keep up with a 50-client load
// on 2 cores (docs/PERFORMANCE.md) while leaving the cores to the coordinator.
inline constexpr int kHttpServerThreads = 4;
// The request head (request line and headers) must arrive within this of the accept.
// Generous for a browser or Prometheus on a slow link, which send theirs at once.
inline constexpr int kHttpRequestTimeoutMs = 10 * 1000;
// A client that does not read its response within this loses the connection.
inline constexpr int kHttpWriteTimeoutMs = 10 * 1000;
// After the response, the server reads and discards what the client still sends (a body
// it never needed) for up to this long before closing, so the close sends FIN, not a
// reset that could destroy the response in the client's receive buffer.
inline constexpr int kHttpLingerMs = 1000;
// The request line plus headers; a browser's are under 2 KiB.
inline constexpr int kHttpMaxRequestHeadBytes = 16 * 1024;
// Open connections in all: bounds the coordinator's file descriptors for HTTP well below
// RLIMIT_NOFILE, leaving the rest to gRPC, SQLite and the checkpoint store.
inline constexpr int kHttpMaxConnections = 512;
// Open connections per client IP address: a Prometheus server needs 1, a browser 6; one
// address cannot take the whole table.
inline constexpr int kHttpMaxConnectionsPerClient = 32;

// The limits above as one value, so a test can shrink them.
struct HttpServerLimits {
  int request_timeout_ms = kHttpRequestTimeoutMs;
  int write_timeout_ms = kHttpWriteTimeoutMs;
  int max_connections = kHttpMaxConnections;
  int max_connections_per_client = kHttpMaxConnectionsPerClient;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Serves `address` (HOST:PORT with a numeric host, e.g. "127.0.0.1:9464" or
  // "[::1]:0"; port 0 picks a free one, see port()). INVALID_ARGUMENT for an address
  // that is not a numeric host and a port, or limits that are not positive; UNAVAILABLE
  // if it cannot be bound (in use, not a local address).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handler handler,
                                                           HttpServerLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port.
  int port() const;

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  const std::unique_ptr<Impl> impl_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_HTTP_SERVER_H_
