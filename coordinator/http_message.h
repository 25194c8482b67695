// The HTTP/1.x wire format the coordinator's HTTP port speaks: a request head parsed into
// an HttpRequest, an HttpResponse written out as bytes. Pure functions, no sockets
// (coordinator/http_server.h owns those), so every rule here is tested and fuzzed without
// a network.
//
//   absl::StatusOr<HttpRequest> request =
//       ParseHttpRequestHead("GET /api/jobs?limit=5 HTTP/1.1\r\nHost: x");
//   // request->method == "GET", request->path == "/api/jobs", request->query == "limit=5"
//   std::string bytes = FormatHttpResponse({200, "text/plain", "hi\n", {}}, true);
//
// Only what a GET needs is understood: header fields are skipped (bodies are never
// read; the server answers and closes the connection).
#ifndef MTRAIN_COORDINATOR_HTTP_MESSAGE_H_
#define MTRAIN_COORDINATOR_HTTP_MESSAGE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtrain {

// Longest request target accepted (browsers and Prometheus send a few dozen bytes).
inline constexpr size_t kHttpMaxTargetBytes = 8 * 1024;

struct HttpRequest {
  std::string method;  // "GET", "HEAD", ... (upper-case letters)
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
  // Connection are written by FormatHttpResponse.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Parses a request head: the request line and header fields, without the blank line that
// ends them. The request line must be `METHOD SP /TARGET SP HTTP/1.0|HTTP/1.1`; the
// target's path is percent-decoded (a malformed escape or a decoded control character is
// refused) and its "." and ".." segments resolved (RFC 3986 5.2.4), so "/a/../b" is "/b"
// and nothing climbs above "/". INVALID_ARGUMENT (answered 400) naming what is wrong,
// with the offending text escaped and cut to a few dozen bytes.
absl::StatusOr<HttpRequest> ParseHttpRequestHead(absl::string_view head);

// Where the head of the request in `received` ends: the offset of its blank line
// ("\r\n\r\n", or "\n\n" from clients that send bare LFs), or npos if it has not arrived.
size_t FindHttpRequestHeadEnd(absl::string_view received);

// "OK", "Not Found", ...; "Unknown" for a code without a phrase here.
const char* HttpReasonPhrase(int status);

// The response as bytes: status line, Content-Type, Content-Length (of the body, also for
// HEAD), "Connection: close" (one request per connection), the extra headers, then the
// body unless `with_body` is false (HEAD).
std::string FormatHttpResponse(const HttpResponse& response, bool with_body);

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_HTTP_MESSAGE_H_
