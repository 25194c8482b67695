// What the coordinator's HTTP port hands its handler and takes back: a request already
// parsed (by libmicrohttpd, see coordinator/http_server.h) and the response to send. Plain
// values, no sockets, so routes (coordinator/http_routes.h) are tested without a network.
//
//   HttpResponse Hello(const HttpRequest& request) {
//     // request.method == "GET", request.path == "/api/jobs", request.query == "limit=5"
//     return HttpResponse{200, "text/plain; charset=utf-8", "hi\n", {}};
//   }
#ifndef MTRAIN_COORDINATOR_HTTP_MESSAGE_H_
#define MTRAIN_COORDINATOR_HTTP_MESSAGE_H_

#include <string>
#include <utility>
#include <vector>

namespace mtrain {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD": the server answers other methods itself (405)
  // The percent-decoded path, e.g. "/api/jobs/job-1/steps". Never empty, starts with '/',
  // holds no control character. Dot segments are not resolved: nothing here is a file,
  // and the routes match whole paths, so "/a/../metrics" is simply not found.
  std::string path;
  // What follows '?', still percent-encoded ("" if none), e.g. "after=10&limit=500".
  std::string query;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  // Extra headers, e.g. {"Cache-Control", "no-store"}. Content-Type, Content-Length, Date
  // and Connection are written by the server; a header whose name or value holds a
  // line break is dropped (libmicrohttpd refuses it).
  std::vector<std::pair<std::string, std::string>> headers;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_HTTP_MESSAGE_H_
