#include "coordinator/http_server.h"

#include <civetweb.h>

#include <cstdint>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mtrain {
namespace {

// HOST:PORT with a numeric port. civetweb's listening_ports also takes a bare port (all
// interfaces), lists and "s"/"r" suffixes; refusing them keeps --http meaning one address.
bool IsHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  if (address.find(',') != std::string::npos) return false;
  uint32_t port = 0;
  const std::string digits = address.substr(colon + 1);
  return absl::c_all_of(digits, absl::ascii_isdigit) && absl::SimpleAtoi(digits, &port) &&
         port <= 65535;
}

void Write(mg_connection* connection, const std::string& bytes) {
  // A client that went away makes this fail; there is no one left to tell.
  if (!bytes.empty()) mg_write(connection, bytes.data(), bytes.size());
}

void Send(mg_connection* connection, const HttpResponse& response, bool with_body) {
  std::string head = absl::StrCat(
      "HTTP/1.1 ", response.status, " ", mg_get_response_code_text(connection, response.status),
      "\r\nContent-Type: ", response.content_type, "\r\nContent-Length: ", response.body.size(),
      // One request per connection: a browser polling every
      // second must not pin one of the few threads.
      "\r\nConnection: close\r\n");
  for (const auto& [name, value] : response.headers)
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  head += "\r\n";
  Write(connection, head);
  if (with_body) Write(connection, response.body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              Handler handler) {
  if (!IsHostPort(address)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address \"", address, "\" is not HOST:PORT"));
  }
  // Reference-counted inside civetweb (prometheus-cpp initialises it too); undone in the
  // destructor.
  mg_init_library(0);
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(handler)));
  const std::string threads = absl::StrCat(kHttpServerThreads);
  const std::string timeout = absl::StrCat(kHttpRequestTimeoutMs);
  // No document_root: civetweb serves no files of its own, only what the handler answers.
  // Name, value pairs.
  // clang-format off
  const char* options[] = {
      "listening_ports", address.c_str(),
      "num_threads", threads.c_str(),
      "request_timeout_ms", timeout.c_str(),
      "enable_keep_alive", "no",
      nullptr};
  // clang-format on
  mg_callbacks callbacks = {};
  callbacks.begin_request = &HttpServer::HandleRequest;
  mg_init_data init = {};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = options;
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error = {};
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->context_ = mg_start2(&init, &error);
  if (server->context_ == nullptr) {
    // The destructor balances mg_init_library.
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", address, ": ",
                                               error_text[0] != '\0' ? error_text : "failed"));
  }
  mg_server_port ports[4] = {};
  const int count = mg_get_server_ports(server->context_, 4, ports);
  if (count <= 0 || ports[0].port <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", address, ": no port"));
  }
  server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  // Joins civetweb's threads: no handler runs after this line.
  if (context_ != nullptr) mg_stop(context_);
  mg_exit_library();
}

int HttpServer::HandleRequest(mg_connection* connection) {
  const mg_request_info* info = mg_get_request_info(connection);
  const auto* server = static_cast<const HttpServer*>(info->user_data);
  HttpRequest request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  const bool head = request.method == "HEAD";
  if (request.method != "GET" && !head) {
    HttpResponse refused{405, "text/plain; charset=utf-8", "only GET and HEAD\n", {}};
    refused.headers.emplace_back("Allow", "GET, HEAD");
    Send(connection, refused, /*with_body=*/true);
    return refused.status;
  }
  // local_uri is NULL for a request-target that is not a path on this server (an
  // absolute URL naming another host).
  if (info->local_uri == nullptr) {
    Send(connection, {400, "text/plain; charset=utf-8", "bad request target\n", {}}, !head);
    return 400;
  }
  request.path = info->local_uri;
  request.query = info->query_string != nullptr ? info->query_string : "";
  const HttpResponse response = server->handler_(request);
  Send(connection, response, /*with_body=*/!head);
  // 1..999 tells civetweb the request was answered (it logs the number as the status).
  return response.status;
}

}  // namespace mtrain
