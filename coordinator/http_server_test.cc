#include "coordinator/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` verbatim to 127.0.0.1:port, closes the sending side, and returns
// everything the server writes back until it closes the connection ("" if it cannot
// connect).
std::string Exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    // Nothing more is coming: a server waiting for the rest of a cut-off request sees
    // the end at once instead of after its request timeout.
    ::shutdown(fd, SHUT_WR);
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  }
  ::close(fd);
  return response;
}

std::string Body(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

// Echoes what it was asked, so the test sees how the server parsed the request.
HttpResponse Echo(const HttpRequest& request) {
  HttpResponse response{200,
                        "text/plain; charset=utf-8",
                        absl::StrCat(request.method, " ", request.path, " ?", request.query),
                        {}};
  response.headers.emplace_back("X-Test", "yes");
  if (request.path == "/missing") response.status = 404;
  return response;
}

TEST(HttpServer, HandsGetsToTheHandlerOnAPickedPort) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start("127.0.0.1:0", Echo);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);

  const std::string response =
      Exchange(port, "GET /api/jobs/job-1/steps?after=3&limit=2 HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain; charset=utf-8\r\n"));
  EXPECT_THAT(response, HasSubstr("X-Test: yes\r\n"));
  const std::string body = Body(response);
  EXPECT_EQ(body, "GET /api/jobs/job-1/steps ?after=3&limit=2");
  EXPECT_THAT(response, HasSubstr(absl::StrCat("Content-Length: ", body.size(), "\r\n")));

  // Percent-escapes in the path are decoded and dot segments resolved; the query is not.
  EXPECT_EQ(Body(Exchange(port, "GET /a%2Db/../c?x=%31 HTTP/1.0\r\n\r\n")), "GET /c ?x=%31");
  EXPECT_THAT(Exchange(port, "GET /missing HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 404 "));
}

TEST(HttpServer, AnswersHeadWithoutABodyAndRefusesOtherMethods) {
  std::atomic<int> calls{0};
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1:0", [&](const HttpRequest& request) {
        ++calls;
        return Echo(request);
      });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  const std::string head = Exchange(port, "HEAD /status HTTP/1.0\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head,
              HasSubstr(absl::StrCat("Content-Length: ", std::string("HEAD /status ?").size())));
  EXPECT_EQ(Body(head), "");
  EXPECT_EQ(calls, 1);

  for (const std::string method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    const std::string response = Exchange(
        port,
        absl::StrCat(method, " /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"));
    EXPECT_THAT(response, StartsWith("HTTP/1.1 405 ")) << method;
    EXPECT_THAT(response, HasSubstr("Allow: GET, HEAD\r\n")) << method;
  }
  EXPECT_EQ(calls, 1);  // the handler never saw them
}

TEST(HttpServer, SurvivesGarbage) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start("127.0.0.1:0", Echo);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  for (const std::string& junk :
       {std::string("\r\n\r\n"), std::string("GET\r\n\r\n"), std::string("hello world\r\n\r\n"),
        std::string(10000, 'A') + "\r\n\r\n",
        std::string("GET http://elsewhere/x HTTP/1.1\r\n\r\n"),
        std::string("GET /\0x HTTP/1.1\r\n\r\n", 20), std::string("GET / HTTP/1.1\r\nHost")}) {
    Exchange(port, junk);  // whatever it answers, it must keep serving
  }
  EXPECT_THAT(Exchange(port, "GET /still-here HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 200 "));
}

TEST(HttpServer, ServesConcurrentRequests) {
  // A handler that takes a while: requests must overlap on the server's threads.
  std::atomic<int> in_flight{0}, most{0};
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1:0", [&](const HttpRequest& request) {
        const int now = ++in_flight;
        for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
        }
        absl::SleepFor(absl::Milliseconds(200));
        --in_flight;
        return Echo(request);
      });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < kHttpServerThreads; ++i) {
    clients.emplace_back([&, i] {
      const std::string response = Exchange(port, absl::StrCat("GET /c", i, " HTTP/1.0\r\n\r\n"));
      if (Body(response) == absl::StrCat("GET /c", i, " ?")) ++ok;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok, kHttpServerThreads);
  EXPECT_GT(most, 1);
}

TEST(HttpServer, RejectsBadAddressesAndPortsInUse) {
  for (const std::string address : {"", "127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:http",
                                    "127.0.0.1:99999", "127.0.0.1:0,127.0.0.1:0"}) {
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(address, Echo);
    ASSERT_FALSE(server.ok()) << address;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << address;
  }
  absl::StatusOr<std::unique_ptr<HttpServer>> first = HttpServer::Start("127.0.0.1:0", Echo);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start(absl::StrCat("127.0.0.1:", (*first)->port()), Echo);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat((*first)->port())));
  // A host that is not ours.
  absl::StatusOr<std::unique_ptr<HttpServer>> foreign = HttpServer::Start("192.0.2.1:0", Echo);
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mtrain
