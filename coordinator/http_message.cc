#include "coordinator/http_message.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mtrain {
namespace {

// Attacker-controlled text quoted in an error: escaped and short, so a refusal can neither
// smuggle control characters into a terminal nor echo megabytes back.
std::string Quote(absl::string_view text) {
  constexpr size_t kMaxQuoted = 64;
  std::string quoted = absl::CHexEscape(text.substr(0, kMaxQuoted));
  if (text.size() > kMaxQuoted) quoted += "...";
  return absl::StrCat("\"", quoted, "\"");
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<std::string> PercentDecodePath(absl::string_view path) {
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    char c = path[i];
    if (c == '%') {
      const bool complete = i + 2 < path.size();
      const int high = complete ? HexValue(path[i + 1]) : -1;
      const int low = complete ? HexValue(path[i + 2]) : -1;
      if (high < 0 || low < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "request path ", Quote(path), " has a '%' not followed by two hex digits"));
      }
      c = static_cast<char>(high * 16 + low);
      i += 2;
    }
    // A NUL or control character cannot name anything served here and would confuse
    // whatever logs the path.
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("request path ", Quote(path), " holds a control character"));
    }
    decoded.push_back(c);
  }
  return decoded;
}

// RFC 3986 5.2.4 for an absolute path ("/..."): "." segments vanish, ".." removes the
// segment before it (never climbing above "/"); a final "." or ".." leaves a trailing "/".
std::string RemoveDotSegments(absl::string_view path) {
  const std::vector<absl::string_view> segments = absl::StrSplit(path.substr(1), '/');
  std::vector<absl::string_view> kept;
  for (size_t i = 0; i < segments.size(); ++i) {
    const bool last = i + 1 == segments.size();
    if (segments[i] == "." || segments[i] == "..") {
      if (segments[i] == ".." && !kept.empty()) kept.pop_back();
      if (last) kept.push_back("");
      continue;
    }
    kept.push_back(segments[i]);
  }
  return absl::StrCat("/", absl::StrJoin(kept, "/"));
}

}  // namespace

absl::StatusOr<HttpRequest> ParseHttpRequestHead(absl::string_view head) {
  absl::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request line ", Quote(line), " is not METHOD TARGET HTTP/1.x (3 parts, one space)"));
  }
  const absl::string_view method = parts[0], target = parts[1], version = parts[2];
  constexpr size_t kMaxMethod = 16;
  if (method.empty() || method.size() > kMaxMethod ||
      !std::all_of(method.begin(), method.end(), absl::ascii_isupper)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request method ", Quote(method), " is not 1 to 16 upper-case letters"));
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return absl::InvalidArgumentError(
        absl::StrCat("request version ", Quote(version), " is not HTTP/1.0 or HTTP/1.1"));
  }
  if (target.size() > kHttpMaxTargetBytes) {
    return absl::InvalidArgumentError(absl::StrCat("request target of ", target.size(),
                                                   " bytes is longer than the limit of ",
                                                   kHttpMaxTargetBytes));
  }
  // Only origin-form ("/path?query"): an absolute URL names some other server, and "*"
  // goes with OPTIONS, which is not served.
  if (target.empty() || target[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("request target ", Quote(target), " does not start with '/'"));
  }
  const size_t question = target.find('?');
  absl::StatusOr<std::string> path = PercentDecodePath(target.substr(0, question));
  if (!path.ok()) return path.status();
  HttpRequest request;
  request.method = std::string(method);
  request.path = RemoveDotSegments(*path);
  if (question != absl::string_view::npos) request.query = std::string(target.substr(question + 1));
  return request;
}

size_t FindHttpRequestHeadEnd(absl::string_view received) {
  const size_t crlf = received.find("\r\n\r\n");
  const size_t lf = received.find("\n\n");
  return std::min(crlf, lf);
}

const char* HttpReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

std::string FormatHttpResponse(const HttpResponse& response, bool with_body) {
  std::string bytes = absl::StrCat(
      "HTTP/1.1 ", response.status, " ", HttpReasonPhrase(response.status),
      "\r\nContent-Type: ", response.content_type, "\r\nContent-Length: ", response.body.size(),
      // One request per connection: the server never waits for a second one, so an idle
      // browser tab holds no connection.
      "\r\nConnection: close\r\n");
  for (const auto& [name, value] : response.headers)
    absl::StrAppend(&bytes, name, ": ", value, "\r\n");
  bytes += "\r\n";
  if (with_body) bytes += response.body;
  return bytes;
}

}  // namespace mtrain
