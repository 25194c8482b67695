#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace mtrain {
namespace {

using Clock = std::chrono::steady_clock;

// Connections accepted per pass of the event loop: a flood of connects cannot starve the
// connections already open (their requests are read first, each pass).
constexpr int kAcceptsPerPass = 64;
// After accept fails for lack of file descriptors, the listener rests this long instead of
// waking the loop again at once (the pending connection stays in the kernel's queue).
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// Bytes discarded after the response before the connection is closed anyway.
constexpr size_t kMaxLingerBytes = 64 * 1024;

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

std::string ClientAddress(const sockaddr_storage& peer) {
  char text[INET6_ADDRSTRLEN] = "";
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text, sizeof(text));
  } else if (peer.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

std::string PlainResponse(int status, std::string body) {
  return FormatHttpResponse({status, "text/plain; charset=utf-8", std::move(body), {}},
                            /*with_body=*/true);
}

// For a connection about to be closed: one non-blocking try, no waiting for a client that
// does not read.
void SendBestEffort(int fd, const std::string& bytes) {
  (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(Handler handler, HttpServerLimits limits, int listen_fd, int wake_fd, int port)
      : handler_(std::move(handler)),
        limits_(limits),
        listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        port_(port) {}

  ~Impl() {
    {
      MutexLock lock(&mutex_);
      stopping_ = true;
    }
    work_ready_.SignalAll();
    Wake();
    if (loop_thread_.joinable()) loop_thread_.join();
    // Handlers in flight finish; the ones still queued never start.
    for (std::thread& thread : handler_threads_) thread.join();
    for (auto& [id, connection] : connections_) ::close(connection.fd);
    ::close(listen_fd_);
    ::close(wake_fd_);
  }

  void StartThreads() {
    loop_thread_ = std::thread([this] { Loop(); });
    for (int i = 0; i < kHttpServerThreads; ++i) {
      handler_threads_.emplace_back([this] { ServeRequests(); });
    }
  }

  int port() const { return port_; }

 private:
  enum class State {
    kReading,   // waiting for the request head; evictable
    kHandling,  // the request is queued or with a handler; the socket is not polled
    kWriting,   // sending the response
    kLingering  // response sent and our side shut down; discarding input until EOF
  };
  struct Connection {
    int fd = -1;
    std::string client;  // peer IP address, the key of the per-client limit
    State state = State::kReading;
    Clock::time_point deadline;  // of the current state (none while kHandling)
    std::string input;
    std::string output;
    size_t written = 0;
    size_t discarded = 0;
  };
  // Ordered by id, which grows with each accept: the first kReading entry is the oldest.
  using Connections = std::map<uint64_t, Connection>;

  struct Request {
    uint64_t connection_id;
    HttpRequest request;
  };
  struct Answer {
    uint64_t connection_id;
    std::string bytes;
  };

  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  // The handler threads: take a parsed request, answer it, hand the bytes to the loop.
  void ServeRequests() {
    for (;;) {
      Request next;
      {
        MutexLock lock(&mutex_);
        while (!stopping_ && requests_.empty()) work_ready_.Wait(&mutex_);
        if (stopping_) return;
        next = std::move(requests_.front());
        requests_.pop_front();
      }
      const HttpResponse response = handler_(next.request);
      std::string bytes = FormatHttpResponse(response, next.request.method != "HEAD");
      {
        MutexLock lock(&mutex_);
        answers_.push_back({next.connection_id, std::move(bytes)});
      }
      Wake();
    }
  }

  Connections::iterator Close(Connections::iterator it) {
    ::close(it->second.fd);
    auto count = per_client_.find(it->second.client);
    if (count != per_client_.end() && --count->second == 0) per_client_.erase(count);
    return connections_.erase(it);
  }

  void Respond(Connection& connection, std::string bytes) {
    connection.state = State::kWriting;
    connection.input.clear();
    connection.output = std::move(bytes);
    connection.written = 0;
    connection.deadline = Clock::now() + std::chrono::milliseconds(limits_.write_timeout_ms);
  }

  // Reads what has arrived; once the head is complete, answers a bad request itself or
  // queues a good one for the handler threads. Returns false if the connection is to be
  // closed.
  bool OnReadable(uint64_t id, Connection& connection) {
    bool end_of_input = false;
    char buffer[4096];
    while (connection.input.size() <= static_cast<size_t>(kHttpMaxRequestHeadBytes) + 4) {
      const ssize_t n = ::recv(connection.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0) {
        connection.input.append(buffer, static_cast<size_t>(n));
      } else if (n == 0) {
        end_of_input = true;
        break;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      } else {
        return false;
      }
    }
    const size_t end = FindHttpRequestHeadEnd(connection.input);
    if ((end == std::string::npos &&
         connection.input.size() > static_cast<size_t>(kHttpMaxRequestHeadBytes)) ||
        (end != std::string::npos && end > static_cast<size_t>(kHttpMaxRequestHeadBytes))) {
      Respond(connection, PlainResponse(431, absl::StrCat("request head longer than the limit of ",
                                                          kHttpMaxRequestHeadBytes, " bytes\n")));
      return true;
    }
    // A client that closed its side before completing the head gets nothing back.
    if (end == std::string::npos) return !end_of_input;
    absl::StatusOr<HttpRequest> request =
        ParseHttpRequestHead(absl::string_view(connection.input).substr(0, end));
    if (!request.ok()) {
      Respond(connection, PlainResponse(400, absl::StrCat(request.status().message(), "\n")));
      return true;
    }
    if (request->method != "GET" && request->method != "HEAD") {
      HttpResponse refused{405, "text/plain; charset=utf-8", "only GET and HEAD\n", {}};
      refused.headers.emplace_back("Allow", "GET, HEAD");
      Respond(connection, FormatHttpResponse(refused, /*with_body=*/true));
      return true;
    }
    connection.state = State::kHandling;
    connection.input.clear();
    {
      MutexLock lock(&mutex_);
      requests_.push_back({id, *std::move(request)});
    }
    work_ready_.Signal();
    return true;
  }

  // Sends what the socket takes; when all is sent, shuts our side and lingers. Returns
  // false if the connection is to be closed.
  bool OnWritable(Connection& connection) {
    while (connection.written < connection.output.size()) {
      const ssize_t n =
          ::send(connection.fd, connection.output.data() + connection.written,
                 connection.output.size() - connection.written, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        connection.written += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return true;
      } else {
        return false;
      }
    }
    ::shutdown(connection.fd, SHUT_WR);
    connection.state = State::kLingering;
    connection.output.clear();
    connection.output.shrink_to_fit();
    connection.deadline = Clock::now() + std::chrono::milliseconds(kHttpLingerMs);
    return true;
  }

  bool OnLingerReadable(Connection& connection) {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(connection.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0) {
        connection.discarded += static_cast<size_t>(n);
        if (connection.discarded > kMaxLingerBytes) return false;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        // EOF (the client closed too: done), an error, or nothing more for now.
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      }
    }
  }

  // The oldest connection still waiting for its request head, of `client` or of all
  // ("" matches every client); end() if there is none.
  Connections::iterator OldestIdle(const std::string& client) {
    return absl::c_find_if(connections_, [&client](const auto& entry) {
      return entry.second.state == State::kReading &&
             (client.empty() || entry.second.client == client);
    });
  }

  void AcceptConnections() {
    for (int i = 0; i < kAcceptsPerPass; ++i) {
      sockaddr_storage peer = {};
      socklen_t peer_length = sizeof(peer);
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          accept_resume_ = Clock::now() + kAcceptBackoff;
        }
        // EAGAIN: all taken; ECONNABORTED and the like: that client is gone already.
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      const std::string client = ClientAddress(peer);
      // Make room: first within the client's own share, then in the whole table. Only
      // connections that have not sent a complete request are closed, oldest first: a
      // client that sends its request at once is never the one closed.
      if (per_client_[client] >= limits_.max_connections_per_client) {
        const auto oldest = OldestIdle(client);
        if (oldest == connections_.end()) {
          SendBestEffort(
              fd, PlainResponse(503, absl::StrCat("too many connections from ", client, " (limit ",
                                                  limits_.max_connections_per_client,
                                                  " per client address)\n")));
          ::close(fd);
          continue;
        }
        Close(oldest);
      }
      if (connections_.size() >= static_cast<size_t>(limits_.max_connections)) {
        const auto oldest = OldestIdle("");
        if (oldest == connections_.end()) {
          SendBestEffort(fd, PlainResponse(503, absl::StrCat("too many connections (limit ",
                                                             limits_.max_connections, ")\n")));
          ::close(fd);
          if (per_client_[client] == 0) per_client_.erase(client);
          continue;
        }
        Close(oldest);
      }
      const uint64_t id = next_id_++;
      Connection& connection = connections_[id];
      connection.fd = fd;
      connection.client = client;
      connection.deadline = Clock::now() + std::chrono::milliseconds(limits_.request_timeout_ms);
      ++per_client_[client];
      // The request usually arrives with the connection: read it now, before the next
      // accept might need room.
      if (!OnReadable(id, connection) ||
          (connection.state == State::kWriting && !OnWritable(connection))) {
        Close(connections_.find(id));
      }
    }
  }

  void Loop() {
    std::vector<pollfd> polled;
    std::vector<uint64_t> polled_ids;
    for (;;) {
      Clock::time_point now = Clock::now();
      Clock::time_point next_deadline = now + std::chrono::seconds(60);
      for (auto it = connections_.begin(); it != connections_.end();) {
        Connection& connection = it->second;
        if (connection.state == State::kHandling || now < connection.deadline) {
          if (connection.state != State::kHandling) {
            next_deadline = std::min(next_deadline, connection.deadline);
          }
          ++it;
          continue;
        }
        // Out of time. Part of a request deserves an answer; silence gets none.
        if (connection.state == State::kReading && !connection.input.empty()) {
          SendBestEffort(connection.fd,
                         PlainResponse(408, absl::StrCat("request head not received within ",
                                                         limits_.request_timeout_ms, " ms\n")));
        }
        it = Close(it);
      }
      polled.clear();
      polled_ids.clear();
      polled.push_back({wake_fd_, POLLIN, 0});
      polled_ids.push_back(0);
      if (now >= accept_resume_) {
        polled.push_back({listen_fd_, POLLIN, 0});
        polled_ids.push_back(0);
      } else {
        next_deadline = std::min(next_deadline, accept_resume_);
      }
      for (const auto& [id, connection] : connections_) {
        if (connection.state == State::kHandling) continue;
        polled.push_back(
            {connection.fd,
             static_cast<short>(connection.state == State::kWriting ? POLLOUT : POLLIN), 0});
        polled_ids.push_back(id);
      }
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_deadline - now);
      const int ready = ::poll(polled.data(), polled.size(),
                               static_cast<int>(std::max<int64_t>(0, wait.count())));
      if (ready < 0 && errno != EINTR) {
        // Not expected (EINVAL, ENOMEM); do not spin.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::vector<Answer> answers;
      {
        MutexLock lock(&mutex_);
        if (stopping_) return;
        answers.swap(answers_);
      }
      if (polled[0].revents != 0) {
        uint64_t count = 0;
        (void)!::read(wake_fd_, &count, sizeof(count));
      }
      for (Answer& answer : answers) {
        auto it = connections_.find(answer.connection_id);
        if (it == connections_.end()) continue;
        Respond(it->second, std::move(answer.bytes));
        if (!OnWritable(it->second)) Close(it);
      }
      // Open connections first, then new ones: requests that arrived are read before
      // anything is closed to make room.
      bool listener_ready = false;
      for (size_t i = 1; i < polled.size(); ++i) {
        if (polled[i].revents == 0) continue;
        if (polled[i].fd == listen_fd_ && polled_ids[i] == 0) {
          listener_ready = true;
          continue;
        }
        auto it = connections_.find(polled_ids[i]);
        if (it == connections_.end()) continue;
        Connection& connection = it->second;
        bool keep = true;
        switch (connection.state) {
          case State::kReading:
            keep = OnReadable(it->first, connection) &&
                   (connection.state != State::kWriting || OnWritable(connection));
            break;
          case State::kWriting:
            keep = OnWritable(connection);
            break;
          case State::kLingering:
            keep = OnLingerReadable(connection);
            break;
          case State::kHandling:
            break;
        }
        if (!keep) Close(it);
      }
      if (listener_ready) AcceptConnections();
    }
  }

  const Handler handler_;
  const HttpServerLimits limits_;
  const int listen_fd_;
  const int wake_fd_;
  const int port_;
  std::thread loop_thread_;
  std::vector<std::thread> handler_threads_;

  // Owned by the loop thread alone (and by the destructor once it has joined).
  Connections connections_;
  absl::flat_hash_map<std::string, int> per_client_;
  uint64_t next_id_ = 1;
  Clock::time_point accept_resume_;

  // Between the loop and the handler threads.
  Mutex mutex_;
  CondVar work_ready_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::deque<Request> requests_ ABSL_GUARDED_BY(mutex_);
  std::vector<Answer> answers_ ABSL_GUARDED_BY(mutex_);
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              Handler handler,
                                                              HttpServerLimits limits) {
  if (limits.request_timeout_ms <= 0 || limits.write_timeout_ms <= 0 ||
      limits.max_connections <= 0 || limits.max_connections_per_client <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP server limits must be positive: request_timeout_ms ",
                     limits.request_timeout_ms, ", write_timeout_ms ", limits.write_timeout_ms,
                     ", max_connections ", limits.max_connections, ", max_connections_per_client ",
                     limits.max_connections_per_client));
  }
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
  const int port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    const absl::Status status = unavailable("eventfd");
    ::close(fd);
    return status;
  }
  auto impl = std::make_unique<Impl>(std::move(handler), limits, fd, wake_fd, port);
  impl->StartThreads();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->port(); }

}  // namespace mtrain
