// The coordinator's HTTP port: a small embedded server (civetweb, the library
// prometheus-cpp's Exposer is built on) that hands every request to one handler function.
// Routing and content belong to the caller (coordinator/http_routes.h); this file owns
// only the socket, the threads and the HTTP framing.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> server,
//                    HttpServer::Start("127.0.0.1:0", [](const HttpRequest& request) {
//                      return HttpResponse{200, "text/plain; charset=utf-8", "hello\n"};
//                    }));
//   std::printf("serving on port %d\n", server->port());
//
// Requests run on civetweb's own threads (kHttpServerThreads of them), never on the
// caller's or on gRPC's, so a slow page cannot hold up the coordinator's RPCs. The
// handler must be thread-safe. Only GET and HEAD reach it; any other method is answered
// 405 without calling it. HEAD gets the GET's status and headers without the body.
// Destroying the server stops accepting, waits for requests in flight, then returns
// (civetweb's accepting thread notices the stop within about 2 s, as it did under
// prometheus-cpp's Exposer).
#ifndef MTRAIN_COORDINATOR_HTTP_SERVER_H_
#define MTRAIN_COORDINATOR_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

struct mg_context;
struct mg_connection;

namespace mtrain {

// Enough for a few browsers and a Prometheus server polling at once; a request takes
// milliseconds.
inline constexpr int kHttpServerThreads = 4;
// A client that sends nothing for this long loses its connection (and its thread).
inline constexpr int kHttpRequestTimeoutMs = 10 * 1000;

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  // URL-decoded path with dot segments removed, e.g. "/api/jobs/job-1/steps".
  std::string path;
  // What follows '?', still URL-encoded ("" if none), e.g. "after=10&limit=500".
  std::string query;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  // Extra headers, e.g. {"Cache-Control", "no-store"}. Content-Type, Content-Length and
  // Connection are written by the server.
  std::vector<std::pair<std::string, std::string>> headers;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Serves `address` (HOST:PORT with a numeric host, e.g. "127.0.0.1:9464" or
  // "[::1]:0"; port 0 picks a free one, see port()). INVALID_ARGUMENT for an address
  // without a port; UNAVAILABLE if it cannot be bound (in use, not a local address).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port.
  int port() const { return port_; }

 private:
  explicit HttpServer(Handler handler) : handler_(std::move(handler)) {}
  // civetweb's begin_request callback: answers every request, so civetweb never falls
  // back to serving files.
  static int HandleRequest(mg_connection* connection);

  const Handler handler_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_HTTP_SERVER_H_
