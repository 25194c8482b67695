#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace mtrain {
namespace {

using Clock = std::chrono::steady_clock;

// The longest the head-deadline sweeper sleeps when no deadline is nearer.
constexpr auto kSweepInterval = std::chrono::seconds(1);

// HOST:PORT with a numeric port. A bare port, a list or a host name are refused, so
// --http always means one address.
absl::StatusOr<sockaddr_storage> ParseAddress(const std::string& address, socklen_t* length) {
  const auto invalid = [&address](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address \"", address, "\" is not HOST:PORT (", why, ")"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return invalid("no host or no port");
  }
  const std::string digits = address.substr(colon + 1);
  uint32_t port = 0;
  if (!absl::c_all_of(digits, absl::ascii_isdigit) || !absl::SimpleAtoi(digits, &port) ||
      port > 65535) {
    return invalid("the port must be a number from 0 to 65535");
  }
  std::string host = address.substr(0, colon);
  sockaddr_storage storage = {};
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6->sin6_addr) != 1) {
      return invalid("the host must be a numeric IPv6 address in brackets, e.g. [::1]");
    }
    *length = sizeof(sockaddr_in6);
    return storage;
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) {
    return invalid("the host must be a numeric IPv4 address, e.g. 127.0.0.1, or [IPv6]");
  }
  *length = sizeof(sockaddr_in);
  return storage;
}

// A listening socket on `address`, bound here rather than by libmicrohttpd so that a
// refusal names the address and the reason (errno) and so that "[::]:PORT" stays IPv6
// only. Its owner is libmicrohttpd once the daemon starts.
absl::StatusOr<int> Listen(const std::string& address, int* port) {
  socklen_t length = 0;
  absl::StatusOr<sockaddr_storage> bind_address = ParseAddress(address, &length);
  if (!bind_address.ok()) return bind_address.status();
  const auto unavailable = [&address](absl::string_view what) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", address, ": ", what, ": ", std::strerror(errno)));
  };
  const int fd = ::socket(bind_address->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable("socket");
  const int one = 1;
  // A restarted coordinator can bind while the old one's connections sit in TIME_WAIT;
  // without SO_REUSEPORT a second live listener is still refused.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // "[::]:PORT" means IPv6 only, as the flag says one address.
  if (bind_address->ss_family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*bind_address), length) != 0) {
    const absl::Status status = unavailable("bind");
    ::close(fd);
    return status;
  }
  if (::listen(fd, SOMAXCONN) != 0) {
    const absl::Status status = unavailable("listen");
    ::close(fd);
    return status;
  }
  sockaddr_storage bound = {};
  socklen_t bound_length = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length);
  *port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  return fd;
}

// A plain-text response owned by the caller (MHD_destroy_response).
MHD_Response* TextResponse(const char* text) {
  MHD_Response* response = MHD_create_response_from_buffer(
      std::strlen(text), const_cast<char*>(text), MHD_RESPMEM_PERSISTENT);
  if (response == nullptr) return nullptr;
  MHD_add_response_header(response, "Content-Type", "text/plain; charset=utf-8");
  MHD_add_response_header(response, "Connection", "close");
  return response;
}

