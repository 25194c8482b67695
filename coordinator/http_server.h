// The coordinator's HTTP port: libmicrohttpd (Debian's libmicrohttpd-dev, 0.9.75) serving
// every request through one handler function. Routing and content belong to the caller
// (coordinator/http_routes.h), the request and response types to
// coordinator/http_message.h, the HTTP wire format, parsing included, to libmicrohttpd.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> server,
//                    HttpServer::Start("127.0.0.1:0", [](const HttpRequest& request) {
//                      return HttpResponse{200, "text/plain; charset=utf-8", "hello\n"};
//                    }));
//   std::printf("serving on port %d\n", server->port());
//
// Why this shape (issues 15 and 37): civetweb, which served this port first, gave each
// connection a thread from its accept, so 8 clients that connected and sent nothing
// silenced /metrics. libmicrohttpd runs here in its epoll mode with a pool of
// kHttpServerThreads threads, each owning the sockets it accepted and reading request
// heads without blocking, so an idle connection costs a file descriptor and a buffer,
// never a thread. Chosen over libevent's evhttp by measurement (docs/PERFORMANCE.md) and
// because Debian 12's evhttp (2.1) has no connection limits at all and drops a request
// whose client shut its sending side. Limits (constants below; HttpServerLimits shrinks
// them for tests):
//   - the request head (request line and headers) must be complete within
//     kHttpHeadTimeoutMs of the accept, else the connection is closed without an answer.
//     libmicrohttpd's own timeout restarts with every byte, so a head trickled a byte at
//     a time would hold a connection for ever: this server cuts it itself.
//   - a connection on which nothing moves either way for kHttpIdleTimeoutS is closed
//     (libmicrohttpd's timeout): a client that sends nothing, or stops reading its
//     response.
//   - the request line and headers must fit the connection's kHttpConnectionMemoryBytes:
//     a longer request line is answered 414, longer headers 431 (by libmicrohttpd).
//   - one request per connection (every response says `Connection: close`).
//   - at most kHttpMaxConnectionsPerClient connections per client IP address. One more
//     is REFUSED: libmicrohttpd accepts and closes it at once, without an answer, and
//     does not close an idle connection to make room (the hand-written server before it
//     did), so a client whose address already holds that many idle connections gets
//     nothing until they time out. Other addresses are unaffected.
//   - at most kHttpMaxConnections in all. A connection beyond it closes the oldest one
//     that has not sent a whole request, of any address (this server's doing: at its own
//     limit libmicrohttpd stops accepting, and a new client waited in the listen queue
//     for an idle connection to time out, 10 s with 1000 idle connections from 40
//     addresses, docs/PERFORMANCE.md). A client that sends its request as it connects is
//     therefore never the one closed. If every connection is busy with a request,
//     libmicrohttpd holds kHttpConnectionHeadroom more, then stops accepting: new
//     connections wait in the kernel's listen queue until one closes.
//
// Thread-safety: the handler runs on libmicrohttpd's threads, up to kHttpServerThreads at
// once, never on the caller's or on gRPC's; it must be thread-safe. A handler that
// blocks (a page waiting for the job manager's lock) holds up only the connections its
// thread had already accepted: a busy thread accepts nothing new, the others take new
// connections. (A thread may accept several connections of a burst at once, so a request
// that arrived together with a slow one can wait for it.)
//
// Only GET and HEAD reach the handler. Another method is answered 405 (with
// `Allow: GET, HEAD`); a target that is not a path (an absolute URL) or that holds a
// control character 400; what libmicrohttpd cannot parse as HTTP/1.x 400 or 414/431; all
// without calling it. HEAD gets the GET's status and headers without the body.
// Destroying the server closes the port at once, lets each handler in flight finish,
// closes every connection and returns; no handler runs after that.
#ifndef MTRAIN_COORDINATOR_HTTP_SERVER_H_
#define MTRAIN_COORDINATOR_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/http_message.h"

namespace mtrain {

// libmicrohttpd's threads, each an epoll loop that also runs the handler. No socket ever
// holds one (each reads whole requests first), and a page takes milliseconds, so a few
// keep up with a 50-client load on 2 cores (docs/PERFORMANCE.md) while leaving the cores
// to the coordinator; more than one, so that a handler waiting for a lock does not stop
// the port.
inline constexpr int kHttpServerThreads = 4;
// The request head must be complete within this of the accept. Generous for a browser
// or Prometheus on a slow link, which send theirs at once.
inline constexpr int kHttpHeadTimeoutMs = 10 * 1000;
// A connection with no traffic either way for this long is closed (libmicrohttpd counts
// whole seconds).
inline constexpr int kHttpIdleTimeoutS = 10;
// libmicrohttpd's memory pool per connection: the request head is read into it and the
// response headers written from it (bodies are not copied into it). A browser's head is
// under 2 KiB; this also bounds what 512 idle connections can make the server hold
// (16 MiB).
inline constexpr size_t kHttpConnectionMemoryBytes = 32 * 1024;
// Open connections in all: bounds the coordinator's file descriptors for HTTP well below
// RLIMIT_NOFILE, leaving the rest to gRPC, SQLite and the checkpoint store.
inline constexpr int kHttpMaxConnections = 512;
// Connections libmicrohttpd may hold beyond max_connections while the oldest idle ones
// are being closed to make room, or when every connection is busy with a request.
inline constexpr int kHttpConnectionHeadroom = 64;
// Open connections per client IP address: a Prometheus server needs 1, a browser 6; one
// address cannot take the whole table.
inline constexpr int kHttpMaxConnectionsPerClient = 32;

// The limits above as one value, so a test can shrink them.
struct HttpServerLimits {
  int head_timeout_ms = kHttpHeadTimeoutMs;
  int idle_timeout_s = kHttpIdleTimeoutS;
  int max_connections = kHttpMaxConnections;
  int max_connections_per_client = kHttpMaxConnectionsPerClient;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Serves `address` (HOST:PORT with a numeric host, e.g. "127.0.0.1:9464" or
  // "[::1]:0"; port 0 picks a free one, see port()). INVALID_ARGUMENT for an address
  // that is not a numeric host and a port, or limits that are not positive; UNAVAILABLE
  // if it cannot be bound (in use, not a local address) or libmicrohttpd does not start.
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
