#include "coordinator/http_message.h"

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseHttpRequestHead, SplitsMethodPathAndQuery) {
  absl::StatusOr<HttpRequest> request =
      ParseHttpRequestHead("GET /api/jobs/job-1/steps?after=3&limit=2 HTTP/1.1\r\nHost: x");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->method, "GET");
  EXPECT_EQ(request->path, "/api/jobs/job-1/steps");
  EXPECT_EQ(request->query, "after=3&limit=2");

  request = ParseHttpRequestHead("HEAD / HTTP/1.0");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->method, "HEAD");
  EXPECT_EQ(request->path, "/");
  EXPECT_EQ(request->query, "");
  // Bare LF line ends.
  EXPECT_TRUE(ParseHttpRequestHead("GET /x HTTP/1.1\nHost: x").ok());
}

TEST(ParseHttpRequestHead, DecodesThePathAndResolvesDotSegments) {
  struct Case {
    const char* target;
    const char* path;
    const char* query;
  };
  for (const Case& c :
       {Case{"/a%2Db/../c?x=%31", "/c", "x=%31"}, Case{"/a/./b/", "/a/b/", ""},
        Case{"/a/b/..", "/a/", ""}, Case{"/../../etc/passwd", "/etc/passwd", ""},
        Case{"/%2e%2e/%2E%2e/x", "/x", ""}, Case{"/..", "/", ""}, Case{"/a//b", "/a//b", ""},
        Case{"/static/status.js?", "/static/status.js", ""}}) {
    absl::StatusOr<HttpRequest> request =
        ParseHttpRequestHead(absl::StrCat("GET ", c.target, " HTTP/1.1"));
    ASSERT_TRUE(request.ok()) << c.target << ": " << request.status();
    EXPECT_EQ(request->path, c.path) << c.target;
    EXPECT_EQ(request->query, c.query) << c.target;
  }
}

TEST(ParseHttpRequestHead, RefusesMalformedRequestLinesSayingWhy) {
  struct Case {
    std::string head;
    const char* why;
  };
  for (const Case& c : {
           Case{"", "is not METHOD TARGET HTTP/1.x"},
           Case{"GET", "is not METHOD TARGET HTTP/1.x"},
           Case{"hello world", "is not METHOD TARGET HTTP/1.x"},
           Case{"GET  / HTTP/1.1", "is not METHOD TARGET HTTP/1.x"},
           Case{"get / HTTP/1.1", "request method \"get\" is not 1 to 16 upper-case letters"},
           Case{"GET / HTTP/2.0", "request version \"HTTP/2.0\" is not HTTP/1.0 or HTTP/1.1"},
           Case{"GET http://elsewhere/x HTTP/1.1", "does not start with '/'"},
           Case{"OPTIONS * HTTP/1.1", "request target \"*\" does not start with '/'"},
           Case{"GET /a%2 HTTP/1.1", "has a '%' not followed by two hex digits"},
           Case{"GET /a%zz HTTP/1.1", "has a '%' not followed by two hex digits"},
           Case{"GET /a%00b HTTP/1.1", "holds a control character"},
           Case{std::string("GET /\0x HTTP/1.1", 16), "holds a control character"},
           Case{absl::StrCat("GET /", std::string(kHttpMaxTargetBytes, 'a'), " HTTP/1.1"),
                "longer than the limit of 8192"},
       }) {
    absl::StatusOr<HttpRequest> request = ParseHttpRequestHead(c.head);
    ASSERT_FALSE(request.ok()) << c.head;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << c.head;
    EXPECT_THAT(request.status().message(), HasSubstr(c.why)) << c.head;
  }
}

TEST(ParseHttpRequestHead, QuotesAttackerTextEscapedAndShort) {
  const std::string junk = absl::StrCat("\x1b[31m", std::string(10000, 'A'));
  absl::StatusOr<HttpRequest> request = ParseHttpRequestHead(junk);
  ASSERT_FALSE(request.ok());
  EXPECT_LT(request.status().message().size(), 200u);
  EXPECT_THAT(request.status().message(), Not(HasSubstr("\x1b")));
  EXPECT_THAT(request.status().message(), HasSubstr("\\x1b[31mAAA"));
}

TEST(ParseHttpRequestHead, NeverCrashesOnRandomBytes) {
  // A fixed seed: the same 20,000 heads every run, mutations of a valid one and noise.
  std::mt19937 random(15);
  const std::string valid = "GET /api/jobs/j%2D1/../x?limit=5 HTTP/1.1\r\nHost: a\r\n";
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string head = valid;
    const int edits = 1 + static_cast<int>(random() % 8);
    for (int e = 0; e < edits; ++e) {
      const size_t at = random() % (head.size() + 1);
      switch (random() % 3) {
        case 0:
          head.insert(at, 1, static_cast<char>(random() % 256));
          break;
        case 1:
          if (at < head.size()) head.erase(at, 1);
          break;
        default:
          if (at < head.size()) head[at] = static_cast<char>(random() % 256);
      }
    }
    absl::StatusOr<HttpRequest> request = ParseHttpRequestHead(head);
    if (!request.ok()) continue;
    ++accepted;
    // Whatever is accepted is a clean absolute path.
    ASSERT_FALSE(request->path.empty()) << head;
    EXPECT_EQ(request->path[0], '/') << head;
    EXPECT_THAT(request->path, Not(HasSubstr("/../"))) << head;
    for (char c : request->path) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << head;
  }
  EXPECT_GT(accepted, 100);  // the mutations do not all break the request line
}

TEST(FindHttpRequestHeadEnd, FindsTheBlankLine) {
  EXPECT_EQ(FindHttpRequestHeadEnd("GET / HTTP/1.1\r\nHost: x\r\n"), std::string::npos);
  EXPECT_EQ(FindHttpRequestHeadEnd("GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), 23u);
  EXPECT_EQ(FindHttpRequestHeadEnd("GET / HTTP/1.1\n\n"), 14u);
  EXPECT_EQ(FindHttpRequestHeadEnd(""), std::string::npos);
}

TEST(FormatHttpResponse, WritesStatusHeadersAndBody) {
  HttpResponse response{404, "text/plain; charset=utf-8", "no such job\n", {}};
  response.headers.emplace_back("Cache-Control", "no-store");
  EXPECT_EQ(FormatHttpResponse(response, /*with_body=*/true),
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 12\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n"
            "no such job\n");
  // HEAD: the GET's length, no body.
  EXPECT_EQ(FormatHttpResponse(response, /*with_body=*/false),
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 12\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n");
  EXPECT_STREQ(HttpReasonPhrase(503), "Service Unavailable");
  EXPECT_STREQ(HttpReasonPhrase(799), "Unknown");
}

}  // namespace
}  // namespace mtrain