// The handler's answer as libmicrohttpd's response, the body moved, not copied; nullptr
// if libmicrohttpd cannot allocate it.
MHD_Response* ToMhdResponse(HttpResponse answer) {
  auto* body = new std::string(std::move(answer.body));
  MHD_Response* response = MHD_create_response_from_buffer_with_free_callback_cls(
      body->size(), body->data(), [](void* text) { delete static_cast<std::string*>(text); }, body);
  if (response == nullptr) {
    delete body;
    return nullptr;
  }
  MHD_add_response_header(response, "Content-Type", answer.content_type.c_str());
  for (const auto& [name, value] : answer.headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  // One request per connection: nothing waits on an idle keep-alive connection.
  MHD_add_response_header(response, "Connection", "close");
  return response;
}

// libmicrohttpd's log, kept only while the daemon starts, to say why it did not: at run
// time it logs each refused connection, which would let an attacker flood stderr.
class StartLog {
 public:
  static void Append(void* cls, const char* format, va_list arguments) {
    auto* log = static_cast<StartLog*>(cls);
    MutexLock lock(&log->mutex_);
    if (!log->capturing_) return;
    char line[512];
    std::vsnprintf(line, sizeof(line), format, arguments);
    absl::StrAppend(&log->text_, absl::StripAsciiWhitespace(line), "; ");
  }
  // Stops capturing; returns what was captured.
  std::string Close() {
    MutexLock lock(&mutex_);
    capturing_ = false;
    return std::move(text_);
  }

 private:
  Mutex mutex_;
  bool capturing_ ABSL_GUARDED_BY(mutex_) = true;
  std::string text_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(Handler handler, HttpServerLimits limits, int port)
      : handler_(std::move(handler)),
        limits_(limits),
        port_(port),
        method_not_allowed_(TextResponse("only GET and HEAD\n")),
        bad_path_(
            TextResponse("request target must be /path?query, without control characters\n")) {
    if (method_not_allowed_ != nullptr) {
      MHD_add_response_header(method_not_allowed_, "Allow", "GET, HEAD");
    }
  }

  // Takes `listen_fd` (closed here on failure).
  absl::Status Start(int listen_fd) {
    if (method_not_allowed_ == nullptr || bad_path_ == nullptr) {
      ::close(listen_fd);
      return absl::UnavailableError("cannot serve HTTP: libmicrohttpd cannot allocate responses");
    }
    sweeper_ = std::thread([this] { Sweep(); });
    daemon_ = MHD_start_daemon(
        // kHttpServerThreads threads, each with its own epoll set, all accepting from the
        // one listening socket; ITC so that MHD_quiesce_daemon can close the port first.
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG,
        /*port=*/0, /*apc=*/nullptr, /*apc_cls=*/nullptr, &Impl::OnRequest, this,
        MHD_OPTION_EXTERNAL_LOGGER, &StartLog::Append, &start_log_,  //
        MHD_OPTION_LISTEN_SOCKET, listen_fd,                         //
        MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(kHttpServerThreads),
        MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned int>(limits_.idle_timeout_s),
        // libmicrohttpd's hard limit, shared out among the threads (a thread at its share
        // stops accepting); max_connections itself is kept by AdmitLocked().
        MHD_OPTION_CONNECTION_LIMIT,
        static_cast<unsigned int>(limits_.max_connections + kHttpConnectionHeadroom),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        static_cast<unsigned int>(limits_.max_connections_per_client),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, kHttpConnectionMemoryBytes,  //
        MHD_OPTION_NOTIFY_CONNECTION, &Impl::OnConnection, this,         //
        MHD_OPTION_URI_LOG_CALLBACK, &Impl::OnRequestLine, this,         //
        MHD_OPTION_END);
    const std::string log = start_log_.Close();
    if (daemon_ == nullptr) {
      ::close(listen_fd);
      StopSweeper();
      return absl::UnavailableError(
          absl::StrCat("cannot serve HTTP: libmicrohttpd did not start: ", log));
    }
    return absl::OkStatus();
  }

  ~Impl() {
    if (daemon_ != nullptr) {
      // The port closes now; then libmicrohttpd lets each thread finish the handler it is
      // in, closes every connection and joins its threads.
      const MHD_socket listener = MHD_quiesce_daemon(daemon_);
      if (listener != MHD_INVALID_SOCKET) ::close(listener);
      MHD_stop_daemon(daemon_);
      StopSweeper();
    }
    if (method_not_allowed_ != nullptr) MHD_destroy_response(method_not_allowed_);
    if (bad_path_ != nullptr) MHD_destroy_response(bad_path_);
  }

  int port() const { return port_; }

 private:
  // A connection as the head-deadline sweeper sees it, from libmicrohttpd's connection
  // notifications; its socket context.
  struct Connection {
    int fd = -1;
    Clock::time_point head_deadline;
    bool head_complete = false;  // guarded by mutex_
    bool cut = false;            // shut down by this server; guarded by mutex_
    // The request target exactly as sent (path and query, not decoded): libmicrohttpd
    // hands the handler only the decoded path. Only the connection's thread uses it.
    std::string target;
  };

  // --- libmicrohttpd's threads ---

  static void OnConnection(void* cls, MHD_Connection* connection, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* tracked = new Connection;
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      tracked->fd = info != nullptr ? info->connect_fd : -1;
      tracked->head_deadline =
          Clock::now() + std::chrono::milliseconds(self->limits_.head_timeout_ms);
      *socket_context = tracked;
      MutexLock lock(&self->mutex_);
      self->connections_.insert(tracked);
      ++self->open_;
      self->AdmitLocked(tracked);
      return;
    }
    auto* tracked = static_cast<Connection*>(*socket_context);
    if (tracked == nullptr) return;
    {
      // libmicrohttpd closes the socket after this returns: once the entry is gone (under
      // the lock the sweeper holds while it shuts a socket down), the sweeper cannot touch
      // a descriptor number that is about to be reused.
      MutexLock lock(&self->mutex_);
      self->connections_.erase(tracked);
      if (!tracked->cut) --self->open_;
    }
    delete tracked;
    *socket_context = nullptr;
  }

  static Connection* TrackedOf(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != nullptr ? static_cast<Connection*>(info->socket_context) : nullptr;
  }

  // Called once the request line has arrived, with the target as sent.
  static void* OnRequestLine(void* /*cls*/, const char* uri, MHD_Connection* connection) {
    if (Connection* tracked = TrackedOf(connection); tracked != nullptr && uri != nullptr) {
      tracked->target = uri;
    }
    return nullptr;  // the request's context (none needed)
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/, size_t* upload_data_size,
                              void** request_context) {
    return static_cast<Impl*>(cls)->Answer(connection, url, method, upload_data_size,
                                           request_context);
  }

  // libmicrohttpd calls this once the head is complete (*context null), then for each
  // piece of a body the client sends anyway, then once more with none: the answer goes
  // with the first call for a refusal (libmicrohttpd then closes the connection without
  // reading the body) and with the last for a GET or HEAD.
  MHD_Result Answer(MHD_Connection* connection, const char* url, const char* method,
                    size_t* upload_data_size, void** context) {
    static int head_seen;  // its address marks "the head was seen"
    if (*context == nullptr) {
      *context = &head_seen;
      if (Connection* tracked = TrackedOf(connection); tracked != nullptr) {
        MutexLock lock(&mutex_);
        tracked->head_complete = true;
      }
      const absl::string_view verb = method != nullptr ? method : "";
      if (verb != "GET" && verb != "HEAD") {
        return MHD_queue_response(connection, MHD_HTTP_METHOD_NOT_ALLOWED, method_not_allowed_);
      }
      const absl::string_view path = url != nullptr ? url : "";
      if (path.empty() || path[0] != '/' || absl::c_any_of(path, absl::ascii_iscntrl)) {
        return MHD_queue_response(connection, MHD_HTTP_BAD_REQUEST, bad_path_);
      }
      return MHD_YES;
    }
    if (*upload_data_size != 0) {
      *upload_data_size = 0;  // a body with a GET: not needed, discarded
      return MHD_YES;
    }
    HttpRequest request;
    request.method = method;
    request.path = url;
    if (Connection* tracked = TrackedOf(connection); tracked != nullptr) {
      const size_t question = tracked->target.find('?');
      if (question != std::string::npos) request.query = tracked->target.substr(question + 1);
    }
    HttpResponse answer = handler_(request);
    const auto status = static_cast<unsigned int>(answer.status);
    MHD_Response* response = ToMhdResponse(std::move(answer));
    if (response == nullptr) return MHD_NO;  // out of memory: close
    const MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);  // the connection holds its own reference
    return queued;
  }

  // --- Head-deadline sweeper ---

  // libmicrohttpd's timeout restarts with every byte received, so a client trickling its
  // head a byte at a time would hold a connection for ever; this cuts one whose head is
  // not complete by its deadline.
  void Sweep() {
    MutexLock lock(&mutex_);
    while (!stopping_) {
      const Clock::time_point now = Clock::now();
      Clock::time_point next =
          now + std::min<Clock::duration>(kSweepInterval,
                                          std::chrono::milliseconds(limits_.head_timeout_ms));
      for (Connection* connection : connections_) {
        if (connection->head_complete || connection->cut) continue;
        if (connection->head_deadline <= now) {
          CutLocked(connection);
        } else {
          next = std::min(next, connection->head_deadline);
        }
      }
      sweep_.WaitUntil(&mutex_, next);
    }
  }

  // Shuts the connection's socket down; libmicrohttpd's loop then sees the end of input
  // and closes it. The descriptor stays libmicrohttpd's: OnConnection removes the entry
  // (under mutex_) before libmicrohttpd closes it, so it is never a reused number here.
  void CutLocked(Connection* connection) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (connection->fd >= 0) ::shutdown(connection->fd, SHUT_RDWR);
    connection->cut = true;
    --open_;
  }

  // Keeps max_connections as `newcomer` arrives: beyond it, the oldest other connection
  // that has not sent a whole request goes, so idle connections can never lock out a
  // client that sends its request as it connects. (libmicrohttpd alone would stop
  // accepting instead, and such a client would wait in the listen queue until an idle
  // one timed out.) If every other connection has sent its request, nothing goes;
  // libmicrohttpd's own limit, kHttpConnectionHeadroom higher, then stops accepting.
  void AdmitLocked(const Connection* newcomer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (open_ <= limits_.max_connections) return;
    Connection* oldest = nullptr;
    for (Connection* connection : connections_) {
      if (connection == newcomer || connection->head_complete || connection->cut) continue;
      if (oldest == nullptr || connection->head_deadline < oldest->head_deadline) {
        oldest = connection;
      }
    }
    if (oldest != nullptr) CutLocked(oldest);
  }

  void StopSweeper() {
    {
      MutexLock lock(&mutex_);
      stopping_ = true;
    }
    sweep_.SignalAll();
    sweeper_.join();
  }

  const Handler handler_;
  const HttpServerLimits limits_;
  const int port_;
  // Shared by every connection they answer.
  MHD_Response* const method_not_allowed_;
  MHD_Response* const bad_path_;
  StartLog start_log_;  // outlives daemon_, which logs to it
  MHD_Daemon* daemon_ = nullptr;
  std::thread sweeper_;

  Mutex mutex_;
  CondVar sweep_;  // stopping_
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // Open connections, for the sweeper and AdmitLocked.
  absl::flat_hash_set<Connection*> connections_ ABSL_GUARDED_BY(mutex_);
  // Those of them not cut: what max_connections counts.
  int open_ ABSL_GUARDED_BY(mutex_) = 0;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              Handler handler,
                                                              HttpServerLimits limits) {
  if (limits.head_timeout_ms <= 0 || limits.idle_timeout_s <= 0 || limits.max_connections <= 0 ||
      limits.max_connections_per_client <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP server limits must be positive: head_timeout_ms ", limits.head_timeout_ms,
        ", idle_timeout_s ", limits.idle_timeout_s, ", max_connections ", limits.max_connections,
        ", max_connections_per_client ", limits.max_connections_per_client));
  }
  int port = 0;
  absl::StatusOr<int> listen_fd = Listen(address, &port);
  if (!listen_fd.ok()) return listen_fd.status();
  auto impl = std::make_unique<Impl>(std::move(handler), limits, port);
  if (absl::Status started = impl->Start(*listen_fd); !started.ok()) return started;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->port(); }

}  // namespace mtrain
